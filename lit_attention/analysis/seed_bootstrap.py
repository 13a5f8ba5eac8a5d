"""Is configuration A better than B when seeds are the random factor? A two-stage bootstrap over
seeds x sentences.

A configuration's score is the mean over its seeds of a corpus score (BLEU) on one test set.
Two things make that mean random: which seeds were trained (training randomness) and which
sentences were drawn (test-set sampling). Each resample b redraws both:

    sentences  one bootstrap draw of the N test sentences, shared by every run (resampling.py), so
               runs stay paired on sentences; every run's corpus score on it comes from its cached
               sentence statistics: scores [B, n] of a configuration's n seeds
    seeds      n of the configuration's seeds with replacement, independently per configuration
               (runs of different configurations share nothing through their seed number), the
               seeds spread around their mean by sqrt(n / (n - 1)) so that the resampled mean's
               variance is s^2 / n (the plain bootstrap's is (n - 1) / n of that: half with 2 seeds)

and gives the difference of the two configurations' seed means, Δ*_b. Resampling both crossed
factors is Owen's pigeonhole bootstrap (Owen 2007, Ann. Appl. Stat. 1:386), slightly
conservative. The p-value of "A better than B" is the share of resamples where A is not better,
(#{Δ*_b <= 0} + 1) / (B + 1) (Koehn 2004's paired bootstrap, with seeds), one-sided; the 95 %
interval of Δ is the 2.5 and 97.5 percentiles of Δ*, so p < 0.025 exactly when the interval
excludes 0.

A configuration with one seed has no seed variance to estimate: it is not tested.
"""

from __future__ import annotations

import numpy as np

CONFIDENCE = 0.95


def seed_rng(seed: int, member: int) -> np.random.Generator:
    """The seed draws of member `member` of a comparison family (0: the baseline): one stream
    per configuration, independent of the sentence draw and of the other configurations."""
    return np.random.default_rng([seed, 1, member])


def resampled_means(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """scores [B, n] (the n seeds' scores on each of B resampled test sets) -> [B] the mean of n
    seeds drawn with replacement per resample, spread by sqrt(n / (n - 1)) around the mean."""
    n_resamples, n = scores.shape
    if n < 2:
        raise ValueError("a seed bootstrap needs at least two seeds")
    picks = rng.integers(0, n, size=(n_resamples, n))
    drawn = np.take_along_axis(scores, picks, axis=1).mean(axis=1)
    mean = scores.mean(axis=1)
    return mean + np.sqrt(n / (n - 1)) * (drawn - mean)


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
