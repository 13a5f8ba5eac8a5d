"""lit_attention/sweep/progress.py: the progress line's counts."""

import optuna

from lit_attention.sweep import progress

DIST = {"model.family": optuna.distributions.CategoricalDistribution(["rnn", "transformer"]),
        "seed": optuna.distributions.CategoricalDistribution([0, 1])}


def test_a_stopped_trial_whose_cell_is_queued_again_is_not_counted_failed():
    """As in the reference sweep after two interruptions: "3 failed" for three runs that `--resume`
    had queued again to continue from their checkpoints."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    failed = optuna.trial.TrialState.FAIL
    for family, seed in (("rnn", 0), ("transformer", 1)):
        study.add_trial(optuna.create_trial(params={"model.family": family, "seed": seed}, distributions=DIST,
                                            state=failed))
    study.add_trial(optuna.create_trial(params={"model.family": "rnn", "seed": 1}, distributions=DIST, value=3.0))
    study.enqueue_trial({"model.family": "rnn", "seed": 0})            # re-queued: continues later
    assert progress.counts(study) == {"complete": 1, "pruned": 0, "failed": 1, "requeued": 1,
                                      "running": 0, "waiting": 1}
    line = progress.progress_line(study, "val_bleu", total=4)
    assert "| 1 waiting | 1 failed (1 stopped and queued again) |" in line
