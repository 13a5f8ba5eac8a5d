"""Tables (lit_attention/analysis/tables.py): captions say what was computed and what the compared
arms share; headers come from the registry; the columns are chosen by name or by what fits."""

import math

import pandas as pd
import pytest

from lit_attention import registry
from lit_attention.analysis import captions, columns, tables
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


# --- paper tables: human headers, chosen columns, width, caption (issue 18 §3) ---

def _agg(keys: dict):
    frame = pd.DataFrame(keys)
    n = len(frame)
    return frame.assign(mean=[20.0 + i for i in range(n)], std=[1.0] * n, ci_lo=[10.0] * n,
                        ci_hi=[30.0] * n, n=[3] * n, n_failed=[0] * n, n_pruned=[0] * n,
                        n_other=[0] * n, params=[123456.0] * n, train_seconds=[100.0] * n)


def test_headers_are_the_registry_labels_and_the_metric_with_its_direction():
    agg = _agg({"model.cell": ["gru", "lstm"], "model.attention": ["none", "luong"], "model.lr": [1, 2]})
    keys = ["model.cell", "model.attention", "model.lr"]
    cells, best = tables.labelled(*columns.summary_table(agg, keys, "val_bleu"), "val_bleu")
    assert list(cells.index.names) == [registry.LABELS["model.cell"], registry.LABELS["model.attention"], "lr"]
    assert list(cells.columns[:2]) == ["BLEU ↑", "95% CI"]
    latex, markdown = tables.to_latex(cells, best, "c"), tables.to_markdown(cells, best)
    assert r"Cell & Attention & lr & BLEU $\uparrow$ & 95\% CI" in latex
    assert "model." not in latex and "model." not in markdown
    assert markdown.startswith("| Cell   | Attention   | lr   | BLEU ↑")
    ppl = tables.labelled(*columns.summary_table(agg, keys, "test_ppl"), "test_ppl")[0]
    assert ppl.columns[0] == "PPL ↓"
    grid = tables.labelled(*tables.pivot_table(agg, ["model.cell"], ["model.attention"], "val_bleu"),
                           "val_bleu")[0]
    assert grid.index.names == ["Cell"] and grid.columns.names == ["Attention"]


def test_latex_has_one_header_row_blank_repeats_and_a_spanning_pivot_header():
    agg = _agg({"model.family": ["rnn", "rnn", "transformer"], "model.scoring": ["additive", "dot", "dot"]})
    keys = ["model.family", "model.scoring"]
    latex = tables.to_latex(*tables.labelled(*columns.summary_table(agg, keys, "val_bleu"), "val_bleu"), "c")
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
    assert r"\begin{table*}" in tables.to_latex(*columns.summary_table(agg, keys, "val_bleu"), "c", wide=True)


def test_columns_are_chosen_by_name_or_by_what_fits_one_column():
    agg = _agg({"model.family": ["rnn", "transformer"], "model.attention": ["bahdanau", None],
                "model.scoring": ["additive", "scaled_dot"]})
    keys = ["model.family", "model.attention", "model.scoring"]
    cells, best = tables.labelled(*columns.summary_table(agg, keys, "val_bleu"), "val_bleu")
    assert list(cells.columns) == ["BLEU ↑", "95% CI", "n", "failed/pruned", "params", "train s"]
    chosen, _, left_out = columns.choose_columns(cells, best, "BLEU ↑", ["mean", "params", "n"])
    assert list(chosen.columns) == ["BLEU ↑", "params", "n"] and "95% CI" in left_out
    assert list(columns.choose_columns(cells, best, "BLEU ↑", ["train_s", "ci"])[0].columns) == ["train s", "95% CI"]
    assert columns.choose_columns(cells, best, "BLEU ↑", ["all"])[0].shape == cells.shape
    with pytest.raises(ValueError, match=r"unknown --columns bogus; this table has: mean, ci, n"):
        columns.choose_columns(cells, best, "BLEU ↑", ["mean", "bogus"])
    fitted, fitted_best, left_out = columns.choose_columns(cells, best, "BLEU ↑")
    assert tables.tabular_width(fitted, fitted_best) <= tables.width_limit() == 229.5
    assert list(fitted.columns) == ["BLEU ↑", "n"]               # the interval would not fit
    assert left_out == ["95% CI", "params", "train s"]           # failed/pruned: all 0/0, shown nowhere
    for column in left_out:
        wider = list(fitted.columns) + [column]
        assert tables.tabular_width(cells[wider], best[wider]) > 229.5
    wide = columns.choose_columns(cells, best, "BLEU ↑", limit=tables.width_limit(wide=True))[0]
    assert list(wide.columns) == ["BLEU ↑", "95% CI", "n", "params", "train s"]
    two_keys = tables.labelled(*columns.summary_table(agg, keys[::2], "val_bleu"), "val_bleu")
    assert list(columns.choose_columns(*two_keys, "BLEU ↑")[0].columns) == ["BLEU ↑", "95% CI", "n"]


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
    assert columns.p_cells(agg, ["a"], sig, pd.Series([True, False, False, False])) == [
        "baseline", "<0.001", "<0.001", "n=1"]
    assert columns.delta_cells(agg, ["a"], sig, 1) == ["", "+10.0 [8.0, 12.0]", "-10.0 [-12.0, -8.0]", "+20.0"]
