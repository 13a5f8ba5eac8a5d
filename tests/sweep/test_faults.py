"""Sweeps under faults: a training process killed outright, a read-only or full run root. Every
failed trial carries its reason, and `--resume` completes the study once the fault is fixed."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from conftest import REPO, cli_in_process, sweep_in_process

COPY = REPO / "configs" / "copy.yaml"
TINY = {"data.n_train": 200, "data.n_val": 80, "data.n_test": 40, "data.max_tokens": 224,
        "model.d_model": 32, "model.ffn": 64, "model.enc_layers": 1, "model.dec_layers": 1,
        "model.dropout": 0.0, "model.val_bleu": False, "model.warmup": 1,
        "trainer.max_epochs": 2, "trainer.enable_progress_bar": False}

pytestmark = pytest.mark.slow


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("LIT_ATTENTION_", "WANDB_"))}
    e.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1")
    return e


def sweep_file(tmp_path: Path, name: str, root: Path, seeds: int = 2, **fixed) -> Path:
    data = {"study_name": name, "base": str(COPY), "root": str(root),
            "objective": {"metric": "val_loss", "direction": "minimize"}, "sampler": "grid",
            "pruner": "none", "seeds": seeds, "heartbeat": {"interval": 1, "grace_period": 4},
            "fixed": {**TINY, **fixed}, "space": {"model.family": {"choices": ["transformer"]}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def trials(url: str, name: str) -> list:
    return optuna.load_study(study_name=name, storage=url).get_trials()


def _fit_pid(run_dir: Path) -> int | None:
    """The pid a running trial recorded in its summary.json, once it is inside fit."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return (summary.get("process") or {}).get("pid") if summary.get("status") == "running" else None


def test_a_trial_killed_with_sigkill_fails_with_the_signal_as_its_reason(tmp_path):
    path = sweep_file(tmp_path, "sig", tmp_path / "runs", seeds=1, **{"trainer.max_epochs": 50})
    url = f"sqlite:///{tmp_path / 'runs' / 'sig' / 'study.db'}"
    run_dir = tmp_path / "runs" / "sig" / "t0000-s0"
    killed = []

    def kill_the_fit():   # beside the driver, which runs in this process's main thread
        deadline = time.monotonic() + 180
        while (pid := _fit_pid(run_dir)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    killer = threading.Thread(target=kill_the_fit, daemon=True)
    killer.start()
    out = sweep_in_process(path, env=env())
    killer.join(timeout=10)
    output = out.stdout + out.stderr
    assert killed, "no trial reached fit\n" + output
    assert out.returncode == 1, output
    [t] = trials(url, "sig")
    assert t.state == TrialState.FAIL and t.user_attrs["error"].startswith("killed by SIGKILL (signal 9)"), t.user_attrs
    assert "failed (1 attempt(s)): killed by SIGKILL (signal 9)" in output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "killed" and "SIGKILL" in summary["error"]


def test_a_read_only_run_root_is_one_line_and_resume_completes_once_writable(tmp_path, tmpfs):
    fs = tmpfs("64m")
    fs.remount("ro")
    path = sweep_file(tmp_path, "ro", fs.path / "runs", seeds=1)   # one trial shows the resume
    out = cli_in_process("sweep", path, env=env())   # refused before the study: no driver process needed
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert errors == [f"lit-attention sweep: error: cannot write {fs.path / 'runs'}: Read-only file system"], errors

    # A study database elsewhere: still refused before the study is created.
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    out = cli_in_process("sweep", path, "--storage", elsewhere, env=env())
    assert out.returncode == 1 and "Read-only file system" in out.stderr, out.stdout + out.stderr
    assert optuna.study.get_all_study_names(elsewhere) == []

    fs.remount("rw")
    again = sweep_in_process(path, "--resume", env=env())
    assert again.returncode == 0, again.stdout + again.stderr
    done = trials(f"sqlite:///{fs.path / 'runs' / 'ro' / 'study.db'}", "ro")
    assert [t.state for t in done] == [TrialState.COMPLETE]


def test_a_full_disk_fails_trials_with_their_reason_and_resume_completes_given_room(tmp_path, tmpfs):
    fs = tmpfs("200k")            # room for run directories and summaries, not for a checkpoint
    url = f"sqlite:///{tmp_path / 'study.db'}"   # the study itself lives on a healthy disk
    path = sweep_file(tmp_path, "full", fs.path)
    out = sweep_in_process(path, "--storage", url, env=env())   # the driver here, the trials processes
    assert out.returncode == 1, out.stdout + out.stderr
    assert "a worker exited with" not in out.stderr, out.stderr     # the worker did not crash
    failed = trials(url, "full")
    assert failed and all(t.state == TrialState.FAIL for t in failed)
    assert all("No space left on device" in t.user_attrs["error"] for t in failed), [t.user_attrs for t in failed]
    assert out.stderr.count("failed (1 attempt(s)): ") == 2 and "No space left on device" in out.stderr

    fs.remount("size=64m")
    again = sweep_in_process(path, "--storage", url, "--resume", env=env())
    assert again.returncode == 0, again.stdout + again.stderr
    done = trials(url, "full")
    assert sorted(t.user_attrs["seed"] for t in done if t.state == TrialState.COMPLETE) == [0, 1]
    assert not [t for t in done if t.state in (TrialState.RUNNING, TrialState.WAITING)]
