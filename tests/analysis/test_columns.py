"""The summary table's columns: one row each in columns.COLUMNS, which builds the table, names
its columns for --columns and writes --columns' help."""

import ast
import re

import pandas as pd

from conftest import REPO
from lit_attention.analysis import columns

ANALYSIS = REPO / "lit_attention" / "analysis"
# The modules that build, choose or caption the summary table's columns.
SUMMARY_MODULES = ("tables.py", "columns.py", "captions.py", "report.py")


def _agg() -> pd.DataFrame:
    return pd.DataFrame({"model.cell": ["gru", "lstm"], "n": [3, 3], "mean": [20.0, 22.5],
                         "std": [1.0, 0.5], "ci_lo": [17.5, 21.3], "ci_hi": [22.5, 23.7],
                         "n_failed": [0, 1], "n_pruned": [0, 0], "n_other": [0, 0],
                         "params": [1.2e6, 1.5e6], "train_seconds": [61.0, 75.0]})


def test_the_table_has_a_column_for_each_row_with_cells_in_the_rows_order():
    cells, best = columns.summary_table(_agg(), ["model.cell"], "val_bleu")
    assert list(cells.columns) == ["val_bleu", "95% CI", "n", "failed/pruned", "params", "train s"]
    assert cells.loc["lstm", "val_bleu"] == "22.5 ± 0.5" and best["val_bleu"].tolist() == [False, True]
    names = columns.column_names(cells.rename(columns={"val_bleu": "BLEU ↑"}), "BLEU ↑")
    assert list(names) == ["mean", "ci", "n", "excluded", "params", "time"]


def test_columns_help_names_every_row_and_the_default_order():
    text = columns.columns_help()
    assert all(re.search(rf"\b{c.name}\b", text) for c in columns.COLUMNS)
    assert "then ci, n, budget, under_budget, p, delta, mde, excluded, params and the rest" in text


# -- One home: a summary-table column is written only as its row -------------------------------

def _headers() -> set[str]:
    """The headers no other code has reason to spell: not a plain word (n, params, steps and
    budget are also the aggregate's column names) and not a template."""
    return {c.header for c in columns.COLUMNS if not re.fullmatch(r"[a-z_]+", c.header) and "{" not in c.header}


def header_literals(source: str, headers: set[str]) -> list[tuple[int, str]]:
    """(line, header) of each string literal in `source` equal to a column header and outside an
    assignment to COLUMNS (the row table)."""
    tree = ast.parse(source)
    table = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "COLUMNS" for t in node.targets):
            table |= {id(inner) for inner in ast.walk(node)}
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in headers and id(node) not in table)


def test_summary_table_columns_are_defined_only_in_their_row_table():
    stray = [f"lit_attention/analysis/{name}:{line}: {header!r}" for name in SUMMARY_MODULES
             for line, header in header_literals((ANALYSIS / name).read_text(), _headers())]
    assert not stray, ("a summary-table column spelled outside columns.COLUMNS (add a row, or name "
                       "its header by columns.HEADER[name]):\n" + "\n".join(stray))


def test_the_header_check_finds_a_column_added_beside_the_table():
    source = "\n".join([
        'COLUMNS = (Column("mde", "MDE", "power", f),)',   # 1: the row table
        'found["MDE"] = cells',                            # 2: a column added by hand
        'shown = has("p (Holm)")',                         # 3: a header spelled in a caption
        'x = HEADER["mde"]',                               # 4: named from the rows
    ])
    assert header_literals(source, {"MDE", "p (Holm)"}) == [(2, "MDE"), (3, "p (Holm)")]
