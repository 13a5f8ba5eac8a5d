"""How wide a booktabs table typesets in pdflatex's default font, without running LaTeX.

Widths come from Computer Modern Roman's metrics (the cmr10 AFM file matplotlib ships), scaled to
the table's font size, so the report can choose the columns that fit a column of a two-column
paper. The estimate errs on the wide side (cmr9 is a little wider per em than cmr10);
tests/analysis/test_latex_width.py holds it against pdflatex.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import matplotlib

# Page widths (pt) of \documentclass[twocolumn]{article}: \columnwidth and \textwidth.
COLUMN_WIDTH = 229.5
TEXT_WIDTH = 469.0
FONT_SIZE = 9.0          # \small in a 10 pt document
TABCOLSEP = 4.0          # set by to_latex; LaTeX's default is 6 pt
BOLD = 1.15              # cmbx10 over cmr10 (digits 0.575 em against 0.5 em)
SAFETY = 1.03            # cmr9 is about 3 % wider per em than cmr10
# Characters the tables print that cmr10's ASCII positions do not give, in em: what LaTeX sets
# for them (latex_text) in a 10 pt font.
EM = {"±": 0.778, "†": 0.31, "–": 0.5, "—": 1.0, "√": 0.833, "·": 0.278, "‖": 0.5, "×": 0.778,
      "≤": 0.778, "↑": 0.5, "↓": 0.5, "∂": 0.57, "_": 0.42, "|": 0.28, "<": 0.778, ">": 0.778,
      "~": 0.5, "\\": 0.5, "{": 0.5, "}": 0.5, "^": 0.5, '"': 0.5,
      "▲": 0.63, "▼": 0.63, "Δ": 0.833}
UNKNOWN = 0.6
NEGATIVE = re.compile(r"(?<![\w.])-(?=\d)")    # a minus sign, set as $-$ (0.778 em), not a hyphen


@functools.cache
def _cmr10() -> dict[str, float]:
    """Advance width in em of each printable ASCII character of cmr10 (TeX's OT1 positions agree
    with ASCII for letters, digits and the punctuation not in EM)."""
    path = Path(matplotlib.get_data_path()) / "fonts" / "afm" / "cmr10.afm"
    widths = {" ": 1 / 3}
    for line in path.read_text(encoding="latin-1").splitlines():
        if not line.startswith("C "):
            continue
        fields = dict(part.strip().split(" ", 1) for part in line.split(";") if part.strip())
        code = int(fields["C"])
        if 32 < code < 127:
            widths[chr(code)] = float(fields["WX"]) / 1000
    return widths


def text_width(text: str, size: float = FONT_SIZE, bold: bool = False) -> float:
    """Width in pt of `text` (the unescaped table string) typeset at `size` pt."""
    text = str(text)
    em = sum(EM.get(ch) or _cmr10().get(ch, UNKNOWN) for ch in text)
    em += len(NEGATIVE.findall(text)) * (0.778 - _cmr10()["-"])
    return em * size * SAFETY * (BOLD if bold else 1.0)


def table_width(columns: list[list[tuple[str, bool]]], size: float = FONT_SIZE,
                tabcolsep: float = TABCOLSEP) -> float:
    """Width in pt of a tabular whose columns hold these (text, bold) entries, header included."""
    widest = [max((text_width(t, size, b) for t, b in column), default=0.0) for column in columns]
    return sum(widest) + 2 * tabcolsep * len(columns)
