"""A sweep can give every trial a training budget (the reference comparison runs as a sweep)."""

import yaml

from conftest import CONFIGS
from lit_attention.sweep.schema import load_sweep
from lit_attention.sweep.trial import build_command


def test_fixed_budget_reaches_every_trial_command(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({
        "study_name": "s", "base": str(CONFIGS / "copy.yaml"), "root": str(tmp_path / "runs"),
        "objective": {"metric": "val_loss", "direction": "minimize"},
        "fixed": {"budget.flops": 2.5e9, "trainer.max_epochs": 50},
        "space": {"model.family": {"choices": ["rnn", "transformer"]}}}))
    sweep = load_sweep(path)
    cmd = build_command(base=sweep.base, root=tmp_path, study="s", run_id="t0001-s1", seed=1,
                        params={"model.family": "rnn"}, fixed=sweep.fixed, tracking="none", name="t1")
    assert "--budget.flops 2500000000.0" in " ".join(cmd)
