"""The figures of an ablation paper, each written as PNG and PDF.

Every function takes the tidy frames of `load`/`aggregate`, the configuration keys that name a
line/bar, and an output path stem (`out/bleu_by_length` -> .png and .pdf); it returns the files
written, or [] when the run stores hold no data for that figure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lit_attention.analysis.aggregate import last_gradflow, usable  # noqa: E402
from lit_attention.analysis.tables import label  # noqa: E402


def config_labels(runs: pd.DataFrame, keys: list[str]) -> pd.Series:
    """'value / value' name of each run's configuration, indexed by run_dir."""
    names = [" / ".join(label(v) for v in row) for row in runs[keys].itertuples(index=False)]
    return pd.Series(names, index=runs["run_dir"].to_numpy())


def save(fig, stem: Path | str) -> list[Path]:
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    fig.tight_layout()
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths


def _with_config(frame: pd.DataFrame, runs: pd.DataFrame, keys: list[str], metric: str) -> pd.DataFrame:
    # Only runs that are averaged in the tables appear in the figures, too.
    good = runs[usable(runs, metric)] if metric in runs else runs[runs["status"] == "finished"]
    frame = frame[frame["run_dir"].isin(good["run_dir"])]
    return frame.assign(config=frame["run_dir"].map(config_labels(good, keys)))


def plot_bleu_by_length(buckets: pd.DataFrame, runs: pd.DataFrame, keys: list[str], stem,
                        metric: str = "val_bleu", score: str = "bleu") -> list[Path]:
    """Score per source-length bucket, one line per configuration (mean ± std over seeds).

    Each tick names the bucket and its number of sentences n (a range when runs differ). Lengths
    are in the unit the runs recorded (words); runs in different units are not drawn together:
    only the runs in words are drawn, with a warning on stderr.
    """
    if buckets.empty:
        return []
    data = _with_config(buckets, runs, keys, metric)
    if data.empty:
        return []
    data = data.dropna(subset=[score])
    units = sorted(data["unit"].dropna().unique()) if "unit" in data else ["tokens"]
    if len(units) > 1:
        print(f"warning: runs measured source length in different units ({', '.join(units)}); "
              "the BLEU-by-length figure shows only the runs in words", file=sys.stderr)
        units = ["words"]
        data = data[data["unit"] == "words"]
    names = data["bucket"] if "bucket" in data else [f"{lo}-{hi}" for lo, hi in zip(data["lo"], data["hi"])]
    data = data.assign(bucket_name=[str(n) for n in names])
    order = data.drop_duplicates("bucket_name").sort_values("lo")["bucket_name"].tolist()
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.arange(len(order))
    for config, group in data.groupby("config"):
        stats = group.groupby("bucket_name")[score].agg(["mean", "std"]).reindex(order)
        ax.errorbar(x, stats["mean"], yerr=stats["std"].fillna(0), marker="o", capsize=3, label=config)
    ax.set_xticks(x, [f"{name}\n{_sentence_count(data, name)}" for name in order])
    ax.set_xlabel(f"source length ({units[0]}); n = sentences per bucket")
    ax.set_ylabel(score.upper() if score == "bleu" else score)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return save(fig, stem)


def _sentence_count(data: pd.DataFrame, bucket: str) -> str:
    if "n" not in data:
        return ""
    n = data.loc[data["bucket_name"] == bucket, "n"]
    return f"n={int(n.min())}" if n.min() == n.max() else f"n={int(n.min())}–{int(n.max())}"


def plot_gradflow(gradflow: pd.DataFrame, runs: pd.DataFrame, keys: list[str], stem,
                  metric: str = "val_bleu") -> list[Path]:
    """‖∂L/∂h_t‖ by distance to the loss (log scale) at each run's last measured step, one line per
    configuration and direction: geometric mean over sentences (pooled over seeds, as the decay fit
    of the tables), band: interquartile range over sentences."""
    if gradflow.empty:
        return []
    data = last_gradflow(_with_config(gradflow, runs, keys, metric))
    if data.empty:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    styles = {"forward": "-", "backward": "--"}
    for (config, direction), group in data.groupby(["config", "direction"]):
        logs = np.log(group["norm"].where(group["norm"] > 0)).groupby(group["distance"])
        line, = ax.plot(np.exp(logs.mean()), styles.get(direction, ":"), marker=".",
                        label=f"{config}, {direction}")
        ax.fill_between(logs.mean().index, np.exp(logs.quantile(0.25)), np.exp(logs.quantile(0.75)),
                        color=line.get_color(), alpha=0.15)
    ax.set_yscale("log")
    ax.set_title("‖∂L/∂h_t‖ by distance to the loss")
    ax.set_xlabel("distance to the loss (steps: forward m-1-t, backward t)")
    ax.set_ylabel("‖∂L/∂h_t‖ (geometric mean over sentences;\nband: interquartile range)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return save(fig, stem)


def plot_learning_curves(metrics: pd.DataFrame, runs: pd.DataFrame, keys: list[str], stem,
                         y: str = "val_ppl", x: str = "step", metric: str = "val_bleu") -> list[Path]:
    """`y` against `x` per configuration: mean over seeds with a ± std band."""
    if metrics.empty or y not in metrics or x not in metrics:
        return []
    data = _with_config(metrics, runs, keys, metric).dropna(subset=[y, x])
    if data.empty:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for config, group in data.groupby("config"):
        stats = group.groupby(x)[y].agg(["mean", "std"]).sort_index()
        std = stats["std"].fillna(0)
        ax.plot(stats.index, stats["mean"], label=config)
        ax.fill_between(stats.index, stats["mean"] - std, stats["mean"] + std, alpha=0.2)
    if "ppl" in y or "loss" in y:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(f"{y} (mean ± std over seeds)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return save(fig, stem)


def plot_ablation_bars(agg: pd.DataFrame, keys: list[str], metric: str, stem) -> list[Path]:
    """One bar per configuration: mean of `metric`, whiskers = 95% CI (none when n < 2)."""
    if agg.empty:
        return []
    names = [" / ".join(label(v) for v in row) for row in agg[keys].itertuples(index=False)]
    low = (agg["mean"] - agg["ci_lo"]).fillna(0).clip(lower=0)
    high = (agg["ci_hi"] - agg["mean"]).fillna(0).clip(lower=0)
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(agg) + 2), 4))
    ax.bar(np.arange(len(agg)), agg["mean"].fillna(0), yerr=[low, high], capsize=4, color="C0")
    ax.set_xticks(np.arange(len(agg)), names, rotation=30, ha="right")
    ax.set_ylabel(f"{metric} (mean, 95% CI)")
    ax.grid(alpha=0.3, axis="y")
    return save(fig, stem)


def plot_attention_grid(runs: pd.DataFrame, keys: list[str], stem, metric: str = "val_bleu",
                        max_maps: int = 4) -> list[Path]:
    """Attention maps (attention/*.png) of one run per configuration, one row per configuration."""
    good = runs[usable(runs, metric)] if metric in runs else runs[runs["status"] == "finished"]
    names = config_labels(good, keys)
    rows = []
    for config in sorted(set(names)):
        run_dirs = sorted(names.index[names == config])
        for run_dir in run_dirs:
            maps = sorted((Path(run_dir) / "attention").glob("*.png"))[:max_maps]
            if maps:
                rows.append((config, maps))
                break
    if not rows:
        return []
    n_cols = max(len(maps) for _, maps in rows)
    fig, axes = plt.subplots(len(rows), n_cols, figsize=(3 * n_cols, 3 * len(rows)), squeeze=False)
    for r, (config, maps) in enumerate(rows):
        for c in range(n_cols):
            ax = axes[r][c]
            ax.axis("off")
            if c < len(maps):
                ax.imshow(mpimg.imread(maps[c]))
                ax.set_title(f"{config}\n{maps[c].stem}" if c == 0 else maps[c].stem, fontsize="small")
    return save(fig, stem)
