"""Vectorized resampling of test sentences: one draw per comparison family, applied to every run.

A draw is a matrix over B resamples and the N sentences of a test set:
    bootstrap    [B, N] counts: how often sentence n is in resample b (N draws with replacement)
    permutation  [B, N] 0/1:    whether sentence n is swapped between the two systems of a pair
Applied to the sentence statistics of R runs ([R, N, K], tracking/sentence_stats.py) it gives resampled
corpus statistics [B, R, K] by one matrix product, and metric scores [B, R] elementwise. Every run
sees the same draw, so any two runs are compared on the same resampled test sets (paired), and
a family of comparisons costs a few matrix products instead of B Python-level scorings per pair.

Tests built on it: the sentence-level tests of significance.py keep the matrices of resampled
scores, so p-values come from the same resamples for every pair; the seed test (seeds_x_sentences.py)
takes the covariance of the runs' resampled scores, its sentence part of the variance.

The draws are sacreBLEU's (PairedTest: `rng.choice(N, (B, N))` for the bootstrap,
`rng.integers(2, (B, N))` for approximate randomization), so for the same seed the resampled
test sets are the same ones sacreBLEU scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lit_attention.tracking.sentence_stats import SCORES

KINDS = ("bootstrap", "permutation")
CHUNK_BYTES = 16 * 2 ** 20    # bound on the float32 product of one chunk of runs
FLOAT32_EXACT = 2 ** 24       # integers below this are exact in float32 (and so their sums)


@dataclass(frozen=True)
class Draw:
    """Seeded resampling weights of one comparison family; `weights` is [B, N] float32."""
    kind: str
    seed: int
    weights: np.ndarray
    max_weight: float

    @property
    def n_resamples(self) -> int:
        return self.weights.shape[0]

    @property
    def n_sentences(self) -> int:
        return self.weights.shape[1]


def draw(kind: str, n_sentences: int, n_resamples: int, seed: int, rows: int = 1000) -> Draw:
    """A bootstrap or permutation draw. Bootstrap indices are generated `rows` resamples at a
    time (the same numbers as one call) so that they never all sit in memory as int64."""
    if kind not in KINDS:
        raise ValueError(f"unknown resampling {kind!r}; one of {', '.join(KINDS)}")
    if n_sentences < 1 or n_resamples < 1:
        raise ValueError(f"need at least one sentence and one resample, got {n_sentences}, {n_resamples}")
    rng = np.random.default_rng(seed)
    if kind == "permutation":   # one call: bools are drawn from buffered bits, chunks would differ
        swaps = rng.integers(2, size=(n_resamples, n_sentences), dtype=bool)
        return Draw(kind, seed, swaps.astype(np.float32), 1.0)
    weights = np.empty((n_resamples, n_sentences), dtype=np.float32)   # counts: exact integers
    for start in range(0, n_resamples, rows):
        b = min(rows, n_resamples - start)
        idx = rng.choice(n_sentences, size=(b, n_sentences), replace=True)
        idx += np.arange(b)[:, None] * n_sentences
        weights[start:start + b] = np.bincount(idx.ravel(), minlength=b * n_sentences).reshape(
            b, n_sentences)
    return Draw(kind, seed, weights, float(weights.max()))


def _float_weights(weights: np.ndarray, stats: np.ndarray, max_weight: float | None = None):
    """The weights as float32 when every partial sum of the product is an integer that float32
    holds exactly (the usual case: BLAS sgemm), else as float64."""
    if max_weight is None:
        max_weight = float(np.abs(weights).max(initial=0))
    bound = float(np.abs(stats).sum(axis=-2).max(initial=0)) * max_weight
    return weights.astype(np.float32 if bound < FLOAT32_EXACT else np.float64, copy=False)


def resampled_sums(weights: np.ndarray, stats: np.ndarray, max_weight: float | None = None):
    """weights [B, N] @ stats [R, N, K] -> [B, R, K] float64 holding exact integer sums (a view
    of a [B, K, R] array: each statistic's sums are contiguous rows)."""
    weights = _float_weights(weights, stats, max_weight)
    return np.moveaxis(_product(weights, stats).astype(np.float64), 1, 2)


def _product(weights: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """float weights [B, N] @ stats [R, N, K] -> [B, K, R] in the weights' dtype."""
    r, n, k = stats.shape
    flat = stats.transpose(1, 2, 0).reshape(n, k * r).astype(weights.dtype)
    return (weights @ flat).reshape(len(weights), k, r)


def _chunks(n_runs: int, n_resamples: int, k: int):
    size = max(1, CHUNK_BYTES // (4 * n_resamples * k))
    return [slice(i, min(i + size, n_runs)) for i in range(0, n_runs, size)]


def resampled_scores(metric: str, draw_: Draw, stats: np.ndarray) -> np.ndarray:
    """Scores of every run on every bootstrap resample: stats [R, N, K] -> [B, R] (float64).

    The products stay float32 when exact; the score functions read them a column at a time."""
    if draw_.kind != "bootstrap":
        raise ValueError("resampled_scores needs a bootstrap draw; use swapped_scores for permutations")
    _check(draw_, stats)
    score, weights = SCORES[metric], _float_weights(draw_.weights, stats, draw_.max_weight)
    out = np.empty((draw_.n_resamples, len(stats)))
    for part in _chunks(len(stats), draw_.n_resamples, stats.shape[2]):
        out[:, part] = score(np.moveaxis(_product(weights, stats[part]), 1, 2))
    return out


def swapped_scores(metric: str, draw_: Draw, stats_a: np.ndarray, stats_b: np.ndarray):
    """Scores of R pairs of systems after swapping the drawn sentences between the two systems of
    each pair (approximate randomization): stats [R, N, K] each -> (scores_a, scores_b) [B, R].

    Pseudo-system a takes a's statistics where the draw is 0 and b's where it is 1: its sums are
    sum(a) + w @ (b - a), and b's are what is left of sum(a) + sum(b). Only columns where the
    two differ anywhere (not the references') are multiplied."""
    if draw_.kind != "permutation":
        raise ValueError("swapped_scores needs a permutation draw")
    _check(draw_, stats_a)
    _check(draw_, stats_b)
    score = SCORES[metric]
    diff = stats_b - stats_a
    moving = np.flatnonzero((diff != 0).any(axis=(0, 1)))
    weights = _float_weights(draw_.weights, diff[:, :, moving], 1.0)
    out_a = np.empty((draw_.n_resamples, len(stats_a)))
    out_b = np.empty_like(out_a)
    for part in _chunks(len(stats_a), draw_.n_resamples, max(1, len(moving))):
        sum_a = stats_a[part].sum(axis=1).T.astype(np.float64)    # [K, R]
        sum_b = stats_b[part].sum(axis=1).T.astype(np.float64)
        pseudo_a = np.repeat(sum_a[None], draw_.n_resamples, axis=0)   # [B, K, R]
        pseudo_b = np.repeat(sum_b[None], draw_.n_resamples, axis=0)
        if len(moving):
            moved = _product(weights, diff[part][:, :, moving])
            for j, column in enumerate(moving):
                pseudo_a[:, column, :] += moved[:, j, :]
                pseudo_b[:, column, :] -= moved[:, j, :]
        out_a[:, part] = score(np.moveaxis(pseudo_a, 1, 2))
        out_b[:, part] = score(np.moveaxis(pseudo_b, 1, 2))
    return out_a, out_b


def _check(draw_: Draw, stats: np.ndarray) -> None:
    if stats.ndim != 3 or stats.shape[1] != draw_.n_sentences:
        raise ValueError(f"statistics of shape {stats.shape} do not fit a draw over "
                         f"{draw_.n_sentences} sentences (expected [runs, sentences, K])")
