"""Study storage: database URLs never leak a secret; several worker processes pop waiting trials
from one SQLite file without taking the same one twice."""

import multiprocessing as mp
import warnings

import optuna
import pytest
import yaml

from conftest import REPO, cli_env, sweep_in_process
from lit_attention.sweep.storage import make_storage, mask_url, redact

# (url, the secret as the user typed it, the secret as a server or driver might echo it)
FORMS = [
    ("postgresql+psycopg2://ana:s3cr3t@db.example:5432/lit", "s3cr3t", "s3cr3t"),
    ("postgresql://ana:p@ss@db/lit", "p@ss", "p@ss"),                       # '@' left unencoded
    ("postgresql://ana:p%40ss%2Fw0rd@db/lit", "p%40ss%2Fw0rd", "p@ss/w0rd"),  # URL-encoded
    ("postgresql://ana@db/lit?password=qu3ry&sslmode=require", "qu3ry", "qu3ry"),
    ("postgresql://db/lit?user=ana&PassWord=Up%2Bper", "Up%2Bper", "Up+per"),
    ("postgresql://db/lit?sslpassword=k3y", "k3y", "k3y"),
]


@pytest.mark.parametrize("url,typed,echoed", FORMS)
def test_every_form_of_the_secret_is_masked(url, typed, echoed):
    masked = mask_url(url)
    assert typed not in masked and echoed not in masked and "***" in masked
    assert "ana" in masked or "ana" not in url                          # the user name stays
    message = f'connection to "{url}" failed: password authentication failed ("{echoed}")'
    assert echoed not in redact(message, url) and typed not in redact(message, url)


def test_a_url_without_secrets_is_unchanged():
    for url in ("sqlite:////tmp/runs/study.db", "postgresql://ana@db/lit?sslmode=require"):
        assert mask_url(url) == url


@pytest.mark.slow
def test_sweep_on_an_unreachable_database_never_prints_or_writes_the_secret(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({
        "study_name": "sec", "base": str(REPO / "configs" / "copy.yaml"), "sampler": "grid",
        "pruner": "none", "seeds": 1, "objective": {"metric": "val_loss", "direction": "minimize"},
        "space": {"model.lr": {"choices": [1.0e-3]}}}))
    url = "postgresql+psycopg2://ana:p%40ssW0rd@127.0.0.1:1/lit?password=S3cretQ&connect_timeout=2"
    # in this process, its file descriptors captured: what a driver process would print (C code's too)
    done = sweep_in_process(sweep, "--storage", url, "--root", tmp_path / "runs", cwd=tmp_path, env=cli_env())
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "cannot open the study" in output
    for secret in ("p%40ssW0rd", "p@ssW0rd", "S3cretQ"):
        assert secret not in output
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert secret not in path.read_text(errors="replace"), path


# -- one trial, one worker ------------------------------------------------------------------------

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
