"""The driver's checks before a sweep starts and its account of unfinished cells (no training)."""

import socket
import subprocess
import sys

import optuna
import pytest
import yaml

from conftest import REPO, family_neutral
from lit_attention.sweep import driver
from lit_attention.sweep.schema import SweepError, parse_sweep, read_yaml

COPY = REPO / "configs" / "copy.yaml"


def sweep_from(tmp_path, text: str, base=COPY):
    path = tmp_path / "s.yaml"
    path.write_text(f"study_name: s\nbase: {base}\nroot: {tmp_path / 'runs'}\n"
                    "objective: {metric: val_loss, direction: minimize}\n" + text)
    data, lines = read_yaml(path.read_text(), path)
    return parse_sweep(data, path, lines)


CASES = [
    ("space:\n  model.family: [transformer, rnn]\n  model.hiden_size: [32, 64]\n",
     "space.model.hiden_size", 7, "unknown option model.hiden_size — did you mean model.d_model?"),
    ("fixed: {trainer.max_epoch: 2}\nspace:\n  model.lr: [0.1]\n",
     "fixed.trainer.max_epoch", 5, "unknown option trainer.max_epoch — did you mean trainer.max_epochs?"),
    ("space:\n  model.d_model: {low: 32.0, high: 64.0, step: 16.0}\n",   # a float parameter: 32.0, 48.0 ...
     "space.model.d_model", 6, "invalid value for model.d_model: expected int, got '32.0'"),
    ("space:\n  model.dropout: [0.1, high]\n",
     "space.model.dropout", 6, "invalid value for model.dropout: expected float, got 'high'"),
    ("space:\n  model.width: [32, 64]\n",                      # a former name (registry.RENAMED)
     "space.model.width", 6, "unknown option model.width — did you mean model.d_model? (renamed: docs/CONFIG.md)"),
    # values the parser takes but the trainer, data module or model would not act on as given
    ("space:\n  trainer.gradient_clip_val: [1.0, -1.0]\n",
     "space.trainer.gradient_clip_val", 6, "invalid value for trainer.gradient_clip_val: -1.0: it must be a finite"),
    ("space:\n  model.lr: [0.001]\nfixed: {data.max_tokens: 0}\n",
     "fixed.data.max_tokens", 7, "invalid configuration: data.max_tokens must be >= 1"),
    ("space:\n  model.beam_size: [4, 0]\n",
     "space.model.beam_size", 6, "invalid configuration: model.beam_size must be >= 1"),
    # an accelerator the Trainer refuses here: every trial failed (exit 2) before
    ("space:\n  model.lr: [0.001]\nfixed: {trainer.accelerator: tpu}\n",
     "fixed.trainer.accelerator", 7, "invalid value for trainer.accelerator: tpu: no tpu device here"),
]


@pytest.mark.parametrize("text,key,line,message", CASES, ids=[c[1] for c in CASES])
def test_every_space_and_fixed_value_is_parsed_by_the_training_cli_first(tmp_path, text, key, line, message):
    sweep = sweep_from(tmp_path, text)
    with pytest.raises(SweepError) as err:
        driver.check_trials(sweep, tmp_path / "runs")
    assert (err.value.key, err.value.line) == (key, line)
    assert message in str(err.value)
    assert not (tmp_path / "runs").exists()


def neutral_base(tmp_path):
    """copy.yaml without its Transformer options: a base every family starts from."""
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(family_neutral(COPY)))
    return base


def test_a_value_only_some_cells_use_is_checked_in_such_a_cell(tmp_path):
    # `lstmm`-style typos of registry choices are the schema's; a value the parser refuses only in
    # a conditional branch must still be reached: here the rnn branch's bad teacher_forcing.
    sweep = sweep_from(tmp_path, "space:\n  model.family: [transformer, rnn]\n"
                                 "  model.teacher_forcing: {choices: [1.0, never], when: {model.family: rnn}}\n",
                       neutral_base(tmp_path))
    with pytest.raises(SweepError, match="invalid value for model.teacher_forcing") as err:
        driver.check_trials(sweep, tmp_path / "runs")
    assert err.value.key == "space.model.teacher_forcing"


def test_a_valid_sweep_passes_the_check(tmp_path):
    sweep = sweep_from(tmp_path, "space:\n  model.family: [transformer, rnn]\n"
                                 "  model.cell: {choices: [gru, lstm], when: {model.family: rnn}}\n"
                                 "  model.heads: {choices: [2, 4], when: {model.family: transformer}}\n"
                                 "  model.d_model: {low: 32, high: 64, step: 16}\n", neutral_base(tmp_path))
    driver.check_trials(sweep, tmp_path / "runs")


def test_an_option_of_another_family_in_the_base_stops_the_sweep(tmp_path):
    sweep = sweep_from(tmp_path, "space:\n  model.family: [transformer, rnn]\n")   # copy.yaml sets positional
    with pytest.raises(SweepError, match="option model.positional is not one of family 'rnn', only of transformer"):
        driver.check_trials(sweep, tmp_path / "runs")


def test_unfinished_cells_are_listed_with_their_reason(tmp_path):
    sweep = sweep_from(tmp_path, "seeds: 2\nspace:\n  model.lr: [0.1, 0.2]\n")
    study = optuna.create_study()
    dist = {"model.lr": optuna.distributions.CategoricalDistribution([0.1, 0.2]),
            "seed": optuna.distributions.CategoricalDistribution([0, 1])}
    state = optuna.trial.TrialState
    for lr, seed, st, attrs in [(0.1, 0, state.COMPLETE, {}), (0.1, 1, state.PRUNED, {}),
                                (0.2, 0, state.FAIL, {"error": "FloatingPointError: non-finite loss"}),
                                (0.2, 0, state.FAIL, {"skipped": "duplicate"})]:
        study.add_trial(optuna.create_trial(params={"model.lr": lr, "seed": seed}, distributions=dist,
                                            state=st, value=1.0 if st == state.COMPLETE else None,
                                            user_attrs=attrs))
    lines = driver.unfinished_cells(sweep, study)
    assert lines == ["lr=0.2 seed=0: failed (1 attempt(s)): FloatingPointError: non-finite loss",
                     "lr=0.2 seed=1: never ran"]


def test_a_dead_workers_trial_is_failed_at_once_and_its_retry_is_not_taken_for_dead(tmp_path):
    # Optuna's retry copied the dead worker's identity into the retry trial: once another worker
    # took it, the next check found "its worker" gone and failed it again, until the retries ran
    # out and --resume left the cell failed (1 of 7 driver kills in the fault-injection suite).
    sweep = sweep_from(tmp_path, "seeds: 1\nheartbeat: {interval: 1, grace_period: 30}\n"
                                 "space:\n  model.lr: [0.1]\n")
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = driver.open_study(sweep, url)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    taken = study.ask()   # as a worker takes a trial, then dies
    taken.set_user_attr("worker_process", {"pid": int(dead.stdout), "host": socket.gethostname(),
                                           "pid_started": None})
    driver.fail_abandoned(study, sweep, url)   # at once, not after the 30 s grace period
    states = [t.state for t in study.get_trials()]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]
    assert driver.failure_reason(study.get_trials()[0]) == driver.NO_RECORD
    retry = study.ask()   # another worker takes the retry
    driver.fail_abandoned(study, sweep, url)
    assert study.get_trials()[retry.number].state == optuna.trial.TrialState.RUNNING


# the scoring and transformer sweeps check the most cells: 1.8 CPU-s each
@pytest.mark.parametrize("name", ["demo", pytest.param("scoring", marks=pytest.mark.slow),
                                  pytest.param("transformer", marks=pytest.mark.slow), "lm", "reverse"])
def test_every_shipped_sweep_passes_the_training_cli_check(name, tmp_path):
    """Each family's options are set only where that family is (`when`), so every probe cell
    passes the model's own checks."""
    from lit_attention.sweep.schema import load_sweep
    driver.check_trials(load_sweep(REPO / "sweeps" / f"{name}.yaml"), tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_an_abandoned_run_is_closed_so_that_it_is_continued_or_never_counted(tmp_path):
    """A trial that lost its worker: a run whose process is gone becomes `killed` (its cell's next
    attempt continues it from last.ckpt); one that finished, or whose process still lives, becomes
    `failed` (it must not count beside the re-run); one that recorded its end keeps it."""
    import zipfile

    from lit_attention.sweep import trial as tr
    from lit_attention.tracking import schema
    from lit_attention.tracking.liveness import process_identity
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    gone = {"pid": int(dead.stdout), "host": socket.gethostname(), "pid_started": None}
    cases = {"gone": ("running", gone, None), "finished": ("finished", process_identity(), None),
             "alive": ("running", process_identity(), None), "signal": ("killed", gone, "killed by SIGKILL")}
    for number, (name, (status, process, error)) in enumerate(cases.items()):
        run_dir = tmp_path / name
        (run_dir / "checkpoints").mkdir(parents=True)
        with zipfile.ZipFile(run_dir / "checkpoints" / "last.ckpt", "w") as z:
            z.writestr("data", "x")
        schema.write_summary(run_dir, {"status": status, "process": process, "error": error})
        trial = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={"run_dir": str(run_dir)})
        trial.number = number
        driver.close_abandoned_run(trial)
    read = {name: schema.read_summary(tmp_path / name) for name in cases}
    assert read["gone"].status == "killed" and read["gone"].error.startswith("abandoned: trial 0 lost its worker")
    assert tr.resumable(tmp_path / "gone") is not None
    for name in ("finished", "alive"):
        assert read[name].status == "failed" and read[name].error.startswith("abandoned: "), name
        assert tr.resumable(tmp_path / name) is None
    assert read["signal"].status == "killed" and read["signal"].error == "killed by SIGKILL"


# -- a resumed study is the same design, its base included ------------------------------------

def inline_base_sweep(tmp_path, d_model: int, n_train: int):
    base = yaml.safe_load(COPY.read_text())
    base["model"]["init_args"]["d_model"], base["data"]["init_args"]["n_train"] = d_model, n_train
    path = tmp_path / "inline.yaml"
    path.write_text(yaml.safe_dump({"study_name": "s", "base": base, "root": str(tmp_path / "runs"),
                                    "objective": {"metric": "val_loss", "direction": "minimize"},
                                    "space": {"model.lr": [0.001, 0.003]}}))
    data, lines = read_yaml(path.read_text(), path)
    return parse_sweep(data, path, lines)


def test_resuming_a_study_whose_inline_base_changed_is_refused_naming_the_changes(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    driver.open_study(inline_base_sweep(tmp_path, 32, 200), url)
    driver.open_study(inline_base_sweep(tmp_path, 32, 200), url, resume=True)   # the same design: joins
    with pytest.raises(driver.StudyMismatch) as refused:
        driver.open_study(inline_base_sweep(tmp_path, 48, 400), url, resume=True)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'inline.yaml'}")
    assert ("base: study 's' was created from another base (base data.init_args.n_train 200 -> 400, "
            "model.init_args.d_model 32 -> 48): its trials would mix two designs; restore the base, or give "
            "the sweep another study_name (or delete the study)") in message, message


def test_resuming_a_study_whose_base_file_changed_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    config = tmp_path / "base.yaml"
    config.write_text(COPY.read_text())
    text = "seeds: 1\nspace:\n  model.lr: [0.1]\n"
    driver.open_study(sweep_from(tmp_path, text, base=config), url)
    config.write_text(COPY.read_text().replace("d_model: 64", "d_model: 48"))
    with pytest.raises(driver.StudyMismatch, match=r"created from another base \(the base config's text changed\)"):
        driver.open_study(sweep_from(tmp_path, text, base=config), url, resume=True)


def test_a_study_created_before_designs_were_recorded_is_joined_and_gets_its_design(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    sweep = sweep_from(tmp_path, "seeds: 1\nspace:\n  model.lr: [0.1]\n")
    old = optuna.create_study(study_name="s", storage=url, direction="minimize")   # as the code before made it
    for key, value in (("spec", sweep.spec()), ("spec_hash", sweep.spec_hash()), (driver.READY, True)):
        old.set_user_attr(key, value)
    study = driver.open_study(sweep, url, resume=True)
    assert study.user_attrs["design"] == sweep.design()
