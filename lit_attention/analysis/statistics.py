"""The statistics of the report on numpy arrays, without run stores: Student's t and F tails,
Holm's correction, the test over seeds x sentences, and resampled test sets (sentences, or
contiguous blocks of a language model's test tokens).

**Student's t and F for fractional degrees of freedom.** Welch–Satterthwaite degrees of freedom
are not integers, and a calibration simulation tests hundreds of thousands of comparisons at
once, so the tail probability is the regularized incomplete beta function evaluated elementwise
(its continued fraction, Numerical Recipes 6.4, with Lentz's method on whole arrays, an element
leaving once converged), and the quantile inverts it by Newton's method inside a bisection
bracket:  P(T > t) = I_x(ν/2, 1/2) / 2 with x = ν / (ν + t²), for t >= 0.

**Is configuration A better than B when seeds are the random factor?** A run r of arm a (a
configuration) has a corpus score (BLEU) on the test set; to first order

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
analysis/calibration_sim.py simulates seeds and sentences with no effect: 5 % of the tests reject
at α = 0.05 for 2-10 seeds and seed/sentence variance ratios 0.1-10. A configuration with one
seed has no seed variance to estimate (unless pooled): it is not tested.

**Resampled test sets.** A draw is a matrix over B resamples and the N sentences of a test set:
    bootstrap    [B, N] counts: how often sentence n is in resample b (N draws with replacement)
    permutation  [B, N] 0/1:    whether sentence n is swapped between the two systems of a pair
Applied to the sentence statistics of R runs ([R, N, K], tracking/sentence_stats.py) it gives
resampled corpus statistics [B, R, K] by one matrix product, and metric scores [B, R]
elementwise. Every run sees the same draw, so any two runs are compared on the same resampled
test sets (paired). The draws are sacreBLEU's (PairedTest: `rng.choice(N, (B, N))` for the
bootstrap, `rng.integers(2, (B, N))` for approximate randomization), so for the same seed the
resampled test sets are the same ones sacreBLEU scores.

**Token blocks.** The tokens of a language model's test text are not independent draws: a scene,
a speaker or a topic makes neighbouring tokens hard or easy together, so a bootstrap over single
tokens sees a fraction of how much another text of the same kind would move a perplexity, and a
test built on it rejects far too often. The text is cut into a fixed number of contiguous blocks
of (nearly) equal length, and a bootstrap draws whole blocks with replacement: the
non-overlapping block bootstrap (Carlstein 1986, *Ann. Stat.* 14:1171). With a fixed number of
blocks each block grows with the text, so every correlation shorter than a block stays inside
one; 30 blocks follows the batch-means advice of 10-30 batches (Schmeiser 1982, *Oper. Res.*
30:556), and the seed test counts the blocks' N - 1 degrees of freedom.

    stats [R, K, 2]  per run and block: (summed NLL, tokens)
    loss = Σ NLL / Σ tokens over the drawn blocks, perplexity = exp(loss)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from lit_attention.tracking.sentence_stats import SCORES

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
    return np.fromiter(map(math.lgamma, values.tolist()), dtype=float, count=values.size)


def t_sf(t, df) -> np.ndarray:
    """P(T > t) for Student's t with `df` degrees of freedom (arrays broadcast; df > 0).
    df = inf gives the normal tail."""
    t, df = np.broadcast_arrays(np.asarray(t, dtype=float), np.asarray(df, dtype=float))
    out = np.full(t.shape, np.nan)
    normal = np.isinf(df) & ~np.isnan(t)
    out[normal] = 0.5 * np.vectorize(math.erfc, otypes=[float])(t[normal] / np.sqrt(2))
    finite = np.isfinite(df) & (df > 0) & ~np.isnan(t)
    out[finite] = np.where(t[finite] > 0, 0.0, 1.0)        # t = ±inf; the others below
    out[finite & (t == 0)] = 0.5
    inner = finite & np.isfinite(t) & (t != 0)
    x = df[inner] / (df[inner] + t[inner] ** 2)
    positive = np.where(x > 0, 0.5 * _betainc(df[inner] / 2, np.full_like(x, 0.5),
                                              np.clip(x, 1e-300, 1 - 1e-16)), 0.0)
    out[inner] = np.where(t[inner] > 0, positive, 1 - positive)
    return out


def t_quantile(p, df) -> np.ndarray:
    """The t with P(T <= t) = p (0 < p < 1): Newton's method on sf, a step that leaves the
    bracket known to hold the root bisecting it instead; within 1e-12 (relative above 1) of the root."""
    p, df = np.broadcast_arrays(np.asarray(p, dtype=float), np.asarray(df, dtype=float))
    upper = p > 0.5
    tail = np.where(upper, 1 - p, p)            # solve t_sf(t) = tail for t >= 0, then sign
    lo, hi = np.zeros(p.shape), np.full(p.shape, 1.0)
    while (short := t_sf(hi, df) > tail).any():  # grow the bracket where it is too narrow
        hi = np.where(short, hi * 4, hi)
    root = (lo + hi) / 2
    for _ in range(200):
        excess = t_sf(root, df) - tail             # sf falls as t grows: the root is above where > 0
        lo, hi = np.where(excess > 0, root, lo), np.where(excess > 0, hi, root)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            step = root + excess / _t_pdf(root, df)
        step = np.where((step >= lo) & (step <= hi), step, (lo + hi) / 2)
        done = np.all(np.abs(step - root) <= 1e-12 * np.maximum(1, root))
        root = step
        if done:
            break
    return np.where(upper, root, -root)


def _t_pdf(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """The density of Student's t (df = inf: the normal density), arrays of one shape."""
    shape, t, df = np.shape(t), np.ravel(t), np.ravel(df)
    density = np.exp(-t * t / 2) / np.sqrt(2 * np.pi)
    finite = np.isfinite(df) & (df > 0)
    nu, x = df[finite], t[finite]
    density[finite] = np.exp(_log_gamma((nu + 1) / 2) - _log_gamma(nu / 2) - np.log(nu * np.pi) / 2
                             - (nu + 1) / 2 * np.log1p(x * x / nu))
    return density.reshape(shape)


def f_sf(f: float, df1: int, df2: float) -> float:
    """P(F > f) for an F(df1, df2) variable (df2 may be fractional, as a Satterthwaite df is)."""
    if math.isnan(f) or df1 < 1 or not df2 > 0:
        return math.nan
    if f <= 0:
        return 1.0
    x = df2 / (df2 + df1 * f)
    if not 0 < x < 1:
        return 0.0 if x <= 0 else 1.0
    return float(_betainc(np.array([df2 / 2]), np.array([df1 / 2]), np.array([x]))[0])


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order (NaN entries are left out)."""
    present = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    scaled = (min(1.0, (len(present) - rank) * p) for rank, (p, _) in enumerate(present))
    # the running maximum: no adjusted p is below the adjusted p of a smaller p
    adjusted = dict(zip((i for _, i in present), itertools.accumulate(scaled, max)))
    return [adjusted.get(i, math.nan) for i in range(len(pvalues))]


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


def resampled_covariance(scores: np.ndarray) -> np.ndarray:
    """scores [B, ..., R] (each run's score on B resampled test sets) -> their covariance
    [..., R, R] (ddof 1)."""
    centred = scores - scores.mean(axis=0)
    return np.einsum("b...i,b...j->...ij", centred, centred, optimize=True) / (len(scores) - 1)


@dataclass
class SeedTest:
    """One comparison per element (arrays of the leading shape of the inputs)."""
    delta: np.ndarray       # difference of the seed means, A - B
    se: np.ndarray          # its standard error, sqrt(seed part + sentence part)
    df: np.ndarray          # Satterthwaite degrees of freedom
    seed_part: np.ndarray   # s²_A/n_A + s²_B/n_B (or pooled)
    sentence_part: np.ndarray
    seed_df: np.ndarray | float = math.inf   # df of the seed part: n_A + n_B - 2, or the pool's

    def p_up(self) -> np.ndarray:
        """One-sided p of 'A better than B' (Δ > 0): P(T >= Δ/se)."""
        return self._tail(self.delta)

    def p_down(self) -> np.ndarray:
        """One-sided p of Δ < 0."""
        return self._tail(-self.delta)

    def _tail(self, delta: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = delta / self.se                  # ±inf without spread; 0/0: no evidence, p = 1
        return np.where(np.isnan(t), 1.0, t_sf(t, self.df))

    def interval(self, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
        half = t_quantile(0.5 + confidence / 2, self.df) * self.se
        return self.delta - half, self.delta + half

    def detectable(self, alpha: float = ALPHA, power: float = POWER) -> np.ndarray:
        """The smallest |Δ| a two-sided test at `alpha` finds with probability `power`:
        (t(1 - α/2, ν) + t(power, ν))·se', where se' scales the estimated seed part up by
        k/median(χ²_k)·(1 + 4/k²) (k = seed_df; Wilson-Hilferty's median). With few seeds the
        estimated seed variance is itself noisy and usually below the truth (the median of χ²_k/k
        is below 1), so the plain formula, read at its median, promises more power than the test
        has; the factor was found by simulation with known truth and the calibration table shows
        the power achieved at the printed MDE (analysis/calibration_sim.py)."""
        k = np.asarray(self.seed_df, dtype=float)
        with np.errstate(divide="ignore"):
            inflate = np.where(np.isfinite(k), (1 - 2 / (9 * k)) ** -3 * (1 + 4 / k ** 2), 1.0)
        se = np.sqrt(self.seed_part * inflate + self.sentence_part)
        return (t_quantile(1 - alpha / 2, self.df) + t_quantile(power, self.df)) * se

    def equivalence_p(self, margin: float) -> np.ndarray:
        """Two one-sided tests (Schuirmann 1987) of |Δ| < margin: the larger of the p-values of
        Δ > -margin and Δ < margin; below α means equivalent within ±margin."""
        return np.maximum(self._tail(self.delta + margin), self._tail(margin - self.delta))


def seed_test(system: np.ndarray, base: np.ndarray, sentence_part=0.0, n_sentences: float = np.inf,
            pooled: tuple | None = None) -> SeedTest:
    """The test of the seed means of `system` [..., n_A] against `base` [..., n_B] (each run's
    score on the whole test set), with the sentence part V [...] (sentence_variance) estimated
    from `n_sentences` sentences (N - 1 df; inf or V = 0: seeds only, Welch's t). `pooled`:
    (pooled seed variance [...], its df [...]) replacing each arm's own s²."""
    system, base = np.asarray(system, dtype=float), np.asarray(base, dtype=float)
    n_a, n_b = system.shape[-1], base.shape[-1]
    sentence_part = np.asarray(sentence_part, dtype=float)
    sentence_df = np.inf if not np.isfinite(n_sentences) else max(n_sentences - 1, 1)
    if pooled is None:     # two or more seeds on each side
        var_a = system.var(axis=-1, ddof=1) / n_a
        var_b = base.var(axis=-1, ddof=1) / n_b
        seed_part = var_a + var_b
        seed_terms = var_a ** 2 / (n_a - 1) + var_b ** 2 / (n_b - 1)
        seed_df = n_a + n_b - 2
    else:
        variance, seed_df = (np.asarray(v, dtype=float) for v in pooled)
        seed_part = variance * (1 / n_a + 1 / n_b)
        seed_terms = seed_part ** 2 / seed_df
    total = seed_part + sentence_part
    with np.errstate(invalid="ignore", divide="ignore"):
        df = total ** 2 / (seed_terms + sentence_part ** 2 / sentence_df)
    df = np.where(total > 0, df, 1.0)
    delta = system.mean(axis=-1) - base.mean(axis=-1)
    return SeedTest(delta, np.sqrt(total), df, seed_part, sentence_part, seed_df)


def pooled_variance(groups: list[np.ndarray]) -> tuple[float, int]:
    """(Σ (n_a - 1) s²_a / Σ (n_a - 1), Σ (n_a - 1)) over arms of per-run scores with 2+ runs
    (one such arm at least)."""
    used = [np.asarray(g, dtype=float) for g in groups if len(g) >= 2]
    df = sum(len(g) - 1 for g in used)
    return float(sum(((g - g.mean()) ** 2).sum() for g in used) / df), df


RESAMPLINGS = ("bootstrap", "permutation")
CHUNK_BYTES = 16 * 2 ** 20    # bound on the float32 product of one chunk of runs
FLOAT32_EXACT = 2 ** 24       # integers below this are exact in float32 (and so their sums)


@dataclass(frozen=True)
class Draw:
    """Seeded resampling weights of one comparison family; `weights` is [B, N] float32."""
    kind: str
    seed: int
    weights: np.ndarray
    max_weight: float
    n_resamples: int      # B: the weights' rows
    n_sentences: int      # N: the weights' columns


def draw(kind: str, n_sentences: int, n_resamples: int, seed: int, rows: int = 1000) -> Draw:
    """A bootstrap or permutation draw. Bootstrap indices are generated `rows` resamples at a
    time (the same numbers as one call) so that they never all sit in memory as int64."""
    if kind not in RESAMPLINGS:
        raise ValueError(f"unknown resampling {kind!r}; one of {', '.join(RESAMPLINGS)}")
    if n_sentences < 1 or n_resamples < 1:
        raise ValueError(f"need at least one sentence and one resample, got {n_sentences}, {n_resamples}")
    rng = np.random.default_rng(seed)
    if kind == "permutation":   # one call: bools are drawn from buffered bits, chunks would differ
        swaps = rng.integers(2, size=(n_resamples, n_sentences), dtype=bool)
        return Draw(kind, seed, swaps.astype(np.float32), 1.0, *swaps.shape)
    weights = np.empty((n_resamples, n_sentences), dtype=np.float32)   # counts: exact integers
    for start in range(0, n_resamples, rows):
        b = min(rows, n_resamples - start)
        idx = rng.choice(n_sentences, size=(b, n_sentences), replace=True)
        idx += np.arange(b)[:, None] * n_sentences
        weights[start:start + b] = np.bincount(idx.ravel(), minlength=b * n_sentences).reshape(
            b, n_sentences)
    return Draw(kind, seed, weights, float(weights.max()), *weights.shape)


def _float_weights(weights: np.ndarray, stats: np.ndarray, max_weight: float | None = None):
    """The weights as float32 when every partial sum of the product is an integer that float32
    holds exactly (the usual case: BLAS sgemm), else as float64."""
    if max_weight is None:
        max_weight = float(np.abs(weights).max(initial=0))
    bound = float(np.abs(stats).sum(axis=-2).max(initial=0)) * max_weight
    return weights.astype(np.float32 if bound < FLOAT32_EXACT else np.float64, copy=False)


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
    out = np.empty((2, draw_.n_resamples, len(stats_a)))
    for part in _chunks(len(stats_a), draw_.n_resamples, max(1, len(moving))):
        moved = _product(weights, diff[part][:, :, moving])      # [B, moving columns, R]
        for sign, stats, scores in ((1, stats_a, out[0]), (-1, stats_b, out[1])):
            sums = stats[part].sum(axis=1).T.astype(np.float64)    # [K, R]
            pseudo = np.repeat(sums[None], draw_.n_resamples, axis=0)   # [B, K, R]
            pseudo[:, moving, :] += sign * moved
            scores[:, part] = score(np.moveaxis(pseudo, 1, 2))
    return out[0], out[1]


def _check(draw_: Draw, stats: np.ndarray) -> None:
    if stats.ndim != 3 or stats.shape[1] != draw_.n_sentences:
        raise ValueError(f"statistics of shape {stats.shape} do not fit a draw over "
                         f"{draw_.n_sentences} sentences (expected [runs, sentences, K])")


BLOCKS = 30
MIN_BLOCK_TOKENS = 20     # a shorter text gets fewer blocks, each at least this long


def block_count(n_tokens: int, blocks: int = BLOCKS) -> int:
    """The number of blocks a text of `n_tokens` is cut into: `blocks`, fewer for a short text."""
    return max(2, min(blocks, n_tokens // MIN_BLOCK_TOKENS))


def cut_blocks(nll: np.ndarray, n_blocks: int) -> np.ndarray:
    """[T] per-token NLL -> [n_blocks, 2] (summed NLL, tokens) of contiguous blocks whose
    lengths differ by at most one token."""
    nll = np.asarray(nll, dtype=np.float64)
    size, longer = divmod(len(nll), n_blocks)       # the first `longer` blocks hold a token more
    lengths = np.full(n_blocks, size) + (np.arange(n_blocks) < longer)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    sums, filled = np.zeros(n_blocks), lengths > 0       # a text shorter than n_blocks leaves some empty
    sums[filled] = np.add.reduceat(nll, starts[filled])
    return np.column_stack([sums, lengths.astype(np.float64)])


def block_score(kind: str, sums: np.ndarray) -> np.ndarray:
    """sums [..., 2] (summed NLL, tokens) -> the loss or perplexity [...]."""
    loss = sums[..., 0] / sums[..., 1]
    return np.exp(loss) if kind == "ppl" else loss


def unbiased(variance, n_blocks: int):
    """A bootstrap variance over `n_blocks` blocks scaled by K / (K - 1): the bootstrap divides
    the blocks' spread by K, an unbiased estimate by K - 1 (3 % more with 30 blocks; with the
    hundreds of sentences of a BLEU test set it does not matter)."""
    return variance * n_blocks / (n_blocks - 1)


def resampled_blocks(kind: str, weights: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """Every run's score on every block resample: weights [B, K] (how often block k is drawn,
    draw over K blocks) @ stats [R, K, 2] -> [B, R]."""
    sums = np.matmul(weights.astype(np.float64), stats).transpose(1, 0, 2)   # [R, B, 2] -> [B, R, 2]
    return block_score(kind, sums)
