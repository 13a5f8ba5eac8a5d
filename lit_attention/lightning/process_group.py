"""The DDP process group, destroyed before the interpreter exits.

Lightning destroys an NCCL group at exit but leaves a gloo group (DDP on CPUs) to the interpreter's
own teardown. Gloo's worker threads then outlive the objects they hold, and a rank that has done
all it was asked can still die with "terminate called without an active exception" (SIGABRT): a
finished run whose process then dies of a signal, which a sweep takes for a killed trial.
Destroying the group while the interpreter is whole avoids it (pytorch/pytorch#65231, #190489).
"""

from __future__ import annotations

import atexit

import torch.distributed as dist


def destroy_at_exit() -> None:
    """Have this process destroy its default process group, if it still has one, when it exits.
    Calling it again registers nothing more."""
    atexit.unregister(_destroy)
    atexit.register(_destroy)


def _destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
