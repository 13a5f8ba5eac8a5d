"""Ctrl-C that arrives while the driver or a worker is inside a storage transaction (real SIGINT,
real SQLite, real processes): the stop happens after the transaction, which leaves the database
to the other processes at once."""

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings

import optuna
import pytest
import sqlalchemy

from lit_attention.sweep import driver, interrupts
from lit_attention.sweep import trial as tr
from lit_attention.sweep.storage import make_storage
from standin_sweeps import STANDIN


def _study(tmp_path):
    path = tmp_path / "study.db"
    storage = make_storage(f"sqlite:///{path}", heartbeat_interval=60, grace_period=120, max_retry=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(study_name="s", storage=storage)
        study.enqueue_trial({"x": 1.0})
    return path, storage, study


def _sigint_inside_next_transaction(storage) -> list:
    """Send SIGINT to this process right after the next query of `storage`, inside its transaction
    (which holds SQLite's write lock: BEGIN IMMEDIATE). Returns the statements it signalled after."""
    sent = []

    @sqlalchemy.event.listens_for(storage.engine, "after_cursor_execute")
    def _signal(conn, cursor, statement, *args):
        if not sent and statement.lstrip().upper().startswith(("SELECT", "INSERT", "UPDATE")):
            sent.append(statement)
            os.kill(os.getpid(), signal.SIGINT)
    return sent


def _writable_at_once(path) -> bool:
    db = sqlite3.connect(path, timeout=1, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("COMMIT")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


def test_a_stop_asked_for_inside_a_transaction_is_raised_after_it(tmp_path):
    path, storage, study = _study(tmp_path)
    sent = _sigint_inside_next_transaction(storage)
    before = signal.getsignal(signal.SIGINT)
    with interrupts.deferred():
        assert len(study.get_trials()) == 1    # the read completes
        assert sent
        with pytest.raises(KeyboardInterrupt):
            interrupts.sleep(0.01)
        assert _writable_at_once(path)
    interrupts.check()   # the request ended with the block
    assert signal.getsignal(signal.SIGINT) is before


# A stand-in worker: on SIGINT it marks its trial in the study (as a real worker does) and exits 0,
# or exits 3 if the database stayed locked.
_WORKER = """
import signal, sqlite3, sys, time
def stop(signum, frame):
    try:
        db = sqlite3.connect(sys.argv[1], timeout=10, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")
        db.execute("COMMIT")
    except sqlite3.OperationalError:
        sys.exit(3)
    sys.exit(0)
signal.signal(signal.SIGINT, stop)
print("ready", flush=True)
time.sleep(120)
sys.exit(4)
"""


@pytest.mark.slow   # over 2 CPU seconds (2.2-4.3 s alone on 2 cores)
def test_ctrl_c_while_the_driver_reads_the_study_lets_its_workers_record_their_trials(tmp_path):
    path, storage, study = _study(tmp_path)
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, str(path)], stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline() == "ready\n"
    polls = []

    def progress(s):   # the driver's progress line reads the study; Ctrl-C lands in the 2nd read
        if len(polls) == 1:
            _sigint_inside_next_transaction(storage)
        polls.append(len(s.get_trials()))

    with pytest.raises(KeyboardInterrupt):
        driver.wait_workers([worker], study, progress)
    assert worker.returncode == 0, "the worker found the database locked by the interrupted driver"
    assert polls == [1, 1]


def test_ctrl_c_while_a_worker_reports_stops_its_trial_after_the_write(tmp_path, monkeypatch):
    path, storage, study = _study(tmp_path)
    monkeypatch.setenv("STANDIN_STEPS", "600")
    monkeypatch.setenv("STANDIN_STEP_SECONDS", "0.1")
    trial = study.ask()
    cmd = [sys.executable, str(STANDIN), "--run.root", str(tmp_path), "--run.group", "g", "--run.id", "t0",
           "--seed_everything", "0"]

    def report(value, step):   # Optuna's intermediate value: a storage write; Ctrl-C lands inside it
        if step == 0:
            _sigint_inside_next_transaction(storage)
        trial.report(value, step)

    started = time.monotonic()
    with interrupts.deferred(), pytest.raises(KeyboardInterrupt):
        tr.run(cmd, tmp_path / "g" / "t0", "val_loss", report, should_prune=lambda: False)
    assert time.monotonic() - started < 30     # not the stand-in's 60 s of training
    assert _writable_at_once(path)
    assert study.get_trials()[0].intermediate_values[0] == pytest.approx(1.0)


def test_a_sleep_ends_once_its_processes_have_exited_not_before():
    """The driver waits for its workers and a worker for its trial this way: a run that has ended
    is noticed at once, not at the end of the poll interval."""
    quick = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(2)]
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = time.monotonic()
        interrupts.sleep(0.5, until_exit=[*quick, slow])
        assert time.monotonic() - started >= 0.5 and slow.poll() is None
        interrupts.sleep(60, until_exit=quick)
        assert time.monotonic() - started < 30
        assert [p.returncode for p in quick] == [0, 0]
    finally:
        slow.kill()
        slow.wait()


def test_a_stop_requested_during_a_sleep_ends_it_at_once():
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    with interrupts.deferred():
        started = time.monotonic()
        timer.start()
        with pytest.raises(interrupts.Stop) as stop:
            interrupts.sleep(60)
    timer.join()
    assert time.monotonic() - started < 30 and stop.value.signum == signal.SIGTERM
