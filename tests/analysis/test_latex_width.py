"""The width estimate of a LaTeX table (lit_attention/analysis/latex_width.py) against pdflatex:
never narrower than the typeset table, at most 3 % wider."""

from __future__ import annotations

import re
import shutil
import subprocess

import pandas as pd
import pytest

from lit_attention.analysis import columns, latex_width, tables


def _tables() -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    agg = pd.DataFrame({"model.family": ["rnn", "rnn", "transformer"], "model.attention": ["none", "luong", None],
                        "model.scoring": [None, "low_rank", "scaled_dot"], "mean": [15.52, 43.04, 51.6],
                        "std": [1.93, 2.5, 1.1], "ci_lo": [-1.6, 20.8, 41.4], "ci_hi": [32.7, 65.3, 61.8],
                        "n": [2, 2, 12], "n_failed": [0, 1, 0], "n_pruned": [0, 0, 3], "n_other": [0, 0, 0],
                        "params": [118e3, 142e3, 2.05e6], "train_seconds": [95.0, 1106.0, 13.0],
                        "tokens_per_second": [2430.0, 17.0, 1.2e6], "clip_fraction": [0.0, 0.25, 1.0]})
    keys = ["model.family", "model.attention", "model.scoring"]
    cells, best = tables.labelled(*columns.summary_table(agg, keys, "val_bleu"), "val_bleu")
    found = [(cells[list(cells.columns[:k])], best[list(cells.columns[:k])]) for k in (1, 3, len(cells.columns))]
    grid = tables.pivot_table(agg, ["model.scoring"], ["model.family"], "val_bleu")
    return found + [tables.labelled(*grid, "val_bleu")]


def test_estimate_is_a_slight_overestimate_of_what_pdflatex_sets(tmp_path):
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not installed (apt-get install --no-install-recommends texlive-latex-base)")
    body = ""
    for i, (cells, best) in enumerate(_tables()):
        tabular = re.search(r"\\begin\{tabular\}.*?\\end\{tabular\}", tables.to_latex(cells, best, "c"), re.S)
        body += (rf"{{\small\setlength{{\tabcolsep}}{{{latex_width.TABCOLSEP:g}pt}}\begin{{lrbox}}{{\tb}}"
                 rf"{tabular.group(0)}\end{{lrbox}}\typeout{{WIDTH{i}=\the\wd\tb}}}}")
    (tmp_path / "w.tex").write_text(r"\documentclass[twocolumn]{article}\usepackage{booktabs}\newsavebox\tb"
                                    rf"\begin{{document}}\typeout{{COLUMN=\the\columnwidth}}{body}x\end{{document}}")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "w.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    log = (tmp_path / "w.log").read_text(errors="replace")
    assert f"COLUMN={latex_width.COLUMN_WIDTH:g}pt" in log
    typeset = {int(i): float(w) for i, w in re.findall(r"WIDTH(\d+)=([\d.]+)pt", log)}
    for i, (cells, best) in enumerate(_tables()):
        estimate = tables.tabular_width(cells, best)
        assert typeset[i] <= estimate <= 1.03 * typeset[i], (i, estimate, typeset[i])
