"""Training behaviour: interruption and resumption, the machine-speed probe."""

import json

import pytest
import torch

from conftest import BACKGROUND_WRITES, REPO, cli_env, cli_in_process, run_cli
from resumed_runs import RESUME_ARGS, run_record
from lit_attention.tracking import machine_speed


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_same_final_validation_loss(tmp_path):
    # Only the cut run needs a process of its own (a real SIGTERM); the others run in this one.
    full = cli_in_process("fit", *RESUME_ARGS, "--run.root", tmp_path, "--run.id", "full")
    assert full.returncode == 0, full.stderr[-3000:]

    env = cli_env(PYTHONPATH=str(REPO / "tests"))
    # A real SIGTERM in the middle of the second epoch; checkpoints written by the writer thread, as
    # on a GPU (lightning/checksum.py; the other stop tests write them in line).
    cut = run_cli("fit", *RESUME_ARGS, "--run.root", tmp_path, "--run.id", "cut",
                  "--trainer.callbacks+=interrupt.SignalAfterSteps", "--trainer.callbacks.steps", "7",
                  *BACKGROUND_WRITES, env=env)
    assert cut.returncode == 143, cut.stderr[-3000:]
    cut_dir = tmp_path / "default" / "cut"
    assert json.loads((cut_dir / "summary.json").read_text())["status"] == "interrupted"
    last = cut_dir / "checkpoints" / "last.ckpt"
    at_step_7 = last.read_bytes()

    resumed = cli_in_process("fit", *RESUME_ARGS, "--run.root", tmp_path, "--run.id", "cut", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows, gradflow, summary = run_record(tmp_path / "default" / "full")
    rows_cut, gradflow_cut, summary_cut = run_record(cut_dir)
    assert summary_cut["status"] == "finished" and summary_cut["steps"] == summary["steps"]
    assert summary_cut["val_loss"] == pytest.approx(summary["val_loss"], abs=1e-6)
    assert summary_cut["train_tokens"] == summary["train_tokens"] > 0
    assert [r["step"] for r in rows_cut] == [r["step"] for r in rows]
    assert gradflow_cut == gradflow and gradflow.count("\n") > 10
    # machine-speed probes carry over too: the resumed process adds its own start probe
    assert len(summary_cut["machine_gflops_probes"]) == len(summary["machine_gflops_probes"]) + 1

    # A hard kill (no checkpoint at the kill) after the resumed run had logged to its end: resuming
    # from the step-7 checkpoint replays steps 8.. instead of logging them twice.
    last.write_bytes(at_step_7)
    replayed = cli_in_process("fit", *RESUME_ARGS, "--run.root", tmp_path, "--run.id", "cut", "--ckpt_path", "last")
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    rows_cut, gradflow_cut, summary_cut = run_record(cut_dir)
    assert [r["step"] for r in rows_cut] == [r["step"] for r in rows]
    assert [float(r["train_loss"]) for r in rows_cut if "train_loss" in r] == pytest.approx(
        [float(r["train_loss"]) for r in rows if "train_loss" in r], abs=1e-5)
    assert gradflow_cut == gradflow
    assert summary_cut["train_tokens"] == summary["train_tokens"]

    # Training time and tokens count every process's training: resuming a finished run trains
    # nothing more and reports what its checkpoint had trained.
    again = cli_in_process("fit", *RESUME_ARGS, "--run.root", tmp_path, "--run.id", "cut", "--ckpt_path", "last")
    assert again.returncode == 0, again.stderr[-3000:]
    _, _, summary_again = run_record(cut_dir)
    assert summary_again["steps"] == summary["steps"]
    assert summary_again["train_tokens"] == summary["train_tokens"]
    assert summary_again["train_seconds"] >= 0.8 * summary_cut["train_seconds"] > 0


def test_machine_speed_probe_measures_without_moving_the_random_stream():
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    gflops = machine_speed.sustained_matmul_gflops(n=128, seconds=0.02)
    assert torch.equal(torch.rand(4), expected)
    # 2 * 128^3 flops per product, many products in 20 ms on any machine that can run the suite
    assert 0.05 < gflops < 10_000
