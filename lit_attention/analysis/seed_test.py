"""Is configuration A better than B when seeds are the random factor? A test over seeds x
sentences.

A configuration's score is the mean over its seeds of a corpus score (BLEU) on one test set.
Two things make the difference of two such means random: which seeds were trained (training
randomness) and which sentences were drawn (test-set sampling). Each of B resamples redraws both:

    sentences  one bootstrap draw of the N test sentences, shared by every run (resampling.py), so
               runs stay paired on sentences; every run's corpus score on it comes from its cached
               sentence statistics: scores [B, n] of a configuration's n seeds
    seeds      the difference of the two seed means on that resample, d_b, moved by its standard
               error times a Student-t draw with Welch-Satterthwaite degrees of freedom:
               Δ*_b = d_b + sqrt(s_A²/n_A + s_B²/n_B) * T_b (s: the seeds' standard deviations on
               that resample). Runs of different configurations share nothing through their seed
               number, so nothing is paired by it.

Over seeds alone this is Welch's unequal-variance t-test (Welch 1947), which Reimers & Gurevych
(2017, EMNLP) recommend for scores over seeds; over sentences alone, Koehn's (2004) paired
bootstrap. Resampling the seeds with replacement instead would be far too sure with the 2-5 seeds
experiments have: 2 seeds give 3 possible means, and any two configurations whose seeds do not
overlap would get the smallest p the resamples allow; the t draw prices in how little 2 seeds say
about their spread.

The p-value of "A better than B" is the share of resamples where A is not better,
(#{Δ*_b <= 0} + 1) / (B + 1), one-sided; the 95 % interval of Δ is the 2.5 and 97.5 percentiles
of Δ*, so p < 0.025 exactly when the interval excludes 0.

A configuration with one seed has no seed variance to estimate: it is not tested.
"""

from __future__ import annotations

import numpy as np

CONFIDENCE = 0.95


def seed_rng(seed: int, member: int) -> np.random.Generator:
    """The t draws of comparison `member` of a family: one stream per comparison, independent of
    the sentence draw and of the other comparisons."""
    return np.random.default_rng([seed, 1, member])


def resampled_differences(system: np.ndarray, base: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """system [B, n_A], base [B, n_B] (each seed's score on each of B resampled test sets) -> Δ*
    [B]: the difference of the seed means plus its Welch standard error times t(ν), ν the
    Welch-Satterthwaite degrees of freedom, all of the same resample."""
    (n_resamples, n_a), n_b = system.shape, base.shape[1]
    if min(n_a, n_b) < 2:
        raise ValueError("a test over seeds needs at least two seeds on each side")
    var_a = system.var(axis=1, ddof=1) / n_a
    var_b = base.var(axis=1, ddof=1) / n_b
    spread = var_a + var_b
    with np.errstate(invalid="ignore", divide="ignore"):
        df = spread ** 2 / (var_a ** 2 / (n_a - 1) + var_b ** 2 / (n_b - 1))
    df = np.where(spread > 0, df, 1.0)       # no spread: the draw is multiplied by 0
    return system.mean(axis=1) - base.mean(axis=1) + np.sqrt(spread) * rng.standard_t(df, size=n_resamples)


def one_sided_pvalues(deltas: np.ndarray) -> tuple[float, float]:
    """(p that the difference is > 0, p that it is < 0) from the resampled differences Δ* [B]:
    the share of resamples on the other side of 0, (count + 1) / (B + 1)."""
    b = len(deltas)
    return float(((deltas <= 0).sum() + 1) / (b + 1)), float(((deltas >= 0).sum() + 1) / (b + 1))


def interval(deltas: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of the resampled differences."""
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(deltas, [tail, 100 - tail])
    return float(low), float(high)
