"""Is configuration A better than B when seeds are the random factor? A test over seeds x
sentences, with the variance of a difference of seed means taken from its two sources once.

A run r of arm a (a configuration) has a corpus score (BLEU) on the test set; to first order

    S_ar = μ_a + u_ar + ē_a + ḡ_ar

u_ar: what its seed did (training randomness); ē_a = mean_i e_ai: how the drawn test sentences
suit arm a (shared by every run of the arm, and in part by both arms: the sentences are the same);
ḡ_ar: how they suit this run beyond that. The difference of seed means D = mean_A S - mean_B S
then varies by

    Var(D) = (σ²_u,A + Var ḡ_A) / n_A  +  (σ²_u,B + Var ḡ_B) / n_B  +  Var(ē_A - ē_B)
             `------------ seed part: s²_A/n_A + s²_B/n_B ------------'    sentence part V

seed part  the spread s²_a of the arm's per-run corpus scores on the test set (ddof 1): runs of
           one arm on the same sentences differ by u + ḡ, never by ē, so nothing of the sentence
           part is in it; Welch's unequal-variance form (Welch 1947), n_a - 1 df each, or one
           seed variance pooled over every arm of the family (`pooled`), Σ(n_a - 1) df.
sentence   the covariance over resampled test sets (one bootstrap draw shared by every run, so
part       runs are paired on sentences) of the scores of two *distinct* runs holds ē only:
           V = c̄(A, A) + c̄(B, B) - 2 c̄(A, B), c̄ the mean covariance over pairs of distinct runs
           (sentence_variance); N - 1 df for N sentences. The bootstrap variance of one run's
           score also holds ḡ, which the seed part already counts: it is not used.

Δ / sqrt(Var) is referred to Student's t with Satterthwaite's degrees of freedom for the sum of
the parts (Satterthwaite 1946): with 2 seeds and little sentence noise it is Welch's t on 1-2
df, with much sentence noise the paired bootstrap's normal test. p is one-sided in each
direction; the 95 % interval is Δ ± t(0.975, ν)·se, so p < 0.025 exactly when it excludes 0.
tests/analysis/test_calibration.py simulates seeds and sentences with no effect and checks that
5 % of the tests reject at α = 0.05 for 2-10 seeds and seed/sentence variance ratios 0.1-10.

The previous test redrew the sentences on every resample and moved each resample's difference by
Welch's t over that resample's seed spread: the sentence noise was counted in the resampled
difference, again in each resample's seed spread, and in the spread of the t draws; it rejected
far less than 5 % of true nulls.

A configuration with one seed has no seed variance to estimate (unless pooled): it is not tested.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lit_attention.analysis import student_t

CONFIDENCE = 0.95
POWER = 0.80
ALPHA = 0.05


def sentence_variance(cov: np.ndarray, n_a: int) -> np.ndarray:
    """V: the sentence part of Var(mean_A - mean_B) from the covariance of run scores over test
    sets, cov [..., n_A + n_B, n_A + n_B] (arm A's runs first). Only covariances of distinct
    runs enter; clipped at 0 (a negative estimate: no sentence variance seen)."""
    n = cov.shape[-1]
    arm = np.arange(n) < n_a
    distinct = ~np.eye(n, dtype=bool)

    def mean_over(mask: np.ndarray) -> np.ndarray:
        return (cov * mask).sum(axis=(-2, -1)) / mask.sum()
    within_a = mean_over(distinct & arm[:, None] & arm[None, :])
    within_b = mean_over(distinct & ~arm[:, None] & ~arm[None, :])
    between = mean_over(arm[:, None] & ~arm[None, :])
    return np.maximum(within_a + within_b - 2 * between, 0.0)


def bootstrap_covariance(per_sentence: np.ndarray) -> np.ndarray:
    """The covariance over bootstrap test sets of the mean scores of R runs with additive
    sentence scores, exactly (no resamples): per_sentence [..., R, N] -> [..., R, R],
    Σ_i (x_ri - x̄_r)(x_si - x̄_s) / N². What resampling.py estimates for a corpus BLEU."""
    n = per_sentence.shape[-1]
    centred = per_sentence - per_sentence.mean(axis=-1, keepdims=True)
    return centred @ np.swapaxes(centred, -1, -2) / n ** 2


def resampled_covariance(scores: np.ndarray) -> np.ndarray:
    """scores [B, ..., R] (each run's score on B resampled test sets) -> their covariance
    [..., R, R] (ddof 1)."""
    centred = scores - scores.mean(axis=0)
    return np.einsum("b...i,b...j->...ij", centred, centred, optimize=True) / (len(scores) - 1)


@dataclass
class Result:
    """One comparison per element (arrays of the leading shape of the inputs)."""
    delta: np.ndarray       # difference of the seed means, A - B
    se: np.ndarray          # its standard error, sqrt(seed part + sentence part)
    df: np.ndarray          # Satterthwaite degrees of freedom
    seed_part: np.ndarray   # s²_A/n_A + s²_B/n_B (or pooled)
    sentence_part: np.ndarray

    def p_up(self) -> np.ndarray:
        """One-sided p of 'A better than B' (Δ > 0): P(T >= Δ/se)."""
        return self._tail(self.delta)

    def p_down(self) -> np.ndarray:
        """One-sided p of Δ < 0."""
        return self._tail(-self.delta)

    def _tail(self, delta: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = delta / self.se                  # ±inf without spread; 0/0: no evidence, p = 1
        return np.where(np.isnan(t), 1.0, student_t.sf(t, self.df))

    def interval(self, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
        half = student_t.quantile(0.5 + confidence / 2, self.df) * self.se
        return self.delta - half, self.delta + half

    def detectable(self, alpha: float = ALPHA, power: float = POWER) -> np.ndarray:
        """The smallest |Δ| a two-sided test at `alpha` finds with probability `power`, if the
        standard error is what was estimated: (t(1 - α/2, ν) + t(power, ν))·se."""
        return (student_t.quantile(1 - alpha / 2, self.df) + student_t.quantile(power, self.df)) * self.se

    def equivalence_p(self, margin: float) -> np.ndarray:
        """Two one-sided tests (Schuirmann 1987) of |Δ| < margin: the larger of the p-values of
        Δ > -margin and Δ < margin; below α means equivalent within ±margin."""
        shifted_up = Result(self.delta + margin, self.se, self.df, self.seed_part, self.sentence_part)
        shifted_down = Result(self.delta - margin, self.se, self.df, self.seed_part, self.sentence_part)
        return np.maximum(shifted_up.p_up(), shifted_down.p_down())


def compare(system: np.ndarray, base: np.ndarray, sentence_part=0.0, n_sentences: float = np.inf,
            pooled: tuple | None = None) -> Result:
    """The test of the seed means of `system` [..., n_A] against `base` [..., n_B] (each run's
    score on the whole test set), with the sentence part V [...] (sentence_variance) estimated
    from `n_sentences` sentences (N - 1 df; inf or V = 0: seeds only, Welch's t). `pooled`:
    (pooled seed variance [...], its df [...]) replacing each arm's own s²."""
    system, base = np.asarray(system, dtype=float), np.asarray(base, dtype=float)
    n_a, n_b = system.shape[-1], base.shape[-1]
    sentence_part = np.asarray(sentence_part, dtype=float)
    sentence_df = np.inf if not np.isfinite(n_sentences) else max(n_sentences - 1, 1)
    if pooled is None:
        if min(n_a, n_b) < 2:
            raise ValueError("a test over seeds needs at least two seeds on each side (or pooled)")
        var_a = system.var(axis=-1, ddof=1) / n_a
        var_b = base.var(axis=-1, ddof=1) / n_b
        seed_part = var_a + var_b
        seed_terms = var_a ** 2 / (n_a - 1) + var_b ** 2 / (n_b - 1)
    else:
        variance, df = (np.asarray(v, dtype=float) for v in pooled)
        seed_part = variance * (1 / n_a + 1 / n_b)
        seed_terms = seed_part ** 2 / df
    total = seed_part + sentence_part
    with np.errstate(invalid="ignore", divide="ignore"):
        df = total ** 2 / (seed_terms + sentence_part ** 2 / sentence_df)
    df = np.where(total > 0, df, 1.0)
    delta = system.mean(axis=-1) - base.mean(axis=-1)
    return Result(delta, np.sqrt(total), df, seed_part, sentence_part)


def pooled_variance(groups: list[np.ndarray]) -> tuple[float, int]:
    """(Σ (n_a - 1) s²_a / Σ (n_a - 1), Σ (n_a - 1)) over arms of per-run scores with 2+ runs."""
    used = [np.asarray(g, dtype=float) for g in groups if len(g) >= 2]
    df = sum(len(g) - 1 for g in used)
    if not df:
        return float("nan"), 0
    return float(sum(((g - g.mean()) ** 2).sum() for g in used) / df), df
