"""Calibration of the seed x sentence test (seeds_x_sentences.py) by simulation with known truth.

Each simulated experiment scores two arms on the same N test sentences, n seeds each; the score
of run r of arm a on sentence i is additive (a corpus score is their mean):

    x_ari = c_i + d_ai + g_ari + u_ar (+ effect in arm A)
    c_i ~ N(0, 3²)        what every system finds hard (cancels in the paired difference)
    d_ai ~ N(0, 1)        how the sentence suits the arm: its variance over N, σ²_sent = 1/N,
                          is the sentence variance of one arm's score that pairing leaves
    g_ari, u_ar           how it suits the run, and the seed: σ²_seed = Var(u) + Var(g)/N, the
                          variance between runs of one arm on one test set, is ratio · σ²_sent

The test gets what the report gets: each run's score on the whole test set and the bootstrap
covariance of the runs' scores (exact for additive scores: seeds_x_sentences.bootstrap_covariance).
`rates` gives the share of experiments rejecting at α (two-sided: Holm over both directions of
one comparison) with no effect, and with an effect of `power_at` true standard deviations of Δ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lit_attention.analysis import seeds_x_sentences

SEEDS = (2, 3, 5, 10)
RATIOS = (0.1, 0.3, 1.0, 3.0, 10.0)
SENTENCES = 100
EXPERIMENTS = 4000
POWER_AT = 3.0          # planted effect in true standard deviations of Δ (a z-test: 85 % power)
SEED = 2026
COMMON_SD = 3.0


@dataclass(frozen=True)
class Rates:
    false_positive: float
    power: float
    detectable: float     # median MDE at 80 % power, in true standard deviations of Δ


def simulate(n_seeds: int, ratio: float, experiments: int = EXPERIMENTS, n_sentences: int = SENTENCES,
             seed: int = SEED, pooled_arms: int | None = None):
    """(seeds_x_sentences.Result of every experiment with no effect, true sd of Δ)."""
    rng = np.random.default_rng([seed, n_seeds, int(ratio * 1000), pooled_arms or 0])
    sentence_var = 1.0 / n_sentences                     # Var(d̄_a) with Var(d) = 1
    run_sentence_var = min(1.0, ratio / 2)               # Var(g): part of the seed variance
    seed_var = ratio * sentence_var - run_sentence_var / n_sentences    # Var(u)
    shape = (experiments, 2, n_seeds, n_sentences)
    common = rng.normal(0, COMMON_SD, (experiments, 1, 1, n_sentences)) + rng.normal(0, 1, (experiments, 2, 1, n_sentences))
    x = rng.normal(0, np.sqrt(run_sentence_var), shape)
    x += common                  # (common + arm) + g: the same sums as new arrays, in place
    x += rng.normal(0, np.sqrt(seed_var), (experiments, 2, n_seeds, 1))
    runs = x.reshape(experiments, 2 * n_seeds, n_sentences)
    scores = runs.mean(axis=-1)                                       # [E, 2n]
    sentence_part = seeds_x_sentences.sentence_variance(seeds_x_sentences.bootstrap_covariance(runs), n_seeds)
    system, base = scores[:, :n_seeds], scores[:, n_seeds:]
    pooled = None
    if pooled_arms:
        # the other arms of the family add their seed variances (chi-square draws) to the pool
        df_other = (pooled_arms - 2) * (n_seeds - 1)
        other = ratio * sentence_var * rng.chisquare(max(df_other, 1), experiments) * (df_other > 0)
        own = ((system - system.mean(1, keepdims=True)) ** 2).sum(1) + ((base - base.mean(1, keepdims=True)) ** 2).sum(1)
        df = pooled_arms * (n_seeds - 1)
        pooled = ((own + other) / df, np.full(experiments, df))
    result = seeds_x_sentences.compare(system, base, sentence_part, n_sentences, pooled=pooled)
    true_sd = np.sqrt(2 * ratio * sentence_var / n_seeds + 2 * sentence_var)
    return result, true_sd


def rejected(result: seeds_x_sentences.Result, alpha: float = seeds_x_sentences.ALPHA) -> np.ndarray:
    """Holm over the two one-sided hypotheses of one comparison: 2·min(p_up, p_down) < α."""
    return 2 * np.minimum(result.p_up(), result.p_down()) < alpha


def rates(n_seeds: int, ratio: float, experiments: int = EXPERIMENTS, seed: int = SEED,
          pooled_arms: int | None = None) -> Rates:
    result, true_sd = simulate(n_seeds, ratio, experiments, seed=seed, pooled_arms=pooled_arms)
    planted = seeds_x_sentences.Result(result.delta + POWER_AT * true_sd, result.se, result.df,
                               result.seed_part, result.sentence_part)
    return Rates(float(rejected(result).mean()), float(rejected(planted).mean()),
                 float(np.median(result.detectable()) / true_sd))


LABEL = "σ²_seed / σ²_sent"       # the calibration table's row header: the variance ratio simulated


def cell_text(r: Rates) -> str:
    """A cell of the calibration table: 'false positives % · power % · MDE'."""
    return f"{100 * r.false_positive:.1f} % · {100 * r.power:.0f} % · {r.detectable:.1f}"
