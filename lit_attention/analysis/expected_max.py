"""Expected best validation score against the number of trials (Dodge et al. 2019, "Show Your
Work: Improved Reporting of Experimental Results", EMNLP).

A family's N finished runs are its observed trials, sorted v_(1) <= ... <= v_(N). The best of n
trials drawn i.i.d. from their empirical distribution is at most v_(i) with probability (i/N)^n,
so
    E[max_n]   = sum_i v_(i)   * ((i/N)^n - ((i-1)/N)^n)
    E[max_n^2] = sum_i v_(i)^2 * ((i/N)^n - ((i-1)/N)^n),   Var = E[max_n^2] - E[max_n]^2
for n = 1..N. Tied scores need no care: their weights add up to the probability of the tie.
A metric where lower is better (perplexity) gets the expected minimum.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lit_attention.analysis.aggregate import usable
from lit_attention.analysis.tables import label

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
        family = family if isinstance(family, tuple) else (family,)
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


def markdown(table: pd.DataFrame, keys: list[str], metric: str, higher_is_better: bool = True,
             digits: int = 1) -> str:
    """Rows n, columns the families, cells 'E[max] ± sd' (blank beyond a family's N), and a caption."""
    name = " / ".join(keys) if keys else "nothing (one family)"
    labels = (table[keys].map(label).agg(" / ".join, axis=1) if keys
              else pd.Series("all runs", index=table.index))
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
