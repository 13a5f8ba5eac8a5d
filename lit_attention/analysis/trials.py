"""Runs as draws from what a configuration (or a family of them) gives: the expected best score
against the number of trials (--trials) and the probability of improvement over the baseline
with the interquartile mean (--improvement).

**Expected best score against trials** (Dodge et al. 2019, "Show Your Work: Improved Reporting of
Experimental Results", EMNLP). A family's N finished runs are its observed trials, sorted
v_(1) <= ... <= v_(N). The best of n trials drawn i.i.d. from their empirical distribution is at
most v_(i) with probability (i/N)^n, so
    E[max_n]   = sum_i v_(i)   * ((i/N)^n - ((i-1)/N)^n)
    E[max_n^2] = sum_i v_(i)^2 * ((i/N)^n - ((i-1)/N)^n),   Var = E[max_n^2] - E[max_n]^2
for n = 1..N. Tied scores need no care: their weights add up to the probability of the tie.
A metric where lower is better (perplexity) gets the expected minimum.

**Probability of improvement and IQM**, with stratified-bootstrap 95 % CIs (Agarwal et al. 2021,
"Deep Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS; the definitions
of their library rliable).
- P(X > Y) of a configuration X over the baseline Y on one task: the mean over every pair of
  runs (x_i, y_j) of [x_i > y_j] + 0.5 [x_i == y_j]; averaged over the tasks both ran.
- IQM: the mean of the middle 50 % of a configuration's scores pooled over its runs and tasks,
  as scipy.stats.trim_mean(scores, 0.25): int(0.25 N) scores cut from each end (rliable's
  `aggregate_iqm`). The scores are the raw metric: tasks are not normalized.
- The CIs resample runs with replacement within each (configuration, task) stratum, keeping
  every stratum's size, and take the 2.5 and 97.5 percentiles of the statistic (rliable's
  StratifiedBootstrap, percentile interval).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lit_attention.analysis.aggregate import usable
from lit_attention.analysis.tables import key_label, label

TRIALS = "trials"     # the column of n


def expected_max(scores, higher_is_better: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(mean, variance) of the best of n = 1..N draws from `scores`, shape (N,) each.

    scores: (N,) the observed trials' scores, any order.
    """
    v = np.sort(np.asarray(scores, float) * (1 if higher_is_better else -1))   # best last
    n_obs = len(v)
    if n_obs == 0:
        return np.empty(0), np.empty(0)
    n = np.arange(1, n_obs + 1)[:, None]                       # (N, 1) trials drawn
    cdf = (np.arange(0, n_obs + 1) / n_obs)[None, :] ** n      # (N, N+1) P(max <= v_(i)), i = 0..N
    weight = np.diff(cdf, axis=1)                              # (N, N)  P(max = v_(i))
    mean = weight @ v
    variance = np.clip(weight @ v ** 2 - mean ** 2, 0.0, None)  # rounding can make it -1e-15
    return mean * (1 if higher_is_better else -1), variance


def expected_max_table(runs: pd.DataFrame, keys: list[str], metric: str,
                       higher_is_better: bool = True) -> pd.DataFrame:
    """One row per (family, n): keys, trials (n), expected_max, sd, n_runs (N of the family).

    runs: one row per run; every finished run with a finite `metric` is one trial of the family
    it shares `keys` with (its seed included: a seed is another draw of the same search).
    """
    used = runs[usable(runs, metric)]
    frames = []
    for family, group in used.groupby(keys, sort=True, dropna=False) if keys else [((), used)]:
        mean, variance = expected_max(group[metric].to_numpy(float), higher_is_better)
        frames.append(pd.DataFrame({**dict(zip(keys, family)), TRIALS: np.arange(1, len(mean) + 1),
                                    "expected_max": mean, "sd": np.sqrt(variance),
                                    "n_runs": len(mean)}))
    columns = list(keys) + [TRIALS, "expected_max", "sd", "n_runs"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def shown_trials(n_max: int) -> list[int]:
    """The n a printed table shows: every n up to 10, else powers of two and N."""
    if n_max <= 10:
        return list(range(1, n_max + 1))
    return sorted({2 ** k for k in range(n_max.bit_length()) if 2 ** k <= n_max} | {n_max})


def expected_max_markdown(table: pd.DataFrame, keys: list[str], metric: str, higher_is_better: bool = True,
             digits: int = 1) -> str:
    """Rows n, columns the families, cells 'E[max] ± sd' (blank beyond a family's N), and a caption."""
    name = " / ".join(keys) if keys else "nothing (one family)"
    labels = table[keys].map(label).agg(" / ".join, axis=1) if keys else "all runs"
    cells = table.assign(family=labels, cell=[f"{m:.{digits}f} ± {s:.{digits}f}"
                                              for m, s in zip(table["expected_max"], table["sd"])])
    grid = cells.pivot(index=TRIALS, columns="family", values="cell").fillna("")
    grid = grid.loc[[n for n in shown_trials(int(grid.index.max())) if n in grid.index]]
    runs_per = cells.groupby("family")["n_runs"].first()
    grid.columns = [f"{family} (N={runs_per[family]})" for family in grid.columns]
    text = grid.reset_index().to_markdown(index=False, disable_numparse=True)
    best = "maximum" if higher_is_better else "minimum"
    return (f"{text}\n\nExpected best {metric} (± sd) of n trials drawn with replacement from each "
            f"family's N finished runs (Dodge et al. 2019); a family: the runs sharing {name}; a "
            f"trial: one run, every seed and hyperparameter setting of the family counted. "
            f"Expected {best}; expected_max.csv has every n.\n")


N_BOOTSTRAP = 2000
SEED = 0              # the bootstrap's seed
CONFIDENCE = 0.95


def prob_improvement(x, y) -> np.ndarray:
    """P(X > Y) with ties counted half, over the last axis of each.

    x: (..., n) runs of the configuration; y: (..., m) runs of the baseline -> shape (...).
    """
    x, y = np.asarray(x, float)[..., :, None], np.asarray(y, float)[..., None, :]
    return ((x > y) + 0.5 * (x == y)).mean(axis=(-2, -1))


def iqm(scores) -> np.ndarray:
    """Interquartile mean over the last axis: (..., N) -> (...), as scipy.stats.trim_mean(x, 0.25)."""
    x = np.sort(np.asarray(scores, float), axis=-1)
    cut = int(0.25 * x.shape[-1])
    return x[..., cut:x.shape[-1] - cut].mean(axis=-1)


def resample(scores: np.ndarray, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap draws of one stratum: (n,) -> (n_draws, n), runs drawn with replacement."""
    return scores[rng.integers(0, len(scores), size=(n_draws, len(scores)))]


def interval(draws: np.ndarray) -> tuple[float, float]:
    """The percentile CI of (n_draws,) bootstrap statistics."""
    tail = 100 * (1 - CONFIDENCE) / 2
    return tuple(np.percentile(draws, [tail, 100 - tail]))


def compare(x_by_task: dict, y_by_task: dict, higher_is_better: bool = True,
            n_draws: int = N_BOOTSTRAP, rng: np.random.Generator | None = None) -> dict:
    """P(X > Y) averaged over the shared tasks and the IQM of X over all its tasks, each with its
    stratified-bootstrap CI.

    x_by_task, y_by_task: task -> (n_task,) scores of the configuration's / baseline's runs.
    """
    rng = rng or np.random.default_rng(SEED)
    sign = 1 if higher_is_better else -1
    shared = [t for t in x_by_task if t in y_by_task]
    x_draws = {t: resample(np.asarray(s, float), n_draws, rng) for t, s in x_by_task.items()}
    y_draws = {t: resample(np.asarray(y_by_task[t], float), n_draws, rng) for t in shared}
    found = {"n_tasks": len(shared)}
    if shared:
        point = np.mean([prob_improvement(sign * np.asarray(x_by_task[t], float),
                                          sign * np.asarray(y_by_task[t], float)) for t in shared])
        draws = np.mean([prob_improvement(sign * x_draws[t], sign * y_draws[t]) for t in shared], axis=0)
        found.update(p_improvement=point, **dict(zip(("p_ci_lo", "p_ci_hi"), interval(draws))))
    pooled = np.concatenate([np.asarray(s, float) for s in x_by_task.values()])
    pooled_draws = np.concatenate(list(x_draws.values()), axis=1)      # (n_draws, N)
    found.update(iqm=iqm(pooled), **dict(zip(("iqm_ci_lo", "iqm_ci_hi"), interval(iqm(pooled_draws)))))
    return found


def by_task(runs: pd.DataFrame, metric: str, task: str | None) -> dict:
    """task -> (n,) scores of `runs` (one task, None, when the store records none)."""
    groups = runs.groupby(task, sort=True) if task else [(None, runs)]
    return {t: group[metric].to_numpy(float) for t, group in groups}


def improvement_table(runs: pd.DataFrame, keys: list[str], baseline: dict, metric: str,
                      higher_is_better: bool = True, n_draws: int = N_BOOTSTRAP,
                      seed: int = SEED) -> pd.DataFrame:
    """One row per configuration (the values of `keys`, task excluded): keys, baseline (bool),
    n_runs, n_runs_min (of its smallest task), n_tasks, p_improvement, p_ci_lo, p_ci_hi (NaN for
    the baseline), iqm, iqm_ci_lo, iqm_ci_hi.

    runs: one row per run; the finished ones with a finite `metric` count. baseline: the
    configuration's key -> value (the configuration every other one is compared with).
    """
    used = runs[usable(runs, metric)]
    task = "task" if "task" in used and used["task"].notna().all() else None
    keys = [k for k in keys if k != "task"]
    is_base = pd.Series(np.logical_and.reduce([(used[k] == v) | (used[k].isna() & pd.isna(v))
                                               for k, v in baseline.items()]), index=used.index)
    base = by_task(used[is_base], metric, task)
    rng = np.random.default_rng(seed)
    rows = []
    for config, group in used.groupby(keys, sort=True, dropna=False):
        is_baseline = bool(is_base[group.index].all())
        scores = by_task(group, metric, task)
        found = compare(scores, {} if is_baseline else base, higher_is_better, n_draws, rng)
        rows.append({**dict(zip(keys, config)), "baseline": is_baseline, "n_runs": len(group),
                     "n_runs_min": min(map(len, scores.values())), **found,
                     **({"n_tasks": len(scores)} if is_baseline else {})})
    columns = keys + ["baseline", "n_runs", "n_runs_min", "n_tasks", "p_improvement", "p_ci_lo", "p_ci_hi",
                      "iqm", "iqm_ci_lo", "iqm_ci_hi"]
    return pd.DataFrame(rows).reindex(columns=columns)


def improvement_markdown(table: pd.DataFrame, metric: str, baseline_text: str, higher_is_better: bool = True,
             n_draws: int = N_BOOTSTRAP, digits: int = 1) -> str:
    """`improvement_table` with 'P [CI]' and 'IQM [CI]' cells, and its caption."""
    keys = list(table.columns[:table.columns.get_loc("baseline")])

    def cell(value, lo, hi, fmt) -> str:
        return "" if pd.isna(value) else f"{value:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"

    shown = table[keys].map(label).rename(columns=key_label).assign(
        **{"runs": table["n_runs"].astype(str),
           "P(X > baseline) [95 % CI]": [("baseline" if b else cell(p, lo, hi, ".2f")) for b, p, lo, hi
                                        in table[["baseline", "p_improvement", "p_ci_lo", "p_ci_hi"]]
                                        .itertuples(index=False)],
           f"IQM {metric} [95 % CI]": [cell(m, lo, hi, f".{digits}f") for m, lo, hi
                                       in table[["iqm", "iqm_ci_lo", "iqm_ci_hi"]].itertuples(index=False)]})
    tasks = int(table["n_tasks"].max()) if len(table) else 0
    # a bootstrap of a few runs sees only those runs: its CI is too narrow, and a point when every
    # pair agrees (rliable's advice is more runs, not a wider interval)
    fewest = int(table["n_runs_min"].min()) if len(table) else 0
    few = "" if fewest >= 5 else (
        f" With {fewest} run{'s' * (fewest != 1)} in the smallest stratum the bootstrap sees only "
        "those runs: its CIs are too narrow, a single point when every pair of runs agrees.")
    text = shown.to_markdown(index=False, disable_numparse=True)
    direction = "" if higher_is_better else " (lower is better)"
    return (f"{text}\n\nP(X > baseline): probability that a run of the row beats a run of the "
            f"baseline ({baseline_text}) on {metric}{direction}, ties counting half, over every pair "
            f"of their runs, averaged over {tasks} task{'s' * (tasks != 1)}; IQM: mean of the middle 50 % of "
            f"the row's scores pooled over its runs and tasks (Agarwal et al. 2021). 95 % CIs: "
            f"percentile bootstrap, {n_draws} draws resampling runs within each "
            f"(configuration, task).{few}\n")

