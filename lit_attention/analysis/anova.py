"""Analysis of variance by least squares: type-II sums of squares and F-tests (numpy only).

A model is a list of terms; a term is a name and its design columns ([n, k] float). The sum of
squares of a term is type II (Langsrud 2003): the drop in residual sum of squares when the term is
added to the model of every term not *above* it (terms the caller marks as containing it, e.g. its
interactions). Degrees of freedom are rank differences, so aliased or rank-deficient designs
(missing cells, conditional factors) give the df they really have, never a made-up one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Term:
    name: str
    columns: np.ndarray            # [n, k] design columns of this term
    above: frozenset = frozenset()  # names of terms that contain this one (left out of its base)


def _fit(y: np.ndarray, blocks: list[np.ndarray]) -> tuple[float, int]:
    """(residual sum of squares, rank) of y regressed on an intercept and the given columns."""
    x = np.column_stack([np.ones(len(y))] + blocks)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coef
    return float(residual @ residual), int(np.linalg.matrix_rank(x))


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) (continued fraction, Numerical Recipes 6.4)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def f_sf(f: float, df1: int, df2: int) -> float:
    """P(F > f) for an F(df1, df2) variable (via the incomplete beta function)."""
    if math.isnan(f) or df1 < 1 or df2 < 1:
        return math.nan
    if f <= 0:
        return 1.0
    return betainc(df2 / 2, df1 / 2, df2 / (df2 + df1 * f))


def type2(y, terms: list[Term]) -> pd.DataFrame:
    """One row per term (then 'residual' and 'total'): df, ss, eta_sq, f, p.

    eta_sq = ss / total ss; f = (ss/df) / (residual ss / residual df); p from F(df, residual df).
    A term that adds no rank (aliased with terms below it) gets df 0 and no test.
    """
    y = np.asarray(y, dtype=float)
    total = float(((y - y.mean()) ** 2).sum())
    rss_full, rank_full = _fit(y, [t.columns for t in terms])
    df_res = len(y) - rank_full
    rss_full = rss_full if df_res > 0 else 0.0     # a saturated model fits exactly (not 1e-30)
    ms_res = rss_full / df_res if df_res > 0 else math.nan
    rows = []
    for term in terms:
        base = [t.columns for t in terms if t.name != term.name and t.name not in term.above]
        rss_without, rank_without = _fit(y, base)
        rss_with, rank_with = _fit(y, base + [term.columns])
        df = rank_with - rank_without
        ss = max(rss_without - rss_with, 0.0) if df else 0.0
        f = (ss / df) / ms_res if df and ms_res > 0 else math.nan
        rows.append(dict(term=term.name, df=df, ss=ss, f=f, p=f_sf(f, df, df_res)))
    rows.append(dict(term="residual", df=df_res, ss=rss_full, f=math.nan, p=math.nan))
    rows.append(dict(term="total", df=len(y) - 1, ss=total, f=math.nan, p=math.nan))
    table = pd.DataFrame(rows)
    table.insert(3, "eta_sq", table["ss"] / total if total > 0 else math.nan)
    return table
