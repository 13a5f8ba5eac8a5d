"""`lit-attention sweep FILE --test` (and `--test-only`, which starts no trial): the best checkpoint
of every finished run evaluated on the test split by real `lit-attention test` processes, and the
end-of-sweep table on the test metric."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, family_neutral, sweep_in_process
from lit_attention.sweep import cli, evaluate

TINY = {"data.n_train": 200, "data.n_val": 80, "data.n_test": 40, "data.max_tokens": 224,
        "model.d_model": 32, "model.enc_layers": 1, "model.dec_layers": 1,
        "model.dropout": 0.0, "model.val_bleu": False, "model.warmup": 1, "trainer.max_epochs": 2,
        "trainer.enable_progress_bar": False}


def test_the_test_metric_is_the_objectives_counterpart():
    assert evaluate.test_metric("val_bleu") == "test_bleu"
    assert evaluate.test_metric("val_ppl") == "test_ppl"
    assert evaluate.test_metric("bleu") == "bleu"


def run_store(root: Path, run_id: str, status: str, checkpoint: bool, tested: bool) -> Path:
    run = root / "study" / run_id
    (run / "checkpoints").mkdir(parents=True)
    if checkpoint:
        (run / "checkpoints" / "best.ckpt").write_bytes(b"0")
        time.sleep(0.01)
    summary = {"status": status, "run_id": run_id, "test_loss": 1.0 if tested else None}
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_only_finished_untested_runs_with_a_checkpoint_are_tested(tmp_path):
    """Unfinished runs are counted, a tested run is skipped, a finished run without a checkpoint is
    a failure with its reason; none of these starts a process."""
    run_store(tmp_path, "pruned", "pruned", checkpoint=True, tested=False)
    run_store(tmp_path, "failed", "failed", checkpoint=False, tested=False)
    run_store(tmp_path, "tested", "finished", checkpoint=True, tested=True)
    run_store(tmp_path, "lost", "finished", checkpoint=False, tested=False)
    done = evaluate.test_study(tmp_path / "study", log=lambda line: None)
    assert done.tested == [] and done.skipped == ["tested"] and done.not_finished == 2
    assert done.failed == [("lost", "no checkpoints/best.ckpt")]
    # a checkpoint newer than the test result: tested again
    os.utime(tmp_path / "study" / "tested" / "checkpoints" / "best.ckpt",
             ns=(time.time_ns() + 10 ** 9,) * 2)
    assert not evaluate.already_tested(tmp_path / "study" / "tested", {"test_loss": 1.0})
    cmd = evaluate.command(tmp_path / "study" / "tested", accelerator="cpu")
    assert cmd[cmd.index("--ckpt_path") + 1].endswith("tested/checkpoints/best.ckpt")
    assert cmd[cmd.index("--run.id") + 1] == "tested" and "--trainer.accelerator" in cmd


@pytest.mark.slow
def test_sweep_test_evaluates_every_finished_run_and_reports_the_test_metric(tmp_path):
    sweep = {"study_name": "tested", "base": family_neutral(REPO / "configs" / "copy.yaml"),
             "root": str(tmp_path / "runs"), "objective": {"metric": "val_loss", "direction": "minimize"},
             "sampler": "grid", "pruner": "none", "seeds": 1, "fixed": TINY,
             "space": {"model.family": {"choices": ["rnn"]}, "model.cell": {"choices": ["gru"]},
                       "model.attention": {"choices": ["none", "bahdanau"]}}}
    path = tmp_path / "tested.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIT_ATTENTION_", "WANDB_"))}
    # the driver in this process; its workers, their fits and the `lit-attention test` runs are processes
    out = sweep_in_process(path, "--test", env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "tested 2 run(s) on the test split, 0 already tested" in out.stdout
    study = tmp_path / "runs" / "tested"
    for summary in study.glob("*/summary.json"):
        found = json.loads(summary.read_text())
        assert found["status"] == "finished" and found["test_loss"] > 0 and found["val_loss"] > 0
        assert (summary.parent / "hyps" / "test.txt").is_file()
    table = pd.read_csv(study / "report" / "table.csv")
    assert table["n"].tolist() == [1, 1] and table["mean"].notna().all()
    assert "Loss ↓ (test_loss: test split" in (study / "report" / "table.md").read_text()
    # --test-only between sessions: a run whose best checkpoint is newer than its test is tested
    # again; no trial starts (the study is not even opened)
    newer = next(study.glob("*/checkpoints/best.ckpt"))
    os.utime(newer, ns=(time.time_ns() + 10 ** 9,) * 2)
    db = (study / "study.db").stat().st_mtime_ns
    only = sweep_in_process(path, "--test-only", env=env)
    assert only.returncode == 0, only.stdout[-3000:] + only.stderr[-3000:]
    assert "tested 1 run(s) on the test split, 1 already tested, 0 not finished" in only.stdout
    assert (study / "study.db").stat().st_mtime_ns == db
    assert "Loss ↓ (test_loss: test split" in (study / "report" / "table.md").read_text()
    # again: nothing new to test, nothing re-run
    again = sweep_in_process(path, "--test", env=env)
    assert again.returncode == 0 and "tested 0 run(s) on the test split, 2 already tested" in again.stdout


def test_test_only_refuses_what_it_would_ignore_and_a_study_without_runs(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"study_name": "s", "base": str(REPO / "configs" / "copy.yaml"),
                                    "root": str(tmp_path / "runs"), "space": {"model.lr": {"choices": [0.1]}},
                                    "objective": {"metric": "val_loss", "direction": "minimize"}}))
    assert cli.main([str(path), "--test-only", "--resume", "--workers", "2"]) == 2
    assert capsys.readouterr().err == ("lit-attention sweep: error: --test-only starts no trial: --resume, "
                                       "--workers would do nothing\n")
    assert cli.main([str(path), "--test-only", "--trials-per-gpu", "2"]) == 2
    assert "--test-only starts no trial: --trials-per-gpu would do nothing" in capsys.readouterr().err
    assert cli.main([str(path), "--test-only"]) == 2
    assert f"no runs of study 's' in {tmp_path / 'runs' / 's'}: run the sweep first" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()   # nothing written
