"""Where the workers of one machine train: disjoint GPU sets and a fair share of the CPU cores.

Worker i of N, with G devices per trial, gets GPUs LIST[i*G:(i+1)*G] through CUDA_VISIBLE_DEVICES
(inherited by its trials); every trial gets floor(cores / (N*G)) intra-op threads (at least 1),
through OMP_NUM_THREADS / MKL_NUM_THREADS, which `lit-attention fit` hands to torch.set_num_threads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from lit_attention.threads import allowed_cores, env_threads


class PlacementError(ValueError):
    """A placement that cannot be satisfied (usage error, exit 2)."""


def parse_gpus(text: str) -> list[str]:
    """`0,1,2,3` (or GPU UUIDs) as a list; `none` or empty: no GPU. Duplicates are refused."""
    if text.strip().lower() in ("", "none"):
        return []
    gpus = [g.strip() for g in text.split(",")]
    if any(not g for g in gpus):
        raise PlacementError(f"--gpus {text!r}: an empty entry (write e.g. 0,1,2,3)")
    twice = sorted({g for g in gpus if gpus.count(g) > 1})
    if twice:
        raise PlacementError(f"--gpus {text!r}: {', '.join(twice)} listed twice")
    return gpus


def visible_gpus() -> tuple[list[str], str]:
    """The GPUs this process sees, and where that came from.

    CUDA_VISIBLE_DEVICES when set (CUDA stops at the first invalid entry, e.g. -1), else
    torch.cuda.device_count() (NVML; does not initialise CUDA).
    """
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        gpus = []
        for g in os.environ["CUDA_VISIBLE_DEVICES"].split(","):
            g = g.strip()
            if not g or g.startswith("-"):
                break
            gpus.append(g)
        return gpus, "CUDA_VISIBLE_DEVICES"
    import torch
    return [str(i) for i in range(torch.cuda.device_count())], "torch.cuda.device_count()"


@dataclass(frozen=True)
class WorkerPlacement:
    gpus: list[str] | None  # None: no GPU on this machine, CUDA_VISIBLE_DEVICES is left as it is
    threads: int
    threads_from: str      # why that many threads

    def env(self) -> dict[str, str]:
        """The variables this worker (and so each of its trials) runs with."""
        env = {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        return env

    def describe(self) -> str:
        gpus = ("CUDA_VISIBLE_DEVICES=" + ",".join(self.gpus) if self.gpus is not None
                else "no GPU (CUDA_VISIBLE_DEVICES unchanged)")
        return f"{gpus} threads={self.threads} ({self.threads_from})"


def place(workers: int, devices: int, gpus: list[str] | None, source: str) -> list[WorkerPlacement]:
    """One placement per worker. `gpus`: the list to partition; [] hides every GPU from the trials
    (`--gpus none`); None: no GPU here, CUDA_VISIBLE_DEVICES is left alone.

    Raises PlacementError when workers x devices GPUs do not fit in the list.
    """
    if gpus:
        need = workers * devices
        if need > len(gpus):
            fit = len(gpus) // devices
            raise PlacementError(
                f"{workers} worker(s) x {devices} device(s) per trial need {need} GPUs, but {len(gpus)} "
                f"are available ({source}: {','.join(gpus)}): at most {fit} worker(s) of {devices} GPU(s) fit"
                + ("" if fit else f"; lower --devices-per-trial to {len(gpus)} or less"))
    processes = workers * devices
    user = env_threads()
    if user is not None:
        threads, why = user, "OMP_NUM_THREADS of the environment"
    else:
        cores = allowed_cores()
        threads, why = max(1, cores // processes), f"{cores} core(s) / {processes} process(es)"
    return [WorkerPlacement(gpus[i * devices:(i + 1) * devices] if gpus is not None else None, threads, why)
            for i in range(workers)]
