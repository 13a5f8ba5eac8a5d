"""A run's identity through the training CLI: a trained run is rewritten only when asked, one
process at a time holds a run, a killed holder's run is continued, and an evaluation names the
checkpoint it evaluated and never records another model's scores as a run's."""

import json
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import CONFIGS, REPO, cli_env, cli_in_process, error_lines, run_cli
from lit_attention.tracking.identity import sha256

TINY = ["--config", CONFIGS / "copy.yaml", "--data.n_train", "100", "--data.n_val", "20",
        "--data.n_test", "20", "--model.d_model", "16", "--model.ffn", "32", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false", "--diagnostics.heatmaps", "0",
        "--diagnostics.gradflow_every", "0", "--trainer.max_epochs", "1"]




def summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def files(run_dir) -> dict:
    return {p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished one-epoch run "A", tested (its whole run root), copied by each test that changes it."""
    root = tmp_path_factory.mktemp("trained")
    fit = cli_in_process("fit", *TINY, "--run.root", root, "--run.id", "A")
    assert fit.returncode == 0, fit.stderr[-3000:]
    test = cli_in_process("test", *TINY, "--run.root", root, "--ckpt_path", root / "default" / "A" / "checkpoints" / "best.ckpt")
    assert test.returncode == 0, test.stderr[-3000:]
    return root


@pytest.fixture
def root(trained, tmp_path):
    shutil.copytree(trained, tmp_path / "runs")
    return tmp_path / "runs"


@pytest.mark.slow
def test_fit_into_a_finished_run_is_refused_and_changes_nothing(root):
    run_dir = root / "default" / "A"
    before = files(run_dir)
    out = cli_in_process("fit", *TINY, "--run.root", root, "--run.id", "A")
    assert out.returncode == 2, out.stderr[-3000:]
    (error,) = error_lines(out.stderr)
    assert error == (f"lit-attention fit: error: run A ({run_dir}) exists (finished, with checkpoints): continue it "
                     f"with --ckpt_path last, train it afresh with --run.overwrite true, or give another --run.id")
    assert files(run_dir) == before


@pytest.mark.slow
def test_overwrite_trains_a_new_run_in_its_place_and_records_the_one_it_replaced(root):
    run_dir = root / "default" / "A"
    old = summary(run_dir)
    assert old["test_bleu"] is not None and len(old["uuid"]) == 32
    out = cli_in_process("fit", *TINY, "--run.root", root, "--run.id", "A", "--run.overwrite", "true")
    assert out.returncode == 0, out.stderr[-3000:]
    new = summary(run_dir)
    assert new["overwritten"]["run"] == old["uuid"] and new["overwritten"]["status"] == "finished"
    assert new["uuid"] != old["uuid"] and new["status"] == "finished"
    assert "test_bleu" not in new and "evaluated" not in new   # nothing of the old run passes for the new one's
    assert not (run_dir / "hyps" / "test.txt").exists()
    assert not (run_dir / "CLAIM").exists()


@pytest.mark.slow
def test_evaluating_another_runs_checkpoint_into_a_trained_run_is_refused(root):
    """`test --run.id B --ckpt_path A/...` wrote A's scores into B's summary, naming no checkpoint."""
    shutil.copytree(root / "default" / "A", root / "default" / "B")
    b_dir, a_ckpt = root / "default" / "B", root / "default" / "A" / "checkpoints" / "best.ckpt"
    before = files(b_dir)
    out = cli_in_process("test", *TINY, "--run.root", root, "--run.id", "B", "--ckpt_path", a_ckpt)
    assert out.returncode == 2, out.stderr[-3000:]
    (error,) = error_lines(out.stderr)
    assert error.startswith(f"lit-attention test: error: run B ({b_dir}) holds the scores of its own training; "
                            f"--ckpt_path {a_ckpt} is another model"), error
    assert files(b_dir) == before


@pytest.mark.slow
def test_an_evaluation_records_the_checkpoint_and_the_run_that_trained_it(root):
    a_dir = root / "default" / "A"
    ckpt = a_dir / "checkpoints" / "best.ckpt"
    assert summary(a_dir)["evaluated"] == {"checkpoint": "default/A/checkpoints/best.ckpt", "sha256": sha256(ckpt),
                                           "run": summary(a_dir)["uuid"]}
    out = cli_in_process("validate", *TINY, "--run.root", root, "--run.id", "E", "--ckpt_path", ckpt)
    assert out.returncode == 0, out.stderr[-3000:]
    e = summary(root / "default" / "E")
    assert e["evaluated"] == summary(a_dir)["evaluated"] and e["uuid"] != summary(a_dir)["uuid"]
    # the same run, another checkpoint: its scores would mix two models
    out = cli_in_process("validate", *TINY, "--run.root", root, "--run.id", "E",
                         "--ckpt_path", a_dir / "checkpoints" / "last.ckpt")
    assert out.returncode == 2 and "holds the scores of default/A/checkpoints/best.ckpt" in out.stderr, out.stderr[-3000:]


@pytest.mark.parametrize("command", ["test", "validate"])
def test_evaluating_untrained_weights_is_refused_unless_asked(tmp_path, command):
    """`test` without --ckpt_path evaluated random weights and recorded a finished run."""
    out = cli_in_process(command, *TINY, "--run.root", tmp_path / "runs")
    assert out.returncode == 2, out.stderr[-3000:]
    (error,) = error_lines(out.stderr)
    assert error.startswith(f"lit-attention {command}: error: {command} without --ckpt_path evaluates untrained"), error
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_evaluating_untrained_weights_when_asked_is_recorded(tmp_path):
    out = cli_in_process("test", *TINY, "--run.root", tmp_path, "--run.id", "U", "--run.untrained", "true")
    assert out.returncode == 0, out.stderr[-3000:]
    s = summary(tmp_path / "default" / "U")
    assert s["untrained"] is True and s["evaluated"] is None
    assert s["test_bleu"] is not None and len(s["uuid"]) == 32


def _fit(root, run_id, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lit_attention.cli", "fit", *map(str, TINY), "--run.root", str(root),
                             "--run.id", run_id, *map(str, extra)], cwd=REPO, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_fits_with_one_run_id_one_trains_the_other_exits_2_naming_it(tmp_path):
    """Both reported finished, and one run was gone."""
    procs = [_fit(tmp_path, "R", "--trainer.max_epochs", "1000") for _ in range(2)]
    try:
        first = None
        while first is None:   # the one refused ends first; the other trains until stopped
            first = next((p for p in procs if p.poll() is not None), None)
            time.sleep(0.2)
        other = next(p for p in procs if p is not first)
        _, err = first.communicate()
        assert first.returncode == 2, err[-3000:]
        (error,) = error_lines(err)
        assert f"is in use: fit by process {other.pid} on {socket.gethostname()}" in error, error
        assert len(error) < 400
        deadline = time.monotonic() + 120   # training (its signal handlers set): a stop it records
        while not (tmp_path / "default" / "R" / "checkpoints" / "last.ckpt").is_file():
            assert other.poll() is None and time.monotonic() < deadline, other.communicate()[1][-3000:]
            time.sleep(0.1)
        other.send_signal(signal.SIGTERM)
        _, err = other.communicate(timeout=120)
        assert other.returncode == 143, err[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    s = summary(tmp_path / "default" / "R")
    assert s["process"]["pid"] == other.pid and s["status"] == "interrupted"
    assert not (tmp_path / "default" / "R" / "CLAIM").exists()


@pytest.mark.slow
def test_a_run_killed_with_sigkill_is_continued_and_the_takeover_recorded(tmp_path):
    run_dir = tmp_path / "default" / "K"
    killed = run_cli("fit", *TINY, "--run.root", tmp_path, "--run.id", "K", "--trainer.max_epochs", "3",
                     "--trainer.callbacks+=interrupt.SignalAfterSteps", "--trainer.callbacks.steps", "3",
                     "--trainer.callbacks.signal_name", "SIGKILL", env=cli_env(PYTHONPATH=str(REPO / "tests")))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    holder = json.loads((run_dir / "CLAIM").read_text())
    before = summary(run_dir)
    assert before["status"] == "running" and holder["uuid"] == before["uuid"]
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()

    afresh = cli_in_process("fit", *TINY, "--run.root", tmp_path, "--run.id", "K")   # would lose its checkpoints
    assert afresh.returncode == 2 and "exists (running, its process gone, with checkpoints)" in afresh.stderr

    resumed = cli_in_process("fit", *TINY, "--run.root", tmp_path, "--run.id", "K", "--trainer.max_epochs", "3",
                             "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = summary(run_dir)
    assert after["status"] == "finished" and after["uuid"] == before["uuid"] and after["epochs"] == 3
    (takeover,) = after["takeovers"]
    assert takeover["pid"] == holder["pid"] and f"process {holder['pid']} on " in takeover["why"]
    assert not (run_dir / "CLAIM").exists()
