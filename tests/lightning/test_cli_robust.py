"""Nothing silently wrong, nothing lost — the training CLI's cases (a failed resume, a
run that would train nothing, values a model or data class refuses). docs/RELIABILITY.md lists them."""

import json
import shutil

import pytest

from conftest import CONFIGS, cli_in_process

TINY = ["--config", CONFIGS / "copy.yaml", "--data.n_train", "100", "--data.n_val", "20",
        "--data.n_test", "20", "--model.d_model", "32", "--model.ffn", "64", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false", "--diagnostics.heatmaps", "0",
        "--diagnostics.gradflow_every", "0"]


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if "error" in line.lower()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 4-step run "R" (its whole run root), copied by each test that changes it."""
    root = tmp_path_factory.mktemp("finished")
    fit = cli_in_process("fit", *TINY, "--run.root", root, "--run.id", "R", "--trainer.max_steps", "4")
    assert fit.returncode == 0, fit.stderr[-3000:]
    return root


def copy_of(finished_run, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(finished_run, root)
    return root, root / "default" / "R"


def record(run_dir) -> dict:
    """The files that say what a run is: a failed attempt on it must leave them byte for byte."""
    return {name: (run_dir / name).read_bytes() for name in ("summary.json", "config.yaml", "metrics.csv")}


# -- case 8: a failed resume never rewrites a finished run -------------------------------------

def test_a_resume_from_a_truncated_last_ckpt_is_refused_and_leaves_the_run_untouched(finished_run, tmp_path):
    root, run_dir = copy_of(finished_run, tmp_path)
    last = run_dir / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:100_000])
    before = record(run_dir)
    out = cli_in_process("fit", *TINY, "--run.root", root, "--run.id", "R", "--trainer.max_steps", "8",
                         "--ckpt_path", "last")
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == 1 and errors[0].startswith(f"lit-attention fit: error: --ckpt_path last: {last}: not a checkpoint"), errors
    assert "best.ckpt" in errors[0]   # the way out
    assert record(run_dir) == before
    assert json.loads(before["summary.json"])["status"] == "finished"


def test_a_trainer_value_refused_on_resume_leaves_the_finished_run_untouched(finished_run, tmp_path):
    """Lightning refuses a validation interval longer than the epoch once fit runs: the resumed
    run was marked failed. It is refused before the run's record is touched."""
    root, run_dir = copy_of(finished_run, tmp_path)
    before = record(run_dir)
    out = cli_in_process("fit", *TINY, "--run.root", root, "--run.id", "R", "--trainer.max_steps", "8",
                         "--ckpt_path", "last", "--trainer.val_check_interval", "1000")
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == 1 and "invalid value for trainer.val_check_interval: 1000" in errors[0], errors
    assert record(run_dir) == before


def test_a_resume_whose_checkpoint_does_not_load_leaves_the_run_untouched(finished_run, tmp_path):
    """A checkpoint that is a whole zip but does not fit the model fails inside Lightning's fit,
    after setup: the run's record is only taken over once the checkpoint has loaded."""
    root, run_dir = copy_of(finished_run, tmp_path)
    before = record(run_dir)
    out = cli_in_process("fit", *TINY, "--run.root", root, "--run.id", "R", "--trainer.max_steps", "8",
                         "--ckpt_path", "last", "--model.ffn", "48")
    assert out.returncode == 1 and "size mismatch" in out.stderr, out.stderr[-3000:]
    assert record(run_dir) == before


def test_a_resume_that_loads_takes_the_run_over(finished_run, tmp_path):
    root, run_dir = copy_of(finished_run, tmp_path)
    before = json.loads((run_dir / "summary.json").read_text())
    out = cli_in_process("fit", *TINY, "--run.root", root, "--run.id", "R", "--trainer.max_steps", "6",
                         "--ckpt_path", "last")
    assert out.returncode == 0, out.stderr[-3000:]
    after = json.loads((run_dir / "summary.json").read_text())
    assert after["status"] == "finished" and after["steps"] == 6 and before["steps"] == 4
    assert after["started_at"] >= before["started_at"]


# -- a run that would train nothing, values no model trains with, values that would not act as
# given ---------------------------------------------------------------------------------------

REFUSED = [
    (["--trainer.max_epochs", "0"], "invalid value for trainer.max_epochs: 0 trains nothing"),
    (["--trainer.max_steps", "0"], "invalid value for trainer.max_steps: 0 trains nothing"),
    (["--trainer.limit_train_batches", "0"], "invalid value for trainer.limit_train_batches: 0 trains nothing"),
    (["--model.lr", "0"], "invalid configuration: model.lr must be a finite number > 0 (at 0 nothing trains), got 0.0"),
    (["--model.lr", "-1"], "invalid configuration: model.lr must be a finite number > 0 (at 0 nothing trains), got -1.0"),
    (["--model.heads", "3"], "invalid configuration: model.heads 3 does not divide model.d_model 32"),
    (["--model.dropout", "1.5"], "invalid configuration: model.dropout must be in [0, 1), got 1.5"),
    (["--model.warmup", "-5"], "invalid configuration: model.warmup must be >= 0, got -5"),
    (["--data.tokenizer", "sentencepiece", "--data.vocab_size", "10"],
     "data.vocab_size 10 is too small for SentencePiece: the training text needs 17 pieces"),
    # values taken without acting on them as given: one of the trainer's, the data's and
    # the model's end to end here; every case, parsed only, in tests/test_config_check.py
    (["--trainer.gradient_clip_val", "-1"],
     "invalid value for trainer.gradient_clip_val: -1: it must be a finite number >= 0 (0: no clipping)"),
    (["--data.max_tokens", "0"], "invalid configuration: data.max_tokens must be >= 1"),
    (["--model.beam_size", "0"], "invalid configuration: model.beam_size must be >= 1 (1: greedy decoding), got 0"),
]


@pytest.mark.parametrize("args,message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_value_no_run_can_train_with_is_one_line_exit_2_and_nothing_written(tmp_path, args, message):
    out = cli_in_process("fit", *TINY, "--run.root", tmp_path / "runs", "--data.cache_dir", tmp_path / "cache",
                         *args)
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == 1 and message in errors[0], errors
    assert not (tmp_path / "runs").exists()


# -- case 11: a model whose scores are not finite ---------------------------------------------

def test_test_of_a_model_with_overflowing_weights_fails_in_one_line(finished_run, tmp_path):
    import torch
    root, run_dir = copy_of(finished_run, tmp_path)
    ckpt = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    ckpt["state_dict"] = {k: torch.full_like(v, 1e30) if v.is_floating_point() else v
                          for k, v in ckpt["state_dict"].items()}
    save_checkpoint(ckpt, tmp_path / "huge.ckpt")
    out = cli_in_process("test", *TINY, "--run.root", root, "--run.id", "T", "--ckpt_path", tmp_path / "huge.ckpt")
    assert out.returncode == 1, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert errors == ["lit-attention test: error: FloatingPointError: beam search: the model's scores are not "
                      "finite (nan) at output position 1: its weights or activations overflowed"], errors
    summary = json.loads((root / "default" / "T" / "summary.json").read_text())
    assert summary["error"].startswith("FloatingPointError: beam search")   # the record says why


def save_checkpoint(ckpt: dict, path) -> None:
    """A checkpoint dict changed by a test, saved as the Trainer would save it (checksum.py)."""
    import torch

    from lit_attention.lightning.checksum import CHECKSUM_KEY, content_checksum
    torch.save({**ckpt, CHECKSUM_KEY: content_checksum(ckpt)}, path)


# -- case 5: a checkpoint's contents are checked on load --------------------------------------

def overwrite_tensor_bytes(path, n: int = 4000) -> None:
    """Overwrite n bytes in the middle of the largest tensor stored in a torch.save zip, in place:
    the archive stays whole (zipfile and torch.load still open it)."""
    import struct
    import zipfile
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as f:
        f.seek(info.header_offset)
        header = f.read(30)
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        start = info.header_offset + 30 + name_len + extra_len + info.file_size // 2 - n // 2
        f.seek(start)
        old = f.read(n)
        f.seek(start)
        f.write(bytes(b ^ 0x55 for b in old))


def test_a_checkpoint_whose_tensor_bytes_changed_is_refused_in_one_line(finished_run, tmp_path):
    """4,000 bytes of one tensor overwritten: `test` refuses the checkpoint instead of exiting 0
    with another loss."""
    import zipfile

    import torch
    root, run_dir = copy_of(finished_run, tmp_path)
    best = run_dir / "checkpoints" / "best.ckpt"
    overwrite_tensor_bytes(best)
    assert zipfile.is_zipfile(best) and torch.load(best, weights_only=True)   # it still loads
    before = record(run_dir)
    out = cli_in_process("test", *TINY, "--run.root", root, "--ckpt_path", best)
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert errors == [f"lit-attention test: error: --ckpt_path {best}: its contents differ from the checksum "
                      f"saved with it (changed or damaged since it was written): refused to load it"], errors
    assert record(run_dir)["config.yaml"] == before["config.yaml"]
    assert json.loads(record(run_dir)["summary.json"])["status"] == "finished"


def test_every_checkpoint_the_trainer_writes_carries_its_checksum(finished_run):
    import torch

    from lit_attention.lightning.checksum import CHECKSUM_KEY, content_checksum
    for name in ("best.ckpt", "last.ckpt"):
        ckpt = torch.load(finished_run / "default" / "R" / "checkpoints" / name, weights_only=True)
        assert ckpt[CHECKSUM_KEY] == content_checksum(ckpt)


@pytest.mark.slow
def test_validate_and_test_of_a_checkpoint_do_not_warn_of_a_missing_callback(finished_run, tmp_path):
    """Every checkpoint holds the training budget's state: validate and test have its callback too
    (Lightning warned "Please add the following callbacks: ['TrainingBudget']" every time)."""
    root, run_dir = copy_of(finished_run, tmp_path)
    best = run_dir / "checkpoints" / "best.ckpt"
    for args in (["validate", "--run.id", "V"], ["test"]):
        out = cli_in_process(*args, *TINY, "--run.root", root, "--ckpt_path", best)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "callbacks used to create the checkpoint" not in out.stderr, out.stderr[-3000:]
