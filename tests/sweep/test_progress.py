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
    assert "| 1 waiting | 1 failed | 1 re-queued |" in line and "pruned" not in line and "running" not in line


def test_progress_lines_fit_100_characters():
    """The longest lines a sweep prints: a trial's parameters (TPE floats shortened) and its run
    directory continue on indented lines, none wider than 100 characters, none dropped."""
    params = {"model.lr": 0.0019634882601995383, "model.warmup": 500, "model.label_smoothing": 0.0324351,
              "model.dropout": 0.082561, "data.max_tokens": 2048, "seed": 0}
    text = progress.short_params(params)
    assert text == "lr=0.001963 warmup=500 label_smoothing=0.03244 dropout=0.08256 max_tokens=2048"
    whole = (f"[tune-reference] trial 19 start (continuing trial 18's run from its last checkpoint): "
             f"{text} seed=0 -> /work/runs/tune-reference/t0018-s0")
    lines = progress.fit(whole).splitlines()
    assert len(lines) > 1 and all(len(l) <= progress.WIDTH for l in lines), lines
    assert all(l.startswith("    ") for l in lines[1:]) and " ".join(l.strip() for l in lines) == whole
