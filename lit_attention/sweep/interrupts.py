"""Ctrl-C and SIGTERM that take effect between storage calls, never inside one.

A KeyboardInterrupt raised inside an SQLite transaction leaves the transaction open, holding the
database's write lock for as long as the exception's traceback lives. A driver stopping its
workers would hold it while it waits for them; each worker would wait on the lock to mark its
trial interrupted and be killed first, leaving the trial RUNNING.

While `deferred()` is active, SIGINT and SIGTERM only record the request; `sleep()` and
`check()`, called where the driver and the workers wait or start something new, raise
KeyboardInterrupt once one is recorded (a `sleep()` ends as soon as one is). Outside it, Python's
own KeyboardInterrupt applies.
"""

import signal
import subprocess
import time
from collections.abc import Sequence
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)
POLL_SECONDS = 0.05   # how soon a sleep notices a stop request or its processes' exit
_requested: list[int] = []   # signals received while deferred


@contextmanager
def deferred():
    """Record SIGINT/SIGTERM instead of raising at once; the previous handlers come back on exit,
    so a second Ctrl-C after the first was acted on is Python's usual one."""
    previous = {s: signal.signal(s, lambda signum, _: _requested.append(signum)) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _requested.clear()


class Stop(KeyboardInterrupt):
    """The KeyboardInterrupt `check()` raises; `signum` is the signal that asked for it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signum(stop: BaseException) -> int:
    """The signal behind a KeyboardInterrupt: a Stop's, else SIGINT (Python's own Ctrl-C)."""
    return getattr(stop, "signum", signal.SIGINT)


def cause(stop: BaseException) -> str:
    """What stopped the process, for a trial's error: `Ctrl-C` or `SIGTERM`."""
    return "SIGTERM" if signum(stop) == signal.SIGTERM else "Ctrl-C"


def check() -> None:
    """Raise Stop (a KeyboardInterrupt) if a stop was requested."""
    if _requested:
        raise Stop(_requested[0])


def sleep(seconds: float, until_exit: Sequence[subprocess.Popen] = ()) -> None:
    """Sleep for `seconds`, or less: until every process of `until_exit` (when given) has exited,
    or until a stop is requested, which then raises Stop."""
    check()
    deadline = time.monotonic() + seconds
    while not _requested and (left := deadline - time.monotonic()) > 0:
        if until_exit and all(p.poll() is not None for p in until_exit):
            break
        time.sleep(min(POLL_SECONDS, left))   # a signal's handler runs, then the sleep resumes
    check()
