"""`fit` on a read-only file system (exit 2, before anything is written) or a full one (exit 1):
one line naming the path, a run that can be started again once the fault is fixed. Real tmpfs mounts (root only; skipped otherwise)."""

import csv

import pytest

from conftest import BACKGROUND_WRITES, CONFIGS, cli_in_process, error_lines, run_cli

TINY = ["--config", CONFIGS / "copy.yaml", "--data.n_train", "300", "--data.n_val", "40",
        "--data.n_test", "40", "--model.d_model", "32", "--model.ffn", "64", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "2",
        "--diagnostics.heatmaps", "0", "--trainer.log_every_n_steps", "1"]




@pytest.mark.slow
def test_fit_on_a_read_only_file_system_says_which_path_in_one_line(tmpfs):
    fs = tmpfs("8m")
    fs.remount("ro")
    out = cli_in_process("fit", *TINY, "--run.root", fs.path / "runs", "--run.id", "r")   # refused before training
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert errors == [f"lit-attention fit: error: cannot write {fs.path}: Read-only file system"], errors

    fs.remount("rw")
    again = cli_in_process("fit", *TINY, "--run.root", fs.path / "runs", "--run.id", "r")
    assert again.returncode == 0, again.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("writes", [[], BACKGROUND_WRITES], ids=["in-line", "background"])
def test_fit_on_a_full_disk_fails_in_one_line_and_runs_once_given_room(tmpfs, writes):
    fs = tmpfs("200k")            # room for the config and summary, not for a checkpoint
    out = run_cli("fit", *TINY, "--run.root", fs.path, "--run.id", "r", *writes)
    assert out.returncode == 1, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == 1 and errors[0].startswith(f"lit-attention fit: error: cannot write under {fs.path}/default/r"), errors
    assert errors[0].endswith(": No space left on device"), errors

    fs.remount("size=64m")
    again = cli_in_process("fit", *TINY, "--run.root", fs.path, "--run.id", "r")   # the failed run was a process
    assert again.returncode == 0, again.stderr[-3000:]
    with open(fs.path / "default" / "r" / "metrics.csv", newline="") as f:
        steps = [r["step"] for r in csv.DictReader(f) if r.get("train_loss")]
    assert steps and len(steps) == len(set(steps))


class _RunsCode:
    def __reduce__(self):
        import os
        return (os.system, ("touch pwned",))


def test_a_checkpoint_that_would_run_code_is_refused_in_one_line(tmp_path):
    """`--ckpt_path` is a file a user may be given: Lightning loads it with weights_only=True, and
    the refusal is one line naming the file, not a traceback."""
    import torch
    crafted = tmp_path / "best.ckpt"
    torch.save({"hyper_parameters": _RunsCode(), "state_dict": {}}, crafted)
    for command in ("test", "fit"):
        out = cli_in_process(command, *TINY, "--run.root", tmp_path / "runs", "--ckpt_path", crafted, cwd=tmp_path)
        assert out.returncode == 2, out.stderr[-3000:]
        errors = error_lines(out.stderr)
        assert len(errors) == 1 and errors[0].startswith(
            f"lit-attention {command}: error: --ckpt_path {crafted}: refused to load"), errors
        assert "posix.system" in errors[0], errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt"]   # no pwned, no runs


def test_a_refused_checkpoint_that_a_config_file_names_is_named_in_the_refusal(tmp_path):
    """The one line names the checkpoint wherever it was given: on the command line or, as here,
    in a config file."""
    import torch
    crafted = tmp_path / "best.ckpt"
    torch.save({"hyper_parameters": _RunsCode(), "state_dict": {}}, crafted)
    (tmp_path / "eval.yaml").write_text(f"ckpt_path: {crafted}\n")
    out = cli_in_process("test", *TINY, "--config", tmp_path / "eval.yaml",
                         "--run.root", tmp_path / "runs", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == 1 and errors[0].startswith(
        f"lit-attention test: error: --ckpt_path {crafted}: refused to load"), errors


@pytest.mark.parametrize("kind", ["missing", "cut short", "not a zip"])
def test_a_ckpt_path_that_is_no_checkpoint_stops_in_one_line_before_a_run_store(tmp_path, kind):
    """Before: a missing file made a new run store marked failed (exit 1), a checkpoint cut short
    ended in an OSError traceback, and random bytes read as a refused crafted checkpoint."""
    import torch
    path = tmp_path / "given.ckpt"
    if kind == "cut short":
        torch.save({"state_dict": {"w": torch.zeros(1000)}}, tmp_path / "whole.ckpt")
        data = (tmp_path / "whole.ckpt").read_bytes()
        path.write_bytes(data[:len(data) // 2])
    elif kind == "not a zip":
        path.write_bytes(bytes(range(256)) * 8)
    out = cli_in_process("test", *TINY, "--run.root", tmp_path / "runs", "--ckpt_path", path)
    assert out.returncode == 2, out.stderr[-3000:]
    why = "no such file" if kind == "missing" else (
        "not a checkpoint: torch.save writes a zip archive and this file is none (cut short, or another "
        "kind of file)")
    assert error_lines(out.stderr) == [f"lit-attention test: error: --ckpt_path {path}: {why}"]
    assert not (tmp_path / "runs").exists()
