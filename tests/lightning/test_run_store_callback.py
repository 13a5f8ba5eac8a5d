"""lit_attention/lightning/run_store_callback.py: what evaluating a trained run writes into its run store."""

import json

import pytest

from conftest import CONFIGS, cli_in_process, files_config, write_lines
from lit_attention.tracking import sentence_stats as ss
from lit_attention.tracking.run_store import git_commit

pytestmark = pytest.mark.slow

PAIRS = [("ein hund läuft", "a dog runs"), ("eine katze schläft", "a cat sleeps"),
         ("der mann sieht den hund", "the man sees the dog")] * 4
TINY = ["--data.task", "files", "--data.src_lang", "de", "--data.tgt_lang", "en", "--data.tokenizer", "word",
        "--model.d_model", "16", "--model.ffn", "32", "--model.heads", "2", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false",
        "--diagnostics.heatmaps", "0"]


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def test_a_failed_test_of_a_trained_run_keeps_its_training_record(tmp_path):
    """A `test` of a finished run (as `sweep --test` runs it) that cannot read its test data is
    refused before anything is written: the run keeps its training record, still counts, and is
    tested once the data is fixed."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val", "test"):
        write_lines(data / f"{split}.de", [s for s, _ in PAIRS])
        write_lines(data / f"{split}.en", [t for _, t in PAIRS])
    common = ["--config", files_config(tmp_path), "--data.data_dir", data, "--run.root", tmp_path,
              "--run.id", "r", *TINY]
    fit = cli_in_process("fit", *common)
    assert fit.returncode == 0, fit.stderr[-3000:]
    run_dir = tmp_path / "default" / "r"
    trained = summary(run_dir)
    assert trained["status"] == "finished"
    # a run caches its sentence statistics where it writes its hypotheses (val: at the end of fit)
    assert all(ss.cache_path(run_dir, "val", metric).is_file() for metric in ss.METRICS)
    kept = ("status", "error", "finished_at", "steps", "epochs", "git_commit", "versions", "val_loss",
            "train_flops")
    test = ["test", *common, "--ckpt_path", run_dir / "checkpoints" / "best.ckpt"]

    good = (data / "test.de").read_bytes()
    (data / "test.de").write_bytes(b"\x00" * 64)            # the test file replaced by a binary one
    before = (run_dir / "summary.json").read_bytes()
    failed = cli_in_process(*test)   # stops at the test data, before writing anything
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "test.de, line 1: NUL byte" in failed.stderr and "run directory:" not in failed.stderr
    assert (run_dir / "summary.json").read_bytes() == before

    (data / "test.de").write_bytes(good)
    tested = cli_in_process(*test)
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert f"run directory: {run_dir} (test finished)" in tested.stderr
    after = summary(run_dir)
    assert after.get("test_error") is None and after["test_loss"] > 0
    assert all(ss.cache_path(run_dir, "test", metric).is_file() for metric in ss.METRICS)
    cached = ss.load_or_compute(run_dir, "test")           # read from the cache, equal to sacreBLEU's
    assert ss.corpus_score("bleu", cached.bleu) == pytest.approx(after["test_bleu"], abs=1e-9)
    assert after["test_git_commit"] == git_commit()
    assert {k: after.get(k) for k in kept} == {k: trained.get(k) for k in kept}


def test_the_summary_records_the_loader_workers_training_ran_with(tmp_path):
    args = ["--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, *TINY[6:],
            "--data.n_train", "40", "--data.n_val", "8", "--data.n_test", "8"]
    for asked, expected in ((None, 0), ("1", 1)):   # null: chosen by device, none on a CPU
        run_id = f"w{expected}"
        fit = cli_in_process("fit", *args, "--run.id", run_id, *(["--data.num_workers", asked] if asked else []))
        assert fit.returncode == 0, fit.stderr[-3000:]
        assert summary(tmp_path / "default" / run_id)["loader_workers"] == expected
