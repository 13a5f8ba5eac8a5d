"""The CLI's Trainer reads batch limits as written: an int counts batches, a float is a share."""

import json

import pytest

from conftest import CONFIGS, cli_in_process
from lit_attention.lightning.cli import check_training_args

SMALL = ["--data.n_train", "300", "--data.n_val", "40", "--data.n_test", "40", "--trainer.max_epochs", "1",
         "--trainer.enable_progress_bar", "false", "--trainer.num_sanity_val_steps", "0"]


@pytest.mark.parametrize("written, parsed", [("1", 1), ("3", 3), ("1.0", 1.0), ("0.5", 0.5)])
@pytest.mark.parametrize("limit", ["limit_train_batches", "limit_val_batches", "limit_test_batches"])
def test_a_batch_limit_keeps_the_type_it_was_written_with(limit, written, parsed):
    config = check_training_args(["fit", "--config", str(CONFIGS / "copy.yaml"), f"--trainer.{limit}", written])
    value = config["fit"]["trainer"][limit]
    assert value == parsed and type(value) is type(parsed)


def test_limit_train_batches_1_trains_one_batch_per_epoch(tmp_path):
    fit = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "one",
                         "--trainer.limit_train_batches", "1", *SMALL)
    assert fit.returncode == 0, fit.stderr[-2000:]
    summary = json.loads((tmp_path / "default" / "one" / "summary.json").read_text())
    assert summary["steps"] == 1, summary["steps"]   # 1 is one batch, not 1.0 (the whole epoch)
