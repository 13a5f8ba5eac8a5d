"""Probability of improvement, IQM and their stratified-bootstrap CIs (improvement.py), checked
against Agarwal et al. (2021)'s definitions (rliable) on worked examples."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lit_attention.analysis import improvement as imp


def test_probability_of_improvement_counts_ties_half():
    # x=1 loses twice, x=2 ties twice (0.5 each), x=3 wins twice: 3 of 6 pairs
    assert imp.prob_improvement([1, 2, 3], [2, 2]) == 0.5
    assert imp.prob_improvement([3, 3], [1, 3]) == 0.75        # (1 + 0.5 + 1 + 0.5) / 4
    assert imp.prob_improvement([[3, 3], [0, 0]], [[1, 3], [1, 1]]).tolist() == [0.75, 0.0]


def test_iqm_is_trim_mean_of_a_quarter():
    # scipy.stats.trim_mean(x, 0.25) cuts int(0.25 N) scores from each end
    assert imp.iqm([5, 1, 4, 2, 3]) == 3.0                      # cut 1: mean(2, 3, 4)
    assert imp.iqm([1, 2, 3, 4, 10, 100]) == 4.75               # cut int(1.5) = 1: mean(2, 3, 4, 10)
    assert imp.iqm(np.arange(1, 9)) == 4.5                      # cut 2: mean(3, 4, 5, 6)
    assert imp.iqm([1, 2, 30]) == 11.0                          # cut int(0.75) = 0: the mean
    assert imp.iqm(np.arange(20)) == 9.5                        # scipy's own docstring example
    assert imp.iqm([[1, 2, 3, 4, 10, 100], [0, 0, 0, 0, 0, 8]]).tolist() == [4.75, 0.0]


def test_resampling_keeps_each_stratum_and_its_size():
    draws = imp.resample(np.array([1.0, 2.0, 3.0]), 500, np.random.default_rng(0))
    assert draws.shape == (500, 3) and set(np.unique(draws)) == {1.0, 2.0, 3.0}
    assert (draws == draws[:, :1]).all(axis=1).any()          # some draws repeat one run


def test_ci_collapses_when_every_stratum_is_constant():
    # within each (configuration, task) every run scores the same: every stratified draw is the
    # data itself; a bootstrap of the pooled scores [5, 5, 5, 1, 1] would move the IQM
    x = {"a": [5.0, 5.0, 5.0], "b": [1.0, 1.0]}
    y = {"a": [3.0, 3.0], "b": [1.0, 1.0]}
    found = imp.compare(x, y, n_draws=300)
    assert found["n_tasks"] == 2
    assert found["p_improvement"] == found["p_ci_lo"] == found["p_ci_hi"] == 0.75   # (1 + 0.5) / 2
    assert found["iqm"] == pytest.approx(11 / 3)               # cut 1: mean(1, 5, 5)
    assert found["iqm_ci_lo"] == pytest.approx(11 / 3) and found["iqm_ci_hi"] == pytest.approx(11 / 3)


def test_ci_spans_the_uncertainty_of_overlapping_runs():
    found = imp.compare({"a": [1.0, 4.0, 6.0, 9.0]}, {"a": [3.0, 5.0, 7.0]}, n_draws=2000)
    assert found["p_improvement"] == pytest.approx(6 / 12)
    assert found["p_ci_lo"] < 0.5 < found["p_ci_hi"]


def test_lower_is_better_improves_downwards():
    x, y = {"a": [1.0, 2.0]}, {"a": [3.0]}                      # perplexities below the baseline's
    assert imp.compare(x, y, higher_is_better=False)["p_improvement"] == 1.0
    assert imp.compare(x, y)["p_improvement"] == 0.0


def test_table_averages_over_tasks_and_marks_the_baseline():
    rows = [("none", "a", 1.0), ("none", "a", 2.0), ("none", "b", 5.0),
            ("dot", "a", 2.0), ("dot", "a", 3.0), ("dot", "b", 4.0), ("dot", "b", 9.0)]
    runs = pd.DataFrame(rows, columns=["model.attention", "task", "val_bleu"]).assign(status="finished")
    table = imp.improvement_table(runs, ["model.attention", "task"], {"model.attention": "none"},
                                  "val_bleu", n_draws=200).set_index("model.attention")
    assert list(table.index) == ["dot", "none"]
    # task a: dot [2, 3] vs none [1, 2]: (1 + 1 + 0.5 + 1) / 4; task b: [4, 9] vs [5]: 1 / 2
    assert table.loc["dot", "p_improvement"] == pytest.approx((3.5 / 4 + 0.5) / 2)
    assert table.loc["dot", "n_tasks"] == 2 and table.loc["dot", "n_runs"] == 4
    assert table.loc["dot", "iqm"] == pytest.approx(3.5)       # pooled [2, 3, 4, 9], cut 1
    # [1, 2, 5]: int(0.75) = 0 cut, the mean
    assert table.loc["none", "baseline"] and pd.isna(table.loc["none", "p_improvement"])
    assert table.loc["none", "iqm"] == pytest.approx(8 / 3) and table.loc["none", "n_tasks"] == 2
    text = imp.markdown(table.reset_index(), "val_bleu", "model.attention=none")
    assert "| dot " in text and "| baseline " in text and "averaged over 2 tasks" in text
