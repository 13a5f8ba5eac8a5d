"""Expected best score against the number of trials (expected_max.py), checked against Dodge et
al. (2019)'s definition on worked examples and against enumerating every draw."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from lit_attention.analysis import expected_max as em


def test_expected_max_of_one_two_three_by_hand():
    # n=1: the mean, 2. n=2: P(max=1,2,3) = 1/9, 3/9, 5/9 -> 22/9. n=3: 1/27, 7/27, 19/27 -> 72/27.
    mean, variance = em.expected_max([3.0, 1.0, 2.0])
    assert mean == pytest.approx([2, 22 / 9, 8 / 3])
    # Var: E[max^2] - E[max]^2 = 14/3 - 4, 58/9 - (22/9)^2, (1 + 28 + 171)/27 - (8/3)^2
    assert variance == pytest.approx([2 / 3, 58 / 9 - (22 / 9) ** 2, 200 / 27 - 64 / 9])


def test_expected_minimum_when_lower_is_better():
    # P(min=1,2,3) of two draws = 5/9, 3/9, 1/9 -> 14/9
    mean, variance = em.expected_max([1.0, 2.0, 3.0], higher_is_better=False)
    assert mean[1] == pytest.approx(14 / 9)
    assert variance[1] == pytest.approx((5 + 12 + 9) / 9 - (14 / 9) ** 2)


def test_ties_agree_with_every_draw_enumerated():
    scores = [1, 2, 2, 5]
    mean, variance = em.expected_max(scores)
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
    table = em.expected_max_table(runs, ["model.family"], "val_bleu")
    rnn = table[table["model.family"] == "rnn"]
    assert rnn["trials"].tolist() == [1, 2, 3] and (rnn["n_runs"] == 3).all()   # the failed run is no trial
    assert rnn["expected_max"].tolist() == pytest.approx([2, 22 / 9, 8 / 3])
    tf = table[table["model.family"] == "tf"]
    assert tf[["trials", "expected_max", "sd"]].to_numpy().tolist() == [[1, 7.0, 0.0]]
    text = em.markdown(table, ["model.family"], "val_bleu")
    assert "| rnn (N=3)" in text and "| 2.4 ± 0.7 " in text     # sd sqrt(38/81)


def test_shown_trials():
    assert em.shown_trials(3) == [1, 2, 3]
    assert em.shown_trials(20) == [1, 2, 4, 8, 16, 20]
