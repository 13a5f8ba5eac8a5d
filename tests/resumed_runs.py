"""A small training run to interrupt and resume, and what it leaves behind (tests/lightning's
test_training.py and test_stop_point.py)."""

import csv
import json

from conftest import CONFIGS

RESUME_ARGS = ["--config", CONFIGS / "copy.yaml", "--data.n_train", "600", "--data.n_val", "50",
               "--data.n_test", "20", "--model.d_model", "32", "--model.ffn", "64",
               "--model.val_bleu", "false", "--trainer.max_epochs", "3", "--diagnostics.gradflow_every", "2",
               "--trainer.log_every_n_steps", "1",   # a row at every step, the checkpoint's own too
               "--trainer.enable_progress_bar", "false"]


def run_record(run_dir):
    """What a run leaves behind that must not depend on interruptions: logged values, gradient flow, counts."""
    with open(run_dir / "metrics.csv") as f:
        rows = [{k: v for k, v in r.items() if k != "time" and v} for r in csv.DictReader(f)]
    gradflow = (run_dir / "gradflow.csv").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    return rows, gradflow, summary
