"""Student's t for fractional degrees of freedom agrees with printed t tables and with the
closed forms of integer df (aggregate.t_coverage) and the F tail (anova.f_sf)."""

from __future__ import annotations

import numpy as np
import pytest

from lit_attention.analysis import aggregate, anova, student_t


def test_quantiles_are_the_t_table():
    table = {1: 12.706, 2: 4.303, 4: 2.776, 10: 2.228, 30: 2.042, np.inf: 1.960}
    found = student_t.quantile(0.975, list(table))
    assert found == pytest.approx(list(table.values()), abs=1e-3)
    assert student_t.quantile(0.8, 1) == pytest.approx(1.376, abs=1e-3)
    assert student_t.quantile(0.025, 4) == pytest.approx(-2.776, abs=1e-3)


def test_tails_agree_with_the_integer_closed_form_and_the_f_tail():
    rng = np.random.default_rng(0)
    t = rng.uniform(-8, 8, 200)
    df = rng.integers(1, 60, 200)
    closed = [(1 - aggregate.t_coverage(abs(x), int(d))) / 2 for x, d in zip(t, df)]
    closed = np.where(t > 0, closed, 1 - np.array(closed))
    assert student_t.sf(t, df) == pytest.approx(closed, abs=1e-12)
    nu = rng.uniform(0.8, 40, 50)          # fractional: P(|T| > t) = P(F(1, ν) > t²)
    x = rng.uniform(0.1, 6, 50)
    tails = [anova.betainc(v / 2, 0.5, v / (v + s * s)) for v, s in zip(nu, x)]
    assert 2 * student_t.sf(x, nu) == pytest.approx(tails, rel=1e-9)


def test_edges():
    assert student_t.sf([0.0, np.inf, -np.inf], 3).tolist() == [0.5, 0.0, 1.0]
    assert student_t.sf(1.959964, np.inf) == pytest.approx(0.025, abs=1e-7)
    assert student_t.cdf(-1.959964, np.inf) == pytest.approx(0.025, abs=1e-7)


def test_tails_of_one_and_two_df_match_their_closed_forms_to_1e_12_relative():
    """On a grid from the centre to far in both tails: P(T > t) = atan2(1, t)/π for ν = 1 and
    1/(s(s + t)) with s = √(2 + t²) for ν = 2 (t > 0; written without cancellation)."""
    t = np.geomspace(1e-3, 1e3, 241)
    s = np.sqrt(2 + t * t)
    for df, upper in ((1, np.arctan2(1, t) / np.pi), (2, 1 / (s * (s + t)))):
        assert student_t.sf(t, df) == pytest.approx(upper, rel=1e-12)
        assert student_t.sf(-t, df) == pytest.approx(1 - upper, rel=1e-12)
        grid = np.stack([t, -t])        # any shape, one df per element
        assert student_t.sf(grid, np.full(grid.shape, df)) == pytest.approx(np.stack([upper, 1 - upper]), rel=1e-12)


def test_quantiles_of_one_and_two_df_match_their_closed_forms_to_1e_12():
    """tan(π(p - 1/2)) for ν = 1 (as ±1/tan(π min(p, 1 - p)): exact to rounding far in the tails)
    and (2p - 1)/√(2p(1 - p)) for ν = 2, within 1e-12 (relative above 1)."""
    p = np.array([1e-6, 0.01, 0.025, 0.2, 0.5, 0.6, 0.8, 0.9, 0.975, 0.995, 0.9999])
    with np.errstate(divide="ignore"):
        cauchy = np.where(p == 0.5, 0.0, np.sign(p - 0.5) / np.tan(np.pi * np.minimum(p, 1 - p)))
    for df, exact in ((1, cauchy), (2, (2 * p - 1) / np.sqrt(2 * p * (1 - p)))):
        found = student_t.quantile(p, df)
        assert np.all(np.abs(found - exact) <= 1e-12 * np.maximum(1, np.abs(exact)))
