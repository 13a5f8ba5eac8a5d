"""Runs of a W&B project/group -> the same DataFrames `load` builds from run stores.

`run_row` and `history_frame` are pure conversions (tested on `wandb.apis.public.Run` objects
built from attributes); `load_wandb` adds the network calls (`wandb.Api().runs` and
`run.scan_history(keys=...)`, never the sampled `run.history()`), which cannot run without
network and an API key, so it is not exercised by the test suite. Hypotheses, gradient-flow
tables and attention maps live only in run stores: significance and those figures need them.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from lit_attention.analysis.load import NESTED, _scalar, flatten
from lit_attention.tracking.schema import Status

# W&B run states -> run-store statuses (used when the summary carries no `status`).
STATES = {"finished": Status.FINISHED, "failed": Status.FAILED, "crashed": Status.FAILED,
          "killed": Status.INTERRUPTED, "running": Status.RUNNING, "pending": Status.RUNNING}
CURVES = ("val_loss", "val_ppl", "val_bleu", "val_chrf", "train_loss", "lr", "grad_norm/total")
STEP = "trainer/global_step"  # the step key Lightning's WandbLogger logs


def plain(value):
    """W&B summary values (SummarySubDict is not a dict) -> plain dicts and lists."""
    if hasattr(value, "items"):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def run_row(run) -> dict:
    """One W&B run (wandb.apis.public.Run) as a `load_runs` row."""
    summary = {k: v for k, v in plain(run.summary).items() if not k.startswith("_")}
    config = plain(run.config)
    row = {k: _scalar(v) for k, v in summary.items() if k not in NESTED}
    model = summary.get("model") or config.get("model")
    if isinstance(model, dict):
        row.update(flatten(model, "model"))
    else:  # flat Lightning hparams: every field but the task becomes part of the configuration
        row.update(flatten({k: v for k, v in config.items() if k not in ("task", "seed")}, "model"))
    row.update(flatten(config, "config"))
    row["task"] = summary.get("task", config.get("task"))
    row["seed"] = summary.get("seed", config.get("seed_everything", config.get("seed")))
    row["run_id"] = summary.get("run_id") or run.id
    row["group"] = getattr(run, "group", None) or summary.get("group")
    state = str(run.state)
    row["status"] = summary.get("status") or (STATES[state.lower()].value if state.lower() in STATES else state)
    row["run_dir"] = f"wandb:{'/'.join(run.path)}"
    return row


def history_frame(run_id: str, run_dir: str, rows: Iterable[dict]) -> pd.DataFrame:
    """scan_history rows of one run -> metrics.csv shape (run_id, run_dir, step, metrics...)."""
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return frame
    step = STEP if STEP in frame else "_step"
    frame = frame.rename(columns={step: "step"})
    frame = frame.drop(columns=[c for c in frame if c.startswith("_")])
    frame = frame.groupby("step", as_index=False).first()  # one row per step, metrics merged
    frame.insert(0, "run_dir", run_dir)
    frame.insert(0, "run_id", run_id)
    return frame


def load_wandb(path: str, group: str | None, metric: str = "val_bleu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, metrics) of a W&B project ("entity/project"), optionally one group (study)."""
    import wandb

    api = wandb.Api()
    runs = list(api.runs(path, filters={"group": group} if group else None))
    if not runs:
        raise SystemExit(f"error: no W&B runs in {path}" + (f" group {group}" if group else ""))
    rows, curves = [], []
    for run in runs:
        row = run_row(run)
        rows.append(row)
        for key in dict.fromkeys((metric,) + CURVES):
            # scan_history(keys=...) yields only rows holding every key: one curve at a time.
            history = history_frame(row["run_id"], row["run_dir"], run.scan_history(keys=[STEP, key]))
            if not history.empty:
                curves.append(history)
    metrics = pd.DataFrame()
    if curves:
        metrics = pd.concat(curves).groupby(["run_id", "run_dir", "step"], as_index=False).first()
    return pd.DataFrame(rows), metrics
