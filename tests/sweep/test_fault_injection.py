"""Fault injection: kill -9 of a trial process and of the sweep driver at random moments of a short
sweep, on real SQLite and real PostgreSQL, then `--resume`; repeated with seeded random moments.

The stand-in trials save a checkpoint after every step, so `--resume` continues a killed run from
it where it can (sweep/trial.resumable) and starts the cell afresh where it cannot. After every
repetition: the resumed sweep exits 0, every cell has exactly one complete trial and exactly one
finished run whose metrics.csv holds each step once, no run directory was started afresh twice, no
trial is left running, and every failed trial and unfinished run says why (standin_sweeps.problems).

FAULT_REPS (default 1) repetitions per storage, FAULT_SEED (default 0) seeds their moments;
FAULT_LOG=FILE appends one JSON line per repetition (what was killed when, what the study shows).
docs/RELIABILITY.md reports
    FAULT_REPS=20 FAULT_LOG=faults.jsonl .venv/bin/python -m pytest tests/sweep/test_fault_injection.py -q
"""

import json
import os
import random
import signal
import threading
import time
from collections import Counter

import pytest

from conftest import sweep_in_process
from lit_attention.sweep.driver import failure_reason
from standin_sweeps import env, problems, sqlite_url, start, sweep_file, trials

REPS = int(os.environ.get("FAULT_REPS", "1"))
SEED = os.environ.get("FAULT_SEED", "0")
LRS = [0.001, 0.002, 0.003, 0.004]
SEEDS = 2
STEPS, STEP_SECONDS = 4, 0.25   # a stand-in trial runs about 1 s
DRIVER_LINES = 30               # the driver is killed after its k-th output line, k in 1..30 (a whole
                                # run prints about 40: progress, trial starts and ends, the report)

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request):
    return request.param, (None if request.param == "sqlite" else request.getfixturevalue("postgres")())


def _pid_of(run_dir) -> int | None:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return summary["process"]["pid"] if summary.get("status") == "running" else None


def _collect(stream, lines: list) -> None:
    for line in stream:
        lines.append(line)


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.parametrize("rep", range(REPS))
def test_kill_9_of_a_trial_and_the_driver_then_resume_runs_every_cell_exactly_once(tmp_path, storage, rep):
    kind, url = storage
    rng = random.Random(f"{SEED}-{kind}-{rep}")
    victim = rng.randrange(len(LRS) * SEEDS)                     # trial number = cell index
    trial_delay = rng.uniform(0, STEPS * STEP_SECONDS)          # into the victim's run
    driver_line = rng.randint(1, DRIVER_LINES)                  # after this line of the driver's output
    driver_delay = rng.uniform(0, 1.0)                          # and this many seconds more
    path = sweep_file(tmp_path, "crash", lrs=LRS, seeds=SEEDS, workers=2, storage=url)
    runs = tmp_path / "runs" / "crash"
    lines: list[str] = []
    proc = start(path, STANDIN_STEPS=STEPS, STANDIN_STEP_SECONDS=STEP_SECONDS)
    reader = threading.Thread(target=_collect, args=(proc.stdout, lines), daemon=True)
    reader.start()
    victim_at = driver_at = None
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if victim_at is None and (pid := _pid_of(runs / f"t{victim:04d}-s{victim % SEEDS}")):
                victim_pid, victim_at = pid, now + trial_delay
            if victim_at is not None and now >= victim_at:
                if _kill(victim_pid):
                    lines.append(f"<killed trial {victim} (pid {victim_pid}) {trial_delay:.2f} s into its run>\n")
                victim_at = float("inf")
            if driver_at is None and len(lines) >= driver_line:
                driver_at = now + driver_delay
            if driver_at is not None and now >= driver_at:
                if _kill(proc.pid):
                    lines.append(f"<killed the driver {driver_delay:.2f} s after output line {driver_line}>\n")
                break
            time.sleep(0.02)
        proc.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    began = time.monotonic()
    # the killed driver was a process; the one that resumes runs here (its workers and trials are processes)
    resumed = sweep_in_process(path, "--resume", env=env(STANDIN_STEPS=STEPS, STANDIN_STEP_SECONDS=STEP_SECONDS))
    story = "".join(lines) + "\n--- resume:\n" + resumed.stdout + resumed.stderr
    url = url or sqlite_url(path, "crash")
    found = problems(url, "crash", tmp_path / "runs", lrs=LRS, seeds=SEEDS, steps=STEPS)
    if os.environ.get("FAULT_LOG"):
        _record(os.environ["FAULT_LOG"], kind, rep, story, url, runs, found, resumed.returncode,
                time.monotonic() - began)
    assert resumed.returncode == 0, story
    assert "Traceback" not in story, story
    assert found == [], story


def _record(path, kind, rep, story, url, runs, found, code, resume_seconds) -> None:
    """One JSON line: what was killed when, in which phase, and what the study and runs show after."""
    before, _, _ = story.partition("--- resume:")
    at_kill = before.partition("<killed the driver")[0]
    progress = [line for line in at_kill.splitlines() if " done (" in line]
    phase = ("not killed: it had exited" if "<killed the driver" not in before
             else "before any trial started" if " start: " not in at_kill
             else "after the last trial (report)" if progress and "| 0 running | 0 waiting" in progress[-1]
             else "while trials ran")
    ts = trials(url, "crash")
    failed = Counter((failure_reason(t) or "no reason").split(":")[0] for t in ts if t.state.name == "FAIL")
    ended = Counter(json.loads((d / "summary.json").read_text()).get("error", "").split(":")[0]
                    for d in runs.glob("t*") if (d / "summary.json").exists())
    line = {"storage": kind, "rep": rep, "seed": SEED, "trial_killed": "<killed trial" in before,
            "driver_phase": phase, "trials": len(ts),
            "failed_trials": dict(failed), "run_errors": {k: v for k, v in ended.items() if k},
            "continued": story.count("from its last checkpoint)"),
            "resume_exit": code, "resume_seconds": round(resume_seconds, 1), "problems": found}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
