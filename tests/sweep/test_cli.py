"""Sweeps with real processes and real databases: a trial is a real `lit-attention fit`, except in
tests of the driver's own bookkeeping (a killed worker, pruning, SIGTERM), whose trials are the
stand-in fit (tests/sweep/standin_fit.py). The driver runs in this process (sweep_in_process), its
workers and trials as processes; a test that signals the driver runs it as a process of its own.

Tiny copy-task configurations (200 pairs, 1-layer width-32 models, 2-6 epochs) keep a trial at a
few seconds of CPU; most of it is importing torch and Lightning (~4.5 CPU seconds a process).
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from conftest import REPO, cli_in_process, family_neutral, sweep_cmd, sweep_in_process, write_sweep
from lit_attention.sweep.driver import failure_reason
from lit_attention.sweep.progress import counted_trials
from standin_sweeps import STANDIN
from standin_sweeps import sweep_file as standin_sweep_file

COPY = REPO / "configs" / "copy.yaml"
TINY = {
    "data.n_train": 200, "data.n_val": 80, "data.n_test": 40, "data.max_tokens": 224,
    "model.d_model": 32, "model.enc_layers": 1, "model.dec_layers": 1,
    "model.dropout": 0.0, "model.val_bleu": False, "model.warmup": 1,
    "trainer.max_epochs": 2, "trainer.enable_progress_bar": False,
}
# On a base without copy.yaml's Transformer options (an option of another family is refused).
TWO_FAMILIES = {"model.family": {"choices": ["transformer", "rnn"]},
                "model.ffn": {"choices": [64], "when": {"model.family": "transformer"}},
                "model.cell": {"choices": ["gru"], "when": {"model.family": "rnn"}}}

STANDIN_FIT = json.dumps([sys.executable, str(STANDIN)])

pytestmark = pytest.mark.slow


def env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("LIT_ATTENTION_", "WANDB_"))}
    e.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1")
    e.update(extra)
    return e


def sweep_file(tmp_path: Path, name: str, space: dict, **top) -> Path:
    data = {"study_name": name, "base": str(COPY), "root": str(tmp_path / "runs"),
            "objective": {"metric": "val_loss", "direction": "minimize"},
            "sampler": "grid", "pruner": "none", "seeds": 1, "heartbeat": {"interval": 1, "grace_period": 4},
            **top}
    data["fixed"] = {**TINY, **top.get("fixed", {})}
    data["space"] = space
    return write_sweep(tmp_path, name, data)


def run_sweep(path: Path, *args, **environ) -> subprocess.CompletedProcess:
    """The sweep with its driver in this process (its workers and trials are processes): for the
    tests that do not signal or kill the driver."""
    return sweep_in_process(path, *args, env=env(**environ))


def load(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=url)


def watch(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    """The trials of a SQLite study that a sweep may be creating right now, read as an outside
    tool should: read-only. Opening it read-write creates Optuna's tables when they are missing,
    outside the driver's study lock, and a driver creating them at the same moment exited with
    "UNIQUE constraint failed: alembic_version.version_num" (2 of 6 runs of the kill test on a
    loaded machine). Raises until the driver has created the study."""
    path = url.removeprefix("sqlite:///")
    assert path != url, url
    return load(f"sqlite:///file:{path}?mode=ro&uri=true", name).get_trials(deepcopy=False)


def sqlite_url(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / 'runs' / name / 'study.db'}"


def cells(trials) -> list[tuple]:
    return [(*sorted(t.params.items()), t.user_attrs["seed"]) for t in trials]


def assert_complete_without_duplicates(study: optuna.Study, n: int) -> list:
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == n, [(t.number, t.state, t.user_attrs) for t in trials]
    assert len(set(cells(complete))) == n  # no grid cell x seed ran twice
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for t in complete:
        run_dir = Path(t.user_attrs["run_dir"])
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["seed"] == t.user_attrs["seed"]
        assert summary["val_loss"] == pytest.approx(t.value)
        assert "wandb_run_id" in t.user_attrs
    return complete


def test_two_workers_on_sqlite_finish_every_cell_once_and_resume_reruns_nothing(tmp_path):
    # One seed: two cells for two workers (exactly-once under many more cells and workers is
    # tests/sweep/test_races.py's, on stand-in trials).
    path = sweep_file(tmp_path, "duo", TWO_FAMILIES, seeds=1, base=family_neutral(COPY))
    out = run_sweep(path, "--workers", 2)
    assert out.returncode == 0, out.stdout + out.stderr
    study = load(sqlite_url(tmp_path, "duo"), "duo")
    complete = assert_complete_without_duplicates(study, 2)
    assert len({t.user_attrs["worker"] for t in complete}) == 2  # both workers took trials
    lines = out.stdout.splitlines()          # the report's view: a header, one row per configuration
    header = next(i for i, line in enumerate(lines) if "mean ± sd (n)" in line)
    rows = " ".join(lines[header + 1:header + 3])
    assert "rnn" in rows and "transformer" in rows and lines[header + 3].startswith("in ")
    assert (tmp_path / "runs" / "duo" / "report" / "table.tex").exists()
    again = run_sweep(path, "--resume")
    assert again.returncode == 0, again.stderr
    assert len(counted_trials(load(sqlite_url(tmp_path, "duo"), "duo"))) == 2   # resume ran nothing again


def test_a_sweep_over_a_typo_exits_2_without_writing_anything(tmp_path):
    # How fast it stops is not asserted here: a loaded machine inflates even CPU seconds.
    path = sweep_file(tmp_path, "typo", {"model.family": {"choices": ["transformer", "rnn"]},
                                         "model.hiden_size": {"choices": [32, 64]}})
    out = run_sweep(path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "space.model.hiden_size: unknown option model.hiden_size — did you mean model.d_model?" in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 5, out.stderr
    assert not (tmp_path / "runs").exists()          # no study database, no run directory


# -- PostgreSQL: the `postgres` fixture (conftest.py) starts a private server ---------------------


def test_two_workers_on_postgresql_and_the_password_never_leaks(tmp_path, postgres):
    secret = "Sup3rSecretPw"
    url = postgres(secret)
    path = sweep_file(tmp_path, "pg", TWO_FAMILIES, seeds=1, base=family_neutral(COPY))
    out = run_sweep(path, "--workers", 2, "--storage", url)
    assert out.returncode == 0, out.stdout + out.stderr
    complete = assert_complete_without_duplicates(load(url, "pg"), 2)
    assert len({t.user_attrs["worker"] for t in complete}) == 2
    assert "***" in out.stdout and secret not in out.stdout + out.stderr
    for f in (tmp_path / "runs").rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


# -- failures ------------------------------------------------------------------------------------

def _wait_running(url: str, name: str, proc: subprocess.Popen | None, timeout: float = 240) -> optuna.trial.FrozenTrial:
    """The first trial a worker has taken whose training process has started and validated once
    (``proc``: the sweep's driver process, None when it runs in this process).

    Waiting for a validation row means the process is past its imports and inside `fit`, so a signal
    sent now meets a trial that is training, not one that is starting or already writing its summary.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        try:
            trials = watch(url, name)
        except Exception:  # no study yet, or the database is locked by a writer for a moment
            trials = []
        for t in trials:
            if t.state == TrialState.RUNNING and "run_dir" in t.user_attrs and _training_processes(t) \
                    and _validated(Path(t.user_attrs["run_dir"])):
                return t
        time.sleep(0.2)
    if proc is None:
        raise AssertionError("no trial seen training")
    proc.kill()
    raise AssertionError(f"no trial seen training (sweep exit {proc.poll()}):\n{proc.communicate()[0]}")


def interrupt_sweep(path: Path, wait, interrupt, *args, timeout: float, **environ) -> tuple[int, str, object]:
    """Start `lit-attention sweep PATH ARGS`, wait for ``wait(proc)`` to return, then call
    ``interrupt(proc, what wait returned)``. Returns (the sweep's exit code, its output, what wait
    returned); the sweep never outlives the call."""
    proc = subprocess.Popen(sweep_cmd(path, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env(**environ), cwd=REPO)
    try:
        waited = wait(proc)
        interrupt(proc, waited)
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, output, waited


def _validated(run_dir: Path) -> bool:
    try:
        return "val_loss" in (run_dir / "metrics.csv").read_text()
    except FileNotFoundError:
        return False


def _training_processes(trial: optuna.trial.FrozenTrial) -> list[int]:
    """Processes whose command line is this trial's `lit-attention fit` (its run id under its root)."""
    run_dir = Path(trial.user_attrs["run_dir"])
    wanted = [f"\0--run.root\0{run_dir.parents[1]}\0".encode(), f"\0--run.id\0{run_dir.name}\0".encode()]
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if all(w in cmdline for w in wanted):
                pids.append(int(proc.name))
    return pids


def test_worker_killed_mid_trial_its_trial_fails_and_its_cell_runs_again(tmp_path):
    """The heartbeats, the re-queue and the guard that takes a trial down with its worker are the
    driver's: the trials are the stand-in fit (tests/sweep/standin_fit.py), 3 s each, long enough
    to outlive the kill; a real fit adds nothing here but ~10 CPU seconds a trial."""
    path = standin_sweep_file(tmp_path, "kill", lrs=[0.001], seeds=3, workers=2, grace=4)
    url = sqlite_url(tmp_path, "kill")
    killed = []

    def kill_a_worker():   # beside the driver, which runs in this process's main thread
        try:
            victim = _wait_running(url, "kill", None)
            os.kill(int(victim.user_attrs["worker"].rpartition(":")[2]), signal.SIGKILL)
            killed.append(victim)
        except BaseException as e:
            killed.append(e)

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    out = run_sweep(path, LIT_ATTENTION_FIT_COMMAND=STANDIN_FIT, STANDIN_STEPS="30", STANDIN_STEP_SECONDS="0.1")
    killer.join(timeout=10)
    output = out.stdout + out.stderr
    assert len(killed) == 1 and isinstance(killed[0], optuna.trial.FrozenTrial), (killed, output)
    victim = killed[0]
    assert out.returncode == 0, output
    trials = load(url, "kill").get_trials(deepcopy=False)
    # Failed by the heartbeat of another worker, not left RUNNING.
    assert trials[victim.number].state == TrialState.FAIL, (trials[victim.number].user_attrs, output)
    assert failure_reason(trials[victim.number]).startswith("stale heartbeat: worker "), output
    retries = [t for t in trials if t.user_attrs.get("retry_of") == victim.number]
    assert [t.state for t in retries] == [TrialState.COMPLETE]
    assert retries[0].params == victim.params
    assert sorted(t.user_attrs["seed"] for t in trials if t.state == TrialState.COMPLETE) == [0, 1, 2]
    assert not _training_processes(victim)  # its training process died with it


@pytest.mark.parametrize("sampler", ["grid", "random"])
def test_seeds_are_replicates_that_optuna_does_not_rank_beside_the_knobs(tmp_path, sampler):
    """The stand-in fit's val_loss is its seed plus a little: were the seed an Optuna parameter,
    importances, the dashboard's plots and trials_dataframe() would rank it as the main effect.
    Random sampling runs each sampled configuration once per seed as the grid does."""
    path = standin_sweep_file(tmp_path, "reps", lrs=[1e-3, 2e-3, 3e-3], seeds=2)
    if sampler == "random":
        data = yaml.safe_load(path.read_text())
        data.update(sampler={"name": "random", "seed": 0}, n_trials=6,
                    space={"model.lr": {"low": 1e-4, "high": 1e-2, "log": True}})
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = run_sweep(path, LIT_ATTENTION_FIT_COMMAND=STANDIN_FIT)
    assert out.returncode == 0, out.stdout + out.stderr
    url = sqlite_url(tmp_path, "reps")
    study = load(url, "reps")
    importances = optuna.importance.get_param_importances(
        study, evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    assert list(importances) == ["model.lr"]
    frame = study.trials_dataframe()
    assert [c for c in frame.columns if c.startswith("params_")] == ["params_model.lr"]
    assert sorted(frame["user_attrs_seed"]) == [0, 0, 0, 1, 1, 1]
    assert len({t.params["model.lr"] for t in study.get_trials()}) == 3   # each configuration: two seeds
    for t in study.get_trials():
        assert t.state == TrialState.COMPLETE and set(t.params) == {"model.lr"}
        assert t.user_attrs["val_loss"] == t.value and "metrics" not in t.user_attrs   # a number to sort by
        assert not [k for k, v in t.user_attrs.items() if "lost" in k or "heartbeat" in str(v)], t.user_attrs
    again = run_sweep(path, "--resume", LIT_ATTENTION_FIT_COMMAND=STANDIN_FIT)
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(load(url, "reps").get_trials()) == 6   # every cell x seed already ran: nothing again


def test_nan_trial_fails_with_its_reason_and_the_others_complete(tmp_path):
    path = sweep_file(tmp_path, "nan", {"model.lr": {"choices": [3.0e-3, 1.0e30]}})
    out = run_sweep(path)
    # Not every requested cell finished: exit 1 and a line per unfinished cell with its reason.
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 requested cell(s) did not finish" in out.stderr
    assert "lr=1e+30 seed=0: failed (1 attempt(s)): " in out.stderr and "non-finite" in out.stderr
    trials = load(sqlite_url(tmp_path, "nan"), "nan").get_trials()
    by_lr = {t.params["model.lr"]: t for t in trials}
    assert by_lr[3.0e-3].state == TrialState.COMPLETE
    bad = by_lr[1.0e30]
    assert bad.state == TrialState.FAIL
    assert "non-finite" in bad.user_attrs["error"]
    assert json.loads((Path(bad.user_attrs["run_dir"]) / "summary.json").read_text())["status"] == "failed"


def test_an_objective_no_trial_logs_stops_the_sweep_after_its_first_trial(tmp_path):
    """objective.metric val_bleu for runs that log val_loss only (a typo, or model.val_bleu false)
    once trained every cell, each failing "missing" at its end."""
    path = standin_sweep_file(tmp_path, "halt", lrs=[1e-3, 2e-3, 3e-3], seeds=1)
    data = yaml.safe_load(path.read_text())
    data["objective"] = {"metric": "val_bleu", "direction": "maximize"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = run_sweep(path, LIT_ATTENTION_FIT_COMMAND=STANDIN_FIT)
    assert out.returncode == 2, out.stdout + out.stderr
    assert ("[halt] stopped: trial 0: objective val_bleu is not among the metrics this run logged (val_loss); "
            "no other trial was started") in out.stderr
    study = load(sqlite_url(tmp_path, "halt"), "halt")
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.WAITING, TrialState.WAITING]
    assert sorted(p.name for p in (tmp_path / "runs" / "halt").glob("t*")) == ["t0000-s0"]
    # --resume tries again: one more trial, which stops it again
    out = run_sweep(path, "--resume", LIT_ATTENTION_FIT_COMMAND=STANDIN_FIT)
    assert out.returncode == 2 and "[halt] stopped: trial 1: " in out.stderr, out.stdout + out.stderr
    assert len(list((tmp_path / "runs" / "halt").glob("t*"))) == 2


def test_ctrl_c_stops_cleanly_and_resume_reruns_only_the_unfinished_cell(tmp_path):
    # One cell: what resume must not do (run a cell twice, or one that is not the interrupted
    # one) shows as a third trial. 6 epochs of ~1 s: the trial outlives the wait below, and its
    # continuation trains the 5 left.
    path = sweep_file(tmp_path, "intr", {"model.family": {"choices": ["transformer"]}}, seeds=1,
                      fixed={"trainer.max_epochs": 6, "data.n_train": 1000})
    url = sqlite_url(tmp_path, "intr")
    code, output, first = interrupt_sweep(path, lambda proc: _wait_running(url, "intr", proc),
                                          lambda proc, _: proc.send_signal(signal.SIGINT), timeout=180)
    assert code == 130, output
    assert "--resume" in output
    t = load(url, "intr").get_trials()[first.number]
    assert t.state == TrialState.FAIL and "interrupted (Ctrl-C)" in t.user_attrs["error"], (t.state, t.user_attrs, output)
    assert not _training_processes(first)
    out = run_sweep(path, "--resume")
    assert out.returncode == 0, out.stdout + out.stderr
    trials = load(url, "intr").get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert [t.user_attrs["seed"] for t in complete] == [0]
    assert complete[0].user_attrs["resumed_from"] == first.number   # from the checkpoint the fit left
    assert len(trials) == 2  # the interrupted cell ran once more, nothing else


def test_median_pruner_stops_a_bad_configuration_before_its_last_epoch(tmp_path):
    """The driver's side of pruning: validation values read from metrics.csv reach Optuna's median
    pruner, which stops the worse configuration through its STOP file. The trials are the stand-in
    fit, the third one (lr=1e-9, grid order) 1.0 worse at every step; a real fit that obeys STOP
    and records "pruned" is tests/sweep/test_trial.py's."""
    steps = 10
    path = standin_sweep_file(tmp_path, "prune", lrs=[1.0e-2, 5.0e-3, 1.0e-9], seeds=1)
    data = yaml.safe_load(path.read_text())
    data["pruner"] = {"name": "median", "n_startup_trials": 2}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # steps of 0.3 s: the driver polls metrics.csv every 0.5 s, so it sees the bad trial early
    out = run_sweep(path, LIT_ATTENTION_FIT_COMMAND=STANDIN_FIT, STANDIN_STEPS=str(steps),
                    STANDIN_STEP_SECONDS="0.3", STANDIN_WORSE_t0002_s0="1.0")
    assert out.returncode == 0, out.stdout + out.stderr
    trials = {t.params["model.lr"]: t for t in load(sqlite_url(tmp_path, "prune"), "prune").get_trials()}
    assert trials[1.0e-2].state == trials[5.0e-3].state == TrialState.COMPLETE
    assert len(trials[1.0e-2].intermediate_values) == steps
    bad = trials[1.0e-9]
    assert bad.state == TrialState.PRUNED
    summary = json.loads((Path(bad.user_attrs["run_dir"]) / "summary.json").read_text())
    assert summary["status"] == "pruned"   # what the driver's STOP file asked for
    # the driver stops it between polls, so how far it got depends on speed: only "not every step"
    assert summary["epochs"] < steps and len(bad.intermediate_values) < steps


def test_two_devices_per_trial_one_run_one_wandb_run_same_loss_as_one_process(tmp_path):
    path = sweep_file(tmp_path, "ddp", {"model.family": {"choices": ["transformer"]}})
    # The same global batch on one process: DDP rank r takes batches r, r+2, ... of one global list,
    # so two accumulated batches per step are exactly one DDP step.
    single = ["fit", "--config", str(COPY),
              "--run.root", str(tmp_path / "single"), "--run.group", "ref", "--run.id", "ref",
              "--seed_everything", "0", "--model.family", "transformer",
              "--trainer.accumulate_grad_batches", "2"]
    for k, v in TINY.items():
        single += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
    out = run_sweep(path, "--devices-per-trial", 2, "--tracking", "wandb")
    assert out.returncode == 0, out.stdout + out.stderr
    ref = cli_in_process(*single, env=env(OMP_NUM_THREADS="1"))   # one process: this one
    assert ref.returncode == 0, ref.stderr[-3000:]
    (trial,) = load(sqlite_url(tmp_path, "ddp"), "ddp").get_trials()
    assert trial.state == TrialState.COMPLETE
    run_dirs = [p for p in (tmp_path / "runs" / "ddp").iterdir() if (p / "summary.json").exists()]
    assert run_dirs == [Path(trial.user_attrs["run_dir"])]
    summary = json.loads((run_dirs[0] / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["status"] == "finished"
    assert "[rank: 1]" in (run_dirs[0] / "trial.log").read_text()  # the second gloo process ran
    assert summary["wandb_run_id"] and trial.user_attrs["wandb_run_id"] == summary["wandb_run_id"]
    assert len(list((run_dirs[0] / "wandb").glob("offline-run-*"))) == 1
    reference = json.loads((tmp_path / "single" / "ref" / "ref" / "summary.json").read_text())
    assert summary["val_loss"] == pytest.approx(reference["val_loss"], abs=1e-4)


def test_sigterm_stops_the_sweep_as_ctrl_c_does(tmp_path):
    """A session's or a batch job's end: SIGTERM to the driver interrupts the running trial (a real
    fit leaves a checkpoint of the step it reached) and the sweep exits 130 with the --resume hint,
    instead of dying at once and taking its workers and trials down with SIGKILL. The trial is a
    stand-in (tests/sweep/record_trial.py) that waits."""
    path = sweep_file(tmp_path, "term", {"model.family": {"choices": ["transformer"]}})
    stand_in = json.dumps([sys.executable, str(Path(__file__).with_name("record_trial.py"))])
    seen = tmp_path / "runs" / "term" / "t0000-s0" / "seen.json"

    def trial_started(proc):
        deadline = time.monotonic() + 120
        while not seen.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.2)
    code, output, _ = interrupt_sweep(path, trial_started, lambda proc, _: proc.send_signal(signal.SIGTERM),
                                      timeout=90, LIT_ATTENTION_FIT_COMMAND=stand_in, RECORD_TRIAL_SECONDS="300")
    assert code == 130, output
    assert "Continue with: lit-attention sweep" in output and "--resume" in output
    [t] = load(sqlite_url(tmp_path, "term"), "term").get_trials()
    assert t.state == TrialState.FAIL and "interrupted (SIGTERM)" in t.user_attrs["error"], t.user_attrs
