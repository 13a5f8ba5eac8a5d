"""Tables (lit_attention/analysis/tables.py): captions say what was computed and what the compared
arms share; headers come from the registry; the summary table's columns are one row each in
tables.COLUMNS, which builds the table, names its columns for --columns and writes --columns'
help, and are chosen by name or by what fits; budgets: costs (steps, wall time, FLOPs) are
columns, the budget is the caption. The width estimate of a LaTeX table against pdflatex: never
narrower than the typeset table, at most 3 % wider."""

from __future__ import annotations

import ast
import json
import math
import re
import shutil
import subprocess

import pandas as pd
import pytest

from analysis_stores import write_run
from conftest import REPO
from lit_attention import registry
from lit_attention.analysis import aggregate, captions, load, report, tables
from lit_attention.analysis.captions import caption_text, scoring_note


def _runs(outputs):
    return pd.DataFrame({"model.family": ["rnn", "rnn", "transformer"],
                         "model.scoring": ["dot", "additive", "scaled_dot"],
                         "model.enc_output": outputs})


def test_caption_names_the_encoder_output_every_scoring_arm_attends_over():
    note = scoring_note(_runs(["project", "project", None]))
    assert "model.enc_output = project; one value" in note
    assert "differ in the scoring function only; dot owns no parameters" in note
    agg = pd.DataFrame({"n": [2], "n_failed": [0], "n_pruned": [0], "n_other": [0]})
    assert note in caption_text("val_bleu", agg, "CI", None, notes=(note,))


def test_caption_says_what_else_the_scoring_arms_differ_in():
    """The reference rows' arms differ in wiring, cell and input feeding too: the old caption
    said 'in the scoring function only'."""
    runs = pd.DataFrame({"model.family": ["rnn"] * 5 + ["transformer"],
                         "model.cell": ["gru", "lstm", "gru", "lstm", "lstm", None],
                         "model.attention": ["bahdanau", "bahdanau", "luong", "luong", "none", None],
                         "model.scoring": ["additive", "additive", "general", "general", None, "scaled_dot"],
                         "model.input_feeding": [False, False, True, True, False, None],
                         "model.enc_output": ["concat"] * 5 + [None]})
    note = scoring_note(runs)
    assert "only" not in note and "own no parameters" not in note
    assert "differ in the scoring function and also in model.cell, model.attention, model.input_feeding" in note
    sweep = pd.DataFrame({"model.family": "rnn", "model.scoring": ["additive", "dot", "low_rank"],
                          "model.rank": [None, None, 16], "model.enc_output": "project"})
    assert "in the scoring function only; dot owns no parameters" in scoring_note(sweep)  # rank: low_rank's


def test_caption_warns_when_scoring_arms_attend_over_different_outputs():
    assert "several values" in scoring_note(_runs(["project", "sum", None]))


def test_no_note_without_scoring_arms_or_recorded_encoder_output():
    assert scoring_note(_runs(["project", None, None])) is None        # one recurrent scoring
    assert scoring_note(pd.DataFrame({"model.scoring": ["dot", "general"]})) is None


# --- paper tables: human headers, chosen columns, width, caption ---

def _agg(keys: dict):
    frame = pd.DataFrame(keys)
    n = len(frame)
    return frame.assign(mean=[20.0 + i for i in range(n)], std=[1.0] * n, ci_lo=[10.0] * n,
                        ci_hi=[30.0] * n, n=[3] * n, n_failed=[0] * n, n_pruned=[0] * n,
                        n_other=[0] * n, params=[123456.0] * n, train_seconds=[100.0] * n)


def test_headers_are_the_registry_labels_and_the_metric_with_its_direction():
    agg = _agg({"model.cell": ["gru", "lstm"], "model.attention": ["none", "luong"], "model.lr": [1, 2]})
    keys = ["model.cell", "model.attention", "model.lr"]
    cells, best = tables.labelled(*tables.summary_table(agg, keys, "val_bleu"), "val_bleu")
    assert list(cells.index.names) == [registry.LABELS["model.cell"], registry.LABELS["model.attention"], "lr"]
    assert list(cells.columns[:2]) == ["BLEU ↑", "95% CI"]
    latex, markdown = tables.to_latex(cells, best, "c"), tables.to_markdown(cells, best)
    assert r"Cell & Attention & lr & BLEU $\uparrow$ & 95\% CI" in latex
    assert "model." not in latex and "model." not in markdown
    assert markdown.startswith("| Cell   | Attention   | lr   | BLEU ↑")
    ppl = tables.labelled(*tables.summary_table(agg, keys, "test_ppl"), "test_ppl")[0]
    assert ppl.columns[0] == "PPL ↓"
    grid = tables.labelled(*tables.pivot_table(agg, ["model.cell"], ["model.attention"], "val_bleu"),
                           "val_bleu")[0]
    assert grid.index.names == ["Cell"] and grid.columns.names == ["Attention"]


def test_latex_has_one_header_row_blank_repeats_and_a_spanning_pivot_header():
    agg = _agg({"model.family": ["rnn", "rnn", "transformer"], "model.scoring": ["additive", "dot", "dot"]})
    keys = ["model.family", "model.scoring"]
    latex = tables.to_latex(*tables.labelled(*tables.summary_table(agg, keys, "val_bleu"), "val_bleu"), "c")
    lines = latex.splitlines()
    head = lines.index(r"\toprule")
    assert lines[head + 2] == r"\midrule"                       # one header row
    assert r" & dot & 21.0 $\pm$ 1.0" in latex                  # rnn not repeated
    assert r"transformer & dot & \textbf{22.0 $\pm$ 1.0}" in latex
    assert r"\small" in latex and r"\setlength{\tabcolsep}{4pt}" in latex and r"\label" not in latex
    grid = tables.to_latex(*tables.labelled(*tables.pivot_table(agg, ["model.scoring"], ["model.family"],
                                                                "val_bleu"), "val_bleu"), "c", label="t")
    assert r"& \multicolumn{2}{c}{Family} \\" in grid and r"\cmidrule(lr){2-3}" in grid
    assert "Scoring & rnn & transformer" in grid and r"\label{t}" in grid
    assert r"\begin{table*}" in tables.to_latex(*tables.summary_table(agg, keys, "val_bleu"), "c", wide=True)


def test_columns_are_chosen_by_name_or_by_what_fits_one_column():
    agg = _agg({"model.family": ["rnn", "transformer"], "model.attention": ["bahdanau", None],
                "model.scoring": ["additive", "scaled_dot"]})
    keys = ["model.family", "model.attention", "model.scoring"]
    cells, best = tables.labelled(*tables.summary_table(agg, keys, "val_bleu"), "val_bleu")
    assert list(cells.columns) == ["BLEU ↑", "95% CI", "n", "failed/pruned", "params", "train s"]
    chosen, _, left_out = tables.choose_columns(cells, best, "BLEU ↑", ["mean", "params", "n"])
    assert list(chosen.columns) == ["BLEU ↑", "params", "n"] and "95% CI" in left_out
    assert list(tables.choose_columns(cells, best, "BLEU ↑", ["train_s", "ci"])[0].columns) == ["train s", "95% CI"]
    assert tables.choose_columns(cells, best, "BLEU ↑", ["all"])[0].shape == cells.shape
    with pytest.raises(ValueError, match=r"unknown --columns bogus; this table has: mean, ci, n"):
        tables.choose_columns(cells, best, "BLEU ↑", ["mean", "bogus"])
    fitted, fitted_best, left_out = tables.choose_columns(cells, best, "BLEU ↑")
    assert tables.tabular_width(fitted, fitted_best) <= tables.width_limit() == 229.5
    assert list(fitted.columns) == ["BLEU ↑", "n"]               # the interval would not fit
    assert left_out == ["95% CI", "params", "train s"]           # failed/pruned: all 0/0, shown nowhere
    for column in left_out:
        wider = list(fitted.columns) + [column]
        assert tables.tabular_width(cells[wider], best[wider]) > 229.5
    wide = tables.choose_columns(cells, best, "BLEU ↑", limit=tables.width_limit(wide=True))[0]
    assert list(wide.columns) == ["BLEU ↑", "95% CI", "n", "params", "train s"]
    two_keys = tables.labelled(*tables.summary_table(agg, keys[::2], "val_bleu"), "val_bleu")
    assert list(tables.choose_columns(*two_keys, "BLEU ↑")[0].columns) == ["BLEU ↑", "95% CI", "n"]


def test_caption_names_metric_split_decoding_and_the_tested_hypotheses():
    agg = pd.DataFrame({"n": [3, 3], "n_failed": [0, 0], "n_pruned": [0, 0], "n_other": [0, 0]})
    text = caption_text("test_bleu", agg, "CI", None, significance="paired bootstrap", baseline="none",
                        decoding="beam 5, length penalty 1", test_split="test")
    assert text.startswith("BLEU ↑ (test_bleu: test split; beam 5, length penalty 1): mean ± standard "
                           "deviation (ddof=1) over n = 3 seeds")
    assert ("▲/▼: better/worse than the baseline (none) on the test hypotheses, Holm-adjusted p < 0.05; "
            "p (Holm): paired bootstrap.") in text
    assert caption_text("val_ppl", agg, "CI", None).startswith("PPL ↓ (val_ppl: validation split): ")


def test_caption_explains_the_gradient_flow_column_only_where_it_is_shown():
    agg = pd.DataFrame({"n": [3], "n_failed": [0], "n_pruned": [0], "n_other": [0],
                        "gradflow_decay_forward": [0.9], "gradflow_decay_forward_lo": [0.8],
                        "gradflow_decay_forward_hi": [0.95]})
    method = captions.GRADFLOW_METHOD
    assert method in caption_text("val_bleu", agg, "CI", None)
    assert method in caption_text("val_bleu", agg, "CI", None, shown=["BLEU ↑", captions.GRADFLOW_COLUMN])
    assert method not in caption_text("val_bleu", agg, "CI", None, shown=["BLEU ↑", "n"])


def test_latex_sets_a_negative_number_with_a_minus_sign_and_leaves_ranges_alone():
    assert tables.latex_text("[-1.6, 32.7]") == "[$-$1.6, 32.7]"
    assert tables.latex_text("1-10 / lr 1e-3") == "1-10 / lr 1e-3"


def test_marks_show_direction_and_never_sit_on_one_seed():
    agg = pd.DataFrame({"a": ["base", "up", "down", "single"], "mean": [20.0, 30.0, 10.0, 40.0],
                        "std": [1.0, 1.0, 1.0, math.nan], "n": [3, 3, 3, 1]})
    sig = pd.DataFrame({"a": ["up", "down", "single"], "significant": [True, True, False],
                        "direction": ["better", "worse", "better"], "n_tested": [3, 3, 1],
                        "n_baseline": [3, 3, 3], "note": ["", "", "n=1"], "p": [1e-4, 1e-4, math.nan],
                        "p_holm": [4e-4, 4e-4, math.nan], "delta": [10.0, -10.0, 20.0],
                        "delta_lo": [8.0, -12.0, math.nan], "delta_hi": [12.0, -8.0, math.nan]})
    sig.attrs["n_samples"] = 10_000
    assert tables.marks(agg, ["a"], sig) == ["", "▲", "▼", ""]
    grid = sig.assign(b="x")
    grid.attrs = sig.attrs
    cells, _ = tables.pivot_table(agg.assign(b="x"), ["a"], ["b"], "val_bleu", grid)
    assert cells.loc["up", "x"] == "30.0 ± 1.0▲" and cells.loc["down", "x"] == "10.0 ± 1.0▼"
    assert cells.loc["single", "x"] == "40.0 (n=1)"
    assert tables.p_cells(agg, ["a"], sig, pd.Series([True, False, False, False])) == [
        "baseline", "<0.001", "<0.001", "n=1"]
    assert tables.delta_cells(agg, ["a"], sig, 1) == ["", "+10.0 [8.0, 12.0]", "-10.0 [-12.0, -8.0]", "+20.0"]


ANALYSIS = REPO / "lit_attention" / "analysis"
# The modules that build, choose or caption the summary table's tables.
SUMMARY_MODULES = ("tables.py", "captions.py", "report.py")


def _two_cells() -> pd.DataFrame:
    return pd.DataFrame({"model.cell": ["gru", "lstm"], "n": [3, 3], "mean": [20.0, 22.5],
                         "std": [1.0, 0.5], "ci_lo": [17.5, 21.3], "ci_hi": [22.5, 23.7],
                         "n_failed": [0, 1], "n_pruned": [0, 0], "n_other": [0, 0],
                         "params": [1.2e6, 1.5e6], "train_seconds": [61.0, 75.0]})


def test_the_table_has_a_column_for_each_row_with_cells_in_the_rows_order():
    cells, best = tables.summary_table(_two_cells(), ["model.cell"], "val_bleu")
    assert list(cells.columns) == ["val_bleu", "95% CI", "n", "failed/pruned", "params", "train s"]
    assert cells.loc["lstm", "val_bleu"] == "22.5 ± 0.5" and best["val_bleu"].tolist() == [False, True]
    names = tables.column_names(cells.rename(columns={"val_bleu": "BLEU ↑"}), "BLEU ↑")
    assert list(names) == ["mean", "ci", "n", "excluded", "params", "time"]


def test_columns_help_names_every_row_and_the_default_order():
    text = tables.columns_help()
    assert all(re.search(rf"\b{c.name}\b", text) for c in tables.COLUMNS)
    assert "then ci, n, budget, under_budget, p, delta, mde, excluded, params and the rest" in text


# -- One home: a summary-table column is written only as its row -------------------------------

def _headers() -> set[str]:
    """The headers no other code has reason to spell: not a plain word (n, params, steps and
    budget are also the aggregate's column names) and not a template."""
    return {c.header for c in tables.COLUMNS if not re.fullmatch(r"[a-z_]+", c.header) and "{" not in c.header}


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
    assert not stray, ("a summary-table column spelled outside tables.COLUMNS (add a row, or name "
                       "its header by tables.HEADER[name]):\n" + "\n".join(stray))


def test_the_header_check_finds_a_column_added_beside_the_table():
    source = "\n".join([
        'COLUMNS = (Column("mde", "MDE", "power", f),)',   # 1: the row table
        'found["MDE"] = cells',                            # 2: a column added by hand
        'shown = has("p (Holm)")',                         # 3: a header spelled in a caption
        'x = HEADER["mde"]',                               # 4: named from the rows
    ])
    assert header_literals(source, {"MDE", "p (Holm)"}) == [(2, "MDE"), (3, "p (Holm)")]


def _tables() -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    agg = pd.DataFrame({"model.family": ["rnn", "rnn", "transformer"], "model.attention": ["none", "luong", None],
                        "model.scoring": [None, "low_rank", "scaled_dot"], "mean": [15.52, 43.04, 51.6],
                        "std": [1.93, 2.5, 1.1], "ci_lo": [-1.6, 20.8, 41.4], "ci_hi": [32.7, 65.3, 61.8],
                        "n": [2, 2, 12], "n_failed": [0, 1, 0], "n_pruned": [0, 0, 3], "n_other": [0, 0, 0],
                        "params": [118e3, 142e3, 2.05e6], "train_seconds": [95.0, 1106.0, 13.0],
                        "tokens_per_second": [2430.0, 17.0, 1.2e6], "clip_fraction": [0.0, 0.25, 1.0]})
    keys = ["model.family", "model.attention", "model.scoring"]
    cells, best = tables.labelled(*tables.summary_table(agg, keys, "val_bleu"), "val_bleu")
    found = [(cells[list(cells.columns[:k])], best[list(cells.columns[:k])]) for k in (1, 3, len(cells.columns))]
    grid = tables.pivot_table(agg, ["model.scoring"], ["model.family"], "val_bleu")
    return found + [tables.labelled(*grid, "val_bleu")]


def test_estimate_is_a_slight_overestimate_of_what_pdflatex_sets(tmp_path):
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not installed (apt-get install --no-install-recommends texlive-latex-base)")
    body = ""
    for i, (cells, best) in enumerate(_tables()):
        tabular = re.search(r"\\begin\{tabular\}.*?\\end\{tabular\}", tables.to_latex(cells, best, "c"), re.S)
        body += (rf"{{\small\setlength{{\tabcolsep}}{{{tables.TABCOLSEP:g}pt}}\begin{{lrbox}}{{\tb}}"
                 rf"{tabular.group(0)}\end{{lrbox}}\typeout{{WIDTH{i}=\the\wd\tb}}}}")
    (tmp_path / "w.tex").write_text(r"\documentclass[twocolumn]{article}\usepackage{booktabs}\newsavebox\tb"
                                    rf"\begin{{document}}\typeout{{COLUMN=\the\columnwidth}}{body}x\end{{document}}")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "w.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    log = (tmp_path / "w.log").read_text(errors="replace")
    assert f"COLUMN={tables.COLUMN_WIDTH:g}pt" in log
    typeset = {int(i): float(w) for i, w in re.findall(r"WIDTH(\d+)=([\d.]+)pt", log)}
    for i, (cells, best) in enumerate(_tables()):
        estimate = tables.tabular_width(cells, best)
        assert typeset[i] <= estimate <= 1.03 * typeset[i], (i, estimate, typeset[i])


def with_counts(run_dir, **fields):
    path = run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def runs_under(tmp_path, budgets):
    """Two configurations x two seeds; `budgets[(family, seed)]` = (budget_flops, reached)."""
    for family in ("rnn", "transformer"):
        for seed in (1, 2):
            flops, reached = budgets[(family, seed)]
            run_dir = write_run(tmp_path, "g", f"{family}-{seed}", seed=seed, model={"family": family},
                                val_bleu=20.0 + seed)
            with_counts(run_dir, steps=1000 + seed, train_flops=1.8e14 + seed * 1e12,
                        budget_flops=flops, budget_tokens=None, budget_steps=None,
                        budget_reached=reached, stopped_by="budget.flops" if reached else "max_epochs")
    return load.load_runs(tmp_path)


def test_costs_are_columns_and_one_shared_budget_is_stated_in_the_caption(tmp_path):
    runs = runs_under(tmp_path, {(f, s): (1.8e14, True) for f in ("rnn", "transformer") for s in (1, 2)})
    agg = aggregate.aggregate(runs, ["model.family"], "val_bleu")
    assert agg["train_flops"].tolist() == [1.815e14, 1.815e14] and agg["steps"].tolist() == [1001.5] * 2
    cells, _ = tables.summary_table(agg, ["model.family"], "val_bleu")
    assert cells["train FLOPs"].tolist() == ["182T", "182T"] and cells["steps"].tolist() == ["1002"] * 2
    assert "train s" in cells and "budget" not in cells and "under budget" not in cells
    caption = captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)
    assert "Every run trained to the same budget, 1.8e+14 FLOPs" in caption
    assert "Not compute-matched" not in caption


def test_a_run_that_fell_short_of_its_budget_is_flagged(tmp_path):
    budgets = {(f, s): (1.8e14, True) for f in ("rnn", "transformer") for s in (1, 2)}
    budgets[("rnn", 2)] = (1.8e14, False)
    runs = runs_under(tmp_path, budgets)
    agg = aggregate.aggregate(runs, ["model.family"], "val_bleu")
    assert agg["n_under_budget"].tolist() == [1, 0]
    cells, _ = tables.summary_table(agg, ["model.family"], "val_bleu")
    assert cells["under budget"].tolist() == ["1", "0"]
    assert "Not compute-matched: 1 averaged run(s)" in captions.caption_text(
        "val_bleu", agg, captions.CI_METHOD, None)


def test_different_budgets_get_a_column_and_seeds_that_differ_are_a_hidden_difference(tmp_path):
    budgets = {(f, s): (1.8e14 if f == "rnn" else 9e13, True) for f in ("rnn", "transformer") for s in (1, 2)}
    runs = runs_under(tmp_path, budgets)
    agg = aggregate.aggregate(runs, ["model.family"], "val_bleu")
    cells, _ = tables.summary_table(agg, ["model.family"], "val_bleu")
    assert cells["budget"].tolist() == ["1.8e+14 FLOPs", "9e+13 FLOPs"]
    assert "budgets differ between rows" in captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)
    # A budget given on the command line lands in config.yaml; seeds with different ones are not one cell.
    for seed, flops in ((1, 1e14), (2, 2e14)):
        config = tmp_path / "g" / f"rnn-{seed}" / "config.yaml"
        config.write_text(config.read_text() + f"budget:\n  flops: {flops}\n")
    assert aggregate.hidden_differences(load.load_runs(tmp_path), ["model.family"]) == ["config.budget.flops"]


def test_a_configuration_with_no_finished_run_yet_does_not_make_the_budgets_differ(tmp_path):
    """A sweep's table while it runs: a row whose only run is still training has no budget to
    compare, which is not the same as a run trained without one."""
    runs = runs_under(tmp_path, {(f, s): (1.8e14, True) for f in ("rnn", "transformer") for s in (1, 2)})
    write_run(tmp_path, "g", "lstm-1", seed=1, model={"family": "lstm"}, status="running", val_bleu=None)
    agg = aggregate.aggregate(load.load_runs(tmp_path), ["model.family"], "val_bleu")
    assert agg["n"].tolist() == [0, 2, 2]
    cells, _ = tables.summary_table(agg, ["model.family"], "val_bleu")
    assert "budget" not in cells
    caption = captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)
    assert "Every run trained to the same budget, 1.8e+14 FLOPs" in caption
    assert "differ" not in caption
    # ...while a finished run without a budget beside budgeted ones does make them differ
    write_run(tmp_path, "g", "lstm-2", seed=2, model={"family": "lstm"}, val_bleu=20.0)
    agg = aggregate.aggregate(load.load_runs(tmp_path), ["model.family"], "val_bleu")
    assert "budgets differ between rows" in captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)


def _sweep_agg(n: int, label_length: int = 6) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """n configurations (the first the baseline) with long labels, and a test of every other one."""
    names = [f"{'x' * label_length}{i}" for i in range(n)]
    agg = pd.DataFrame({"model.family": names, "model.scoring": [f"scoring-{'y' * label_length}"] * n,
                        "mean": [20.0 + 0.1 * i * (-1) ** i for i in range(n)], "std": [1.25] * n,
                        "n": [4] * n})
    delta = agg["mean"] - agg["mean"].iloc[0]
    sig = pd.DataFrame({"model.family": names[1:], "model.scoring": agg["model.scoring"].iloc[1:],
                        "delta": delta.iloc[1:], "delta_lo": delta.iloc[1:] - 1.5, "delta_hi": delta.iloc[1:] + 1.5,
                        "direction": ["better" if d > 0 else "worse" for d in delta.iloc[1:]],
                        "p": 0.001, "p_holm": 0.004, "significant": True, "n_tested": 4, "n_baseline": 4,
                        "note": ""})
    sig.attrs.update(test="seeds", n_samples=1000)
    return agg, sig, pd.Series([True] + [False] * (n - 1))


@pytest.mark.parametrize("n, label_length", [(4, 6), (250, 6), (250, 80), (3, 200)])
def test_the_terminal_view_fits_100_characters_with_the_baseline_first(n, label_length):
    agg, sig, base = _sweep_agg(n, label_length)
    lines = tables.terminal_view(agg, ["model.family", "model.scoring"], "val_bleu", sig, base)
    assert max(map(len, lines)) <= tables.WIDTH
    rows = lines[1:]
    assert rows[0].startswith("xxx") and rows[0].endswith("baseline")
    assert ("…" in rows[0]) == (label_length > 30)                         # abbreviated to fit
    shown = min(n - 1, tables.SHOWN)
    assert len(rows) == 1 + shown + (n - 1 > tables.SHOWN)
    if n - 1 > tables.SHOWN:
        assert rows[-1] == f"{n - 1 - tables.SHOWN} more in table.md"
    deltas = [abs(float(r.split("(4)")[1].split()[0])) for r in rows[1:1 + shown]]
    assert deltas == sorted(deltas, reverse=True)                          # the largest |Δ| first
    assert deltas[0] == pytest.approx(abs(sig["delta"]).max()) and len(set(deltas)) > 1
    assert all(r.rstrip().endswith(("▲", "▼")) for r in rows[1:1 + shown])


def test_labels_are_abbreviated_part_by_part():
    assert tables.abbreviate("transformer / scaled_dot / 4", 100) == "transformer / scaled_dot / 4"
    short = tables.abbreviate("transformer / scaled_dot / 4", 20)
    assert len(short) <= 20 and short.endswith(" / 4") and short.count("…") == 2
    assert len(tables.abbreviate("a" * 300, 30)) == 30


def test_without_a_test_the_view_lists_the_best_means(tmp_path):
    agg, _, _ = _sweep_agg(30)
    lines = tables.terminal_view(agg, ["model.family"], "val_ppl", None, None)
    assert lines[0].split() == ["Family", "mean", "±", "sd", "(n)"]
    means = [float(line.split()[1]) for line in lines[1:11]]
    assert means == sorted(means) and lines[-1] == "20 more in table.md"     # perplexity: lowest first


def test_the_report_prints_the_view_then_one_line_naming_the_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert report.main([str(REPO / "results" / "demo"), "--out", "report", "--no-figures"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert max(map(len, printed)) <= tables.WIDTH
    assert printed[0].startswith("val_bleu (BLEU ↑): 8 runs, 4 configurations, 0 excluded; Δ and p against")
    assert printed[2].startswith("rnn / none / –") and printed[2].endswith("baseline")
    assert [line.split()[0] + line.split()[2] for line in printed[3:6]] == ["rnnbahdanau", "rnnbahdanau",
                                                                          "transformer–"]
    assert printed[-1] == "in report: table.md (full table, caption), table.csv, table.tex, excluded.csv"
    assert "| Family      | Attention   | Scoring    | BLEU ↑ " in (tmp_path / "report" / "table.md").read_text()


def test_a_sampled_float_is_labelled_to_6_significant_digits():
    """A TPE study's learning rates and dropouts as row labels: short, and still told apart."""
    assert tables.label(0.0019634882601995383) == "0.00196349"
    assert tables.label(0.0019579673857690575) == "0.00195797"
    assert [tables.label(v) for v in (4.0, 0.01, 3e-4, float("nan"), None, "gru")] == \
        ["4", "0.01", "0.0003", "–", "–", "gru"]
