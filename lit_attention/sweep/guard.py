"""Exec a command that dies with its parent (so a worker killed with SIGKILL leaves no orphan trial)
and takes SIGINT as Ctrl-C.

Usage: python -m lit_attention.sweep.guard PARENT_PID CMD...  (Linux PR_SET_PDEATHSIG; elsewhere
it just execs). A wrapper process instead of `preexec_fn`, which is unsafe once the heartbeat
thread runs.
"""

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    parent, cmd = int(sys.argv[1]), sys.argv[2:]
    with contextlib.suppress(OSError, AttributeError):   # not Linux: no prctl
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        sys.exit(1)
    # The driver stops workers (and they their trials) with SIGINT: a driver started with SIGINT
    # ignored (a background job of a script) must not pass that on to them.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
