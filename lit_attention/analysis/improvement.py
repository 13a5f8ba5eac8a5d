"""Probability of improvement over the baseline and interquartile mean, with stratified-bootstrap
95 % CIs (Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical
Precipice", NeurIPS; the definitions of their library rliable).

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

N_BOOTSTRAP = 2000
SEED = 0
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
    if task is None:
        return {None: runs[metric].to_numpy(float)}
    return {t: group[metric].to_numpy(float) for t, group in runs.groupby(task, sort=True)}


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
        config = config if isinstance(config, tuple) else (config,)
        is_baseline = bool(is_base[group.index].all())
        found = compare(by_task(group, metric, task), {} if is_baseline else base, higher_is_better,
                        n_draws, rng)
        rows.append({**dict(zip(keys, config)), "baseline": is_baseline, "n_runs": len(group),
                     "n_runs_min": min(map(len, by_task(group, metric, task).values())),
                     **found, **({"n_tasks": group[task].nunique() if task else 1}
                                 if is_baseline else {})})
    columns = keys + ["baseline", "n_runs", "n_runs_min", "n_tasks", "p_improvement", "p_ci_lo", "p_ci_hi",
                      "iqm", "iqm_ci_lo", "iqm_ci_hi"]
    return pd.DataFrame(rows).reindex(columns=columns)


def markdown(table: pd.DataFrame, metric: str, baseline_text: str, higher_is_better: bool = True,
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
    text = shown.to_markdown(index=False, disable_numparse=True)
    direction = "" if higher_is_better else " (lower is better)"
    return (f"{text}\n\nP(X > baseline): probability that a run of the row beats a run of the "
            f"baseline ({baseline_text}) on {metric}{direction}, ties counting half, over every pair "
            f"of their runs, averaged over {tasks} task{'s' * (tasks != 1)}; IQM: mean of the middle 50 % of "
            f"the row's scores pooled over its runs and tasks (Agarwal et al. 2021). 95 % CIs: "
            f"percentile bootstrap, {n_draws} draws resampling runs within each "
            f"(configuration, task).{few_runs_note(table)}\n")


def few_runs_note(table: pd.DataFrame) -> str:
    """A bootstrap of a few runs sees only those runs: its CI is too narrow, and a point when
    every pair agrees (rliable's advice is more runs, not a wider interval)."""
    fewest = int(table["n_runs_min"].min()) if len(table) else 0
    if fewest >= 5:
        return ""
    return (f" With {fewest} run{'s' * (fewest != 1)} in the smallest stratum the bootstrap sees only "
            "those runs: its CIs are too narrow, a single point when every pair of runs agrees.")
