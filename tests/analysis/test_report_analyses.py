"""`lit-attention report --trials --improvement` on the demo study (FIXTURE run store,
tests/analysis_stores.py): the files and the printed tables of trials.py."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis_stores import demo_study
from conftest import cli_in_process


@pytest.mark.slow
def test_report_trials_and_improvement_on_the_demo_study(tmp_path):
    study = demo_study(tmp_path / "runs")          # 4 configurations x 2 seeds, 3 of them rnn
    out = tmp_path / "report"
    result = cli_in_process("report", study, "--out", out, "--trials", "--improvement")
    assert result.returncode == 0, result.stderr
    for name in ("expected_max.csv", "expected_max.png", "expected_max.pdf", "improvement.csv"):
        assert (out / name).is_file(), name

    trials = pd.read_csv(out / "expected_max.csv").set_index(["model.family", "trials"])
    # rnn: 6 trials (3 configurations x 2 seeds); one draw -> their mean
    rnn = [14.2, 16.9, 41.3, 44.8, 46.1, 47.9]
    assert trials.loc[("rnn", 1), "expected_max"] == pytest.approx(sum(rnn) / 6)
    # transformer [50.8, 52.4]: two draws -> 50.8 / 4 + 52.4 * 3 / 4
    assert trials.loc[("transformer", 2), "expected_max"] == pytest.approx(52.0)
    assert trials.loc[("rnn", 6), "n_runs"] == 6 and ("transformer", 3) not in trials.index
    printed = (out / "expected_max.md").read_text()
    assert "| rnn (N=6) " in printed and "| transformer (N=2) " in printed
    assert "| 35.2 ± 14.1 " in printed           # rnn, n = 1: mean ± population sd

    improved = pd.read_csv(out / "improvement.csv")
    base = improved[improved["baseline"]]
    assert len(base) == 1 and base["model.attention"].item() == "none"
    beaten = improved[~improved["baseline"]]
    assert (beaten["p_improvement"] == 1.0).all() and (beaten["p_ci_lo"] == 1.0).all()   # every pair wins
    assert base["iqm"].item() == pytest.approx((14.2 + 16.9) / 2)          # 2 runs: nothing cut
    printed = (out / "improvement.md").read_text()
    assert "| 1.00 [1.00, 1.00]" in printed and "baseline (model.attention=none)" in printed
    assert "With 2 runs in the smallest stratum the bootstrap sees only those runs" in printed
    assert "expected_max.md, improvement.md" in result.stdout.splitlines()[-1]


def test_improvement_without_a_baseline_is_a_usage_error(tmp_path):
    study = demo_study(tmp_path / "runs", epochs=1)
    result = cli_in_process("report", study, "--out", tmp_path / "r", "--no-figures", "--baseline", "off",
                            "--improvement")
    assert result.returncode == 2
    assert "--improvement compares every row with a baseline" in result.stderr
    assert not (tmp_path / "r" / "improvement.csv").exists()


def test_a_runs_dir_after_trials_is_named_not_taken_for_a_key(tmp_path):
    result = cli_in_process("report", "--trials", tmp_path)
    assert result.returncode == 2
    assert f"--trials took {tmp_path} as a KEY: put RUNS_DIR before --trials" in result.stderr


@pytest.mark.parametrize("store,family,trials", [("demo", "rnn", 6), ("lm-lr", "transformer", 9)])
def test_report_trials_and_improvement_on_committed_stores(tmp_path, store, family, trials):
    """Both run on results/demo and on a committed sweep that varies
    hyperparameters (results/lm-lr: learning rates x seeds, lower perplexity is better)."""
    from conftest import REPO
    from lit_attention.analysis import report
    out = tmp_path / store
    metric = ["--metric", "val_ppl"] if store == "lm-lr" else []
    baseline = ["--baseline", "family=rnn", "model.lr=0.01"] if store == "lm-lr" else []
    assert report.main([str(REPO / "results" / store), "--out", str(out), "--no-figures", "--trials",
                        "--improvement", *metric, *baseline]) == 0
    curve = pd.read_csv(out / "expected_max.csv").set_index(["model.family", "trials"])["expected_max"]
    best_of = curve.loc[family] if store == "demo" else -curve.loc[family]    # lower perplexity is better
    assert best_of.is_monotonic_increasing and best_of.loc[trials] == best_of.max()
    improved = pd.read_csv(out / "improvement.csv")
    assert improved["baseline"].sum() == 1
    assert improved.loc[~improved["baseline"], "p_improvement"].between(0, 1).all()
