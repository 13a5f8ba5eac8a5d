"""Reading sentence-per-line text files, plain or gzipped, with errors that say what is wrong."""

from __future__ import annotations

import gzip
import os


class DataError(ValueError):
    """Bad input data: missing files, undecodable bytes, mismatched or empty splits."""


def resolve(data_dir: str, split: str, lang: str) -> str:
    """Path of ``{data_dir}/{split}.{lang}``, or of the ``.gz`` file if only that one exists."""
    plain = os.path.join(data_dir, f"{split}.{lang}")
    for path in (plain, plain + ".gz"):
        if os.path.isfile(path):
            return path
    raise DataError(f"missing data file: neither {plain} nor {plain}.gz exists")


def read_lines(path: str) -> list[str]:
    """Lines of a UTF-8 text file (gzipped if the name ends in ``.gz``), without line endings."""
    if not os.path.isfile(path):
        other = path[:-3] if path.endswith(".gz") else path + ".gz"
        hint = f" (but {other} exists)" if os.path.isfile(other) else ""
        raise DataError(f"missing data file: {path}{hint}")
    opener = gzip.open if path.endswith(".gz") else open
    lines = []
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise DataError(f"{path}, line {number}: not valid UTF-8 ({err.reason} at "
                                    f"byte {err.start})") from None
                lines.append(line.rstrip("\r\n"))
    except (gzip.BadGzipFile, EOFError) as err:
        raise DataError(f"{path}: corrupt gzip file ({err})") from None
    return lines


def read_parallel(src_path: str, tgt_path: str) -> tuple[list[str], list[str], int]:
    """Aligned source/target lines; pairs with an empty side are dropped and counted.

    Returns ``(src_lines, tgt_lines, n_empty_dropped)``.
    """
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"line counts differ: {src_path} has {len(src)} lines, "
                        f"{tgt_path} has {len(tgt)} lines")
    kept = [(s, t) for s, t in zip(src, tgt) if s.strip() and t.strip()]
    if not kept:
        raise DataError(f"empty split: no non-empty sentence pairs in {src_path} and {tgt_path}")
    return [s for s, _ in kept], [t for _, t in kept], len(src) - len(kept)
