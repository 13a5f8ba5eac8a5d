"""Several drivers and workers on one study, real processes, real SQLite and PostgreSQL: every
cell is run by exactly one worker, and two drivers started at once share one study. (The stalled
worker's sweep has its driver in this process: only its workers race.)"""

import json
import os
import signal
import subprocess
import threading

import pytest

from conftest import sweep_in_process
from standin_sweeps import env, problems, sqlite_url, start, sweep_file, wait_for, worker_of

# 10 to 25 CPU seconds per test and storage (drivers, workers and their storage round-trips).
pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request):
    """The study URL a test's sweep file names: None (SQLite under its root), or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("postgres")()


def url_of(path, name, storage):
    return storage or sqlite_url(path, name)


def finish(proc: subprocess.Popen, timeout: float = 240) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def test_two_drivers_of_two_workers_started_at_once_share_a_new_study_and_run_each_cell_once(tmp_path, storage):
    # Both drivers created the tables (PostgreSQL: IntegrityError on pg_type) or the study at the
    # same moment, and the loser exited 1 with the raw SQL error. Four workers then pull 12 short
    # trials from the one study (3 each on average; every trial costs each process storage
    # round-trips, ~1 CPU second in all): none may run twice, none may be lost.
    lrs = [round(0.001 * i, 3) for i in range(1, 7)]
    path = sweep_file(tmp_path, "twin", lrs=lrs, workers=2, storage=storage)
    drivers = [start(path, STANDIN_STEPS=1, STANDIN_STEP_SECONDS=0.2) for _ in range(2)]
    outputs = [finish(p) for p in drivers]
    for p, out in zip(drivers, outputs):
        assert p.returncode == 0, out
        assert "Traceback" not in out and "cannot open the study" not in out, out
    assert all(" start: " in out for out in outputs), "a driver ran no trial:\n" + "\n".join(outputs)
    assert problems(url_of(path, "twin", storage), "twin", tmp_path / "runs", lrs=lrs) == [], "\n".join(outputs)


def test_a_stalled_worker_whose_trial_was_rerun_elsewhere_stops_it_and_it_does_not_count(tmp_path, storage):
    # A worker paused past the grace period (SIGSTOP: a loaded machine, a VM pause) had its trial
    # failed as stale and re-run by the other worker; it then ran on, both runs finished (one cell,
    # two runs in the report) and the worker died on "Cannot tell a FAIL trial".
    path = sweep_file(tmp_path, "stall", lrs=[0.001], seeds=1, workers=2, interval=1, grace=2, storage=storage)
    runs = tmp_path / "runs" / "stall"
    stalled = []

    def stall_the_first_worker():   # beside the driver, which runs in this process's main thread
        try:
            worker = wait_for(lambda: worker_of(runs / "t0000-s0"))
            os.kill(worker, signal.SIGSTOP)
            try:
                wait_for(lambda: next((d for d in runs.glob("t*-s0") if d.name != "t0000-s0"), None))   # re-run
            finally:
                os.kill(worker, signal.SIGCONT)
            stalled.append(worker)
        except BaseException as e:
            stalled.append(e)

    stall = threading.Thread(target=stall_the_first_worker, daemon=True)
    stall.start()
    # Only t0000 must outlive the stall (its worker's fence stops it after SIGCONT); the re-run is short.
    done = sweep_in_process(path, env=env(STANDIN_STEPS=4, STANDIN_STEPS_t0000_s0=60, STANDIN_STEP_SECONDS=0.5))
    stall.join(timeout=60)
    out = done.stdout + done.stderr
    assert len(stalled) == 1 and isinstance(stalled[0], int), (stalled, out)
    assert done.returncode == 0, out
    assert "Traceback" not in out and "Cannot tell" not in out, out
    summary = json.loads((runs / "t0000-s0" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("superseded: "), summary
    assert problems(url_of(path, "stall", storage), "stall", tmp_path / "runs", lrs=[0.001], seeds=1) == []
