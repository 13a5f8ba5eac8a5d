"""Runs of a W&B project/group (or of offline W&B run files) -> what `report` reads.

Every run logs its run store as a `run-store` artifact (tracking/wandb.py) when `fit` or `test`
ends, and load.py's reader reads those run stores as it reads a local tree: each run once, every
run left out named, the same tables, tests and figures. Of an offline run (a directory holding
`offline-run-*`), the store read is the newest snapshot its artifact was logged from, kept in the
W&B run's directory, else the run store beside it (the run directory its `wandb/` is in: a run
killed before it logged anything ends there as the local report counts it); a W&B run with
neither is named and left out. Of a project, each run's newest artifact is downloaded through the
public API (`wandb.Api().runs`, `run.logged_artifacts()`, `artifact.download`); a run logged
before the artifact existed has only its summary and history: `run_row` and `history_frame`
convert those (pure functions, tested on `wandb.apis.public.Run` objects built from attributes),
and significance and the figures that need hypotheses, gradient flow or attention maps leave it
out.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterable

import pandas as pd

from lit_attention.analysis import load
from lit_attention.analysis.load import NESTED, AnalysisError, Skipped, _scalar, flatten
from lit_attention.tracking.schema import SUMMARY, Status
from lit_attention.tracking.wandb import RUN_STORE_ARTIFACT, RUN_STORE_SNAPSHOTS

# W&B run states -> run-store statuses (used when the summary carries no `status`).
STATES = {"finished": Status.FINISHED, "failed": Status.FAILED, "crashed": Status.FAILED,
          "killed": Status.INTERRUPTED, "running": Status.RUNNING, "pending": Status.RUNNING}
CURVES = ("val_loss", "val_ppl", "val_bleu", "val_chrf", "train_loss", "lr", "grad_norm/total")
STEP = "trainer/global_step"  # the step key Lightning's WandbLogger logs
OFFLINE_RUN = re.compile(r"offline-run-\d{8}_\d{6}-(?P<id>.+)")   # W&B's name of an offline run's directory
NO_STORE = "no run store"


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
    if not isinstance(model, dict):   # flat Lightning hparams: all but task and seed configure it
        model = {k: v for k, v in config.items() if k not in ("task", "seed")}
    row.update(flatten(model, "model"))
    row.update(flatten(config, "config"))
    row["task"] = summary.get("task", config.get("task"))
    row["seed"] = summary.get("seed", config.get("seed_everything", config.get("seed")))
    row["run_id"] = summary.get("run_id") or run.id
    row["group"] = getattr(run, "group", None) or summary.get("group")
    row["status"] = summary.get("status") or str(STATES.get(str(run.state).lower(), run.state))
    row["run_dir"] = f"wandb:{'/'.join(run.path)}"
    return {k: load.cut(v) if isinstance(v, str) else v for k, v in row.items()}


def history_frame(run_id: str, run_dir: str, rows: Iterable[dict]) -> pd.DataFrame:
    """scan_history rows of one run -> metrics.csv shape (run_id, run_dir, step, metrics...)."""
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return frame
    frame = frame.rename(columns={STEP if STEP in frame else "_step": "step"})
    frame = frame.drop(columns=[c for c in frame if c.startswith("_")])
    frame = frame.groupby("step", as_index=False).first()  # one row per step, metrics merged
    frame.insert(0, "run_dir", run_dir)
    frame.insert(0, "run_id", run_id)
    return frame


def scan_wandb(source: str, group: str | None = None, into: Path | None = None,
               metric: str = "val_bleu") -> tuple[pd.DataFrame, pd.DataFrame, list[Skipped]]:
    """(runs, curves, skipped) of ``source`` (of its ``group`` only, if given): a directory holding
    offline W&B runs, or a project (ENTITY/PROJECT) whose artifacts are downloaded under ``into`` (a new
    temporary directory if None). ``curves``: the W&B history (metrics.csv shape) of the runs read
    from their summaries, whose run_dir is `wandb:<path>`; the other runs' curves are their
    metrics.csv (`load.load_metrics`)."""
    if Path(source).is_dir():
        runs, skipped = load.read_runs(*offline_stores(Path(source)), where=source)
        return runs if group is None else runs[runs["group"] == group], pd.DataFrame(), skipped
    import wandb

    if not re.fullmatch(r"[^/\s]+/[^/\s]+", source) or source.startswith((".", "~")):
        raise AnalysisError(f"--wandb {source}: no such directory, and not a W&B project (ENTITY/PROJECT)")
    try:
        api = wandb.Api()
    except (wandb.errors.UsageError, wandb.errors.AuthenticationError) as exc:
        raise AnalysisError(f"--wandb {source}: reading a W&B project needs an API key ({str(exc).splitlines()[0]}): "
                            f"run `wandb login` or set WANDB_API_KEY; for offline runs give their directory") from None
    try:
        runs = list(api.runs(source, filters={"group": group} if group else None))
        if not runs:
            raise AnalysisError(f"no W&B runs in {source}" + (f" group {group}" if group else ""))
        run_dirs, rows, curves = online_stores(runs, Path(into or tempfile.mkdtemp(prefix="wandb-runs-")), metric)
    except wandb.errors.Error as exc:
        raise AnalysisError(f"--wandb {source}: {' '.join(str(exc).split())}") from None
    found, skipped = load.read_runs(run_dirs, rows=rows, where=source)
    return found, curves, skipped


def load_wandb(source: str, group: str | None = None, into: Path | None = None,
               metric: str = "val_bleu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, metrics) of ``source`` (see `scan_wandb`), as `load.load_runs` and `load.load_metrics`
    give them; each run left out is named on a warning line."""
    runs, curves, skipped = scan_wandb(source, group, into, metric)
    load.warn_skipped(skipped)
    return runs, pd.concat([load.load_metrics(runs), curves], ignore_index=True)


def offline_stores(directory: Path) -> tuple[list[Path], list[Skipped]]:
    """(run stores, W&B runs left out) of the offline W&B runs under ``directory``: per W&B run
    id, of its newest directory (names begin with the time), the newest run-store snapshot it
    logged, else the run store beside it."""
    runs = sorted((p for p in directory.rglob("offline-run-*") if p.is_dir()), key=lambda p: p.name, reverse=True)
    if not runs:
        raise FileNotFoundError(f"no offline W&B runs (offline-run-*) under {directory}")
    newest = {}
    for run in runs:
        match = OFFLINE_RUN.fullmatch(run.name)
        newest.setdefault(match["id"] if match else run.name, run)
    stores, skipped = [], []
    for wandb_id, run in newest.items():
        snapshots = run / RUN_STORE_SNAPSHOTS
        logged = sorted((p for p in snapshots.iterdir() if p.name.isdigit() and (p / SUMMARY).is_file()),
                        key=lambda p: int(p.name)) if snapshots.is_dir() else []
        if logged or (run.parent.parent / SUMMARY).exists():   # else the run store beside it
            stores.append(logged[-1] if logged else run.parent.parent)
        else:
            skipped.append(Skipped(run, NO_STORE, f"{run}: W&B run {wandb_id} logged no run store (its process "
                                   f"ended before it could: killed?), and no run store is beside it",
                                   run_id=wandb_id))
    return stores, skipped


def online_stores(runs: list, into: Path, metric: str = "val_bleu") -> tuple[list[Path], list[dict], pd.DataFrame]:
    """(run stores, rows, curves) of W&B runs (`wandb.apis.public.Run`): each run's newest run-store
    artifact downloaded to ``into``/<artifact name> (``into`` emptied first: it holds the last
    download only); a run without one (logged before the artifact existed) as a row of its summary
    (`run_row`) with its history's curves (`history_frame`)."""
    shutil.rmtree(into, ignore_errors=True)
    stores, rows, curves = [], [], []
    for run in runs:
        versions = [a for a in run.logged_artifacts() if a.type == RUN_STORE_ARTIFACT]
        if versions:
            newest = max(versions, key=lambda a: int(a.version.lstrip("v")))
            stores.append(Path(newest.download(root=str(into / newest.name.partition(":")[0]))))
            continue
        rows.append(run_row(run))
        for key in dict.fromkeys((metric,) + CURVES):
            # scan_history(keys=...) yields only rows holding every key: one curve at a time.
            history = history_frame(rows[-1]["run_id"], rows[-1]["run_dir"], run.scan_history(keys=[STEP, key]))
            if not history.empty:
                curves.append(history)
    if rows:
        print(f"note: {len(rows)} of {len(runs)} W&B runs carry no run-store artifact (logged before it "
              "existed): their summaries and curves only, without tests or hypothesis-based figures",
              file=sys.stderr)
    return stores, rows, (pd.concat(curves).groupby(["run_id", "run_dir", "step"], as_index=False).first()
                          if curves else pd.DataFrame())
