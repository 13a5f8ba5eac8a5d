"""Seeds -> one row per configuration: mean, std (ddof=1), n, 95% t-interval, costs, gradient stats
(and the gradient-flow decay per step with its bootstrap interval, from the runs' gradflow.csv).

Only finished runs with a finite value for the metric are averaged; failed, pruned, invalid (a
metric that is inf, NaN or not a number), finished without the metric (missing) and other runs are
counted per configuration (n_failed, n_pruned, n_invalid, n_missing, n_other) and their ids listed,
never averaged in. Cost and gradient means use finite values only. The t-interval is clipped to
the range the metric can take (metric_facts): with 2 seeds it is mean ± 12.7·s/√2, which
would otherwise put BLEU intervals past 100.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from lit_attention import registry
from lit_attention.analysis import load, statistics
from lit_attention.analysis.load import FINISHED, AnalysisError, load_gradflow, read_csv
from lit_attention.metric_facts import metric_range
from lit_attention.tracking.schema import METRICS, Status

CONFIDENCE = 0.95
# Per-run quantities averaged per configuration beside the metric: what training cost, never
# the budget it was given (that is `budget`, and `n_under_budget` counts runs that fell short).
COSTS = ("params", "steps", "train_seconds", "train_flops", "tokens_per_second", "machine_gflops")
BUDGETS = {"budget_flops": "FLOPs", "budget_tokens": "tokens", "budget_steps": "steps"}
GRADIENT = ("grad_norm_median", "clip_fraction")
# Gradient flow through time: one fit per configuration and direction, over its seeds.
GRADFLOW_RESAMPLES = 1000
GRADFLOW_FIT_FROM = 4       # distances 0-3 hold a transient (a rise or a fast drop), not the decay


def clip(value: float, bounds: tuple[float | None, float | None]) -> float:
    return float(np.clip(value, *bounds))   # a bound None: no bound


def seed_stats(values, bounds: tuple[float | None, float | None] = (None, None)) -> dict:
    """n, mean, std (ddof=1) and the 95% t-interval of one configuration's per-seed values,
    the interval clipped to `bounds` (the metric's range)."""
    x = np.asarray([v for v in values if v is not None and not pd.isna(v)], dtype=float)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    if n < 2:
        return dict(n=n, mean=mean, std=math.nan, ci_lo=math.nan, ci_hi=math.nan)
    std = float(x.std(ddof=1))
    half = float(statistics.t_quantile(0.5 + CONFIDENCE / 2, n - 1)) * std / math.sqrt(n)
    return dict(n=n, mean=mean, std=std, ci_lo=clip(mean - half, bounds), ci_hi=clip(mean + half, bounds))


def last_gradflow(gradflow: pd.DataFrame) -> pd.DataFrame:
    """Each run's gradflow.csv rows at its last measured step.

    Rows without a direction come from gradflow.csv files written before the measurement became
    ‖∂L/∂h_t‖ per direction (they held ∂L/∂x_t, a different quantity) and are left out.
    """
    if gradflow.empty or "direction" not in gradflow:
        return gradflow.iloc[0:0]
    gradflow = gradflow.dropna(subset=["direction"])
    by = ["run_dir"] if "run_dir" in gradflow else []
    last = gradflow.groupby(by)["step"].transform("max") if by else gradflow["step"].max()
    return gradflow[gradflow["step"] == last]


def gradflow_decay(rows: pd.DataFrame, resamples: int = GRADFLOW_RESAMPLES,
                   seed: int = 0) -> pd.DataFrame:
    """One row per direction: decay, ci_lo, ci_hi, sentences, min_distance, max_distance.

    `rows` are gradflow.csv rows of one measurement (columns direction, sentence, distance, norm;
    with run_dir, several runs: the seeds of one configuration). decay = exp(slope) of the
    least-squares fit of log ‖∂L/∂h_t‖ on the distance, from GRADFLOW_FIT_FROM to the largest
    distance every sentence reaches, of the mean log-norm profile: the mean over runs of each
    run's mean over its sentences; the factor the gradient norm changes by per step (< 1
    vanishing, > 1 exploding) once the first steps' transient has passed. ci_lo/ci_hi: 95%
    percentile bootstrap resampling the runs (seeds), then the sentences, `resamples` times with
    a fixed seed: one draw of sentence ids for all drawn runs, since every run measures the same
    fixed sample of sentences (a run missing some weighs its own by the draw). A sentence with a
    zero norm (no path to the loss, log undefined) is left out.
    """
    columns = ["direction", "decay", "ci_lo", "ci_hi", "sentences", "min_distance", "max_distance"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    units = [c for c in ("run_dir", "sentence") if c in rows]
    found = []
    for direction, group in rows.groupby("direction", sort=False):
        table = group.pivot_table(index=units, columns="distance", values="norm").dropna(axis=1)
        table = table.loc[:, table.columns >= GRADFLOW_FIT_FROM]
        with np.errstate(divide="ignore"):
            logs = np.log(table.to_numpy(float))
        kept = np.isfinite(logs).all(axis=1)
        distance = table.columns.to_numpy(float)
        row = dict(direction=direction, decay=math.nan, ci_lo=math.nan, ci_hi=math.nan,
                   sentences=int(kept.sum()), min_distance=int(distance.min()) if len(distance) else 0,
                   max_distance=int(distance.max()) if len(distance) else 0)
        if kept.any() and len(distance) >= 2:
            cube, present = _by_run(table.index[kept], logs[kept], units)
            ones = (np.ones((1, n)) for n in present.shape)
            row["decay"] = float(_decay(_profile(*ones, cube, present)[0], distance))
            if kept.sum() >= 2:
                rng = np.random.default_rng(seed)
                # runs, then sentences: each drawn with replacement
                draws = [rng.multinomial(n, np.full(n, 1 / n), resamples) for n in present.shape]
                profiles = _profile(*draws, cube, present)
                resampled = _decay(profiles[np.isfinite(profiles).all(axis=1)], distance)
                row["ci_lo"], row["ci_hi"] = np.percentile(resampled, [2.5, 97.5]).tolist()
        found.append(row)
    order = sorted(found, key=lambda r: (r["direction"] != "forward", r["direction"]))
    return pd.DataFrame(order, columns=columns)


def _by_run(index: pd.Index, logs: np.ndarray, units: list[str]):
    """(log-norms [R, S, D] with 0 where absent, present [R, S]), runs and sentences sorted."""
    frame = index.to_frame(index=False)
    run = frame["run_dir"] if "run_dir" in units else np.zeros(len(frame))
    sentence = frame["sentence"] if "sentence" in units else np.arange(len(frame))
    r, s = (pd.factorize(column, sort=True)[0] for column in (run, sentence))
    present = np.zeros((r.max() + 1, s.max() + 1))
    cube = np.zeros((*present.shape, logs.shape[1]))
    cube[r, s], present[r, s] = logs, 1.0
    return cube, present


def _profile(run_weights: np.ndarray, sentence_weights: np.ndarray, cube: np.ndarray,
             present: np.ndarray) -> np.ndarray:
    """Mean log-norm profiles [B, D]: each run's sentence mean weighted by sentence_weights [B, S],
    then the runs' mean weighted by run_weights [B, R] (a run none of whose sentences was drawn
    drops out of that draw; NaN when no drawn run is left)."""
    totals = np.einsum("bs,rsd->brd", sentence_weights, cube)
    counts = np.einsum("bs,rs->br", sentence_weights, present)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = totals / counts[..., None]
    weights = run_weights * (counts > 0)
    return np.einsum("br,brd->bd", weights, np.nan_to_num(means)) / weights.sum(axis=1, keepdims=True)


def _decay(mean_logs: np.ndarray, distance: np.ndarray) -> np.ndarray:
    """exp(least-squares slope) of mean log-norms [..., D] on distance [D]. Every sentence has
    every distance (a balanced design), so this is also the slope fitted to all sentences' points."""
    centred = distance - distance.mean()
    return np.exp(mean_logs @ centred / (centred @ centred))


def gradflow_columns(rows: pd.DataFrame) -> dict:
    """gradflow_decay_<direction>, _lo, _hi and gradflow_sentences_<direction> of `rows`."""
    columns = {}
    for fit in gradflow_decay(rows).itertuples():
        name = f"gradflow_decay_{fit.direction}"
        columns.update({name: fit.decay, f"{name}_lo": fit.ci_lo, f"{name}_hi": fit.ci_hi,
                        f"gradflow_sentences_{fit.direction}": fit.sentences})
    return columns


def run_gradient_stats(run: pd.Series) -> dict:
    """Gradient statistics of one run: from summary.json when recorded, else from its files."""
    stats = {k: run.get(k, math.nan) for k in GRADIENT}
    metrics = Path(run["run_dir"]) / METRICS
    frame = read_csv(metrics) if pd.isna(list(stats.values())).any() and metrics.is_file() else None
    norms = frame["grad_norm/total"].dropna() if frame is not None and "grad_norm/total" in frame else ()
    if len(norms):
        clip = run.get("config.trainer.gradient_clip_val")
        found = {"grad_norm_median": float(norms.median()),
                 "clip_fraction": math.nan if pd.isna(clip) else float((norms > float(clip)).mean())}
        stats = {k: found[k] if pd.isna(v) else v for k, v in stats.items()}
    return stats


def add_gradient_stats(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with the GRADIENT columns filled in for every run."""
    stats = pd.DataFrame([run_gradient_stats(run) for _, run in runs.iterrows()], index=runs.index)
    return runs.drop(columns=[c for c in GRADIENT if c in runs]).join(stats)


def invalid(runs: pd.DataFrame, metric: str) -> pd.Series:
    """Which runs hold a value for the metric that is no finite number: inf, NaN written as
    such in summary.json (load's `nonfinite` column; a missing value is not invalid), text."""
    values = pd.to_numeric(runs[metric], errors="coerce")
    named = runs["nonfinite"].fillna("").str.split(";") if "nonfinite" in runs else None
    written_nan = named.map(lambda fields: metric in fields) if named is not None else False
    return np.isinf(values) | written_nan | (values.isna() & runs[metric].notna())


def budget_text(run) -> str:
    """The training budget a run asked for (summary.json budget_*), e.g. '1.8e+14 FLOPs'; '' if none."""
    return ", ".join(f"{float(run[col]):.3g} {unit}" for col, unit in BUDGETS.items()
                     if col in run and run[col] is not None and not pd.isna(run[col]))


def usable(runs: pd.DataFrame, metric: str) -> pd.Series:
    """Which runs are averaged: finished and with a finite value for the metric."""
    return (runs["status"] == FINISHED) & runs[metric].notna() & ~invalid(runs, metric)


def finite_mean(values: pd.Series) -> float:
    x = pd.to_numeric(values, errors="coerce")
    return x[np.isfinite(x)].mean()


def aggregate(runs: pd.DataFrame, keys: list[str], metric: str = "val_bleu",
              also: list[str] = ()) -> pd.DataFrame:
    """One row per configuration (the distinct values of `keys`), sorted by `keys`.

    Columns: keys, n, mean, std, ci_lo, ci_hi (of `metric` over finished runs; the interval
    clipped to the metric's range), n_failed, n_pruned, n_invalid, n_missing (finished without
    the metric), n_other, the finite means of COSTS and GRADIENT columns present, the
    `gradflow_columns` of the averaged runs' gradflow.csv pooled, budget (the budgets of the
    averaged runs, ';'-separated; None in a row with no averaged run), n_under_budget (averaged
    runs that stopped before their budget was used up), run_ids (averaged runs) and excluded_ids
    (`run_id:status`), both ';'-separated. `also`: configuration fields outside `keys` (see
    `other_differences`), each with its configuration's value (None where it does not act).
    """
    if metric not in runs:
        raise AnalysisError(f"metric {metric!r} not in the runs; columns: {', '.join(runs.columns)}")
    acting = acting_values(runs, also)
    needed = dict.fromkeys([*keys, metric, "status", "seed", "run_id", "run_dir", "nonfinite", *COSTS,
                            *GRADIENT, *BUDGETS, "budget_reached"])
    runs = runs[[c for c in needed if c in runs]]     # groups of a wide frame are slow to cut
    runs = runs.assign(_usable=usable(runs, metric),
                       _invalid=(runs["status"] == FINISHED) & invalid(runs, metric))
    rows = []
    for values, group in runs.groupby(keys, dropna=False, sort=True):
        good, bad = group[group["_usable"]], group[~group["_usable"]]
        row = dict(zip(keys, values))   # (a tuple: keys is a list)
        row.update({column: next(iter(acting.loc[group.index, column].dropna()), None) for column in also})
        row.update(seed_stats(good[metric], metric_range(metric)))
        counted = {"n_failed": bad["status"] == Status.FAILED, "n_pruned": bad["status"] == Status.PRUNED,
                   "n_invalid": bad["_invalid"],
                   "n_missing": (bad["status"] == FINISHED) & bad[metric].isna() & ~bad["_invalid"]}
        row.update({name: int(which.sum()) for name, which in counted.items()})
        row["n_other"] = len(bad) - sum(row[name] for name in counted)
        row.update({col: finite_mean(good[col]) for col in COSTS + GRADIENT if col in good})
        if "run_dir" in good and len(good):
            row.update(gradflow_columns(last_gradflow(load_gradflow(good))))
        row["budget"] = ";".join(sorted({budget_text(r) for _, r in good.iterrows()})) if len(good) else None
        row["n_under_budget"] = int(good["budget_reached"].eq(False).sum()) if "budget_reached" in good else 0
        row["seeds"] = ";".join(str(s) for s in good.get("seed", []))
        row["run_ids"] = ";".join(good["run_id"])
        row["excluded_ids"] = ";".join(f"{r.run_id}:{r.status}" for r in bad.itertuples())
        rows.append(row)
    return pd.DataFrame(rows)


# Config fields that may differ between seeds of one configuration without changing the result.
BOOKKEEPING = ("config.run.", "config.seed_everything", "config.ckpt_path", "config.tracking",
               "config.trainer.logger", "config.trainer.callbacks", "config.trainer.default_root_dir",
               "config.trainer.enable_progress_bar", "config.data.cache_dir", "config.data.num_workers")


def config_fields(runs: pd.DataFrame) -> list[str]:
    """The config.* fields that may change a result (model, data, trainer, budget; not BOOKKEEPING)."""
    return [c for c in runs.columns if c.startswith(("config.model.", "config.data.", "config.trainer.",
                                                     "config.budget.")) and not c.startswith(BOOKKEEPING)]


def hidden_differences(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """config.* fields (e.g. a swept learning rate) that differ between runs averaged together."""
    fields = [c for c in config_fields(runs) if c not in keys]
    text = runs[fields].astype(str)
    counts = text.groupby([runs[k].astype(str) for k in keys], dropna=False).nunique()
    return [c for c in fields if (counts[c] > 1).any()]


# Families counted from the training stream: the gradient settings of their config.yaml do not act.
GRADIENT_FREE = tuple(name for name, family in registry.LM_MODELS.items()
                      if not family.gradient and name not in registry.SEQ2SEQ_MODELS)


def configuration_fields(runs: pd.DataFrame) -> list[str]:
    """Every field that may tell two configurations apart: the task, the summary's model dict (the
    options that acted) and `config_fields`; a config.model.* field the model dict records is left
    to it (config.yaml also spells options that did not act: a Transformer's `cell`)."""
    return load.config_columns(runs) + [
        c for c in config_fields(runs) if "model." + c.removeprefix("config.model.") not in runs
        and c.removeprefix("config.model.") not in registry.UNRECORDED_OPTIONS]


def acting_values(runs: pd.DataFrame, fields) -> pd.DataFrame:
    """runs[fields] with a gradient setting (registry.GRADIENT_SETTINGS) blank in the runs of a
    family without a gradient (an n-gram model's config.yaml spells a learning rate it never used)."""
    values = runs[list(fields)].copy()
    inert = [f"config.{s}" for s in registry.GRADIENT_SETTINGS if f"config.{s}" in values]
    if "model.family" in runs and inert:
        values.loc[runs["model.family"].isin(GRADIENT_FREE), inert] = None
    return values


def other_differences(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """The configuration fields outside `keys` that take two or more values across the
    configurations (a run's d_model beside the positional encoding that keys its row). Each has one
    value per configuration (the report refuses keys that leave a field varying inside one); where
    it does not act (None) it is no difference."""
    fields = [c for c in configuration_fields(runs) if c not in keys]
    per_config = acting_values(runs, fields).groupby([runs[k].astype(str) for k in keys], dropna=False).first()
    return [c for c in fields if per_config[c].dropna().astype(str).nunique() > 1]


def excluded_runs(runs: pd.DataFrame, metric: str, skipped=()) -> pd.DataFrame:
    """excluded.csv: the runs left out of every mean, with their status, error and why, then the
    directories the reader left out (``skipped``, load.Skipped: unreadable, copies)."""
    cols = [c for c in ("group", "run_id", "status", "error", "run_dir") if c in runs]
    excluded = runs.loc[~usable(runs, metric), cols]
    values = runs.loc[excluded.index, metric]
    reason = [status if status != FINISHED else (f"{metric} is {load.quoted(value)}" if bad else f"no {metric}")
              for status, value, bad in zip(excluded["status"], values, invalid(runs, metric)[excluded.index])]
    frames = [frame for frame in (excluded.assign(reason=reason), load.skipped_frame(skipped)) if len(frame)]
    return pd.concat(frames, ignore_index=True) if frames else excluded.assign(reason=reason)


def excluded_counts(excluded: pd.DataFrame, metric: str) -> str:
    """'2 failed, 1 unreadable, 1 invalid val_bleu': the rows of excluded.csv counted by why."""
    why = excluded["status"].where(excluded["status"] != FINISHED,
                                   excluded["reason"].map(lambda r: r if r == f"no {metric}" else f"invalid {metric}"))
    return ", ".join(f"{n} {kind}" for kind, n in why.value_counts(sort=False).items())


def invalid_values(runs: pd.DataFrame, columns) -> list[tuple[str, str, object]]:
    """(run_dir, column, value) of every invalid value (see `invalid`) in `columns`."""
    return [(run_dir, column, value) for column in columns if column in runs
            for run_dir, value in runs.loc[invalid(runs, column), ["run_dir", column]].to_numpy()]
