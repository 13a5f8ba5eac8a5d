"""Whether a run whose summary says "running" still has a process behind it.

A run killed with SIGKILL (or by the OOM killer, or a reboot) never writes its end, so its
summary.json keeps ``status: running``. The training process records who it is (pid, host and
the pid's start time, which tells a reused pid apart); a reader on the same host checks that
process and reports the run as ``killed`` with a reason when it is gone. On another host it
cannot look, and the run stays ``running`` (its ``heartbeat_at``, written at every validation,
says how recent it is).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from lit_attention.tracking.schema import Status


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of process `pid` (/proc/PID/stat fields 3 and
    22; the start time tells a reused pid apart), None if there is no such process or no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def process_identity() -> dict:
    """pid, host and pid start time of this process (recorded in summary.json by a running fit)."""
    stat = _stat(os.getpid())
    return {"pid": os.getpid(), "host": socket.gethostname(), "pid_started": stat and stat[1]}


def _alive(pid: int, started: int | None) -> bool:
    if not os.path.isdir("/proc"):   # no /proc: only whether some process has this pid
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    stat = _stat(pid)
    # A zombie (Z, or X while it is removed) has ended: only its exit status waits for a parent,
    # which after a SIGKILL of the whole process tree may take long to collect it, or never.
    if stat is None or stat[0] in ("Z", "X"):
        return False
    return started is None or stat[1] == started


def run_state(summary: Mapping) -> tuple[Status | None, str | None]:
    """(status, error) of a run as a reader should report it: a "running" run whose process on this
    host is gone is (KILLED, reason); everything else is as the summary says."""
    status, error = summary.get("status"), summary.get("error")
    status = None if status is None else Status.parse(status)
    proc = summary.get("process")
    if status is not Status.RUNNING or not gone(proc):
        return status, error
    return Status.KILLED, (f"process {proc['pid']} on {proc['host']} is gone but never recorded an end "
                           f"(killed with SIGKILL, by the OOM killer or a reboot); last heartbeat "
                           f"{summary.get('heartbeat_at') or summary.get('started_at') or 'unknown'}")


def gone(process: dict) -> bool:
    """True if `process` (as `process_identity()` recorded it) ran on this host and has ended."""
    return (isinstance(process, dict) and isinstance(process.get("pid"), int)
            and process.get("host") == socket.gethostname() and not _alive(process["pid"], process.get("pid_started")))
