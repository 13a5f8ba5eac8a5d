"""Calibration of the seed test on language-model losses over contiguous token blocks
(token_blocks.py), by simulation with known truth.

Each simulated experiment scores two arms, n seeds each, on the same text of T tokens; the NLL
of run r of arm a at token t is

    x_art = c_t + d_at + g_art + u_ar (+ effect in arm A)
    c_t, d_at   moving averages of Q independent N(0, 1) draws, scaled to variance 1: what makes
                a stretch of text hard for every system (c, cancels in the paired difference)
                and for one arm (d); neighbours within Q tokens are correlated, 1 - |k|/Q
    g_art       how the token suits the run, independent N(0, σ²_g)
    u_ar        the seed; σ²_seed = Var(u) + σ²_g / T, the variance between runs of one arm on
                one text, is `ratio` · σ²_text, σ²_text = Var(mean_t d_at) (exact, below)

A run's score is its mean NLL (the loss; perplexity is its exponential). The test gets what the
report gets: each run's score and the bootstrap covariance of the runs' scores over draws of
BLOCKS contiguous blocks (exact for equal blocks: seeds_x_sentences.bootstrap_covariance of the block
means). For comparison, the same test with every token its own block (an i.i.d. bootstrap over
tokens) sees only about 1/Q of σ²_text and rejects far more true nulls when the text matters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lit_attention.analysis import seeds_x_sentences, token_blocks
from lit_attention.analysis.calibration import EXPERIMENTS, POWER_AT, SEED, rejected

BLOCK_TOKENS = 60          # tokens per block: T = BLOCKS x BLOCK_TOKENS
CORRELATION = 5            # Q: tokens over which the text's difficulty is correlated
CHUNK = 100                # experiments generated at once (bounds memory: CHUNK x 2n x T floats)


@dataclass(frozen=True)
class Rates:
    false_positive: float        # the block test, no effect
    power: float                 # ... against POWER_AT true standard deviations of Δ
    detectable: float            # median MDE at 80 % power, in true standard deviations of Δ
    token_false_positive: float  # the same test with single tokens as blocks


def text_variance(n_tokens: int, q: int = CORRELATION) -> float:
    """Var(mean over T tokens) of a unit-variance moving average of q draws: Σ_k (T - |k|) ρ_k / T²."""
    k = np.arange(-(q - 1), q)
    return float(((n_tokens - np.abs(k)) * (1 - np.abs(k) / q)).sum() / n_tokens ** 2)


def _smooth(rng, shape: tuple, q: int) -> np.ndarray:
    """Moving averages over the last axis of q independent N(0, 1) draws, variance 1."""
    draws = rng.normal(0, 1, (*shape[:-1], shape[-1] + q))
    sums = np.cumsum(draws, axis=-1)
    return (sums[..., q:] - sums[..., :-q]) / np.sqrt(q)


def simulate(n_seeds: int, ratio: float, experiments: int = EXPERIMENTS,
             blocks: int = token_blocks.BLOCKS, block_tokens: int = BLOCK_TOKENS,
             q: int = CORRELATION, seed: int = SEED):
    """(block test results, token test results, true sd of Δ) of experiments with no effect."""
    rng = np.random.default_rng([seed, n_seeds, int(ratio * 1000), blocks, q])
    n_tokens = blocks * block_tokens
    text_var = text_variance(n_tokens, q)
    g_var = min(1.0, ratio * text_var * n_tokens / 2)      # at most half of the seed variance
    u_var = ratio * text_var - g_var / n_tokens
    found = {"blocks": [], "tokens": []}
    for start in range(0, experiments, CHUNK):
        e = min(CHUNK, experiments - start)
        arm = np.repeat([0, 1], n_seeds)
        # c + d, then + g, then + u, in place (the same sums: a third of the time of new arrays)
        x = _smooth(rng, (e, 1, n_tokens), q) + _smooth(rng, (e, 2, n_tokens), q)[:, arm]   # [e, 2n, T]
        x += rng.normal(0, np.sqrt(g_var), (e, 2 * n_seeds, n_tokens))
        x += rng.normal(0, np.sqrt(u_var), (e, 2 * n_seeds, 1))
        scores = x.mean(axis=-1)
        system, base = scores[:, :n_seeds], scores[:, n_seeds:]
        block_means = x.reshape(e, 2 * n_seeds, blocks, block_tokens).mean(axis=-1)
        for name, units in (("blocks", block_means), ("tokens", x)):
            part = token_blocks.unbiased(
                seeds_x_sentences.sentence_variance(seeds_x_sentences.bootstrap_covariance(units), n_seeds), units.shape[-1])
            found[name].append((system, base, part, units.shape[-1]))
    results = {}
    for name, parts in found.items():
        system, base, part = (np.concatenate([p[i] for p in parts]) for i in range(3))
        results[name] = seeds_x_sentences.compare(system, base, part, parts[0][3])
    true_sd = np.sqrt(2 * ratio * text_var / n_seeds + 2 * text_var)
    return results["blocks"], results["tokens"], true_sd


def rates(n_seeds: int, ratio: float, experiments: int = EXPERIMENTS, seed: int = SEED, **options) -> Rates:
    blocks, tokens, true_sd = simulate(n_seeds, ratio, experiments, seed=seed, **options)
    planted = seeds_x_sentences.Result(blocks.delta + POWER_AT * true_sd, blocks.se, blocks.df,
                               blocks.seed_part, blocks.sentence_part)
    return Rates(float(rejected(blocks).mean()), float(rejected(planted).mean()),
                 float(np.median(blocks.detectable()) / true_sd), float(rejected(tokens).mean()))


LABEL = "σ²_seed / σ²_text"       # the calibration table's row header: the variance ratio simulated


def cell_text(r: Rates) -> str:
    """A cell of the calibration table: 'false positives % · power % · MDE (tokens i.i.d.: false
    positives %)'."""
    return (f"{100 * r.false_positive:.1f} % · {100 * r.power:.0f} % · {r.detectable:.1f} "
            f"({100 * r.token_false_positive:.0f} %)")
