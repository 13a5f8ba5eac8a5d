"""Student's t distribution for any (also fractional) degrees of freedom, on numpy arrays.

Welch–Satterthwaite degrees of freedom are not integers, and a calibration simulation tests
hundreds of thousands of comparisons at once, so the tail probability is the regularized
incomplete beta function evaluated elementwise (its continued fraction, Numerical Recipes 6.4,
with Lentz's method on whole arrays, an element leaving once converged), and the quantile
inverts it by Newton's method inside a bisection bracket.

    P(T > t) = I_x(ν/2, 1/2) / 2  with  x = ν / (ν + t²),  for t >= 0
"""

from __future__ import annotations

import numpy as np
from math import lgamma

TINY = 1e-300
STEPS = 300          # continued-fraction terms; converged well before for the ν and t seen here


def _betainc(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Regularized incomplete beta I_x(a, b) elementwise (arrays of one shape, 0 < x < 1)."""
    swap = x > (a + 1) / (a + b + 2)              # the fraction converges fast on this side only
    a, b, x = (np.ravel(v) for v in (np.where(swap, b, a), np.where(swap, a, b), np.where(swap, 1 - x, x)))
    front = np.exp(_log_gamma(a + b) - _log_gamma(a) - _log_gamma(b)
                   + a * np.log(x) + b * np.log1p(-x)) / a
    c = np.ones_like(x)
    d = 1 - (a + b) * x / (a + 1)
    d = 1 / np.where(np.abs(d) < TINY, TINY, d)
    f = d.copy()
    value = np.empty_like(x)
    left = np.arange(x.size)                      # the elements whose fraction has not converged
    for m in range(1, STEPS):
        if not left.size:
            break
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / np.where(np.abs(d) < TINY, TINY, d)
            c = 1 + numerator / c
            c = np.where(np.abs(c) < TINY, TINY, c)
            f *= c * d
        done = np.abs(c * d - 1) < 1e-14
        if done.any():                            # converged elements leave the arrays
            value[left[done]] = f[done]
            going = ~done
            left, a, b, x, c, d, f = (v[going] for v in (left, a, b, x, c, d, f))
    value[left] = f
    value = (front * value).reshape(swap.shape)
    return np.where(swap, 1 - value, value)


def _log_gamma(values: np.ndarray) -> np.ndarray:
    """log Γ elementwise (math.lgamma: numpy has none; a 1-d array)."""
    return np.fromiter(map(lgamma, values.tolist()), dtype=float, count=values.size)


def sf(t, df) -> np.ndarray:
    """P(T > t) for Student's t with `df` degrees of freedom (arrays broadcast; df > 0).
    df = inf gives the normal tail."""
    t, df = np.broadcast_arrays(np.asarray(t, dtype=float), np.asarray(df, dtype=float))
    out = np.full(t.shape, np.nan)
    normal = np.isinf(df) & ~np.isnan(t)
    out[normal] = 0.5 * _erfc(t[normal] / np.sqrt(2))
    finite = np.isfinite(df) & (df > 0) & ~np.isnan(t)
    if finite.any():
        tf, nu = t[finite], df[finite]
        tail = np.full(tf.shape, 0.5)
        inner = np.isfinite(tf) & (tf != 0)
        x = nu[inner] / (nu[inner] + tf[inner] ** 2)
        positive = np.where(x > 0, 0.5 * _betainc(nu[inner] / 2, np.full_like(x, 0.5),
                                                  np.clip(x, 1e-300, 1 - 1e-16)), 0.0)
        tail[inner] = np.where(tf[inner] > 0, positive, 1 - positive)
        tail[np.isinf(tf)] = np.where(tf[np.isinf(tf)] > 0, 0.0, 1.0)
        out[finite] = tail
    return out


def cdf(t, df) -> np.ndarray:
    """P(T <= t)."""
    return sf(-np.asarray(t, dtype=float), df)


def quantile(p, df) -> np.ndarray:
    """The t with P(T <= t) = p (0 < p < 1): Newton's method on sf, a step that leaves the
    bracket known to hold the root bisecting it instead; within 1e-12 (relative above 1) of the root."""
    p, df = np.broadcast_arrays(np.asarray(p, dtype=float), np.asarray(df, dtype=float))
    upper = p > 0.5
    tail = np.where(upper, 1 - p, p)            # solve sf(t) = tail for t >= 0, then sign
    lo, hi = np.zeros(p.shape), np.full(p.shape, 1.0)
    while True:                                  # grow the bracket where it is too narrow
        short = sf(hi, df) > tail
        if not short.any():
            break
        hi = np.where(short, hi * 4, hi)
    root = (lo + hi) / 2
    for _ in range(200):
        excess = sf(root, df) - tail             # sf falls as t grows: the root is above where > 0
        lo, hi = np.where(excess > 0, root, lo), np.where(excess > 0, hi, root)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            step = root + excess / _pdf(root, df)
        step = np.where((step >= lo) & (step <= hi), step, (lo + hi) / 2)
        done = np.all(np.abs(step - root) <= 1e-12 * np.maximum(1, root))
        root = step
        if done:
            break
    return np.where(upper, root, -root)


def _pdf(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """The density of Student's t (df = inf: the normal density), arrays of one shape."""
    shape, t, df = np.shape(t), np.ravel(t), np.ravel(df)
    density = np.exp(-t * t / 2) / np.sqrt(2 * np.pi)
    finite = np.isfinite(df) & (df > 0)
    nu, x = df[finite], t[finite]
    density[finite] = np.exp(_log_gamma((nu + 1) / 2) - _log_gamma(nu / 2) - np.log(nu * np.pi) / 2
                             - (nu + 1) / 2 * np.log1p(x * x / nu))
    return density.reshape(shape)


def _erfc(z: np.ndarray) -> np.ndarray:
    from math import erfc
    return np.vectorize(erfc, otypes=[float])(z)
