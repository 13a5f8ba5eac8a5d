"""Several drivers and workers on one study, real processes, real SQLite and PostgreSQL: every
cell is run by exactly one worker, and two drivers started at once share one study."""

import subprocess

import pytest

from standin_sweeps import problems, sqlite_url, start, sweep_file

# About 40 s per test and storage on the shared 2-core machine (each driver starts the training CLI).
pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request):
    """``storage(path, name)`` -> the study URL the sweep file at `path` uses (None: its SQLite)."""
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


def test_two_drivers_started_at_once_share_one_new_study(tmp_path, storage):
    # Both drivers created the tables (PostgreSQL: IntegrityError on pg_type) or the study at
    # the same moment, and the loser exited 1 with the raw SQL error.
    path = sweep_file(tmp_path, "twin", storage=storage)
    drivers = [start(path, STANDIN_STEP_SECONDS=0.3) for _ in range(2)]
    outputs = [finish(p) for p in drivers]
    for p, out in zip(drivers, outputs):
        assert p.returncode == 0, out
        assert "Traceback" not in out and "cannot open the study" not in out, out
    assert all(" start: " in out for out in outputs), "a driver ran no trial:\n" + "\n".join(outputs)
    assert problems(url_of(path, "twin", storage), "twin", tmp_path / "runs") == []
