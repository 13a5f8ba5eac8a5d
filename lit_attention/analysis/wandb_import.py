"""Runs of a W&B project/group (or of offline W&B run files) -> what `report` reads.

Every run logs its run store as a `run-store` artifact (tracking/wandb.py) when `fit` or `test`
ends, and load.py's reader reads those run stores as it reads a local tree: each run once, every
run left out named, the same tables, tests and figures. Of an offline run (a directory holding
`offline-run-*`), the store read is the newest snapshot its artifact was logged from, kept in the
W&B run's directory, else the run store beside it (the run directory its `wandb/` is in: a run
killed before it logged anything ends there as the local report counts it); a W&B run with
neither is named and left out. Of a project, each run's newest artifact is downloaded through the
public API (`wandb.Api().runs`, `run.logged_artifacts()`, `artifact.download`); a W&B run
without one is named and left out.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from lit_attention.analysis import load
from lit_attention.analysis.load import AnalysisError, Skipped
from lit_attention.tracking.schema import SUMMARY
from lit_attention.tracking.wandb import RUN_STORE_ARTIFACT, RUN_STORE_SNAPSHOTS

OFFLINE_RUN = re.compile(r"offline-run-\d{8}_\d{6}-(?P<id>.+)")   # W&B's name of an offline run's directory
NO_STORE = "no run store"


def project_api(source: str):
    """A W&B API client for project ``source`` (ENTITY/PROJECT), or AnalysisError saying why not:
    a path that names no directory, or no API key."""
    import wandb

    if not re.fullmatch(r"[^/\s]+/[^/\s]+", source) or source.startswith((".", "~")):
        raise AnalysisError(f"--wandb {source}: no such directory, and not a W&B project (ENTITY/PROJECT)")
    try:
        return wandb.Api()
    except (wandb.errors.UsageError, wandb.errors.AuthenticationError) as exc:
        raise AnalysisError(f"--wandb {source}: reading a W&B project needs an API key ({str(exc).splitlines()[0]}): "
                            f"run `wandb login` or set WANDB_API_KEY; for offline runs give their directory") from None


def scan_wandb(source: str, group: str | None = None,
               into: Path | None = None) -> tuple[pd.DataFrame, list[Skipped]]:
    """(runs, skipped) of ``source`` (of its ``group`` only, if given): a directory holding
    offline W&B runs, or a project (ENTITY/PROJECT) whose artifacts are downloaded under ``into`` (a new
    temporary directory if None)."""
    if Path(source).is_dir():
        runs, skipped = load.read_runs(*offline_stores(Path(source)), where=source)
        return runs if group is None else runs[runs["group"] == group], skipped
    import wandb

    api = project_api(source)
    try:
        runs = list(api.runs(source, filters={"group": group} if group else None))
        if not runs:
            raise AnalysisError(f"no W&B runs in {source}" + (f" group {group}" if group else ""))
        run_dirs, without = online_stores(runs, Path(into or tempfile.mkdtemp(prefix="wandb-runs-")))
    except wandb.errors.Error as exc:
        raise AnalysisError(f"--wandb {source}: {' '.join(str(exc).split())}") from None
    return load.read_runs(run_dirs, without, where=source)


def load_wandb(source: str, group: str | None = None,
               into: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, metrics) of ``source`` (see `scan_wandb`), as `load.load_runs` and `load.load_metrics`
    give them; each run left out is named on a warning line."""
    runs, skipped = scan_wandb(source, group, into)
    load.warn_skipped(skipped)
    return runs, load.load_metrics(runs)


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
        beside = run.parent.parent
        if logged:
            stores.append(logged[-1])
        elif (beside / SUMMARY).exists():
            stores.append(beside)
        else:
            skipped.append(Skipped(run, NO_STORE, f"{run}: W&B run {wandb_id} logged no run store (its process "
                                   f"ended before it could: killed?), and no run store is beside it",
                                   run_id=wandb_id))
    return stores, skipped


def online_stores(runs: list, into: Path) -> tuple[list[Path], list[Skipped]]:
    """(run stores, W&B runs left out) of W&B runs (`wandb.apis.public.Run`): each run's newest
    run-store artifact downloaded to ``into``/<artifact name> (``into`` emptied first: it holds the
    last download only); a run without one is left out."""
    shutil.rmtree(into, ignore_errors=True)
    stores, skipped = [], []
    for run in runs:
        versions = [a for a in run.logged_artifacts() if a.type == RUN_STORE_ARTIFACT]
        if not versions:
            skipped.append(Skipped(Path(*run.path), NO_STORE, f"W&B run {'/'.join(run.path)} logged no "
                                   f"{RUN_STORE_ARTIFACT} artifact", getattr(run, "group", None), run.id))
            continue
        newest = max(versions, key=lambda a: int(a.version.lstrip("v")))
        stores.append(Path(newest.download(root=str(into / newest.name.partition(":")[0]))))
    return stores, skipped
