"""One trial (sweep/trial.py) against a real `lit-attention fit`: pruning crosses the process
boundary through the run store's STOP file and comes back as the run's status."""

import pytest

from conftest import CONFIGS, cli_env
from lit_attention.sweep import trial as tr
from lit_attention.tracking.schema import Status

TINY = {"data.n_train": 200, "data.n_val": 20, "data.n_test": 20, "model.d_model": 16,
        "model.ffn": 32, "model.enc_layers": 1, "model.dec_layers": 1, "model.val_bleu": False,
        "trainer.max_epochs": 30, "trainer.enable_progress_bar": False, "diagnostics.heatmaps": 0,
        "diagnostics.gradflow_every": 0}


@pytest.mark.slow
def test_a_pruned_trial_stops_its_fit_which_records_status_pruned(tmp_path, monkeypatch):
    for key, value in cli_env().items():
        monkeypatch.setenv(key, value)
    cmd = tr.build_command(base=CONFIGS / "copy.yaml", root=tmp_path, study="s", run_id="t0000-s1", seed=1,
                           params={}, fixed=TINY, tracking="none", name="t")
    reported = []
    out = tr.run(cmd, tmp_path / "s" / "t0000-s1", "val_loss", lambda value, step: reported.append(value),
                 should_prune=lambda: True)     # prune as soon as one validation is reported
    assert out.status is Status.PRUNED and out.error is None, out
    assert out.summary.status is Status.PRUNED and out.summary.reason == "STOP file: pruned"
    assert 1 <= out.summary["epochs"] < TINY["trainer.max_epochs"] and len(reported) >= 1
