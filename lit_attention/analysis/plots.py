"""The figures of an ablation paper, each written as PNG and PDF.

Every function takes the tidy frames of `load`/`aggregate`, the configuration keys that name a
line/bar, and an output path stem (`out/bleu_by_length` -> .png and .pdf); it returns the files
written, or [] when the run stores hold no data for that figure. Every figure is drawn in
`paper_style`: sized for a column (3.3 in) or the text width (6.75 in) of a two-column paper,
8 pt text, and the Okabe-Ito colours, which stay distinct under colour-vision deficiencies.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import io
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from cycler import cycler  # noqa: E402

from lit_attention.analysis.aggregate import GRADFLOW_FIT_FROM, last_gradflow, usable  # noqa: E402
from lit_attention import metric_facts  # noqa: E402
from lit_attention.metric_facts import SPLITS, metric_name, metric_range, split_of  # noqa: E402
from lit_attention.analysis.tables import config_names, key_label, label  # noqa: E402
from lit_attention.files import atomic_write  # noqa: E402
from lit_attention.tracking.schema import ATTENTION, Status  # noqa: E402

COLUMN_IN, TEXT_IN = 3.3, 6.75      # figure widths: one column, the text width
SHOWN = 3        # configurations a figure draws beside the baseline: one row of attention maps
GRAD_NORM = r"$\Vert\partial L / \partial h_t\Vert$"   # mathtext: h with subscript t
# Okabe & Ito (2008), "Color universal design"; yellow last, it is faint on white.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7,
         "ytick.labelsize": 7, "legend.fontsize": 7, "legend.title_fontsize": 7,
         "font.family": "DejaVu Sans", "axes.prop_cycle": cycler(color=OKABE_ITO),
         "axes.spines.top": False, "axes.spines.right": False, "lines.linewidth": 1.2,
         "lines.markersize": 4, "savefig.bbox": "tight", "savefig.pad_inches": 0.02,
         "pdf.fonttype": 42}   # TrueType in the PDF: text stays text


def paper_style(plot):
    """Draw the figure of `plot` under STYLE (the rcParams apply while its artists are made)."""
    @functools.wraps(plot)
    def styled(*args, **kwargs):
        with plt.rc_context(STYLE):
            return plot(*args, **kwargs)
    return styled


def config_labels(runs: pd.DataFrame, keys: list[str]) -> pd.Series:
    """'value / value' name of each run's configuration, indexed by run_dir."""
    names = [" / ".join(name) for name in config_names(runs, keys)]
    return pd.Series(names, index=runs["run_dir"].to_numpy())


_UNDRAWN = contextvars.ContextVar("undrawn", default=False)


@contextlib.contextmanager
def undrawn():
    """Within it, save() writes every figure file empty instead of drawing the figure
    (analysis/reproduce.py --check compares which figures a report makes, never their pixels)."""
    token = _UNDRAWN.set(True)
    try:
        yield
    finally:
        _UNDRAWN.reset(token)


def save(fig, stem: Path | str) -> list[Path]:
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    if fig.get_layout_engine() is None and not _UNDRAWN.get():
        fig.tight_layout()
    for path in paths:   # whole files only: a report stopped midway never leaves a figure cut short
        data = io.BytesIO()
        if not _UNDRAWN.get():
            fig.savefig(data, format=path.suffix[1:], dpi=200)
        atomic_write(path, data.getvalue())
    plt.close(fig)
    return paths


def _averaged(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The runs the tables average: only they appear in the figures, too."""
    return runs[usable(runs, metric)] if metric in runs else runs[runs["status"] == Status.FINISHED]


def _with_config(frame: pd.DataFrame, runs: pd.DataFrame, keys: list[str], metric: str) -> pd.DataFrame:
    if frame.empty:    # no column to select by
        return frame
    good = _averaged(runs, metric)
    frame = frame[frame["run_dir"].isin(good["run_dir"])]
    return frame.assign(config=frame["run_dir"].map(config_labels(good, keys)))


@paper_style
def plot_bleu_by_length(buckets: pd.DataFrame, runs: pd.DataFrame, keys: list[str], stem,
                        metric: str = "val_bleu") -> list[Path]:
    """Score per source-length bucket, one line per configuration (mean ± std over seeds).

    Each tick names the bucket and its number of sentences n (a range when runs differ). Lengths
    are in the unit the runs recorded (words); runs in different units are not drawn together:
    only the runs in words are drawn, with a warning on stderr.
    """
    data = _with_config(buckets, runs, keys, metric)
    if data.empty:
        return []
    data = data.dropna(subset=["bleu"])
    units = sorted(data["unit"].dropna().unique()) if "unit" in data else ["tokens"]
    if len(units) > 1:
        print(f"warning: runs measured source length in different units ({', '.join(units)}); "
              "the BLEU-by-length figure shows only the runs in words", file=sys.stderr)
        units = ["words"]
        data = data[data["unit"] == "words"]
    names = data["bucket"] if "bucket" in data else [f"{lo}-{hi}" for lo, hi in zip(data["lo"], data["hi"])]
    data = data.assign(bucket_name=[str(n) for n in names])
    order = data.drop_duplicates("bucket_name").sort_values("lo")["bucket_name"].tolist()
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    x = np.arange(len(order))
    groups = list(data.groupby("config"))
    seeds = set()
    for i, (config, group) in enumerate(groups):
        stats = group.groupby("bucket_name")["bleu"].agg(["mean", "std", "count"]).reindex(order)
        seeds.update(stats["count"].dropna().astype(int))
        # buckets are categories (merged until each holds enough sentences): points, no lines,
        # side by side within a bucket
        shift = (i - (len(groups) - 1) / 2) * min(0.8 / len(groups), 0.15)
        ax.errorbar(x + shift, stats["mean"], yerr=stats["std"].fillna(0), marker="o", linestyle="none",
                    capsize=3, label=config)
    # a bucket's sentences: 'n=12', or 'n=10–12' where runs differ
    counts = (data.groupby("bucket_name")["n"].agg(["min", "max"]).astype(int).astype(str)
              .apply(lambda r: "n=" + "–".join(dict.fromkeys(r)), axis=1) if "n" in data else {})
    ax.set_xticks(x, [f"{name}\n{counts.get(name, '')}" for name in order])
    ax.set_xlabel(f"source length ({units[0]}); n = sentences per bucket")
    n = "–".join(map(str, sorted({min(seeds), max(seeds)}))) if seeds else "0"
    ax.set_ylabel(f"BLEU (mean over {n} seed{'s' * (n != '1')}"
                  + ("; bars: ±1 std over seeds)" if max(seeds, default=1) > 1 else ")"))
    return legend_below(ax, "", stem, axis="y")


@paper_style
def plot_gradflow(gradflow: pd.DataFrame, runs: pd.DataFrame, keys: list[str], stem,
                  metric: str = "val_bleu") -> list[Path]:
    """‖∂L/∂h_t‖ by distance to the loss (log scale) at each run's last measured step, one line per
    configuration and direction: geometric mean over sentences (pooled over seeds), band:
    interquartile range over sentences; a dotted line where the tables' decay/step fit starts."""
    data = last_gradflow(_with_config(gradflow, runs, keys, metric))
    if data.empty:
        return []
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    styles = {"forward": "-", "backward": "--"}
    for (config, direction), group in data.groupby(["config", "direction"]):
        logs = np.log(group["norm"].where(group["norm"] > 0)).groupby(group["distance"])
        line, = ax.plot(np.exp(logs.mean()), styles.get(direction, ":"), marker=".",
                        label=f"{config}, {direction}")
        ax.fill_between(logs.mean().index, np.exp(logs.quantile(0.25)), np.exp(logs.quantile(0.75)),
                        color=line.get_color(), alpha=0.15)
    ax.axvline(GRADFLOW_FIT_FROM, color="0.5", linestyle=":", linewidth=1)
    ax.text(GRADFLOW_FIT_FROM, 1, " decay/step fitted from here", transform=ax.get_xaxis_transform(),
            va="top", fontsize="small", color="0.4")
    ax.set_yscale("log")
    ax.set_title(rf"{GRAD_NORM} by distance to the loss")
    ax.set_xlabel(r"distance to the loss (steps: forward $m-1-t$, backward $t$)")
    ax.set_ylabel(rf"{GRAD_NORM} (geometric mean over sentences;" "\nband: interquartile range)")
    return legend_below(ax, "", stem, which="both")


def legend_title(keys: list[str]) -> str:
    return " / ".join(key_label(k) for k in keys)


def axis_label(metric: str) -> str:
    """'val_bleu' -> 'Validation BLEU'."""
    split = SPLITS.get(split_of(metric))
    return f"{split.capitalize()} {metric_name(metric)}" if split else metric_name(metric)


def _x_values(data: pd.DataFrame, runs: pd.DataFrame, x: str) -> pd.Series | None:
    """The x of every metrics row: its step, or ("tokens") step × the run's mean target tokens
    per step (train_tokens / steps of its summary); None when a run lacks what that needs."""
    if x == "step":
        return data["step"]
    per_step = runs.set_index("run_dir")
    if not {"train_tokens", "steps"} <= set(per_step):
        return None
    rate = pd.to_numeric(per_step["train_tokens"], errors="coerce") / pd.to_numeric(per_step["steps"], errors="coerce")
    rate = data["run_dir"].map(rate.where(np.isfinite(rate) & (rate > 0)))
    return None if rate.isna().any() else data["step"] * rate


def seed_band(curves: list[pd.Series]) -> pd.DataFrame:
    """Mean, min and max over seeds of curves y(x) sampled at different x: each is linearly
    interpolated at the union of their x within the range every seed covers (so the mean never
    jumps between seeds), columns mean/low/high indexed by x. Curves that share no range (one
    validation each, at different steps) are paired by validation instead, at their mean x."""
    low, high = max(c.index.min() for c in curves), min(c.index.max() for c in curves)
    grid = np.unique(np.concatenate([c.index.to_numpy(float) for c in curves]))
    grid = grid[(grid >= low) & (grid <= high)]
    if len(grid):
        values = np.array([np.interp(grid, c.index.to_numpy(float), c.to_numpy(float)) for c in curves])
    else:
        n = min(len(c) for c in curves)
        grid = np.mean([c.index.to_numpy(float)[:n] for c in curves], axis=0)
        values = np.array([c.to_numpy(float)[:n] for c in curves])
    return pd.DataFrame({"mean": values.mean(0), "low": values.min(0), "high": values.max(0)}, index=grid)


@paper_style
def plot_learning_curves(metrics: pd.DataFrame, runs: pd.DataFrame, keys: list[str], stem,
                         y: str = "val_ppl", x: str = "step", metric: str = "val_bleu") -> list[Path]:
    """`y` against the training step (x="step") or the target tokens seen (x="tokens"), one line
    per configuration: the mean over its seeds, band: their min-max (see `seed_band`)."""
    if y not in metrics or "step" not in metrics:   # and so when there is no metrics.csv
        return []
    data = _with_config(metrics, runs, keys, metric).dropna(subset=[y, "step"])
    xs = None if data.empty else _x_values(data, runs, x)
    if xs is None:
        return []
    data = data.assign(_x=xs)
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 2.8), layout="constrained")
    seeds = set()
    for config, group in data.groupby("config", sort=True):
        curves = [run.groupby("_x")[y].last() for _, run in group.groupby("run_dir")]
        seeds.add(len(curves))
        band = seed_band(curves)
        line, = ax.plot(band.index, band["mean"], marker="o" if len(band) < 4 else None, label=config)
        if len(curves) > 1:
            ax.fill_between(band.index, band["low"], band["high"], color=line.get_color(),
                            alpha=0.2, linewidth=0)
    if metric_facts.log_axis(y):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))      # 20, not 2×10¹
        ax.yaxis.set_minor_formatter(ticker.LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    ax.xaxis.set_major_formatter(ticker.EngFormatter(sep=""))                        # 250k, not 250000
    ax.set_xlabel("training step" if x == "step" else "target tokens seen (step × tokens per step)")
    ax.set_ylabel(axis_label(y))
    n = "–".join(map(str, sorted({min(seeds), max(seeds)})))
    ax.set_title(f"mean over {n} seed{'s' * (n != '1')}" + ("; band: min–max" if max(seeds) > 1 else ""),
                 loc="right", fontsize=7)
    return legend_below(ax, legend_title(keys), stem)


def whiskers(mean: pd.Series, ci_lo: pd.Series, ci_hi: pd.Series) -> list[pd.Series]:
    """errorbar's yerr: how far a CI reaches below and above the mean (0 where there is none)."""
    return [(mean - ci_lo).fillna(0).clip(lower=0), (ci_hi - mean).fillna(0).clip(lower=0)]


def legend_below(ax, title: str, stem, **grid) -> list[Path]:
    """The legend under the axes (of a figure with a constrained layout), where it hides no line,
    a light grid (`grid`: ax.grid's options), and the figure saved (`save`)."""
    ax.figure.legend(title=title or None, loc="outside lower center", ncol=2, frameon=False)
    ax.grid(alpha=0.3, **grid)
    return save(ax.figure, stem)


@paper_style
def plot_ablation_bars(agg: pd.DataFrame, keys: list[str], metric: str, stem, runs: pd.DataFrame | None = None,
                       marks: list[str] | None = None) -> list[Path]:
    """One bar per configuration: mean of `metric`, whiskers = its 95% CI (none when n < 2), both
    clipped to the metric's range (metric_facts), and the axis within it; a dot per seed (the
    averaged runs of ``runs``) and the table's ▲/▼ (``marks``, one per row of ``agg``) above it."""
    if agg.empty:
        return []
    low_end, high_end = metric_range(metric)
    names = ["\n".join(name) for name in config_names(agg, keys)]
    mean, ci_lo, ci_hi = (agg[c].clip(low_end, high_end) for c in ("mean", "ci_lo", "ci_hi"))
    fig, ax = plt.subplots(figsize=(COLUMN_IN if len(agg) <= 6 else TEXT_IN, 2.6))
    x = np.arange(len(agg))
    ax.bar(x, mean.fillna(0), yerr=whiskers(mean, ci_lo, ci_hi), capsize=3, color=OKABE_ITO[5], width=0.6,
           error_kw={"linewidth": 0.9})
    seeds = _seed_values(agg, keys, metric, runs)
    for i, values in enumerate(seeds):
        spread = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else np.zeros(len(values))
        ax.plot(x[i] + spread, np.clip(values, low_end, high_end), "o", color="black", markersize=2.5,
                label="seeds" if i == 0 else None)
    top = np.nanmax(np.concatenate([mean.to_numpy(float), ci_hi.to_numpy(float), *seeds]))
    bottom = low_end if low_end is not None else min(0.0, np.nanmin(ci_lo.fillna(mean).to_numpy(float)))
    ceiling = top + 0.05 * (top - bottom) if np.isfinite(top) else 1.0
    ax.set_ylim(bottom, ceiling if high_end is None else min(high_end, ceiling))
    for i, mark in enumerate(marks or []):
        if mark:   # above the whisker and the dots
            above = np.nanmax([mean.iloc[i], ci_hi.iloc[i], *seeds[i]])
            ax.annotate(mark, (x[i], above), xytext=(0, 2), textcoords="offset points", ha="center",
                        va="bottom", fontsize=7)
    ax.set_xticks(x, names)                 # one line per key, read against the axis label
    ax.set_xlabel(legend_title(keys).replace(" / ", ", "))
    dots = "; dots: seeds" if any(len(v) for v in seeds) else ""
    signs = "\n▲/▼: better/worse than the baseline (the table's test)" if any(marks or []) else ""
    ax.set_ylabel(axis_label(metric))
    ax.set_title(f"bars: mean, whiskers: 95% CI{dots}{signs}", loc="right", fontsize=7, pad=8)
    ax.grid(alpha=0.3, axis="y")
    return save(fig, stem)


def _seed_values(agg: pd.DataFrame, keys: list[str], metric: str, runs: pd.DataFrame | None) -> list[np.ndarray]:
    """Per row of ``agg``, the ``metric`` of the runs averaged in it (empty without ``runs``)."""
    if runs is None or metric not in runs:
        return [np.array([]) for _ in range(len(agg))]
    good = runs[usable(runs, metric)]
    values = pd.to_numeric(good[metric], errors="coerce").to_numpy(float)
    return [np.array([v for name, v in zip(config_names(good, keys), values) if name == row])
            for row in config_names(agg, keys)]


def _attention_maps(run_dir: Path) -> list[dict]:
    """The attention maps a run stored as data (attention/*.json beside its pictures)."""
    maps = []
    for path in sorted((Path(run_dir) / ATTENTION).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            weights = np.asarray(data["weights"], dtype=float)
        except (ValueError, KeyError, TypeError):
            continue
        if weights.shape == (len(data["target"]), len(data["source"])):
            maps.append({**data, "weights": weights, "name": path.stem})
    return maps


@paper_style
def plot_attention_grid(runs: pd.DataFrame, keys: list[str], stem, metric: str = "val_bleu") -> list[Path]:
    """The same validation sentence's attention map in one run of every configuration, side by
    side at the text width, source tokens on x and target tokens on y (the sentence is the
    shortest one every configuration stored, so its tokens stay legible); none when no sentence
    is stored by every configuration."""
    names = config_labels(_averaged(runs, metric), keys)
    found = {}
    for config in sorted(set(names)):
        for run_dir in sorted(names.index[names == config]):
            maps = _attention_maps(run_dir)
            if maps:
                found[config] = {m["name"]: m for m in maps}
                break
    shared = set.intersection(*(set(maps) for maps in found.values())) if found else set()
    if not shared:
        return []
    name = min(shared, key=lambda n: max(len(m[n]["source"]) + len(m[n]["target"]) for m in found.values()))
    panels = [(config, maps[name]) for config, maps in found.items()]
    n = len(panels)
    n_cols = min(n, 4)
    n_rows = -(-n // n_cols)
    longest = max(max(len(m["source"]), len(m["target"])) for _, m in panels)
    panel_in = (TEXT_IN - 0.6) / n_cols
    token_pt = min(7.0, 0.8 * 72 * panel_in * 0.75 / longest)     # a token's row, 80 % of it text
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(TEXT_IN, n_rows * (panel_in + 0.5)),
                             squeeze=False, constrained_layout=True)
    for ax, (config, data) in zip(axes.flat, panels):
        image = ax.imshow(data["weights"], cmap="viridis", vmin=0, vmax=1, aspect="equal",
                          interpolation="nearest")
        ax.set_xticks(range(len(data["source"])), data["source"], rotation=90, fontsize=token_pt)
        ax.set_yticks(range(len(data["target"])), data["target"], fontsize=token_pt)
        ax.tick_params(length=0, pad=1)
        ax.xaxis.tick_top()
        ax.set_title(config, fontsize=7, pad=2)
        ax.spines[["top", "right"]].set_visible(True)
    for ax in axes.flat[n:]:
        ax.axis("off")
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    fig.suptitle(f"{legend_title(keys)}; {panels[0][1].get('title') or 'attention'}", fontsize=7)
    return save(fig, stem)


@paper_style
def plot_expected_max(table: pd.DataFrame, keys: list[str], metric: str, stem) -> list[Path]:
    """Expected best `metric` against the number of trials, one line per family (trials.py's
    table: keys, trials, expected_max, sd), band: ± one standard deviation."""
    if table.empty:
        return []
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 2.8), layout="constrained")
    groups = table.groupby(keys, sort=True, dropna=False) if keys else [("all runs", table)]
    for family, curve in groups:
        name = " / ".join(label(v) for v in (family if isinstance(family, tuple) else (family,)))
        line, = ax.plot(curve["trials"], curve["expected_max"], marker="o" if len(curve) < 12 else None,
                        label=f"{name} (N={len(curve)})")
        ax.fill_between(curve["trials"], curve["expected_max"] - curve["sd"],
                        curve["expected_max"] + curve["sd"], color=line.get_color(), alpha=0.2, linewidth=0)
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlabel("trials (runs drawn with replacement)")
    name = axis_label(metric)
    ax.set_ylabel(f"expected best {name[:1].lower()}{name[1:]}")       # 'validation BLEU'; BLEU stays
    ax.set_title("band: ± 1 sd", loc="right", fontsize=7)
    return legend_below(ax, legend_title(keys), stem)
