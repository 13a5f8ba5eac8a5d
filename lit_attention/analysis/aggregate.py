"""Seeds -> one row per configuration: mean, std (ddof=1), n, 95% t-interval, costs, gradient stats.

Only finished runs with a value for the metric are averaged; failed, pruned and other runs are
counted per configuration (n_failed, n_pruned, n_other) and their ids listed, never averaged in.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from lit_attention.analysis.load import FINISHED, AnalysisError

CONFIDENCE = 0.95
CI_METHOD = "95% Student-t interval over seeds, mean ± t(0.975, n-1)·s/√n; s with ddof=1"
# Per-run quantities averaged per configuration beside the metric.
COSTS = ("params", "train_seconds", "tokens_per_second", "machine_gflops")
GRADIENT = ("grad_norm_median", "clip_fraction", "gradflow_ratio", "gradflow_decay")
# Distances compared by the gradient-flow ratio ‖∂L/∂h‖ at distance 1 over distance 20.
NEAR, FAR = 1, 20


def t_coverage(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer df (closed form, Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2 == 1:
        if df == 1:
            return 2 * theta / math.pi
        term = total = math.cos(theta)
        for k in range(3, df - 1, 2):
            term *= (k - 1) / k * cos2
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * total)
    term = total = 1.0
    for k in range(2, df - 1, 2):
        term *= (k - 1) / k * cos2
        total += term
    return math.sin(theta) * total


def t_quantile(confidence: float, df: int) -> float:
    """The t with P(|T| < t) = confidence, i.e. the two-sided critical value (bisection)."""
    if df < 1:
        raise ValueError("a t-interval needs at least two seeds (df >= 1)")
    lo, hi = 0.0, 1.0
    while t_coverage(hi, df) < confidence:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_coverage(mid, df) < confidence else (lo, mid)
    return (lo + hi) / 2


def seed_stats(values) -> dict:
    """n, mean, std (ddof=1) and the 95% t-interval of one configuration's per-seed values."""
    x = np.asarray([v for v in values if v is not None and not pd.isna(v)], dtype=float)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    if n < 2:
        return dict(n=n, mean=mean, std=math.nan, ci_lo=math.nan, ci_hi=math.nan)
    std = float(x.std(ddof=1))
    half = t_quantile(CONFIDENCE, n - 1) * std / math.sqrt(n)
    return dict(n=n, mean=mean, std=std, ci_lo=mean - half, ci_hi=mean + half)


def gradflow_stats(gradflow: pd.DataFrame) -> tuple[float, float]:
    """(ratio, decay) of one run's gradflow table at its last recorded step.

    ratio: mean ‖∂L/∂h‖ at distance 1 divided by that at distance 20 (NaN if 20 was not reached).
    decay: exp of the least-squares slope of log-norm against distance, the factor the gradient
    norm changes by per step back in time (< 1 vanishing, > 1 exploding).
    """
    last = gradflow[gradflow["step"] == gradflow["step"].max()]
    by_distance = last.groupby("distance")["norm"].mean()
    by_distance = by_distance[by_distance > 0]
    ratio = math.nan
    if NEAR in by_distance.index and FAR in by_distance.index:
        ratio = float(by_distance[NEAR] / by_distance[FAR])
    decay = math.nan
    if len(by_distance) >= 2:
        slope = np.polyfit(by_distance.index.to_numpy(float), np.log(by_distance.to_numpy()), 1)[0]
        decay = float(math.exp(slope))
    return ratio, decay


def run_gradient_stats(run: pd.Series) -> dict:
    """Gradient statistics of one run: from summary.json when recorded, else from its files."""
    stats = {k: run.get(k, math.nan) for k in GRADIENT}
    run_dir = Path(run["run_dir"])
    metrics = run_dir / "metrics.csv"
    if metrics.is_file() and (pd.isna(stats["grad_norm_median"]) or pd.isna(stats["clip_fraction"])):
        frame = pd.read_csv(metrics)
        if "grad_norm/total" in frame:
            norms = frame["grad_norm/total"].dropna()
            if pd.isna(stats["grad_norm_median"]) and len(norms):
                stats["grad_norm_median"] = float(norms.median())
            clip = run.get("config.trainer.gradient_clip_val")
            if pd.isna(stats["clip_fraction"]) and len(norms) and clip is not None and not pd.isna(clip):
                stats["clip_fraction"] = float((norms > float(clip)).mean())
    gradflow = run_dir / "gradflow.csv"
    if gradflow.is_file() and gradflow.stat().st_size and pd.isna(stats["gradflow_ratio"]):
        stats["gradflow_ratio"], stats["gradflow_decay"] = gradflow_stats(pd.read_csv(gradflow))
    return stats


def add_gradient_stats(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with the GRADIENT columns filled in for every run."""
    stats = pd.DataFrame([run_gradient_stats(run) for _, run in runs.iterrows()], index=runs.index)
    return runs.drop(columns=[c for c in GRADIENT if c in runs]).join(stats)


def usable(runs: pd.DataFrame, metric: str) -> pd.Series:
    """Which runs are averaged: finished and with a value for the metric."""
    return (runs["status"] == FINISHED) & runs[metric].notna()


def aggregate(runs: pd.DataFrame, keys: list[str], metric: str = "val_bleu") -> pd.DataFrame:
    """One row per configuration (the distinct values of `keys`), sorted by `keys`.

    Columns: keys, n, mean, std, ci_lo, ci_hi (of `metric` over finished runs), n_failed,
    n_pruned, n_other, the means of COSTS and GRADIENT columns present, run_ids (averaged runs)
    and excluded_ids (`run_id:status`), both ';'-separated.
    """
    if metric not in runs:
        raise AnalysisError(f"metric {metric!r} not in the runs; columns: {', '.join(runs.columns)}")
    needed = dict.fromkeys([*keys, metric, "status", "seed", "run_id", *COSTS, *GRADIENT])
    runs = runs[[c for c in needed if c in runs]]     # groups of a wide frame are slow to cut
    runs = runs.assign(_usable=usable(runs, metric))
    rows = []
    for values, group in runs.groupby(keys, dropna=False, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        good, bad = group[group["_usable"]], group[~group["_usable"]]
        row = dict(zip(keys, values))
        row.update(seed_stats(good[metric]))
        row["n_failed"] = int((bad["status"] == "failed").sum())
        row["n_pruned"] = int((bad["status"] == "pruned").sum())
        row["n_other"] = len(bad) - row["n_failed"] - row["n_pruned"]
        for col in COSTS + GRADIENT:
            if col in good:
                row[col] = pd.to_numeric(good[col], errors="coerce").mean()
        row["seeds"] = ";".join(str(s) for s in good.get("seed", []))
        row["run_ids"] = ";".join(good["run_id"])
        row["excluded_ids"] = ";".join(f"{r.run_id}:{r.status}" for r in bad.itertuples())
        rows.append(row)
    return pd.DataFrame(rows)


# Config fields that may differ between seeds of one configuration without changing the result.
BOOKKEEPING = ("config.run.", "config.seed_everything", "config.ckpt_path", "config.tracking",
               "config.trainer.logger", "config.trainer.callbacks", "config.trainer.default_root_dir",
               "config.trainer.enable_progress_bar", "config.data.cache_dir", "config.data.num_workers")


def hidden_differences(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """config.* fields (e.g. a swept learning rate) that differ between runs averaged together."""
    fields = [c for c in runs.columns if c.startswith(("config.model.", "config.data.", "config.trainer."))
              and not c.startswith(BOOKKEEPING) and c not in keys]
    if not fields:
        return []
    text = runs[fields].astype(str)
    counts = text.groupby([runs[k].astype(str) for k in keys], dropna=False).nunique()
    return [c for c in fields if (counts[c] > 1).any()]


def excluded_runs(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The runs left out of every mean, with their status and error (for the report footnote)."""
    cols = [c for c in ("group", "run_id", "status", "error", "run_dir") if c in runs]
    return runs.loc[~usable(runs, metric), cols]
