"""The checkpoints `fit` writes: best.ckpt (lowest val_loss) and last.ckpt (the end of the last epoch)."""

import pytest

from conftest import BACKGROUND_WRITES, cli_in_process, files_config, write_lines
from lit_attention.lightning.checksum import ChecksummedCheckpointIO

PAIRS = [("ein hund läuft", "a dog runs"), ("eine katze schläft", "a cat sleeps"),
         ("der mann sieht den hund", "the man sees the dog")] * 4
TINY = ["--data.task", "files", "--data.src_lang", "de", "--data.tgt_lang", "en", "--data.tokenizer", "word",
        "--model.d_model", "16", "--model.ffn", "32", "--model.heads", "2", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false", "--diagnostics.heatmaps", "0"]


@pytest.mark.slow
@pytest.mark.parametrize("writes", [[], BACKGROUND_WRITES], ids=["in-line", "background"])
def test_last_checkpoint_is_the_last_epoch_also_when_val_loss_did_not_improve(tmp_path, writes):
    """Lightning 2.6 writes ModelCheckpoint's save_last copy only when a top-k checkpoint is saved
    at the same step: with the best one kept, last.ckpt stayed at the last improvement, and
    `fit --ckpt_path last` (a sweep's resume after a kill) went back to it. A learning rate of 1e-30
    moves no fp32 weight, so val_loss stays equal and only the first epoch is an improvement."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val", "test"):
        write_lines(data / f"{split}.de", [s for s, _ in PAIRS])
        write_lines(data / f"{split}.en", [t for _, t in PAIRS])
    fit = cli_in_process("fit", "--config", files_config(tmp_path), "--data.data_dir", data, "--run.root", tmp_path,
                         "--run.id", "r", *TINY, "--trainer.max_epochs", "3", "--model.lr", "1e-30", *writes)
    assert fit.returncode == 0, fit.stderr[-3000:]
    checkpoints = tmp_path / "default" / "r" / "checkpoints"
    io = ChecksummedCheckpointIO()   # the loader `fit --ckpt_path` uses
    last, best = (io.load_checkpoint(checkpoints / name) for name in ("last.ckpt", "best.ckpt"))
    assert last["epoch"] == 2 and best["epoch"] == 0
    assert last["global_step"] == 3 * best["global_step"]
