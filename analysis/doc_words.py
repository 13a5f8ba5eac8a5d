"""Words of prose per page of the manual (README.md and docs/*.md), and their total.

Prose is every word outside Markdown table rows (lines that start with `|`) and outside what
analysis/reproduce.py generates (a marker, the text it wraps and its `<!-- end -->`); other HTML
comments do not count either. Code blocks count: they are read like prose.

    python analysis/doc_words.py             # a line per page, then the total
    python analysis/doc_words.py --max 16000 # exit 1 when the total is over
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GENERATED = re.compile(r"<!-- (?:report|value|figures|calibration|sig|method)\b.*?<!-- end -->", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)


def prose_words(text: str) -> int:
    """The words of ``text`` outside table rows, generated blocks and comments."""
    text = COMMENT.sub(" ", GENERATED.sub(" ", text))
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("|")]
    return sum(len(line.split()) for line in lines)


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=None, help="exit 1 when the total is over this")
    args = parser.parse_args(argv)
    total = 0
    for page in pages():
        words = prose_words(page.read_text(encoding="utf-8"))
        total += words
        print(f"{words:7,d}  {page.relative_to(REPO)}")
    print(f"{total:7,d}  in all")
    return 1 if args.max is not None and total > args.max else 0


if __name__ == "__main__":
    sys.exit(main())
