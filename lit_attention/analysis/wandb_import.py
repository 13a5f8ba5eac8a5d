"""Runs of a W&B project/group (or of offline W&B run files) -> what `report` reads.

Every run logs its run store as a `run-store` artifact (tracking/wandb.py) when `fit` or `test`
ends. `fetch_run_stores` writes the newest version of each run's artifact as a local run store:
downloaded through the public API (`wandb.Api().runs`, `run.logged_artifacts()`,
`artifact.download`), or, for offline runs, copied from the files their .wandb logs name
(`wandb leet inspect --json`). The report then reads them as it reads any run store: the same
tables, tests and figures. Runs logged before the artifact existed have only their summaries and
histories: `run_row` and `history_frame` convert those (pure functions, tested on
`wandb.apis.public.Run` objects built from attributes); significance and the figures that need
hypotheses, gradient flow or attention maps are then left out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable

import pandas as pd

from lit_attention.analysis.load import NESTED, AnalysisError, _scalar, flatten
from lit_attention.tracking.schema import Status
from lit_attention.tracking.wandb import RUN_STORE_ARTIFACT

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


def project_api(source: str):
    """A W&B API client for project ``source`` (ENTITY/PROJECT), or AnalysisError saying why not:
    a path that names no directory, or no API key (was: wandb's traceback, exit 1)."""
    import re

    import wandb

    if not re.fullmatch(r"[^/\s]+/[^/\s]+", source) or source.startswith((".", "~")):
        raise AnalysisError(f"--wandb {source}: no such directory, and not a W&B project (ENTITY/PROJECT)")
    try:
        return wandb.Api()
    except (wandb.errors.UsageError, wandb.errors.AuthenticationError) as exc:
        raise AnalysisError(f"--wandb {source}: reading a W&B project needs an API key ({str(exc).splitlines()[0]}): "
                            f"run `wandb login` or set WANDB_API_KEY; for offline runs give their directory") from None


def load_wandb(path: str, group: str | None, metric: str = "val_bleu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, metrics) of a W&B project ("entity/project"), optionally one group (study)."""
    api = project_api(path)
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


def fetch_run_stores(source: str, group: str | None, into: Path) -> bool:
    """Write the newest run-store artifact of every run of ``source`` (ENTITY/PROJECT, or a local
    directory holding offline runs: a `wandb/` directory or a runs/ tree) under ``into``, one run
    store per run. False when some run carries no run store (an older run): nothing is written."""
    stores = _offline_stores(Path(source)) if Path(source).is_dir() else _online_stores(source, group)
    if stores is None:
        return False
    if into.exists():
        shutil.rmtree(into)
    for name, write in stores.items():
        write(into / name)
    return True


def _offline_stores(directory: Path) -> dict | None:
    """name -> writer of the newest run-store artifact per offline run under ``directory``."""
    runs = sorted(directory.rglob("offline-run-*"), key=lambda p: p.name)   # names begin with the time
    if not runs:
        raise FileNotFoundError(f"no offline W&B runs (offline-run-*) under {directory}")
    newest = {}
    for run in runs:
        for record in _records(run):
            artifact = record.get("artifact") or {}
            if record.get("type") == "artifact" and artifact.get("type") == RUN_STORE_ARTIFACT:
                newest[artifact["name"]] = artifact["manifest"]["contents"]
    return {name: _copier(contents) for name, contents in newest.items()} if newest else None


def _records(run: Path) -> list[dict]:
    """The records of an offline run's .wandb log, as `wandb leet inspect --json` prints them."""
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AnalysisError(f"cannot read the W&B log of {run}: {done.stderr.strip()[-300:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _copier(contents: list[dict]):
    def write(target: Path) -> None:
        for entry in contents:
            path = target / entry["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(entry["local_path"], path)
    return write


def _online_stores(path: str, group: str | None) -> dict | None:
    """name -> writer (a download) of the newest run-store artifact of every run of ``path``."""
    runs = list(project_api(path).runs(path, filters={"group": group} if group else None))
    if not runs:
        raise SystemExit(f"error: no W&B runs in {path}" + (f" group {group}" if group else ""))
    stores = {}
    for run in runs:
        versions = [a for a in run.logged_artifacts() if a.type == RUN_STORE_ARTIFACT]
        if not versions:
            return None
        newest = max(versions, key=lambda a: int(a.version.lstrip("v")))
        stores[newest.name.partition(":")[0]] = lambda target, a=newest: a.download(root=str(target))
    return stores
