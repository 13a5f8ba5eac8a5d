"""Reading sentence-per-line text files, plain or gzipped, with errors that say what is wrong.

Policy for bad lines (docs/ERRORS.md): a training split drops a pair whose line is empty or not
valid UTF-8 and counts it by reason; an evaluation split keeps every line, so hypotheses stay
aligned with the file line by line, and refuses a line that is not valid UTF-8. A file holding a
NUL byte is binary, never text, and is refused whatever the split. A UTF-8 byte-order mark
(U+FEFF) at the start of a line (of the file, or of each file cat joined) is no text: it is
removed, and the number removed is said once per file.
"""

from __future__ import annotations

import gzip
import logging
import os

GZIP_MAGIC = b"\x1f\x8b"
# Why a training pair is dropped: the keys of every per-split count.
DROP_REASONS = ("empty", "too_long", "invalid_utf8")
BOM = "\ufeff"
log = logging.getLogger(__name__)


class DataError(ValueError):
    """Bad input data: missing files, undecodable bytes, mismatched or empty splits."""


def no_drops() -> dict[str, int]:
    return dict.fromkeys(DROP_REASONS, 0)


def resolve(data_dir: str, split: str, lang: str) -> str:
    """Path of ``{data_dir}/{split}.{lang}``, or of the ``.gz`` file if only that one exists."""
    plain = os.path.join(data_dir, f"{split}.{lang}")
    for path in (plain, plain + ".gz"):
        if os.path.isfile(path):
            return path
    raise DataError(f"missing data file: neither {plain} nor {plain}.gz exists")


def read_lines(path: str, invalid: str = "raise") -> list[str | None]:
    """Lines of a UTF-8 text file (gzipped if the name ends in ``.gz``), without line endings.

    A line that is not valid UTF-8 raises a DataError naming the file and line
    (``invalid="raise"``) or is returned as None (``invalid="mark"``). A NUL byte always raises.
    """
    if invalid not in ("raise", "mark"):
        raise ValueError(f"invalid must be 'raise' or 'mark', got {invalid!r}")
    if not os.path.isfile(path):
        other = path[:-3] if path.endswith(".gz") else path + ".gz"
        hint = f" (but {other} exists)" if os.path.isfile(other) else ""
        raise DataError(f"missing data file: {path}{hint}")
    gzipped = path.endswith(".gz")
    if not gzipped:
        with open(path, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                raise DataError(f"{path} is gzip-compressed: name it {path}.gz")
    lines: list[str | None] = []
    boms: list[int] = []   # numbers of the lines a byte-order mark was removed from
    try:
        with (gzip.open if gzipped else open)(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                if b"\x00" in raw:
                    raise DataError(f"{path}, line {number}: NUL byte: a binary file, not text "
                                    "(or UTF-16 text: convert it to UTF-8)")
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as err:
                    if invalid == "raise":
                        raise DataError(f"{path}, line {number}: not valid UTF-8 ({err.reason} at "
                                        f"byte {err.start})") from None
                    lines.append(None)
                    continue
                if line.startswith(BOM):
                    line = line.lstrip(BOM)
                    boms.append(number)
                lines.append(line)
    except (gzip.BadGzipFile, EOFError) as err:
        raise DataError(f"{path}: corrupt gzip file ({err})") from None
    if boms:
        where = f"line {boms[0]}" if len(boms) == 1 else f"{len(boms)} lines, the first line {boms[0]}"
        log.warning("%s: removed the UTF-8 byte-order mark (U+FEFF) at the start of %s: a mark of the "
                    "file's encoding, not text", path, where)
    return lines


def read_parallel(src_path: str, tgt_path: str,
                  train: bool = True) -> tuple[list[str], list[str], dict[str, int]]:
    """Aligned source/target lines and the count of pairs dropped per reason.

    ``train=True``: pairs with an empty side or a line that is not valid UTF-8 are dropped and
    counted (``{"empty": n, "too_long": 0, "invalid_utf8": n}``; too_long is the DataModule's).
    ``train=False`` (evaluation): every line is kept, index i is line i + 1 of both files, and a
    line that is not valid UTF-8 is a DataError. Either way a split without one pair that has
    text on both sides is a DataError.
    """
    invalid = "mark" if train else "raise"
    src, tgt = read_lines(src_path, invalid), read_lines(tgt_path, invalid)
    if len(src) != len(tgt):
        raise DataError(f"line counts differ: {src_path} has {len(src)} lines, "
                        f"{tgt_path} has {len(tgt)} lines")
    dropped = no_drops()
    if not train:
        kept = list(zip(src, tgt))
        if not any(s.strip() and t.strip() for s, t in kept):
            raise DataError(f"empty split: no non-empty sentence pairs in {src_path} and {tgt_path}")
        return src, tgt, dropped
    kept = []
    for s, t in zip(src, tgt):
        if s is None or t is None:
            dropped["invalid_utf8"] += 1
        elif not (s.strip() and t.strip()):
            dropped["empty"] += 1
        else:
            kept.append((s, t))
    if not kept:
        raise DataError(f"no usable training pair in {src_path} and {tgt_path}: {len(src)} lines, "
                        f"{dropped['empty']} pairs with an empty side, {dropped['invalid_utf8']} "
                        "not valid UTF-8")
    return [s for s, _ in kept], [t for _, t in kept], dropped
