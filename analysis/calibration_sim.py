"""Calibration of the report's test over seeds by simulation with known truth, and the calibration
tables as committed results (results/calibration/); analysis/calibrate.py writes and checks them,
analysis/reproduce.py formats docs/REPORT.md's tables from them.

**seeds**: the seed x sentence test (lit_attention/analysis/statistics.py). Each simulated
experiment scores two arms on the same N test sentences, n seeds each; the score of run r of arm
a on sentence i is additive (a corpus score is their mean):

    x_ari = c_i + d_ai + g_ari + u_ar (+ effect in arm A)
    c_i ~ N(0, 3²)        what every system finds hard (cancels in the paired difference)
    d_ai ~ N(0, 1)        how the sentence suits the arm: its variance over N, σ²_sent = 1/N,
                          is the sentence variance of one arm's score that pairing leaves
    g_ari, u_ar           how it suits the run, and the seed: σ²_seed = Var(u) + Var(g)/N, the
                          variance between runs of one arm on one test set, is ratio · σ²_sent

The test gets what the report gets: each run's score on the whole test set and the bootstrap
covariance of the runs' scores (exact for additive scores: bootstrap_covariance).
`rates` gives the share of experiments rejecting at α (two-sided: Holm over both directions of
one comparison) with no effect, and with an effect of POWER_AT true standard deviations of Δ.

**blocks**: the test of a language model's loss over contiguous token blocks. Each experiment
scores two arms, n seeds each, on the same text of T tokens; the NLL of run r of arm a at token t is

    x_art = c_t + d_at + g_art + u_ar (+ effect in arm A)
    c_t, d_at   moving averages of Q independent N(0, 1) draws, scaled to variance 1: what makes
                a stretch of text hard for every system (c) and for one arm (d); neighbours
                within Q tokens are correlated, 1 - |k|/Q
    g_art       how the token suits the run, independent N(0, σ²_g)
    u_ar        the seed; σ²_seed = Var(u) + σ²_g / T is `ratio` · σ²_text, σ²_text = Var(mean_t d_at)

The same test with every token its own block (an i.i.d. bootstrap over tokens) sees only about
1/Q of σ²_text and rejects far more true nulls when the text matters.

**Committed results**: one CSV per table, one row per cell, holding what simulates that cell
again (kind, seeds, ratio, experiments, pooled_arms, seed) and the rates it gave; the suite
simulates the smallest cell of each committed file, so a change to the simulation that moves the
numbers fails there.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Callable

import numpy as np

from lit_attention.analysis import statistics as st
from lit_attention.files import atomic_write


def bootstrap_covariance(per_sentence: np.ndarray) -> np.ndarray:
    """The covariance over bootstrap test sets of the mean scores of R runs with additive
    sentence scores, exactly (no resamples): per_sentence [..., R, N] -> [..., R, R],
    Σ_i (x_ri - x̄_r)(x_si - x̄_s) / N². What resampled_scores estimates for a corpus BLEU."""
    n = per_sentence.shape[-1]
    centred = per_sentence - per_sentence.mean(axis=-1, keepdims=True)
    return centred @ np.swapaxes(centred, -1, -2) / n ** 2


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
    achieved_power: float  # with Δ fixed at that median MDE: what the MDE column promises (80 %)


def simulate(n_seeds: int, ratio: float, experiments: int = EXPERIMENTS, n_sentences: int = SENTENCES,
             seed: int = SEED, pooled_arms: int | None = None):
    """(st.SeedTest of every experiment with no effect, true sd of Δ)."""
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
    sentence_part = st.sentence_variance(bootstrap_covariance(runs), n_seeds)
    system, base = scores[:, :n_seeds], scores[:, n_seeds:]
    pooled = None
    if pooled_arms:
        # the other arms of the family add their seed variances (chi-square draws) to the pool
        df_other = (pooled_arms - 2) * (n_seeds - 1)
        other = ratio * sentence_var * rng.chisquare(max(df_other, 1), experiments) * (df_other > 0)
        own = ((system - system.mean(1, keepdims=True)) ** 2).sum(1) + ((base - base.mean(1, keepdims=True)) ** 2).sum(1)
        df = pooled_arms * (n_seeds - 1)
        pooled = ((own + other) / df, np.full(experiments, df))
    result = st.seed_test(system, base, sentence_part, n_sentences, pooled=pooled)
    true_sd = np.sqrt(2 * ratio * sentence_var / n_seeds + 2 * sentence_var)
    return result, true_sd


def rejected(result: st.SeedTest, alpha: float = st.ALPHA) -> np.ndarray:
    """Holm over the two one-sided hypotheses of one comparison: 2·min(p_up, p_down) < α."""
    return 2 * np.minimum(result.p_up(), result.p_down()) < alpha


def rates(n_seeds: int, ratio: float, experiments: int = EXPERIMENTS, seed: int = SEED,
          pooled_arms: int | None = None) -> Rates:
    result, true_sd = simulate(n_seeds, ratio, experiments, seed=seed, pooled_arms=pooled_arms)
    mde = float(np.median(result.detectable()))
    return Rates(float(rejected(result).mean()), power_at(result, POWER_AT * true_sd), float(mde / true_sd),
                 power_at(result, mde))


def power_at(result: st.SeedTest, delta: float) -> float:
    """The share of the experiments rejecting with ``delta`` added to every difference."""
    return float(rejected(replace(result, delta=result.delta + delta)).mean())


def seed_cell(r: Rates) -> str:
    """A cell of the calibration table: 'false positives % · power % · MDE (power at it %)'."""
    return (f"{100 * r.false_positive:.1f} % · {100 * r.power:.0f} % · {r.detectable:.1f} "
            f"({100 * r.achieved_power:.0f} %)")


BLOCK_TOKENS = 60          # tokens per block: T = BLOCKS x BLOCK_TOKENS
CORRELATION = 5            # Q: tokens over which the text's difficulty is correlated
CHUNK = 100                # experiments generated at once (bounds memory: CHUNK x 2n x T floats)


@dataclass(frozen=True)
class BlockRates:
    false_positive: float        # the block test, no effect
    power: float                 # ... against POWER_AT true standard deviations of Δ
    detectable: float            # median MDE at 80 % power, in true standard deviations of Δ
    token_false_positive: float  # the same test with single tokens as blocks
    achieved_power: float        # the block test with Δ fixed at that median MDE


def text_variance(n_tokens: int, q: int = CORRELATION) -> float:
    """Var(mean over T tokens) of a unit-variance moving average of q draws: Σ_k (T - |k|) ρ_k / T²."""
    k = np.arange(-(q - 1), q)
    return float(((n_tokens - np.abs(k)) * (1 - np.abs(k) / q)).sum() / n_tokens ** 2)


def _smooth(rng, shape: tuple, q: int) -> np.ndarray:
    """Moving averages over the last axis of q independent N(0, 1) draws, variance 1."""
    draws = rng.normal(0, 1, (*shape[:-1], shape[-1] + q))
    sums = np.cumsum(draws, axis=-1)
    return (sums[..., q:] - sums[..., :-q]) / np.sqrt(q)


def simulate_blocks(n_seeds: int, ratio: float, experiments: int = EXPERIMENTS,
             blocks: int = st.BLOCKS, block_tokens: int = BLOCK_TOKENS,
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
            part = st.unbiased(
                st.sentence_variance(bootstrap_covariance(units), n_seeds), units.shape[-1])
            found[name].append((system, base, part, units.shape[-1]))
    results = {}
    for name, parts in found.items():
        system, base, part = (np.concatenate([p[i] for p in parts]) for i in range(3))
        results[name] = st.seed_test(system, base, part, parts[0][3])
    true_sd = np.sqrt(2 * ratio * text_var / n_seeds + 2 * text_var)
    return results["blocks"], results["tokens"], true_sd


def block_rates(n_seeds: int, ratio: float, experiments: int = EXPERIMENTS, seed: int = SEED, **options) -> BlockRates:
    blocks, tokens, true_sd = simulate_blocks(n_seeds, ratio, experiments, seed=seed, **options)
    mde = float(np.median(blocks.detectable()))
    return BlockRates(float(rejected(blocks).mean()), power_at(blocks, POWER_AT * true_sd), float(mde / true_sd),
                      float(rejected(tokens).mean()), power_at(blocks, mde))


def block_cell(r: BlockRates) -> str:
    """A cell of the calibration table: 'false positives % · power % · MDE (power at it %; tokens
    i.i.d.: false positives %)'."""
    return (f"{100 * r.false_positive:.1f} % · {100 * r.power:.0f} % · {r.detectable:.1f} "
            f"({100 * r.achieved_power:.0f} %; {100 * r.token_false_positive:.0f} %)")


@dataclass(frozen=True)
class Kind:
    rates_type: type
    rates: Callable
    label: str                  # the calibration table's row header: the variance ratio simulated
    cell: Callable[..., str]


KINDS = {"seeds": Kind(Rates, rates, "σ²_seed / σ²_sent", seed_cell),
         "blocks": Kind(BlockRates, block_rates, "σ²_seed / σ²_text", block_cell)}


PARAMETERS = ("kind", "seeds", "ratio", "experiments", "pooled_arms", "seed")


class CalibrationFileError(ValueError):
    """A calibration file that cannot be read as one table (the message names the file)."""


def rate_names(kind: str) -> list[str]:
    return [f.name for f in fields(KINDS[kind].rates_type)]


def rates_of(row: dict):
    """The Rates of a cell's row (Rates or BlockRates, by its kind)."""
    kind = row["kind"]
    return KINDS[kind].rates_type(**{name: row[name] for name in rate_names(kind)})


def simulate_cell(kind: str, seeds: int, ratio: float, experiments: int = EXPERIMENTS,
             pooled_arms: int | None = None, seed: int = SEED) -> dict:
    """One cell: its parameters and the rates of its simulation (a row of a calibration file)."""
    if pooled_arms is not None and kind != "seeds":
        raise ValueError(f"pooled_arms is an option of the seeds calibration only, not of {kind}")
    options = {} if pooled_arms is None else {"pooled_arms": pooled_arms}
    rates = KINDS[kind].rates(seeds, ratio, experiments, seed=seed, **options)
    return dict(kind=kind, seeds=seeds, ratio=ratio, experiments=experiments, pooled_arms=pooled_arms,
                seed=seed, **asdict(rates))


def resimulate(row: dict) -> dict:
    """The row that simulating ``row``'s parameters gives now."""
    return simulate_cell(**{key: row[key] for key in PARAMETERS})


def differences(committed: dict, fresh: dict, rel: float = 1e-9) -> dict:
    """{key: (committed, fresh)} of what differs between two rows of a cell. A rate is a share of
    experiments and must be equal; the MDE passes through BLAS and libm, whose last bits differ
    between CPUs, so it is compared to a relative ``rel``."""
    return {key: (committed[key], fresh[key]) for key in committed
            if not (committed[key] == fresh[key] or key == "detectable"
                    and abs(committed[key] - fresh[key]) <= rel * abs(committed[key]))}


def write(path: Path | str, rows: list[dict]) -> None:
    """Rows of one kind to CSV, floats as repr (they read back to the same numbers)."""
    kinds = {row["kind"] for row in rows}
    if len(kinds) != 1:
        raise ValueError(f"a calibration file holds one kind of table, not {sorted(kinds)}")
    out = io.StringIO()
    writer = csv.DictWriter(out, [*PARAMETERS, *rate_names(kinds.pop())], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: "" if value is None else repr(value) if isinstance(value, float) else value
                         for key, value in row.items()})
    atomic_write(path, out.getvalue())


def read(path: Path | str) -> list[dict]:
    """The rows of a calibration file, typed; CalibrationFileError names what is wrong."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            raw = list(csv.DictReader(f))
    except OSError as exc:
        raise CalibrationFileError(f"{path}: {exc.strerror or exc}") from exc
    if not raw:
        raise CalibrationFileError(f"{path}: no cells")
    kind = raw[0].get("kind")
    if kind not in KINDS:
        raise CalibrationFileError(f"{path}: kind {kind!r} is not one of {', '.join(KINDS)}")
    columns = [*PARAMETERS, *rate_names(kind)]
    if list(raw[0]) != columns:
        raise CalibrationFileError(f"{path}: columns {', '.join(raw[0])}; a {kind} table has {', '.join(columns)}")
    rows = []
    for line, row in enumerate(raw, 2):
        try:
            if row["kind"] != kind:
                raise ValueError(f"kind {row['kind']!r} in a {kind} table")
            rows.append(dict(kind=kind, seeds=int(row["seeds"]), ratio=float(row["ratio"]),
                             experiments=int(row["experiments"]),
                             pooled_arms=int(row["pooled_arms"]) if row["pooled_arms"] else None,
                             seed=int(row["seed"]), **{name: float(row[name]) for name in rate_names(kind)}))
        except (TypeError, ValueError) as exc:
            raise CalibrationFileError(f"{path}, line {line}: {exc}") from exc
    return rows


def markdown(rows: list[dict]) -> str:
    """The table: one row per variance ratio, one column per number of seeds."""
    kind = rows[0]["kind"]
    cells = {(row["seeds"], row["ratio"]): row for row in rows}
    seeds, ratios = sorted({n for n, _ in cells}), sorted({r for _, r in cells})
    missing = [f"{n} seeds at ratio {r:g}" for r in ratios for n in seeds if (n, r) not in cells]
    if missing or len(cells) != len(rows):
        raise CalibrationFileError(f"not one cell per seeds and ratio: {'missing ' + ', '.join(missing) if missing else 'a cell twice'}")
    lines = [f"| {KINDS[kind].label} | " + " | ".join(f"{n} seeds" for n in seeds) + " |",
             "|" + "---:|" * (len(seeds) + 1)]
    for ratio in ratios:
        texts = [KINDS[kind].cell(rates_of(cells[n, ratio])) for n in seeds]
        lines.append(f"| {ratio:g} | " + " | ".join(texts) + " |")
    return "\n".join(lines)
