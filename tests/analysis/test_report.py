"""`lit-attention report` on run stores with malformed or non-finite runs: each is skipped with one
warning line naming it, counted in the table, never averaged; a bug still gives a traceback
(FIXTURE run stores, tests/analysis_stores.py)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analysis_stores import lstm, write_run, write_study
from conftest import run_cli
from lit_attention.analysis import aggregate, load, report

BLEU = {"none": [10.0, 11.0, 12.0], "luong": [20.0, 21.0, 22.0]}



@pytest.fixture
def study(tmp_path):
    """2 configurations x 3 seeds (FIXTURE)."""
    return write_study(tmp_path, BLEU)


def set_summary(run_dir, **fields):
    path = run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def test_malformed_summaries_are_skipped_warned_and_counted(study):
    (study / "none-s1" / "summary.json").write_text('{"status": "finished", "val_bl')
    (study / "luong-s2" / "summary.json").write_text("[]")
    out = study.parent / "report"
    result = run_cli("report", study, "--out", out, "--no-figures", "--baseline", "off", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: skipped run")]
    assert warnings == [
        f"warning: skipped run: {study / 'luong-s2' / 'summary.json'}: holds an array, not a JSON object",
        f"warning: skipped run: {study / 'none-s1' / 'summary.json'}: not valid JSON "
        "(Unterminated string starting at: line 1 column 24 (char 23))"]
    assert "2 runs skipped as unreadable" in (out / "table.md").read_text()          # the caption
    assert "4 runs, 2 configurations, 2 excluded (2 unreadable)" in result.stdout   # as many as excluded.csv lists
    table = pd.read_csv(out / "table.csv").set_index("model.attention")
    assert table.loc["none", "mean"] == 11.5 and table.loc["luong", "mean"] == 21.0
    excluded = pd.read_csv(out / "excluded.csv")
    assert sorted(excluded["run_id"]) == ["luong-s2", "none-s1"]
    assert set(excluded["status"]) == {"unreadable"} and excluded["reason"].str.contains("JSON").all()
    assert "2 runs skipped as unreadable" in (out / "table.tex").read_text()


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "n/a"])
def test_a_non_finite_metric_is_never_averaged_but_counted(study, tmp_path, capsys, value):
    set_summary(study / "luong-s1", val_bleu=value)           # json writes Infinity / NaN literals
    out = tmp_path / "report"
    assert report.main([str(study), "--out", str(out), "--no-figures", "--baseline", "off"]) == 0
    captured = capsys.readouterr()
    assert f"warning: {study / 'luong-s1'}: val_bleu is {value!r}, not a finite number; the run " \
           "is not averaged" in captured.err.splitlines()
    table = pd.read_csv(out / "table.csv").set_index("model.attention")
    assert table.loc["luong", "mean"] == 21.5 and table.loc["luong", "n"] == 2
    assert table.loc["luong", "n_invalid"] == 1 and table.loc["none", "n_invalid"] == 0
    assert "| 0/0 (+1 invalid)" in (out / "table.md").read_text()
    assert "1 with an invalid val_bleu" in (out / "table.md").read_text()
    excluded = pd.read_csv(out / "excluded.csv")
    assert excluded["reason"].tolist() == [f"val_bleu is {value!r}"]


@pytest.mark.parametrize("value,why", [("50", "not a finite number"), (True, "not a finite number"),
                                       (150.0, "outside its range [0, 100]"), (-3.0, "outside its range [0, 100]")])
def test_a_metric_of_the_wrong_type_or_out_of_range_is_invalid_not_a_value(study, tmp_path, capsys, value, why):
    """`"val_bleu": "50"` or `true` is an invalid value, never shown as 50.0 or 1.0 and marked best."""
    set_summary(study / "luong-s1", val_bleu=value)
    out = tmp_path / "report"
    assert report.main([str(study), "--out", str(out), "--no-figures", "--baseline", "off"]) == 0
    captured = capsys.readouterr()
    assert f"warning: {study / 'luong-s1'}: val_bleu is {value!r}, {why}; the run is not averaged" \
        in captured.err.splitlines(), captured.err
    table = pd.read_csv(out / "table.csv").set_index("model.attention")
    assert table.loc["luong", "mean"] == 21.5 and table.loc["luong", "n"] == 2
    assert table.loc["luong", "n_invalid"] == 1


def test_non_finite_costs_are_left_out_of_their_means(study, tmp_path, capsys):
    set_summary(study / "none-s2", train_seconds=math.inf)
    assert report.main([str(study), "--out", str(tmp_path), "--no-figures", "--baseline", "off"]) == 0
    assert f"warning: {study / 'none-s2'}: train_seconds is inf; left out of the train_seconds mean" \
        in capsys.readouterr().err
    table = pd.read_csv(tmp_path / "table.csv").set_index("model.attention")
    assert table.loc["none", "train_seconds"] == 12.0          # seeds 1 and 3: 11 s and 13 s
    assert table.loc["none", "n"] == 3                         # the metric itself is fine


def test_only_unreadable_runs_exit_2_with_a_short_message(study):
    for summary in study.glob("*/summary.json"):
        summary.write_text("")
    result = run_cli("report", study, "--no-figures", timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "error: no readable run under" in result.stderr and "all 6 are unreadable" in result.stderr


@pytest.mark.parametrize("args,message", [
    (["--digits", "-1"], "--digits must be 0 or more, got -1"),
    (["--resample-seed", "-1"], "--resample-seed must be 0 or more, got -1"),
])
def test_a_negative_count_or_seed_is_a_usage_error(study, tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        report.main([str(study), "--out", str(tmp_path / "out"), "--no-figures", *args])
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--rows", "model.attention", "--cols", "model.attention"],
                                  ["--cols", "model.attention", "model.attention"]])
def test_a_key_given_twice_in_rows_and_cols_is_a_usage_error(study, tmp_path, capsys, args):
    """A key is one axis of the table: given twice, it is a usage error naming it."""
    assert report.main([str(study), "--out", str(tmp_path / "out"), "--no-figures", *args]) == 2
    assert "model.attention is given twice in --rows/--cols" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [["--cols", "seed"], ["--rows", "model.scoring", "run_id"],
                                  ["--where", "status=finished"]])
def test_a_key_that_is_no_configuration_key_is_a_usage_error(study, tmp_path, capsys, args):
    """A row is a configuration averaged over its seeds: a run's seed, id or status is no key."""
    assert report.main([str(study), "--out", str(tmp_path / "out"), "--no-figures", *args]) == 2
    err = capsys.readouterr().err
    assert "unknown key" in err and "configuration keys" in err and "Traceback" not in err


def test_group_picks_the_runs_of_one_group_of_a_local_store(study, tmp_path, capsys):
    """--group also acts on a local runs/ directory: the table averages that group's runs only,
    not every group's."""
    write_run(tmp_path, "other", "x-s1", seed=1, model=lstm("none"), val_bleu=90.0)
    out = tmp_path / "out"
    assert report.main([str(tmp_path), "--out", str(out), "--group", "study", "--no-figures"]) == 0
    table = pd.read_csv(out / "table.csv").set_index("model.attention")
    assert table.loc["none", "n"] == 3 and table.loc["none", "mean"] == pytest.approx(11.0)
    assert report.main([str(tmp_path), "--out", str(out), "--group", "studdy", "--no-figures"]) == 2
    assert "--group studdy: no run of that group here; the groups: other, study" in capsys.readouterr().err


def test_a_bug_still_gives_a_traceback(study, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug in the analysis")
    monkeypatch.setattr(aggregate, "seed_stats", broken)
    with pytest.raises(ZeroDivisionError):
        report.main([str(study), "--out", str(tmp_path), "--no-figures"])


def test_usable_invalid_and_missing_metrics_are_told_apart():
    runs = pd.DataFrame({"run_dir": list("abcde"), "status": ["finished"] * 4 + ["failed"],
                         "val_bleu": [20.0, math.inf, None, math.nan, 5.0],
                         "nonfinite": ["", "val_bleu", "", "val_bleu", ""]})
    assert aggregate.usable(runs, "val_bleu").tolist() == [True, False, False, False, False]
    assert aggregate.invalid(runs, "val_bleu").tolist() == [False, True, False, True, False]
    agg = aggregate.aggregate(runs.assign(k="x", run_id=list("abcde")), ["k"])
    assert agg.loc[0, ["n", "n_invalid", "n_missing", "n_other", "n_failed"]].tolist() == [1, 2, 1, 0, 1]
    assert load.FINISHED == "finished"


def test_columns_label_and_wide_shape_the_latex_and_markdown_tables(study, tmp_path, capsys):
    out = tmp_path / "r"
    assert report.main([str(study), "--out", str(out), "--baseline", "off", "--no-figures",
                        "--columns", "n", "mean", "--label", "tab:attention"]) == 0
    latex, md = (out / "table.tex").read_text(), (out / "table.md").read_text()
    assert r"\label{tab:attention}" in latex and r"\begin{table}" in latex
    assert r"Attention & n & BLEU $\uparrow$ \\" in latex
    assert md.startswith("| Attention   | n   | BLEU ↑")
    assert report.main([str(study), "--out", str(out), "--baseline", "off", "--no-figures", "--wide"]) == 0
    latex = (out / "table.tex").read_text()
    assert r"\begin{table*}" in latex and r"\label" not in latex
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert report.main([str(study), "--out", str(bad), "--no-figures", "--columns", "mean", "bogus"]) == 2
    assert "error: unknown --columns bogus; this table has: mean, ci, n" in capsys.readouterr().err
    assert list(bad.iterdir()) == []                                 # nothing written


def test_default_table_tells_what_it_left_out_to_fit_a_column(tmp_path, capsys):
    runs = tmp_path / "runs"
    for family, positional, scoring in (("transformer", "sinusoidal", "scaled_dot"),
                                        ("transformer", "rotary", "scaled_dot"),
                                        ("transformer", "alibi", "general")):
        for seed in (1, 2):
            write_run(runs, "g", f"{positional}-{scoring}-s{seed}", seed=seed, val_bleu=30.0 + seed,
                      model=dict(family=family, positional=positional, scoring=scoring, heads=4))
    assert report.main([str(runs / "g"), "--out", str(tmp_path / "r"), "--no-figures"]) == 0
    err = capsys.readouterr().err
    # (--no-figures reads no metrics.csv: the gradient columns come from summaries, none here)
    assert "train s, tok/s left out to fit the column width of a two-column" in err
    md = (tmp_path / "r" / "table.md").read_text()
    assert "| train s" in md and "| Positions" in md                # the Markdown keeps every column


def test_caption_says_how_test_hypotheses_were_decoded():
    runs = pd.DataFrame({"status": ["finished"] * 3, "test_bleu": [1.0, 2.0, 3.0],
                         "val_bleu": [1.0, 2.0, 3.0], "val_ppl": [3.0, 2.0, 1.0],
                         "config.model.beam_size": [5, 5, 1], "config.model.length_penalty": [1.0, 1.0, 0.6]})
    assert report.decoding(runs, "test_bleu") == "beam 5, length penalty 1; greedy decoding"
    assert report.decoding(runs, "val_bleu") == "greedy decoding"
    assert report.decoding(runs, "val_ppl") is None
    assert report.decoding(runs.assign(decoding="beam 4"), "test_bleu") == "beam 4"


def test_a_table_wider_than_the_column_even_without_statistics_is_warned_about(tmp_path, capsys):
    runs = tmp_path / "runs"
    for positional, scoring in (("sinusoidal", "scaled_dot"), ("t5_bias", "additive")):
        write_run(runs, "g", f"{positional}-s1", seed=1, val_bleu=30.0,
                  model=dict(family="transformer", positional=positional, scoring=scoring,
                             norm="post" if scoring == "additive" else "pre", tie_embeddings=True))
    rows = ["family", "positional", "scoring", "norm", "tie_embeddings"]
    assert report.main([str(runs / "g"), "--out", str(tmp_path / "r"), "--no-figures", "--rows", *rows]) == 0
    err = capsys.readouterr().err
    assert "warning: table.tex is about" in err and "wider than the column width of a two-column paper (229.5 pt)" in err
    assert r"Family & Positions & Scoring & Norm & Tied emb. & BLEU $\uparrow$ \\" in (tmp_path / "r" / "table.tex").read_text()


def test_a_hidden_varying_parameter_is_a_row_key_by_default_and_refused_when_hidden(tmp_path, capsys):
    """Two learning rates (a config field outside the summary's model dict) are two
    configurations, never 2 x 2 'seeds' of one."""
    for lr, scores in {"0.001": [10.0, 11.0], "0.003": [30.0, 31.0]}.items():
        for attention in ("none", "luong"):
            for seed, bleu in enumerate(scores, start=1):
                run = write_run(tmp_path, "lr", f"{attention}-{lr}-s{seed}", seed=seed,
                                model=lstm(attention), val_bleu=bleu)
                with open(run / "config.yaml", "a") as f:
                    f.write(f"    lr: {lr}\n")
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "lr"), "--out", str(out), "--baseline", "off", "--no-figures"]) == 0
    assert "rows: config.model.lr added" in capsys.readouterr().err
    table = pd.read_csv(out / "table.csv")
    assert table["n"].tolist() == [2, 2, 2, 2] and sorted(table["mean"]) == [10.5, 10.5, 30.5, 30.5]
    assert "| lr " in (out / "table.md").read_text()
    assert report.main([str(tmp_path / "lr"), "--out", str(out), "--rows", "model.attention",
                        "--no-figures"]) == 2
    assert "configuration keys ['config.model.lr'] vary across the runs" in capsys.readouterr().err
    assert report.main([str(tmp_path / "lr"), "--out", str(out), "--rows", "model.attention",
                        "--where", "config.model.lr=0.003", "--baseline", "off", "--no-figures"]) == 0


def test_the_default_baseline_is_found_when_scoring_restates_attention(tmp_path, capsys):
    """A reference table's shape: no attention, one attention wiring with one scoring, and a
    Transformer. `scoring` alone tells all three apart, yet the automatic rows must keep
    `attention`, or the default baseline (attention=none) is silently not tested."""
    from analysis_stores import references
    refs = references(60, seed=3)
    # The Transformer's run is read first, so `scoring` is a column before `attention` is.
    models = {"t0-transformer": dict(family="transformer", scoring="scaled_dot"),
              "t1-none": dict(family="rnn", cell="lstm", attention="none"),
              "t2-luong": dict(family="rnn", cell="lstm", attention="luong", scoring="general")}
    for name, fields in models.items():
        for seed in (1, 2):
            hyps = refs if name != "t1-none" else [r.split()[0] for r in refs]
            write_run(tmp_path, "study", f"{name}-s{seed}", seed=seed, model=fields,
                      val_bleu=30.0 + seed if name != "t1-none" else 10.0 + seed, hyps=hyps, refs=refs)
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "study"), "--out", str(out), "--no-figures"]) == 0
    assert "significance against the configuration without attention" in capsys.readouterr().err
    sig = pd.read_csv(out / "significance.csv")
    tested = sorted(zip(sig["model.family"], sig["model.attention"].fillna("")))   # a Transformer: no field
    assert tested == [("rnn", "luong"), ("transformer", "")]
    header = (out / "table.md").read_text().splitlines()[0]
    assert [c.strip() for c in header.split("|")[1:3]] == ["Family", "Attention"]


def test_a_table_with_nothing_tested_yet_says_so_not_a_test_of_0_comparisons(tmp_path):
    """A sweep under way: the baseline and another row, each with one seed so far."""
    from analysis_stores import references
    refs = references(30, seed=4)
    for scoring in ("dot", "general"):
        write_run(tmp_path, "study", f"{scoring}-s1", seed=1, model=dict(family="rnn", scoring=scoring),
                  val_bleu=30.0, hyps=refs, refs=refs)
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "study"), "--out", str(out), "--no-figures",
                        "--rows", "model.scoring", "--baseline", "scoring=dot"]) == 0
    caption = (out / "table.md").read_text()
    assert "0 comparisons" not in caption and "(0 hypotheses)" not in caption
    assert "Holm-corrected over both directions of the comparisons tested (none here)." in caption
    assert "n=1: one seed (here or in the baseline), so no test over seeds and no mark." in caption


def whole(path) -> bool:
    """A figure or table file that was written to its end."""
    data = path.read_bytes()
    if path.suffix == ".png":
        return data.endswith(b"IEND\xaeB`\x82")
    if path.suffix == ".pdf":
        return data.startswith(b"%PDF") and data.rstrip().endswith(b"%%EOF")
    return len(data) > 0


@pytest.mark.slow
def test_sigterm_while_report_writes_leaves_whole_files_and_says_so(study, tmp_path):
    """SIGTERM while the report writes leaves no file at 0 bytes (runs.csv beside the previous
    table.csv, ablation_bars.pdf): every file is whole, and the report says so."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO, cli_env
    out = tmp_path / "report"
    first = run_cli("report", study, "--out", out, "--baseline", "off", timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    before = {p.name: p.stat().st_ino for p in out.iterdir()}
    assert "ablation_bars.pdf" in before
    proc = subprocess.Popen([sys.executable, "-m", "lit_attention.cli", "report", str(study), "--out", str(out),
                             "--baseline", "off"], cwd=REPO, env=cli_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (out / "runs.csv").stat().st_ino == before["runs.csv"]:
        time.sleep(0.005)   # until the second report has replaced its first file
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == (f"lit-attention report: interrupted (SIGTERM): {out} holds whole "
                                               f"files only, some of them from an earlier report; run the report again")
    files = sorted(out.iterdir())
    assert not [p.name for p in files if p.name.startswith(".")], files    # no temporary file left
    assert [p.name for p in files if not whole(p)] == []
    assert set(before) <= {p.name for p in files}


# -- a metric not recorded yet --------------------------------------------------------------------------

def test_a_metric_no_run_has_yet_says_the_runs_are_still_running(tmp_path, capsys):
    run = write_run(tmp_path, "first", "t0", seed=1, model=lstm("none"), status="running")
    summary = json.loads((run / "summary.json").read_text())
    del summary["val_bleu"]                    # a first trial before its first validation
    (run / "summary.json").write_text(json.dumps(summary))
    assert report.main([str(tmp_path / "first"), "--out", str(tmp_path / "out"), "--no-figures"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: metric 'val_bleu' is in no run summary yet (1 run: 1 running); a run records it at its "
        "first validation: report again then")


def test_files_of_an_earlier_report_that_this_one_did_not_write_are_named(study, tmp_path, capsys):
    out = tmp_path / "report"
    out.mkdir()
    (out / "ablation_bars.png").write_bytes(b"an earlier report's figure")
    (out / "table.csv").write_text("old")
    assert report.main([str(study), "--out", str(out), "--no-figures", "--baseline", "off"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert (f"note: 1 file in {out} are not from this report, left as they are (no earlier report wrote "
            f"them, or they changed since): ablation_bars.png") in err, err
    assert (out / "table.csv").read_text() != "old"


def test_files_of_an_earlier_report_that_this_one_did_not_write_are_removed_and_nothing_else(
        study, tmp_path, capsys):
    """An earlier report's outputs that a new report into the same
    directory does not write are removed (they were named only); a file the earlier report did not
    write, or one changed since, is left and named; a refused report removes nothing."""
    out = tmp_path / "report"
    assert report.main([str(study), "--out", str(out), "--no-figures", "--trials"]) == 0   # + significance.csv
    first = {p.name for p in out.iterdir()}
    assert {"significance.csv", "expected_max.csv", "report-files.json"} <= first
    (out / "notes.md").write_text("mine")
    with open(out / "expected_max.csv", "a") as f:       # an earlier output, edited since
        f.write("# checked\n")
    capsys.readouterr()
    assert report.main([str(study), "--out", str(out), "--rows", "model.atention", "--no-figures"]) == 2
    assert {p.name for p in out.iterdir()} == first | {"notes.md"}          # bad input: nothing lost
    assert report.main([str(study), "--out", str(out), "--no-figures", "--baseline", "off"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert (f"removed 2 files of the earlier report in {out} that this one did not write: expected_max.md, "
            "significance.csv") in err, err
    assert (f"note: 2 files in {out} are not from this report, left as they are (no earlier report wrote them, "
            f"or they changed since): expected_max.csv, notes.md") in err, err
    assert {p.name for p in out.iterdir()} == first - {"significance.csv", "expected_max.md"} | {"notes.md"}
    assert (out / "notes.md").read_text() == "mine" and "# checked" in (out / "expected_max.csv").read_text()
    assert report.main([str(study), "--out", str(out), "--no-figures", "--baseline", "off"]) == 0
    assert "removed" not in capsys.readouterr().err                 # the same report again: nothing stale


def test_a_baseline_value_matches_however_the_number_is_written(tmp_path, capsys):
    for lr, bleu in ((0.001, [10.0, 11.0]), (0.003, [20.0, 22.0])):
        for seed, value in enumerate(bleu, start=1):
            write_run(tmp_path, "lr", f"{lr}-s{seed}", seed=seed, model={**lstm("luong"), "lr": lr}, val_bleu=value)
    out = tmp_path / "report"
    assert report.main([str(tmp_path / "lr"), "--out", str(out), "--no-figures", "--baseline", "model.lr=1e-3",
                        "--test", "seeds"]) == 0, capsys.readouterr().err
    table = pd.read_csv(out / "table.csv")
    assert table.loc[table["baseline"], "model.lr"].tolist() == [0.001]


def test_a_misspelt_rows_key_gets_a_did_you_mean(study, tmp_path, capsys):
    assert report.main([str(study), "--out", str(tmp_path / "out"), "--rows", "model.atention"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "error: unknown key 'model.atention' — did you mean model.attention?; configuration keys: ")


def confounded_study(root):
    """Two arms that differ in width, learning rate and training-set size at once (`--rows model.lr`
    alone must not hide the other two)."""
    for lr, width, n_train, scores in ((0.001, 32, 200, [10.0, 11.0]), (0.003, 48, 400, [30.0, 31.0])):
        for seed, bleu in enumerate(scores, start=1):
            run = write_run(root, "arms", f"{lr}-s{seed}", seed=seed, val_bleu=bleu,
                            model={**lstm("luong"), "d_model": width})
            with open(run / "config.yaml", "a") as f:
                f.write(f"    lr: {lr}\ndata:\n  n_train: {n_train}\n")
    return root / "arms"


@pytest.mark.parametrize("rows", [["--rows", "model.lr"], []])
def test_every_key_that_varies_is_shown_beside_the_row_keys(tmp_path, capsys, rows):
    out = tmp_path / "out"
    assert report.main([str(confounded_study(tmp_path)), "--out", str(out), "--no-figures",
                        "--baseline", "off", *rows]) == 0
    err = capsys.readouterr().err
    table = pd.read_csv(out / "table.csv")
    shown = {"model.d_model", "config.model.lr", "config.data.n_train"}
    assert shown <= set(table.columns), table.columns
    assert sorted(zip(table["model.d_model"], table["config.model.lr"], table["config.data.n_train"])) == [
        (32, 0.001, 200), (48, 0.003, 400)]
    header = (out / "table.md").read_text().splitlines()[0]
    assert {"Width", "lr", "n_train"} <= {c.strip() for c in header.split("|")}, header   # narrow: columns
    assert r"& n\_train &" in (out / "table.tex").read_text() or r"n\_train & BLEU" in (out / "table.tex").read_text()
    assert "rows also differ in" in err and "shown as columns" in err and "warning" not in err


def test_keys_too_many_for_columns_are_listed_in_the_caption_and_the_latex_still_fits(tmp_path, capsys):
    """Two families that differ in many fields: as columns table.tex would not fit a column, so the
    caption lists each row's values (an n-gram model's learning rate, which never acted, is not)."""
    models = {"ngram": dict(family="ngram", order=5, smoothing="interp"),
              "rnn": dict(family="rnn", cell="lstm", d_model=256, layers=2, dropout=0.1, tie_embeddings=False),
              "transformer": dict(family="transformer", d_model=128, layers=4, dropout=0.0, tie_embeddings=True,
                                  positional="sinusoidal")}
    for name, fields in models.items():
        for seed in (1, 2):
            run = write_run(tmp_path, "lm", f"{name}-s{seed}", seed=seed, model=fields, val_bleu=20.0 + seed)
            with open(run / "config.yaml", "a") as f:
                f.write(f"    lr: {0.002 if name == 'rnn' else 0.001}\n")
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "lm"), "--out", str(out), "--no-figures", "--baseline", "off"]) == 0
    err = capsys.readouterr().err
    assert "shown in the caption" in err and "warning" not in err
    legend = ("Rows also differ in Width, Layers, Dropout, Tied emb., lr (not listed where it does not act): "
              "rnn: Width 256, Layers 2, Dropout 0.1, Tied emb. False, lr 0.002; transformer: Width 128, "
              "Layers 4, Dropout 0, Tied emb. True, lr 0.001.")
    assert legend in (out / "table.md").read_text()
    assert legend.replace("_", r"\_") in (out / "table.tex").read_text()
    assert {"model.d_model", "model.layers", "config.model.lr"} <= set(pd.read_csv(out / "table.csv").columns)


def test_runs_that_record_nothing_to_group_by_are_a_usage_error(tmp_path, capsys):
    """Summaries without a model, a task or any varying key: one line naming --rows, exit 2."""
    (tmp_path / "s" / "r1").mkdir(parents=True)
    (tmp_path / "s" / "r1" / "summary.json").write_text('{"status": "finished", "val_loss": 1.0}')
    assert report.main([str(tmp_path / "s"), "--out", str(tmp_path / "out"), "--metric", "val_loss"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith("name the key of their rows with --rows KEY")
