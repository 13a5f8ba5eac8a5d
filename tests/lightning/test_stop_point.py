"""Ctrl-C and SIGTERM during fit: the run stops where its checkpoint continues exactly."""

import json

import pytest
import torch

from conftest import REPO, cli_env, cli_in_process, run_cli
from resumed_runs import RESUME_ARGS, run_record

# small batches, so that a validation has several and a signal can land in its middle
ARGS = [*RESUME_ARGS, "--data.max_tokens", "64", "--data.n_train", "300"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("stop_point")
    full = cli_in_process("fit", *ARGS, "--run.root", root, "--run.id", "full")
    assert full.returncode == 0, full.stderr[-3000:]
    return run_record(root / "default" / "full")


@pytest.mark.slow
@pytest.mark.parametrize("where, signal_name, code, said", [
    ("validation", "SIGINT", 130, "Ctrl-C"), ("validation", "SIGTERM", 143, "SIGTERM"),
    ("training", "SIGINT", 130, "Ctrl-C"),   # SIGTERM in training: test_training.py
])
def test_a_stopped_run_continues_as_if_it_had_not_stopped(tmp_path, uninterrupted, where, signal_name, code, said):
    """Before the fix a stop inside a validation left a checkpoint from which Lightning skipped that
    validation, and a Ctrl-C inside a training batch one from which the run trained a step less."""
    stop = (["--trainer.callbacks+=interrupt.SignalDuringValidation", "--trainer.callbacks.epoch", "1"]
            if where == "validation" else
            ["--trainer.callbacks+=interrupt.SignalAfterSteps", "--trainer.callbacks.steps", "50"])
    cut = run_cli("fit", *ARGS, "--run.root", tmp_path, "--run.id", "cut", *stop,
                  "--trainer.callbacks.signal_name", signal_name, env=cli_env(PYTHONPATH=str(REPO / "tests")))
    run_dir = tmp_path / "default" / "cut"
    stopped = json.loads((run_dir / "summary.json").read_text())
    # The stop needs a process of its own (a real signal); continuing it does not.
    resumed = cli_in_process("fit", *ARGS, "--run.root", tmp_path, "--run.id", "cut", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows, gradflow, summary = uninterrupted
    rows_cut, gradflow_cut, summary_cut = run_record(run_dir)
    assert [r["step"] for r in rows_cut] == [r["step"] for r in rows]
    for key in ("val_loss", "train_loss"):
        assert [float(r[key]) for r in rows_cut if key in r] == pytest.approx(
            [float(r[key]) for r in rows if key in r], abs=1e-5), key
    assert summary_cut["steps"] == summary["steps"]
    assert summary_cut["best_val_loss"] == pytest.approx(summary["best_val_loss"], abs=1e-6)
    assert gradflow_cut == gradflow

    assert cut.returncode == code, cut.stderr[-3000:]
    assert f"interrupted ({said}): resume with --run.id cut --ckpt_path last" in cut.stderr
    assert (stopped["status"], stopped["error"]) == ("interrupted", f"interrupted ({said})")
    if where == "validation":
        assert "the run stops when this validation ends" in cut.stderr


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_the_run_continues_from_its_last_checkpoint(tmp_path, uninterrupted):
    cut = run_cli("fit", *ARGS, "--run.root", tmp_path, "--run.id", "cut",
                  "--trainer.callbacks+=interrupt.SignalDuringValidation", "--trainer.callbacks.epoch", "1",
                  "--trainer.callbacks.times", "2", env=cli_env(PYTHONPATH=str(REPO / "tests")))
    assert cut.returncode == 130, cut.stderr[-3000:]
    run_dir = tmp_path / "default" / "cut"
    stopped = json.loads((run_dir / "summary.json").read_text())
    assert (stopped["status"], stopped["error"]) == ("interrupted", "interrupted (Ctrl-C)")
    at_epoch_end = run_dir / "checkpoints" / "last.ckpt"   # ModelCheckpoint's, after epoch 0
    assert torch.load(at_epoch_end, weights_only=True)["epoch"] == 0

    resumed = cli_in_process("fit", *ARGS, "--run.root", tmp_path, "--run.id", "cut", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows, _, summary = uninterrupted
    rows_cut, _, summary_cut = run_record(run_dir)
    assert [r["step"] for r in rows_cut] == [r["step"] for r in rows]
    assert [float(r["val_loss"]) for r in rows_cut if "val_loss" in r] == pytest.approx(
        [float(r["val_loss"]) for r in rows if "val_loss" in r], abs=1e-5)
    assert summary_cut["best_val_loss"] == pytest.approx(summary["best_val_loss"], abs=1e-6)


@pytest.mark.slow
def test_ddp_ranks_stopped_by_ctrl_c_continue_as_if_they_had_not_stopped(tmp_path):
    """Ctrl-C reaches every rank (the terminal's or the sweep's signal goes to the process group)."""
    ddp = [*ARGS, "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]
    full = run_cli("fit", *ddp, "--run.root", tmp_path, "--run.id", "full", timeout=300)
    assert full.returncode == 0, full.stderr[-3000:]
    cut = run_cli("fit", *ddp, "--run.root", tmp_path, "--run.id", "cut",
                  "--trainer.callbacks+=interrupt.SignalAfterSteps", "--trainer.callbacks.steps", "25",
                  "--trainer.callbacks.signal_name", "SIGINT", env=cli_env(PYTHONPATH=str(REPO / "tests")),
                  timeout=300)
    assert cut.returncode == 130, cut.stderr[-3000:]
    resumed = run_cli("fit", *ddp, "--run.root", tmp_path, "--run.id", "cut", "--ckpt_path", "last", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows, _, summary = run_record(tmp_path / "default" / "full")
    rows_cut, _, summary_cut = run_record(tmp_path / "default" / "cut")
    assert [r["step"] for r in rows_cut] == [r["step"] for r in rows]
    for key in ("val_loss", "train_loss"):
        assert [float(r[key]) for r in rows_cut if key in r] == pytest.approx(
            [float(r[key]) for r in rows if key in r], abs=1e-5), key
    assert (summary_cut["steps"], summary_cut["train_tokens"]) == (summary["steps"], summary["train_tokens"])
