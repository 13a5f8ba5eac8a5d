"""Evaluation and diagnostics on real short training runs from the CLI."""

import json

import pytest

from conftest import CONFIGS, cli_in_process, unset_family_options

pytestmark = pytest.mark.slow


def _summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def test_beam_5_is_no_worse_than_greedy_on_toy_mt(tmp_path):
    # the demo sweep's attention GRU: it learns toy-mt in a few CPU epochs
    common = ["--config", CONFIGS / "toy-mt.yaml", "--run.root", tmp_path, "--data.n_train", "3000",
              "--data.n_val", "100", "--data.n_test", "150", "--data.max_len_words", "20",
              "--data.max_tokens", "1024", *unset_family_options(CONFIGS / "toy-mt.yaml"),
              "--model.family", "rnn", "--model.cell", "gru",
              "--model.attention", "bahdanau", "--model.scoring", "dot", "--model.enc_output", "project",
              "--model.enc_layers", "1",
              "--model.dec_layers", "1", "--model.d_model", "64", "--model.lr", "3e-3",
              "--model.warmup", "100", "--trainer.max_epochs", "4",
              "--trainer.enable_progress_bar", "false", "--diagnostics.heatmaps", "0"]
    # in this process: what is tested is what beam search finds, not the processes
    fit = cli_in_process("fit", *common, "--run.id", "m")
    assert fit.returncode == 0, fit.stderr[-3000:]
    ckpt = tmp_path / "default" / "m" / "checkpoints" / "best.ckpt"
    scores = {}
    for beam in (1, 5):
        test = cli_in_process("test", *common, "--run.id", f"beam{beam}", "--ckpt_path", ckpt,
                       "--model.beam_size", beam)
        assert test.returncode == 0, test.stderr[-3000:]
        scores[beam] = _summary(tmp_path / "default" / f"beam{beam}")
    assert scores[1]["test_bleu"] > 20, "the model should have learned something"
    assert scores[5]["test_bleu"] >= scores[1]["test_bleu"]
    for s in scores.values():
        assert sum(b["n"] for b in s["test_bleu_by_length"]) == 150
