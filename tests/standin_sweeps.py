"""Short grid sweeps whose trials are the stand-in fit (tests/sweep/standin_fit.py), and the
exactly-once checks the race and fault-injection tests assert on their studies and run stores."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from conftest import REPO, sweep_cmd, write_sweep
from lit_attention.sweep.driver import failure_reason
from lit_attention.tracking.liveness import run_state

STANDIN = REPO / "tests" / "sweep" / "standin_fit.py"
LRS = [0.001, 0.002, 0.003, 0.004, 0.005, 0.006]


def env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("LIT_ATTENTION_", "WANDB_", "STANDIN_"))}
    e.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1",
             LIT_ATTENTION_FIT_COMMAND=json.dumps([sys.executable, str(STANDIN)]), **extra)
    return {k: str(v) for k, v in e.items()}


def sweep_file(tmp_path: Path, name: str, *, lrs=LRS, seeds: int = 2, workers: int = 1,
               interval: int = 1, grace: int = 10, storage: str | None = None) -> Path:
    data = {"study_name": name, "base": str(REPO / "configs" / "copy.yaml"), "root": str(tmp_path / "runs"),
            "objective": {"metric": "val_loss", "direction": "minimize"}, "sampler": "grid",
            "pruner": "none", "seeds": seeds, "workers": workers,
            "heartbeat": {"interval": interval, "grace_period": grace},
            "fixed": {"trainer.max_epochs": 1}, "space": {"model.lr": {"choices": list(lrs)}}}
    if storage:
        data["storage"] = storage
    return write_sweep(tmp_path, name, data)


def start(path: Path, *args, **extra) -> subprocess.Popen:
    """A sweep driver in the background (its own session, so that a test can kill its group)."""
    return subprocess.Popen(sweep_cmd(path, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env(**extra), cwd=REPO, start_new_session=True)


def sqlite_url(path: Path, name: str) -> str:
    return f"sqlite:///{yaml.safe_load(path.read_text())['root']}/{name}/study.db"


def trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optuna.load_study(study_name=name, storage=url).get_trials()


def worker_of(run_dir) -> int | None:
    """The worker process running the stand-in trial in run_dir (the trial's parent), once it runs."""
    try:
        pid = json.loads((run_dir / "summary.json").read_text())["process"]["pid"]
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return None


def wait_for(what, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while (found := what()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert found is not None, "timed out"
    return found


def problems(url: str, name: str, root: Path, lrs=LRS, seeds: int = 2, steps: int | None = None) -> list[str]:
    """Every way the finished study breaks exactly-once; [] when it holds: each cell (lr x seed)
    has exactly one COMPLETE trial and exactly one finished run directory, no run directory was
    started afresh twice (continuing it from its checkpoint is no new start), no metrics.csv
    repeats a step (and, given `steps`, a finished run logged each of its steps), no trial is left
    waiting or running, and every failed trial and every run that did not finish says why."""
    found = []
    ts = trials(url, name)
    counted = [t for t in ts if not t.user_attrs.get("skipped")]
    complete = Counter((t.params["model.lr"], t.user_attrs["seed"]) for t in counted if t.state == TrialState.COMPLETE)
    wanted = {(lr, s) for lr in lrs for s in range(seeds)}
    found += [f"cell {c}: {complete[c]} complete trials" for c in sorted(wanted) if complete[c] != 1]
    found += [f"trial {t.number} left {t.state.name}" for t in ts if t.state in (TrialState.WAITING, TrialState.RUNNING)]
    found += [f"trial {t.number} failed without a reason ({t.user_attrs})" for t in ts
              if t.state == TrialState.FAIL and not failure_reason(t)]
    finished = Counter()
    for run_dir in sorted((root / name).glob("t*-s*")):
        starts = (run_dir / "starts.log").read_text().splitlines() if (run_dir / "starts.log").exists() else []
        afresh = [s for s in starts if not s.endswith(" resume")]
        if len(afresh) > 1 or (starts and starts[0].endswith(" resume")):
            found.append(f"{run_dir.name}: started {starts}")
        logged = []
        if (run_dir / "metrics.csv").exists():
            with open(run_dir / "metrics.csv", newline="") as f:
                logged = [int(r["step"]) for r in csv.DictReader(f)]
            if len(logged) != len(set(logged)):
                found.append(f"{run_dir.name}: duplicate metric rows (steps {logged})")
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except FileNotFoundError:
            if starts:
                found.append(f"{run_dir.name}: started but has no summary.json")
            continue
        status, error = run_state(summary)
        if status == "finished":
            finished[(summary["model"]["lr"], summary["seed"])] += 1
            if steps is not None and logged != list(range(steps)):
                found.append(f"{run_dir.name}: finished with metric rows for steps {logged}")
        elif not error:
            found.append(f"{run_dir.name}: {status} without a reason")
    found += [f"cell {c}: {finished[c]} finished run directories" for c in sorted(wanted) if finished[c] != 1]
    return found
