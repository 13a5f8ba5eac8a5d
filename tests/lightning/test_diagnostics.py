"""The diagnostics callback (lit_attention/lightning/diagnostics.py) in real CLI training runs:
what it writes to gradflow.csv, and what the analysis reads from it."""

import pandas as pd
import pytest

from conftest import CONFIGS, cli_in_process, unset_family_options
from lit_attention.analysis.aggregate import gradflow_decay, last_gradflow
from lit_attention.data.translation import TranslationDataModule
from lit_attention.diagnostics import long_sentence_sample

COPY = dict(task="copy", n_train=160, n_val=120, n_test=20, min_len=3, max_len_words=30,
            n_symbols=20, max_tokens=1024)
ARGS = ["--config", CONFIGS / "copy.yaml", "--trainer.max_epochs", "1",
        "--trainer.enable_progress_bar", "false", "--model.d_model", "32", "--model.ffn", "64",
        *[x for k, v in COPY.items() for x in (f"--data.{k}", v)]]
RNN = [*unset_family_options(CONFIGS / "copy.yaml"), "--model.family", "rnn"]   # after ARGS


@pytest.mark.slow
def test_gradflow_csv_holds_every_sampled_sentence_at_every_distance_per_direction(tmp_path):
    fit = cli_in_process("fit", *ARGS, *RNN, "--run.root", tmp_path, "--run.id", "gru", "--model.cell", "gru",
                         "--model.attention", "none", "--model.bidirectional", "true",
                         "--diagnostics.gradflow_every", "1", "--diagnostics.gradflow_sentences", "16")
    assert fit.returncode == 0, fit.stderr[-3000:]
    frame = pd.read_csv(tmp_path / "default" / "gru" / "gradflow.csv")
    assert list(frame.columns) == ["step", "direction", "sentence", "position", "distance", "norm"]
    steps = sorted(frame["step"].unique())
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 2

    # the fixed-seed sample of the validation split: 16 sentences reaching distance 20
    examples = TranslationDataModule(**COPY).dataset("val")
    expected, distance = long_sentence_sample(examples, n=16)
    assert distance == 20
    length = {ex["idx"]: len(ex["src"]) + 1 for ex in examples}
    for (step, direction), rows in frame.groupby(["step", "direction"]):
        assert direction in ("forward", "backward")
        assert sorted(rows["sentence"].unique()) == expected["idx"].tolist()
        for sentence, one in rows.groupby("sentence"):
            assert sorted(one["distance"]) == list(range(21))
            m = length[sentence]
            reach = one["position"] if direction == "backward" else m - 1 - one["position"]
            assert (reach == one["distance"]).all()
    assert (frame["norm"] > 0).all()
    fit = gradflow_decay(last_gradflow(frame))
    assert fit["direction"].tolist() == ["forward", "backward"] and (fit["sentences"] == 16).all()


def test_a_gradflow_distance_the_sample_cannot_reach_stops_the_run(tmp_path):
    fit = cli_in_process("fit", *ARGS, *RNN, "--run.root", tmp_path, "--diagnostics.gradflow_distance", "31")
    assert fit.returncode != 0
    assert "gradflow_distance=31: only 0 sentences reach it, gradflow_sentences=32" in fit.stderr


@pytest.mark.slow
def test_elman_gradient_vanishes_faster_than_lstm_after_brief_training(tmp_path):
    # The same ordering as at initialisation (tests/diagnostics/test_gradflow.py), after one epoch
    # of the copy task through the last encoder state only, measured by the callback.
    fits = {}
    for cell in ("elman-tanh", "lstm"):
        result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", cell,
                                *RNN, "--model.cell", cell, "--model.attention", "none",
                                "--model.bidirectional", "false", "--model.d_model", "64",
                                "--data.min_len", "12", "--data.max_len_words", "16", "--data.n_train", "600",
                                "--trainer.max_epochs", "1", "--diagnostics.gradflow_every", "5",
                                "--trainer.enable_progress_bar", "false")
        assert result.returncode == 0, result.stderr[-3000:]
        frame = pd.read_csv(tmp_path / "default" / cell / "gradflow.csv")
        fits[cell] = gradflow_decay(last_gradflow(frame)).set_index("direction").loc["forward"]
    assert fits["elman-tanh"]["ci_hi"] < fits["lstm"]["ci_lo"], fits


@pytest.mark.slow   # over 2 CPU seconds (2.2-4.3 s alone on 2 cores)
def test_per_module_gradient_norms_appear_only_at_the_steps_they_were_measured(tmp_path):
    fit = cli_in_process("fit", *ARGS, "--run.root", tmp_path, "--run.id", "norms", "--model.val_bleu", "false",
                         "--data.n_train", "800", "--diagnostics.module_norm_every", "4",
                         "--trainer.log_every_n_steps", "1")
    assert fit.returncode == 0, fit.stderr[-3000:]
    metrics = pd.read_csv(tmp_path / "default" / "norms" / "metrics.csv")
    module = [c for c in metrics.columns if c.startswith("grad_norm/") and c != "grad_norm/total"]
    assert module, list(metrics.columns)
    measured = metrics.dropna(subset=module, how="all")
    steps = sorted(measured["step"])
    assert steps == list(range(0, 4 * len(steps), 4)) and len(steps) >= 3, steps
    # each measurement is its own: no two measured steps carry the same norms (stale copies did)
    assert not measured[module].duplicated().any()


def gradflow_rows(step, n):
    return [{"step": step, "direction": "forward", "sentence": i, "position": 0, "distance": 0, "norm": 1.5}
            for i in range(n)]


def test_a_gradient_flow_measurement_appends_its_rows_and_leaves_the_earlier_ones(tmp_path):
    # Rewriting every row at every measurement grew quadratically over a long run.
    from lit_attention.lightning.diagnostics import DiagnosticsCallback
    from lit_attention.tracking.run_store import RunDir

    callback = DiagnosticsCallback(RunDir(tmp_path))
    callback.add_gradflow_rows(gradflow_rows(100, 3))
    path = tmp_path / "gradflow.csv"
    path.write_text(path.read_text() + "# written before\n")
    callback.add_gradflow_rows(gradflow_rows(200, 2))
    lines = path.read_text().splitlines()
    assert lines[0] == "step,direction,sentence,position,distance,norm"
    assert lines[4] == "# written before"                   # not rewritten from memory
    assert lines[5:] == ["200,forward,0,0,0,1.5", "200,forward,1,0,0,1.5"]
    assert len(callback.gradflow_rows) == 5


def test_training_starts_gradflow_csv_from_the_rows_its_checkpoint_holds(tmp_path):
    # A run killed after a measurement but before its next checkpoint left rows that the
    # continued run measures again: they are dropped when training starts.
    from lightning.pytorch import Trainer

    from lit_attention.lightning.diagnostics import DiagnosticsCallback
    from lit_attention.tracking.run_store import RunDir

    path = tmp_path / "gradflow.csv"
    killed = DiagnosticsCallback(RunDir(tmp_path))
    killed.add_gradflow_rows(gradflow_rows(100, 2))
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False)
    DiagnosticsCallback(RunDir(tmp_path)).on_train_start(trainer, None)   # its checkpoint: no rows
    assert not path.exists()
    killed.add_gradflow_rows(gradflow_rows(200, 1))                      # ... or rows up to step 100
    resumed = DiagnosticsCallback(RunDir(tmp_path))
    resumed.load_state_dict({"gradflow_rows": gradflow_rows(100, 2)})
    resumed.on_train_start(trainer, None)
    assert pd.read_csv(path)["step"].tolist() == [100, 100]
