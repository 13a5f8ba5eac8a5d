"""A run killed with kill -9: resuming it, restarting it, and what readers say about it."""

import csv
import json
import shutil
import signal

import pytest

from conftest import CONFIGS, REPO, cli_env, cli_in_process, run_cli
from lit_attention.analysis.load import load_runs
from lit_attention.tracking.liveness import run_state

TINY = ["--config", CONFIGS / "copy.yaml", "--data.n_train", "300", "--data.n_val", "40",
        "--data.n_test", "40", "--model.d_model", "32", "--model.ffn", "64", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "2",
        "--diagnostics.heatmaps", "0", "--trainer.log_every_n_steps", "1"]


def _steps(run_dir, column):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [r["step"] for r in csv.DictReader(f) if r.get(column)]


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """Run "k", killed with SIGKILL before its first checkpoint; tests take a copy (`_copy_of`)."""
    root = tmp_path_factory.mktemp("killed")
    killed = run_cli("fit", *TINY, "--run.root", root, "--run.id", "k",
                     "--trainer.callbacks+=interrupt.SigkillAtFirstValidation",
                     env=cli_env(PYTHONPATH=str(REPO / "tests")))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    run_dir = root / "default" / "k"
    assert _steps(run_dir, "val_loss") and not (run_dir / "checkpoints" / "last.ckpt").exists()
    return run_dir


def _copy_of(killed_run, tmp_path):
    """The killed run copied to tmp_path/default/k: readers go by where a run is now, and its
    process stays dead."""
    run_dir = tmp_path / "default" / "k"
    shutil.copytree(killed_run, run_dir)
    return run_dir


@pytest.mark.slow
def test_resuming_a_run_killed_before_its_first_checkpoint_says_so_and_touches_nothing(killed_run, tmp_path):
    run_dir = _copy_of(killed_run, tmp_path)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}

    resumed = run_cli("fit", *TINY, "--run.root", tmp_path, "--run.id", "k", "--ckpt_path", "last")   # all it prints
    assert resumed.returncode == 2, resumed.stderr[-2000:]
    lines = [line for line in resumed.stderr.splitlines() if line.strip() and line != "Seed set to 1"]
    assert len(lines) == 1 and "nothing to resume" in lines[0] and "last.ckpt" in lines[0], lines
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before

    # Started again from scratch under the same id: its metrics file holds each step once.
    again = cli_in_process("fit", *TINY, "--run.root", tmp_path, "--run.id", "k")
    assert again.returncode == 0, again.stderr[-2000:]
    for column in ("val_loss", "train_loss"):
        steps = _steps(run_dir, column)
        assert steps and len(steps) == len(set(steps)), (column, steps)
    assert len(_steps(run_dir, "val_loss")) == 2    # one validation per epoch, 2 epochs


@pytest.mark.slow
def test_a_killed_run_is_reported_killed_with_a_reason(killed_run, tmp_path):
    run_dir = _copy_of(killed_run, tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "running"             # the process had no chance to write its end
    assert summary["process"]["pid"] > 0 and summary["heartbeat_at"]
    status, reason = run_state(summary)
    assert status == "killed" and str(summary["process"]["pid"]) in reason, reason
    row = load_runs(run_dir).iloc[0]
    assert row["status"] == "killed" and "never recorded an end" in row["error"]

    # `report` counts it and says why it is left out.
    finished = cli_in_process("fit", *TINY, "--run.root", tmp_path, "--run.id", "ok")
    assert finished.returncode == 0, finished.stderr[-2000:]
    report = cli_in_process("report", tmp_path, "--metric", "val_loss", "--out", tmp_path / "report")
    assert report.returncode == 0, report.stderr[-2000:]
    assert "2 runs, 1 configurations, 1 excluded (1 killed)" in report.stdout
    assert "and 1 other (interrupted, killed or running) runs" in (tmp_path / "report" / "table.md").read_text()
    with open(tmp_path / "report" / "excluded.csv", newline="") as f:
        [excluded] = list(csv.DictReader(f))
    assert excluded["run_id"] == "k" and excluded["status"] == "killed"
    assert "never recorded an end" in excluded["error"]


def test_a_live_run_stays_running():
    import os
    import socket
    from lit_attention.tracking.liveness import process_identity
    me = process_identity()
    assert me["host"] == socket.gethostname() and me["pid"] == os.getpid()
    assert run_state({"status": "running", "process": me}) == ("running", None)
    # the same pid with another start time is another process: this run's process is gone
    assert run_state({"status": "running", "process": {**me, "pid_started": me["pid_started"] + 1}})[0] == "killed"


def test_a_killed_process_not_yet_collected_by_its_parent_is_gone():
    # Seen in the suite: a sweep killed with SIGKILL left its fit a zombie (ended, its exit status
    # not yet collected); counted as alive, the resumed sweep failed the run instead of continuing it.
    import signal
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    from lit_attention.tracking.liveness import _stat
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        identity = {"pid": child.pid, "host": socket.gethostname(), "pid_started": _stat(child.pid)[1]}
        assert run_state({"status": "running", "process": identity})[0] == "running"
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert run_state({"status": "running", "process": identity})[0] == "killed"   # a zombie, not reaped
    finally:
        child.kill()
        child.wait()
