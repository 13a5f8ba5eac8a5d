"""Reading sentence-per-line text files, plain or gzipped, with errors that say what is wrong.

Policy for bad lines (docs/ERRORS.md): a training split drops a pair whose line is empty or not
valid UTF-8 and counts it by reason; an evaluation split keeps every line, so hypotheses stay
aligned with the file line by line, and refuses a line that is not valid UTF-8. A file holding a
NUL byte is binary, never text, and is refused whatever the split. Lines end at LF, CR LF or
a lone CR; other line-break characters are spaces inside a line (read_lines). A UTF-8 byte-order mark
(U+FEFF) at the start of a line (of the file, or of each file cat joined) is no text: it is
removed, and the number removed is said once per file.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import zlib

GZIP_MAGIC = b"\x1f\x8b"
# Why a training pair is dropped: the keys of every per-split count.
DROP_REASONS = ("empty", "too_long", "invalid_utf8")
BOM = "\ufeff"
LINE_END = re.compile(b"\r\n|\r|\n")
OTHER_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")   # str.splitlines()'s others
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


def read_lines(path: str, mark_invalid: bool = False, counts: dict | None = None) -> list[str | None]:
    """Lines of a UTF-8 text file (gzipped if the name ends in ``.gz``), without line endings.

    A line ends at LF, CR LF or a lone CR (Unix, Windows and old Mac files read alike). Any other
    character that str.splitlines() would end a line at (U+2028, U+2029, U+0085, VT, FF, FS, GS,
    RS) is no line end in a data file: it becomes a space inside its line, as in a hyps file
    (tracking.schema.as_line), so a sentence is one sentence in every reader. A line that is not
    valid UTF-8 raises a DataError naming the file and line, or is returned as None
    (``mark_invalid``). A NUL byte always raises. ``counts[path]``, when given, receives
    what was read: lines, CR LF and lone CR line ends, byte-order marks removed, lines not valid
    UTF-8 and other line breaks made spaces.
    """
    if not os.path.isfile(path):
        other = path[:-3] if path.endswith(".gz") else path + ".gz"
        hint = f" (but {other} exists)" if os.path.isfile(other) else ""
        raise DataError(f"missing data file: {path}{hint}")
    gzipped = path.endswith(".gz")
    try:
        with (gzip.open if gzipped else open)(path, "rb") as f:
            data = f.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{path}: corrupt gzip file ({err})") from None
    if not gzipped and data[:2] == GZIP_MAGIC:
        raise DataError(f"{path} is gzip-compressed: name it {path}.gz")
    if b"\x00" in data:
        number = len(LINE_END.findall(data, 0, data.index(b"\x00"))) + 1
        raise DataError(f"{path}, line {number}: NUL byte: a binary file, not text "
                        "(or UTF-16 text: convert it to UTF-8)")
    raws = LINE_END.split(data)
    if raws[-1] == b"":   # the file ends with a line end (or is empty)
        raws.pop()
    tally = dict(lines=len(raws), crlf=data.count(b"\r\n"), cr=0, bom=0, invalid_utf8=0, breaks=0)
    tally["cr"] = data.count(b"\r") - tally["crlf"]
    lines: list[str | None] = []
    first_bom = None
    for number, raw in enumerate(raws, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if not mark_invalid:
                raise DataError(f"{path}, line {number}: not valid UTF-8 ({err.reason} at "
                                f"byte {err.start})") from None
            tally["invalid_utf8"] += 1
            lines.append(None)
            continue
        if line.startswith(BOM):
            line = line.lstrip(BOM)
            tally["bom"] += 1
            first_bom = first_bom or number
        line, breaks = OTHER_BREAKS.subn(" ", line)
        tally["breaks"] += breaks
        lines.append(line)
    if tally["bom"]:
        where = f"line {first_bom}" if tally["bom"] == 1 else f"{tally['bom']} lines, the first line {first_bom}"
        log.warning("%s: removed the UTF-8 byte-order mark (U+FEFF) at the start of %s: a mark of the "
                    "file's encoding, not text", path, where)
    if counts is not None:
        counts[path] = tally
    return lines


def read_parallel(src_path: str, tgt_path: str, train: bool = True,
                  counts: dict | None = None) -> tuple[list[str], list[str], dict[str, int]]:
    """Aligned source/target lines and the count of pairs dropped per reason.

    ``counts`` receives read_lines' counts of both files. ``train=True``: pairs with an empty side or a line that is not valid UTF-8 are dropped and
    counted (``{"empty": n, "too_long": 0, "invalid_utf8": n}``; too_long is the DataModule's).
    ``train=False`` (evaluation): every line is kept, index i is line i + 1 of both files, and a
    line that is not valid UTF-8 is a DataError. Either way a split without one pair that has
    text on both sides is a DataError.
    """
    counts = {} if counts is None else counts
    src, tgt = read_lines(src_path, train, counts), read_lines(tgt_path, train, counts)
    if len(src) != len(tgt):
        ends = "; ".join(f"{p} has {counts[p]['cr']} ending in a lone CR" for p in (src_path, tgt_path)
                         if counts[p]["cr"])
        raise DataError(f"line counts differ: {src_path} has {len(src)} lines, "
                        f"{tgt_path} has {len(tgt)} lines" + (f" (a lone CR ends a line: {ends})" if ends else ""))
    dropped = no_drops()
    if not train:
        if not any(s.strip() and t.strip() for s, t in zip(src, tgt)):
            raise DataError(f"empty split: no non-empty sentence pairs in {src_path} and {tgt_path}")
        return src, tgt, dropped
    valid = [(s, t) for s, t in zip(src, tgt) if s is not None and t is not None]
    kept = [(s, t) for s, t in valid if s.strip() and t.strip()]
    dropped.update(invalid_utf8=len(src) - len(valid), empty=len(valid) - len(kept))
    if not kept:
        raise DataError(f"no usable training pair in {src_path} and {tgt_path}: {len(src)} lines, "
                        f"{dropped['empty']} pairs with an empty side, {dropped['invalid_utf8']} "
                        "not valid UTF-8")
    return [s for s, _ in kept], [t for _, t in kept], dropped
