"""Plan before write: what `fit` can check before its first step (trainer values against the data's
batches, the run directory's path, a --trainer option it would ignore) is checked before anything
is written; a refusal is one line, exit 2, and leaves nothing behind."""

import json

import pytest

from conftest import CONFIGS, cli_in_process

TINY = ["--config", CONFIGS / "copy.yaml", "--data.n_train", "100", "--data.n_val", "20",
        "--data.n_test", "20", "--model.d_model", "32", "--model.ffn", "64", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false", "--diagnostics.heatmaps", "0",
        "--diagnostics.gradflow_every", "0"]


def error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and len(errors[0]) < 400, stderr[-3000:]
    return errors[0]


@pytest.mark.parametrize("option,value,message", [
    ("val_check_interval", "1000", "invalid value for trainer.val_check_interval: 1000: an epoch has"),
    ("limit_train_batches", "0.001", "invalid value for trainer.limit_train_batches: 0.001 of the"),
    ("limit_val_batches", "0.001", "invalid value for trainer.limit_val_batches: 0.001 of the"),
])
def test_a_trainer_value_lightning_refuses_late_is_refused_before_the_run_directory(tmp_path, option, value, message):
    """Lightning refuses these once fit runs, after the run's record was started (a traceback and a
    failed run): here before anything is written."""
    out = cli_in_process("fit", *TINY, f"--trainer.{option}", value, "--run.root", tmp_path / "runs")
    assert out.returncode == 2, out.stderr[-3000:]
    assert error_line(out.stderr).startswith(f"lit-attention fit: error: {message}")
    assert not (tmp_path / "runs").exists()


def test_a_run_root_under_a_file_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "afile").write_text("x")
    out = cli_in_process("fit", *TINY, "--run.root", tmp_path / "afile" / "runs", "--run.id", "r")
    assert out.returncode == 2, out.stderr[-3000:]
    assert error_line(out.stderr) == (f"lit-attention fit: error: cannot make the run directory "
                                      f"{tmp_path}/afile/runs/default/r: {tmp_path}/afile is a file, not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_default_root_dir_and_a_different_run_root_are_refused(tmp_path):
    out = cli_in_process("fit", *TINY, "--trainer.default_root_dir", tmp_path / "a", "--run.root", tmp_path / "b")
    assert out.returncode == 2, out.stderr[-3000:]
    assert "--trainer.default_root_dir" in error_line(out.stderr) and "give one" in out.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_default_root_dir_is_the_run_root(tmp_path):
    """`--trainer.default_root_dir DIR` (Lightning's directory for a run's files) stores the run
    under DIR, as --run.root does."""
    out = cli_in_process("fit", *TINY, "--trainer.default_root_dir", tmp_path / "dr", "--run.id", "r",
                         "--trainer.max_steps", "1", "--trainer.limit_val_batches", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "dr" / "default" / "r" / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert not (tmp_path / "runs").exists()
