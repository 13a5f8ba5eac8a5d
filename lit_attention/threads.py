"""torch's intra-op thread count: the cores this process may use, or what its launcher decided.

`os.cpu_count()` is the machine's count; a SLURM task, a `taskset` or a container's cpuset gets
fewer cores (`os.sched_getaffinity`). The sweep driver sets `OMP_NUM_THREADS` / `MKL_NUM_THREADS`
for each trial (cores / concurrent processes); `lit-attention fit` follows them when set.
"""

from __future__ import annotations

import os


def allowed_cores() -> int:
    """Cores this process may run on (its CPU affinity), not the machine's count."""
    # (macOS has no sched_getaffinity)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def env_threads() -> int | None:
    """OMP_NUM_THREADS when it is a positive integer (the launcher's decision), else None."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def use_allowed_cores() -> int:
    """Set torch's intra-op threads to OMP_NUM_THREADS when given, else to the allowed cores.

    OMP_NUM_THREADS is left unset in the second case: Lightning's DDP launcher divides the cores
    among its ranks only when it is unset.
    """
    import torch

    threads = env_threads() or allowed_cores()
    torch.set_num_threads(threads)
    return threads
