"""Study storage: several worker processes popping waiting trials from one SQLite file."""

import multiprocessing as mp
import warnings

import optuna
import pytest

from lit_attention.sweep.storage import make_storage

N = 200


def _pop_all(url: str, queue) -> None:
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name="race", storage=make_storage(url, 10, 30, 2))
    taken = []
    while True:
        trial = study.ask()                # pops a waiting trial, else creates a new one
        if trial.number >= N:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            break
        taken.append(trial.number)
    queue.put(taken)


@pytest.mark.slow  # about 25 s on the shared 2-core machine
def test_three_processes_never_take_the_same_waiting_trial(tmp_path):
    # Without BEGIN IMMEDIATE, Python's sqlite3 read the trial's state outside the update's
    # transaction: 220 pops of 200 waiting trials (2 workers in a sweep both ran trial 0).
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="race", storage=make_storage(url, 10, 30, 2))
    for i in range(N):
        study.enqueue_trial({"x": i})
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_pop_all, args=(url, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    taken = [n for _ in procs for n in queue.get(timeout=240)]
    for p in procs:
        p.join(timeout=60)
    assert sorted(taken) == list(range(N))
