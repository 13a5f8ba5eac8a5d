"""One trial (sweep/trial.py) against a real `lit-attention fit`: pruning crosses the process
boundary through the run store's STOP file and comes back as the run's status."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from conftest import CONFIGS, REPO, cli_env, cli_in_process, sweep_in_process
from lit_attention.sweep import trial as tr
from lit_attention.tracking.schema import Status

TINY = {"data.n_train": 200, "data.n_val": 20, "data.n_test": 20, "model.d_model": 16,
        "model.ffn": 32, "model.enc_layers": 1, "model.dec_layers": 1, "model.val_bleu": False,
        "trainer.max_epochs": 30, "trainer.enable_progress_bar": False, "diagnostics.heatmaps": 0,
        "diagnostics.gradflow_every": 0}


@pytest.mark.slow
def test_a_pruned_trial_stops_its_fit_which_records_status_pruned(tmp_path, monkeypatch):
    for key, value in cli_env().items():
        monkeypatch.setenv(key, value)
    cmd = tr.build_command(base=CONFIGS / "copy.yaml", root=tmp_path, study="s", run_id="t0000-s1", seed=1,
                           params={}, fixed=TINY, tracking="none", name="t")
    reported = []
    out = tr.run(cmd, tmp_path / "s" / "t0000-s1", "val_loss", lambda value, step: reported.append(value),
                 should_prune=lambda: True)     # prune as soon as one validation is reported
    assert out.status is Status.PRUNED and out.error is None, out
    assert out.summary.status is Status.PRUNED and out.summary.reason == "STOP file: pruned"
    assert 1 <= out.summary["epochs"] < TINY["trainer.max_epochs"] and len(reported) >= 1


@pytest.mark.parametrize("status,process,checkpoint,resumable", [
    ("killed", None, True, True),
    ("interrupted", None, True, True),
    ("running", "gone", True, True),        # SIGKILL of the whole tree: no end recorded, process gone
    ("running", "alive", True, False),      # still training somewhere on this host
    ("running", "elsewhere", True, False),  # on another host: cannot tell
    ("failed", None, True, False),          # its own error (NaN, exception): it would fail again
    ("finished", None, True, False),
    ("killed", None, False, False),         # killed before its first checkpoint: nothing to continue
    ("killed", None, "cut", False),         # killed while writing it: the checkpoint is incomplete
])
def test_only_a_run_stopped_from_outside_with_a_last_checkpoint_is_continued(tmp_path, status, process,
                                                                           checkpoint, resumable):
    import socket
    run_dir = tmp_path / "t0000-s0"
    (run_dir / "checkpoints").mkdir(parents=True)
    if checkpoint:
        import torch
        last = run_dir / "checkpoints" / "last.ckpt"
        torch.save({"global_step": 3, "state_dict": {"w": torch.zeros(1000)}}, last)
        if checkpoint == "cut":
            last.write_bytes(last.read_bytes()[:2000])
    fields = {"status": status}
    if process:
        gone = subprocess.Popen([sys.executable, "-c", ""])
        gone.wait()
        pid = {"gone": gone.pid, "alive": os.getpid(), "elsewhere": gone.pid}[process]
        host = "another-host" if process == "elsewhere" else socket.gethostname()
        fields["process"] = {"pid": pid, "host": host, "pid_started": None}
    (run_dir / "summary.json").write_text(json.dumps(fields))
    assert (tr.resumable(run_dir) is not None) == resumable


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"


def _metrics_rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_continues_its_trial_from_the_last_checkpoint_on_resume(tmp_path):
    """A session's end: the driver, its worker and the trial's fit are killed with SIGKILL after the
    fit's first checkpoint. `sweep --resume` continues that run from checkpoints/last.ckpt in the
    same run directory: it ends with the same steps, tokens, FLOPs, validation loss and
    metrics.csv rows as the same fit run without a break (nothing trained or logged twice)."""
    fixed = {**{k: v for k, v in TINY.items() if not k.startswith("diagnostics.")}, "data.n_train": 600, "data.n_val": 40, "data.max_tokens": 224, "model.d_model": 32,
             "model.ffn": 64, "model.warmup": 1, "trainer.max_epochs": 20,
             "budget.tokens": 60000}   # about 13 epochs of 21 steps, ~0.3 s each on one thread
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({
        "study_name": "s", "base": str(CONFIGS / "copy.yaml"), "root": str(tmp_path / "runs"), "seeds": [0],
        "objective": {"metric": "val_loss", "direction": "minimize"}, "sampler": "grid",
        "heartbeat": {"interval": 1, "grace_period": 2}, "fixed": fixed,
        "space": {"model.family": {"choices": ["transformer"]}}}))
    env = {k: v for k, v in cli_env().items() if not k.startswith("LIT_ATTENTION_")}
    run_dir = tmp_path / "runs" / "s" / "t0000-s0"
    sweep_cmd = [sys.executable, "-m", "lit_attention.cli", "sweep", str(sweep)]
    driver = subprocess.Popen(sweep_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              cwd=REPO)
    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "checkpoints" / "last.ckpt").is_file():
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()[0]
            time.sleep(0.05)
        time.sleep(0.4)   # into the next epoch: steps after the checkpoint are trained and logged
        fit = json.loads((run_dir / "summary.json").read_text())["process"]["pid"]
        study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'runs' / 's' / 'study.db'}")
        worker = int(study.get_trials()[0].user_attrs["worker"].rpartition(":")[2])
        for pid in (driver.pid, worker, fit):
            os.kill(pid, signal.SIGKILL)
        driver.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(fit) or _alive(worker):
            assert time.monotonic() < deadline, "the killed fit or worker is still running"
            time.sleep(0.1)
    finally:
        if driver.poll() is None:
            driver.kill()
    killed = json.loads((run_dir / "summary.json").read_text())
    assert killed["status"] == "running" and killed.get("finished_at") is None   # it never recorded an end
    # No wait for the heartbeat's grace period: `--resume` fails a trial whose worker is gone at once.

    # The killed driver needed a process of its own; the one that resumes does not (its trial is one).
    out = sweep_in_process(sweep, "--resume", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    # the same fit without a break, in this process
    ref_cmd = tr.build_command(base=CONFIGS / "copy.yaml", root=tmp_path / "ref", study="s", run_id="ref",
                               seed=0, params={"model.family": "transformer"}, fixed=fixed, tracking="none",
                               name="ref")
    ref = cli_in_process(*ref_cmd[ref_cmd.index("fit"):], env=env)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert "continuing trial 0's run from its last checkpoint" in out.stdout, out.stdout
    assert "Restoring states from the checkpoint" in (run_dir / "trial.log").read_text()
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[1].user_attrs["resumed_from"] == 0 and trials[1].user_attrs["run_id"] == "t0000-s0"
    assert [p.name for p in run_dir.parent.glob("t*")] == ["t0000-s0"]   # one run directory

    summary = json.loads((run_dir / "summary.json").read_text())
    expected = json.loads((tmp_path / "ref" / "s" / "ref" / "summary.json").read_text())
    assert summary["status"] == "finished" and expected["stopped_by"] == "budget.tokens"
    assert summary["uuid"] == killed["uuid"] and summary["takeovers"][0]["pid"] == fit   # the killed fit's claim
    assert 0 < killed["steps"] < expected["steps"]   # killed part-way through the run
    keys = ("steps", "epochs", "train_tokens", "train_flops", "stopped_by", "budget_reached")
    assert {k: summary[k] for k in keys} == {k: expected[k] for k in keys}   # budget counted once
    assert summary["val_loss"] == pytest.approx(expected["val_loss"], abs=1e-5)
    assert 0 < summary["train_seconds"] < 3 * expected["train_seconds"] + 10
    rows, expected_rows = _metrics_rows(run_dir), _metrics_rows(tmp_path / "ref" / "s" / "ref")
    assert [(r["step"], r["val_loss"] != "") for r in rows] == [(r["step"], r["val_loss"] != "") for r in expected_rows]
