"""A run's claim (tracking/identity.py): taken once, held against others, taken over from the
dead, and never granted for a write the run's record does not allow."""

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import random

import pytest

from lit_attention.tracking import identity, schema
from lit_attention.tracking.identity import Claim, RunRefused, check_options
from lit_attention.tracking.liveness import process_identity
from lit_attention.tracking.schema import CLAIM, Status

HOST = socket.gethostname()


def dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def write_claim(run_dir: Path, age: float = 0.0, **holder) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM
    path.write_text(json.dumps({"command": "fit", "claimed_at": "2026-01-01T00:00:00+00:00", **holder}))
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def files(run_dir: Path) -> dict:
    return {p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_a_claim_is_taken_once_and_given_back(tmp_path):
    run_dir = tmp_path / "runs" / "g" / "r"
    first = Claim(run_dir, "fit")
    first.acquire()
    holder = json.loads((run_dir / CLAIM).read_text())
    assert {k: holder[k] for k in ("pid", "host", "pid_started")} == process_identity()
    assert len(first.record["uuid"]) == 32 and holder["uuid"] == first.record["uuid"]
    assert first.created == tmp_path / "runs"     # the highest directory it made

    with pytest.raises(RunRefused, match=f"in use: fit by process {os.getpid()} on {HOST}"):
        Claim(run_dir, "test", ckpt_path="x.ckpt").acquire()
    first.release()
    assert not (run_dir / CLAIM).exists()
    again = Claim(run_dir, "fit")
    again.acquire()
    assert "takeovers" not in again.record     # given back: nothing to take over
    again.release()


@pytest.mark.parametrize("holder,age,why", [
    (lambda: {"pid": dead_pid(), "host": HOST, "pid_started": 1}, 0, "is gone"),
    (lambda: {"pid": 1, "host": "elsewhere", "pid_started": 1}, identity.STALE_SECONDS + 5, "no heartbeat from elsewhere"),
    (lambda: {}, 0, "unreadable"),
])
def test_a_dead_holders_claim_is_taken_over_and_recorded(tmp_path, holder, age, why):
    run_dir = tmp_path / "r"
    old = holder()
    write_claim(run_dir, age, **old)
    schema.write_summary(run_dir, {"status": "running", "uuid": "a" * 32, "started_at": "then"})
    claim = Claim(run_dir, "fit", ckpt_path="last")
    claim.acquire()
    (taken,) = claim.record["takeovers"]
    assert why in taken["why"] and taken["pid"] == old.get("pid")
    assert claim.record["uuid"] == "a" * 32     # continued: the same run
    assert json.loads((run_dir / CLAIM).read_text())["pid"] == os.getpid()
    claim.release()


def test_a_live_holder_on_another_host_keeps_its_claim(tmp_path):
    run_dir = tmp_path / "r"
    write_claim(run_dir, identity.STALE_SECONDS - 60, pid=4242, host="elsewhere", pid_started=1)
    before = files(run_dir)
    with pytest.raises(RunRefused, match="in use: fit by process 4242 on elsewhere .*heartbeat"):
        Claim(run_dir, "fit", ckpt_path="last").acquire()
    assert files(run_dir) == before


def test_a_requeued_slurm_job_takes_over_its_earlier_attempts_claim(tmp_path, monkeypatch):
    run_dir = tmp_path / "r"
    write_claim(run_dir, pid=4242, host="node7", pid_started=1, slurm_job="99", slurm_restart=0)
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    claim = Claim(run_dir, "fit", ckpt_path="last")
    claim.acquire()
    assert "SLURM job 99 was requeued" in claim.record["takeovers"][0]["why"]
    assert json.loads((run_dir / CLAIM).read_text())["slurm_restart"] == 1
    claim.release()
    monkeypatch.setenv("SLURM_JOB_ID", "100")   # another job: the holder is not known dead
    write_claim(run_dir, pid=4242, host="node7", pid_started=1, slurm_job="99", slurm_restart=0)
    with pytest.raises(RunRefused, match="node7"):
        Claim(run_dir, "fit", ckpt_path="last").acquire()


def test_claims_race_one_process_wins(tmp_path):
    """Processes that claim one new run directory at the same moment: one holds it (until told to
    give it back), every other one is refused naming that holder."""
    run_dir, done = tmp_path / "runs" / "g" / "r", tmp_path / "done"
    script = (f"import os, sys, time; from lit_attention.tracking.identity import Claim, RunRefused\n"
              f"c = Claim({str(run_dir)!r}, 'fit')\n"
              f"time.sleep(max(0, {time.time() + 2} - time.time()))\n"
              f"try:\n    c.acquire()\nexcept RunRefused as e:\n    print(e); sys.exit(2)\n"
              f"while not os.path.exists({str(done)!r}):\n    time.sleep(0.05)\nc.release()\n")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    deadline = time.monotonic() + 60
    while sum(p.poll() is not None for p in procs) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    done.touch()
    outs = [(p.communicate(timeout=60)[0].strip(), p.returncode, p.pid) for p in procs]
    winners = [pid for out, code, pid in outs if code == 0]
    assert len(winners) == 1, outs
    for out, code, pid in outs:
        if pid != winners[0]:
            assert code == 2 and f"process {winners[0]} on {HOST}" in out, outs
    assert not (run_dir / CLAIM).exists()


# -- every claim state against every request: a claim or one short line, nothing written --------

HOLDERS = ("none", "alive", "dead", "remote-fresh", "remote-stale", "unreadable")
STATUSES = (None, *Status)


CASES = list(itertools.product(HOLDERS, STATUSES, (False, True), (False, True), (None, "same", "other", "untrained"),
                               ("fit", "validate", "test"), (None, "last", "own", "foreign"), (False, True), (False, True)))


@pytest.mark.parametrize("seed", range(3))
def test_every_claim_state_gives_a_claim_or_one_line_and_writes_nothing_when_refused(tmp_path_factory, seed):
    """Seeded random claim states (holder, record, checkpoints) against random requests."""
    for case in random.Random(seed).sample(CASES, 20):
        try:
            _claim_case(tmp_path_factory, *case)
        except AssertionError as exc:
            raise AssertionError(f"{case}: {exc}") from None


def _claim_case(tmp_path_factory, holder, status, trained, checkpoints, evaluated, subcommand, ckpt, overwrite,
                untrained):
    root = tmp_path_factory.mktemp("claims")
    run_dir = root / "g" / "r"
    (run_dir / "checkpoints").mkdir(parents=True)
    foreign = root / "g" / "other" / "checkpoints" / "best.ckpt"
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"PK-foreign")
    own = run_dir / "checkpoints" / "best.ckpt"
    if checkpoints:
        own.write_bytes(b"PK-own")
    ckpt_path = {None: None, "last": "last", "own": str(own), "foreign": str(foreign)}[ckpt]
    fields = {"status": status, "uuid": "b" * 32, "started_at": "then" if trained else None}
    if evaluated == "untrained":
        fields["untrained"] = True
    elif evaluated:
        fields["evaluated"] = {"checkpoint": "g/other/checkpoints/best.ckpt",
                               "sha256": identity.sha256(foreign) if evaluated == "same" else "0" * 64, "run": None}
    if status is not None or evaluated or trained:
        schema.write_summary(run_dir, {k: v for k, v in fields.items() if v is not None})
    if holder == "alive":
        write_claim(run_dir, **process_identity())
    elif holder == "dead":
        write_claim(run_dir, pid=dead_pid(), host=HOST, pid_started=1)
    elif holder.startswith("remote"):
        write_claim(run_dir, identity.STALE_SECONDS * (2 if holder == "remote-stale" else 0.5),
                    pid=7, host="elsewhere", pid_started=1)
    elif holder == "unreadable":
        (run_dir / CLAIM).write_text("{")
    before = files(run_dir)

    claim = Claim(run_dir, subcommand, ckpt_path, overwrite, untrained)
    try:
        check_options(subcommand, ckpt_path, overwrite, untrained)
        claim.acquire()
    except RunRefused as exc:
        line = str(exc)
        assert "\n" not in line and len(line) < 400, line
        assert files(run_dir) == before
        return
    finally:
        claim.release()
    # granted: never over a live holder, a trained run asked for nothing, or another model's scores
    assert holder not in ("alive", "remote-fresh")
    assert ("takeovers" in claim.record) == (holder != "none")
    if subcommand == "fit" and not ckpt_path:
        assert overwrite or status not in (Status.FINISHED, Status.PRUNED)
        assert overwrite or status is None or not checkpoints
        assert claim.record["uuid"] != "b" * 32 and not files(run_dir).get(Path(CLAIM))   # a new run; released
    if subcommand != "fit" and trained:
        assert ckpt in ("last", "own")
    if subcommand != "fit" and not trained and evaluated in ("same", "other"):
        assert ckpt == "foreign" and evaluated == "same"
    if subcommand != "fit" and not trained and evaluated == "untrained":
        assert untrained


@pytest.mark.parametrize("subcommand,ckpt,overwrite,untrained,says", [
    ("fit", None, False, True, "--run.untrained is for validate and test"),
    ("fit", "last", True, False, "give one of them"),
    ("test", "a.ckpt", True, False, "--run.overwrite is for fit"),
    ("validate", "a.ckpt", False, True, "give one of them"),
    ("test", None, False, False, "test without --ckpt_path evaluates untrained (random) weights"),
])
def test_run_options_at_odds_are_refused(subcommand, ckpt, overwrite, untrained, says):
    with pytest.raises(RunRefused, match=says.replace("(", r"\(").replace(")", r"\)")):
        check_options(subcommand, ckpt, overwrite, untrained)


def test_a_runs_identity_is_its_uuid_or_for_older_stores_its_record():
    assert identity.run_identity({"uuid": "c" * 32, "group": "g"}) == "c" * 32
    old = {"group": "g", "run_id": "t0000-s0", "started_at": "2025-01-01T00:00:00+00:00", "git_commit": "abc"}
    assert identity.run_identity(old) == "g/t0000-s0/2025-01-01T00:00:00+00:00/abc"
    assert identity.run_identity(old) != identity.run_identity({**old, "started_at": "2025-01-02T00:00:00+00:00"})
