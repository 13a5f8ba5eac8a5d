"""Analysis of variance by least squares: type-II sums of squares and F-tests (numpy only).

A model is a list of terms; a term is a name and its design columns ([n, k] float). The sum of
squares of a term is type II (Langsrud 2003): the drop in residual sum of squares when the term is
added to the model of every term not *above* it (terms the caller marks as containing it, e.g. its
interactions). Degrees of freedom are rank differences, so aliased or rank-deficient designs
(missing cells, conditional factors) give the df they really have, never a made-up one.

`type2` tests with the pooled residual variance, which assumes every configuration's runs spread
alike; seeds of sweeps do not (one cell's SD 0.8, another's 10.2), and then it rejects true
nulls far too often. `robust` tests the same type-II hypotheses without that assumption: with Q an
orthonormal basis of the term's columns after the terms below it, the type-II SS is |Q'y|², and
Q'y has covariance Q' diag(σ²_i) Q, estimated from the full model's residuals e_i as
e_i² / (1 - h_ii) (HC2, unbiased for cell-means designs: it is Welch's per-cell variance; MacKinnon
& White 1985, *J. Econometrics* 29:305). The Wald statistic (Q'y)' V⁻¹ (Q'y) is referred to F(df, ν)
after Johansen's Welch-James correction (Johansen 1980, *Biometrika* 67:85), each cell
(configuration) holding a variance estimate on n_c - 1 df: for a 1-df term Welch's t² against
Satterthwaite's df (Welch 1947).
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


def f_sf(f: float, df1: int, df2: float) -> float:
    """P(F > f) for an F(df1, df2) variable (via the incomplete beta function; df2 may be
    fractional, as a Satterthwaite df is)."""
    if math.isnan(f) or df1 < 1 or not df2 > 0:
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


def _basis(columns: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """An orthonormal basis [n, rank] of the column space of `columns`."""
    if columns.shape[1] == 0:
        return columns
    u, sv, _ = np.linalg.svd(columns, full_matrices=False)
    return u[:, sv > tol * max(sv.max(), 1.0)]


@dataclass(frozen=True)
class RobustDesign:
    """What the robust test of a model needs that does not depend on the response (built once
    for many responses of one design, as a calibration simulates)."""
    names: list[str]
    full: np.ndarray        # [n, rank] orthonormal basis of the full model
    leverage: np.ndarray    # [n] h_ii
    cell_df: np.ndarray     # [cells] n_c - 1, at least 1
    bases: list[np.ndarray]  # per term, Q [n, df]: its columns after the terms below it
    cell_onehot: np.ndarray  # [cells, n] 1 where the run is of the cell


def robust_design(terms: list[Term], cells) -> RobustDesign:
    """The response-free part of `robust` for these terms and cells."""
    n = len(terms[0].columns) if terms else len(cells)
    ones = np.ones((n, 1))
    full = _basis(np.column_stack([ones] + [t.columns for t in terms]))
    codes = pd.factorize(pd.Series(list(cells)).astype(str))[0]
    bases = []
    for term in terms:
        base = _basis(np.column_stack([ones] + [t.columns for t in terms
                                                if t.name != term.name and t.name not in term.above]))
        bases.append(_basis(term.columns - base @ (base.T @ term.columns)))
    cell_df = np.maximum(np.bincount(codes) - 1, 1)
    return RobustDesign([t.name for t in terms], full, (full ** 2).sum(axis=1), cell_df, bases,
                        (codes == np.arange(len(cell_df))[:, None]) * 1.0)


def robust(y, terms: list[Term], cells) -> pd.DataFrame:
    """One row per term: f, df_den, p of the heteroscedasticity-robust test of its type-II
    hypothesis (module docstring); `cells` [n] labels the configuration of each run (its
    variance is estimated from its own runs). A run the model fits exactly (leverage 1: a
    configuration of one run in a saturated model) carries no residual; it gets the mean variance
    of the others. A term without df or a model without residual df gets no test."""
    return robust_on(robust_design(terms, cells), y)


def robust_on(design: RobustDesign, y) -> pd.DataFrame:
    """`robust` for a design built once (robust_design)."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    full, leverage, cell_df = design.full, design.leverage, design.cell_df
    residual = y - full @ (full.T @ y)
    rounding = 1e-12 * max(1.0, float(np.abs(y).max(initial=0)))
    residual[np.abs(residual) < rounding] = 0.0
    exact = leverage > 1 - 1e-9
    omega = np.where(exact, 0.0, residual ** 2 / np.maximum(1 - leverage, 1e-12))
    if exact.any() and (~exact).any():
        omega[exact] = omega[~exact].mean()
    df_res = n - full.shape[1]
    rows = []
    for name, q in zip(design.names, design.bases):
        row = dict(term=name, f=math.nan, df_den=math.nan, p=math.nan)
        if q.shape[1] and df_res > 0:
            z = q.T @ y
            variance = (q * omega[:, None]).T @ q
            df = q.shape[1]
            if not variance.any():     # no spread at all: any difference is exact
                moved = bool((np.abs(z) > rounding).any())
                row.update(f=math.inf if moved else math.nan, df_den=df_res, p=0.0 if moved else math.nan)
                rows.append(row)
                continue
            inverse = np.linalg.pinv(variance)
            wald = float(z @ inverse @ z)
            # Johansen's (1980) Welch-James approximation: each cell's share of V̂ is a variance
            # estimate on n_c - 1 df; wald / c ~ F(df, ν) (for df 1: Welch's t², Satterthwaite's ν)
            per_cell = np.einsum("cn,ni,nj->cij", design.cell_onehot, q * omega[:, None], q)   # [cells, df, df]
            shares = inverse @ per_cell
            a = float(((np.einsum("cij,cji->c", shares, shares) + np.einsum("cii->c", shares) ** 2)
                       / (2 * cell_df)).sum())
            c = df + 2 * a - 6 * a / (df + 2)
            nu = min(df * (df + 2) / (3 * a), df_res) if a > 0 else df_res
            f = wald / c
            row.update(f=f, df_den=nu, p=f_sf(f, df, nu))
        rows.append(row)
    return pd.DataFrame(rows)
