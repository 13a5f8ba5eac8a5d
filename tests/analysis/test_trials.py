"""Expected best score against the number of trials, checked against Dodge et al. (2019)'s
definition on worked examples and against enumerating every draw; probability of improvement,
IQM and their stratified-bootstrap CIs, checked against Agarwal et al. (2021)'s definitions
(rliable) on worked examples."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from lit_attention.analysis import trials


def test_expected_max_of_one_two_three_by_hand():
    # n=1: the mean, 2. n=2: P(max=1,2,3) = 1/9, 3/9, 5/9 -> 22/9. n=3: 1/27, 7/27, 19/27 -> 72/27.
    mean, variance = trials.expected_max([3.0, 1.0, 2.0])
    assert mean == pytest.approx([2, 22 / 9, 8 / 3])
    # Var: E[max^2] - E[max]^2 = 14/3 - 4, 58/9 - (22/9)^2, (1 + 28 + 171)/27 - (8/3)^2
    assert variance == pytest.approx([2 / 3, 58 / 9 - (22 / 9) ** 2, 200 / 27 - 64 / 9])


def test_expected_minimum_when_lower_is_better():
    # P(min=1,2,3) of two draws = 5/9, 3/9, 1/9 -> 14/9
    mean, variance = trials.expected_max([1.0, 2.0, 3.0], higher_is_better=False)
    assert mean[1] == pytest.approx(14 / 9)
    assert variance[1] == pytest.approx((5 + 12 + 9) / 9 - (14 / 9) ** 2)


def test_ties_agree_with_every_draw_enumerated():
    scores = [1, 2, 2, 5]
    mean, variance = trials.expected_max(scores)
    for n in range(1, 5):
        maxima = [max(draw) for draw in itertools.product(scores, repeat=n)]   # all 4^n draws
        exact = Fraction(sum(maxima), len(maxima))
        second = Fraction(sum(m * m for m in maxima), len(maxima))
        assert mean[n - 1] == pytest.approx(float(exact))
        assert variance[n - 1] == pytest.approx(float(second - exact ** 2))
    assert mean[-1] < 5 and variance[0] > variance[-1] > 0


def test_one_row_per_family_and_trial_count_from_finished_runs():
    runs = pd.DataFrame({"model.family": ["rnn", "rnn", "rnn", "rnn", "tf"],
                         "status": ["finished", "finished", "finished", "failed", "finished"],
                         "val_bleu": [1.0, 2.0, 3.0, 99.0, 7.0]})
    table = trials.expected_max_table(runs, ["model.family"], "val_bleu")
    rnn = table[table["model.family"] == "rnn"]
    assert rnn["trials"].tolist() == [1, 2, 3] and (rnn["n_runs"] == 3).all()   # the failed run is no trial
    assert rnn["expected_max"].tolist() == pytest.approx([2, 22 / 9, 8 / 3])
    tf = table[table["model.family"] == "tf"]
    assert tf[["trials", "expected_max", "sd"]].to_numpy().tolist() == [[1, 7.0, 0.0]]
    text = trials.expected_max_markdown(table, ["model.family"], "val_bleu")
    assert "| rnn (N=3)" in text and "| 2.4 ± 0.7 " in text     # sd sqrt(38/81)


def test_shown_trials():
    assert trials.shown_trials(3) == [1, 2, 3]
    assert trials.shown_trials(20) == [1, 2, 4, 8, 16, 20]


def test_probability_of_improvement_counts_ties_half():
    # x=1 loses twice, x=2 ties twice (0.5 each), x=3 wins twice: 3 of 6 pairs
    assert trials.prob_improvement([1, 2, 3], [2, 2]) == 0.5
    assert trials.prob_improvement([3, 3], [1, 3]) == 0.75        # (1 + 0.5 + 1 + 0.5) / 4
    assert trials.prob_improvement([[3, 3], [0, 0]], [[1, 3], [1, 1]]).tolist() == [0.75, 0.0]


def test_iqm_is_trim_mean_of_a_quarter():
    # scipy.stats.trim_mean(x, 0.25) cuts int(0.25 N) scores from each end
    assert trials.iqm([5, 1, 4, 2, 3]) == 3.0                      # cut 1: mean(2, 3, 4)
    assert trials.iqm([1, 2, 3, 4, 10, 100]) == 4.75               # cut int(1.5) = 1: mean(2, 3, 4, 10)
    assert trials.iqm(np.arange(1, 9)) == 4.5                      # cut 2: mean(3, 4, 5, 6)
    assert trials.iqm([1, 2, 30]) == 11.0                          # cut int(0.75) = 0: the mean
    assert trials.iqm(np.arange(20)) == 9.5                        # scipy's own docstring example
    assert trials.iqm([[1, 2, 3, 4, 10, 100], [0, 0, 0, 0, 0, 8]]).tolist() == [4.75, 0.0]


def test_resampling_keeps_each_stratum_and_its_size():
    draws = trials.resample(np.array([1.0, 2.0, 3.0]), 500, np.random.default_rng(0))
    assert draws.shape == (500, 3) and set(np.unique(draws)) == {1.0, 2.0, 3.0}
    assert (draws == draws[:, :1]).all(axis=1).any()          # some draws repeat one run


def test_ci_collapses_when_every_stratum_is_constant():
    # within each (configuration, task) every run scores the same: every stratified draw is the
    # data itself; a bootstrap of the pooled scores [5, 5, 5, 1, 1] would move the IQM
    x = {"a": [5.0, 5.0, 5.0], "b": [1.0, 1.0]}
    y = {"a": [3.0, 3.0], "b": [1.0, 1.0]}
    found = trials.compare(x, y, n_draws=300)
    assert found["n_tasks"] == 2
    assert found["p_improvement"] == found["p_ci_lo"] == found["p_ci_hi"] == 0.75   # (1 + 0.5) / 2
    assert found["iqm"] == pytest.approx(11 / 3)               # cut 1: mean(1, 5, 5)
    assert found["iqm_ci_lo"] == pytest.approx(11 / 3) and found["iqm_ci_hi"] == pytest.approx(11 / 3)


def test_ci_spans_the_uncertainty_of_overlapping_runs():
    found = trials.compare({"a": [1.0, 4.0, 6.0, 9.0]}, {"a": [3.0, 5.0, 7.0]}, n_draws=2000)
    assert found["p_improvement"] == pytest.approx(6 / 12)
    assert found["p_ci_lo"] < 0.5 < found["p_ci_hi"]


def test_lower_is_better_improves_downwards():
    x, y = {"a": [1.0, 2.0]}, {"a": [3.0]}                      # perplexities below the baseline's
    assert trials.compare(x, y, higher_is_better=False)["p_improvement"] == 1.0
    assert trials.compare(x, y)["p_improvement"] == 0.0


def test_table_averages_over_tasks_and_marks_the_baseline():
    rows = [("none", "a", 1.0), ("none", "a", 2.0), ("none", "b", 5.0),
            ("dot", "a", 2.0), ("dot", "a", 3.0), ("dot", "b", 4.0), ("dot", "b", 9.0)]
    runs = pd.DataFrame(rows, columns=["model.attention", "task", "val_bleu"]).assign(status="finished")
    table = trials.improvement_table(runs, ["model.attention", "task"], {"model.attention": "none"},
                                  "val_bleu", n_draws=200).set_index("model.attention")
    assert list(table.index) == ["dot", "none"]
    # task a: dot [2, 3] vs none [1, 2]: (1 + 1 + 0.5 + 1) / 4; task b: [4, 9] vs [5]: 1 / 2
    assert table.loc["dot", "p_improvement"] == pytest.approx((3.5 / 4 + 0.5) / 2)
    assert table.loc["dot", "n_tasks"] == 2 and table.loc["dot", "n_runs"] == 4
    assert table.loc["dot", "iqm"] == pytest.approx(3.5)       # pooled [2, 3, 4, 9], cut 1
    # [1, 2, 5]: int(0.75) = 0 cut, the mean
    assert table.loc["none", "baseline"] and pd.isna(table.loc["none", "p_improvement"])
    assert table.loc["none", "iqm"] == pytest.approx(8 / 3) and table.loc["none", "n_tasks"] == 2
    text = trials.improvement_markdown(table.reset_index(), "val_bleu", "model.attention=none")
    assert "| dot " in text and "| baseline " in text and "averaged over 2 tasks" in text
