"""Where the workers of one machine train: GPU sets shared by up to K trials each, and a fair share
of the CPU cores.

A sweep's `workers` is the number of trials in flight. With G devices per trial the GPU list is cut
into sets of G; worker i gets set i mod S (S sets) through CUDA_VISIBLE_DEVICES (inherited by its
trials), so the workers spread over the GPUs first and then pack onto them, at most K per set
(`--trials-per-gpu`; by default as many as the workers need, see `default_trials_per_gpu`). Every
trial gets floor(cores / (N*G)) intra-op threads (at least 1), through OMP_NUM_THREADS /
MKL_NUM_THREADS, which `lit-attention fit` hands to torch.set_num_threads.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import subprocess
from dataclasses import dataclass

from lit_attention.threads import allowed_cores, env_threads

# GPU memory a reference-size trial is assumed to take (6M-parameter Transformer, 4,096-token
# batches: CUDA context, weights, Adam state, activations and the allocator's cache; assumed, not
# measured), for the default packing's advice only; a trial that runs out of memory fails and says so.
TRIAL_GPU_GIB = 4.0


class PlacementError(ValueError):
    """A placement that cannot be satisfied (usage error, exit 2)."""


def parse_gpus(text: str) -> list[str]:
    """`0,1,2,3` (or GPU UUIDs) as a list; `none` or empty: no GPU. Duplicates are refused."""
    if text.strip().lower() in ("", "none"):
        return []
    gpus = [g.strip() for g in text.split(",")]
    if any(not g for g in gpus):
        raise PlacementError(f"--gpus {text!r}: an empty entry (write e.g. 0,1,2,3)")
    if twice := sorted({g for g in gpus if gpus.count(g) > 1}):
        raise PlacementError(f"--gpus {text!r}: {', '.join(twice)} listed twice")
    return gpus


def check_visible(gpus: list[str], text: str, accelerator: str | None = None, planning: bool = False) -> str | None:
    """PlacementError unless every GPU of ``--gpus text`` is one this process sees (visible_gpus;
    a GPU UUID is taken unchecked where this process sees GPUs and CUDA_VISIBLE_DEVICES does not
    say which). A worker's trials get their set as CUDA_VISIBLE_DEVICES, which names physical
    GPUs: one this process does not see (`--gpus 5` on a 1-GPU machine, `--gpus abc`, `--gpus 0`
    inside a job given GPUs 2,3) left a trial no GPU, or another job's, and `auto` trained it on
    the CPU without a word. ``planning`` (--dry-run) where this process sees no GPU at all (a
    login node): the note to print instead, as the plan is for another machine."""
    if accelerator == "cpu":
        raise PlacementError(f"--gpus {text} and --accelerator cpu: trials on the CPU use no GPU; keep one")
    visible, source = visible_gpus()
    if planning and not visible:
        return (f"note: this process sees no GPU ({source}: none): the plan is for a machine that has "
                f"GPUs {text}; a sweep run here with --gpus {text} is refused")
    uuids_unchecked = source != "CUDA_VISIBLE_DEVICES" and bool(visible)
    unseen = [g for g in gpus
              if g not in visible and not (uuids_unchecked and g.startswith(("GPU-", "MIG-")))]
    if unseen:
        raise PlacementError(f"--gpus {text}: {', '.join(unseen)} not among the GPUs this process sees "
                             f"({source}: {', '.join(visible) or 'none'}); list those, or --gpus none for CPU trials")
    return None


def visible_gpus() -> tuple[list[str], str]:
    """The GPUs this process sees, and where that came from.

    CUDA_VISIBLE_DEVICES when set (CUDA stops at the first invalid entry, e.g. -1), else
    torch.cuda.device_count() (NVML; does not initialise CUDA).
    """
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        listed = (g.strip() for g in os.environ["CUDA_VISIBLE_DEVICES"].split(","))
        gpus = list(itertools.takewhile(lambda g: g and not g.startswith("-"), listed))
        return gpus, "CUDA_VISIBLE_DEVICES"
    import torch
    return [str(i) for i in range(torch.cuda.device_count())], "torch.cuda.device_count()"


def gpu_memory_gib() -> tuple[float | None, str]:
    """The smallest GPU's memory in GiB and where it came from, or None and why not.

    Asked of `nvidia-smi` in a subprocess: torch has no public call for it that leaves CUDA
    uninitialised in this process (torch.cuda.mem_get_info and get_device_properties initialise it).
    """
    try:
        query = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
        out = subprocess.run(query, capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        return None, "GPU memory unknown: no nvidia-smi on PATH"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"GPU memory unknown: nvidia-smi failed ({exc})"
    with contextlib.suppress(ValueError):   # a line that is no number: what it said, below
        if out.returncode == 0 and (mib := [float(line) for line in out.stdout.split()]):
            return min(mib) / 1024, "nvidia-smi"
    return None, f"GPU memory unknown: nvidia-smi said {(out.stdout + out.stderr).strip()[:100]!r}"


def default_trials_per_gpu(gpus: int, memory_gib: float | None, cores: int, workers: int,
                           devices: int = 1) -> tuple[int, str]:
    """Trials on each set of `devices` GPUs when --trials-per-gpu is not given, and why.

    `workers` is the number of trials in flight the user asked for: they all run, spread evenly
    over the gpus // devices sets, so K = ceil(workers / sets). What the machine holds is said
    beside it: memory // TRIAL_GPU_GIB trials per GPU, and a core for each trial process's Python
    loop (cores // (sets * devices) per set). K above that is allowed with a warning in the reason
    (a trial that runs out of GPU memory fails and says so; too few cores only slow trials down).
    """
    sets = gpus // devices
    k = math.ceil(workers / sets)
    per_set = sets * devices
    limits = [(cores // per_set, f"{cores} core(s) / {per_set} GPU(s)")]
    if memory_gib is not None:
        limits.insert(0, (int(memory_gib // TRIAL_GPU_GIB),
                          f"{memory_gib:.0f} GiB / ~{TRIAL_GPU_GIB:.0f} GiB a trial"))
    fit = min(n for n, _ in limits)
    why = ", ".join(f"{text} = {n}" for n, text in limits)
    why += "; GPU memory unknown" if memory_gib is None else ""
    asked = f"{workers} worker(s) over {sets} GPU{' set' if devices > 1 else ''}(s)"
    if k > fit:
        return k, (f"default: {asked}; more than the {fit} that fit ({why}): lower --workers if "
                   f"trials run out of GPU memory or crowd the cores")
    return k, f"default: {asked}; up to {fit} fit ({why})"


@dataclass(frozen=True)
class WorkerPlacement:
    gpus: list[str] | None  # None: no GPU on this machine, CUDA_VISIBLE_DEVICES is left as it is
    threads: int
    threads_from: str      # why that many threads
    sharing: int = 1       # trials running at once on this worker's GPUs (its own included)

    def env(self) -> dict[str, str]:
        """The variables this worker (and so each of its trials) runs with."""
        gpus = {} if self.gpus is None else {"CUDA_VISIBLE_DEVICES": ",".join(self.gpus)}
        return {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads), **gpus}

    def describe(self) -> str:
        gpus = ("CUDA_VISIBLE_DEVICES=" + ",".join(self.gpus) if self.gpus is not None
                else "no GPU (CUDA_VISIBLE_DEVICES unchanged)")
        shared = f" (shared by {self.sharing} trials)" if self.gpus and self.sharing > 1 else ""
        return f"{gpus}{shared} threads={self.threads} ({self.threads_from})"


def gpu_words(gpus: list[str], source: str) -> str:
    """`1 GPU (CUDA_VISIBLE_DEVICES=0)`: the count, then the list and where it came from."""
    if source in ("CUDA_VISIBLE_DEVICES", "--gpus"):
        return f"{len(gpus)} GPU(s) ({source}={','.join(gpus)})"
    return f"{len(gpus)} GPU(s) (numbered {','.join(gpus)}, from {source})"


def place(workers: int, devices: int, gpus: list[str] | None, source: str,
          per_gpu: int | None = None) -> list[WorkerPlacement]:
    """One placement per worker. `gpus`: the list to share out; [] hides every GPU from the trials
    (`--gpus none`); None: no GPU here, CUDA_VISIBLE_DEVICES is left alone. `per_gpu`: at most
    that many trials on each set of `devices` GPUs (None: as many as the workers need).

    Raises PlacementError when a trial needs more GPUs than listed, or `workers` trials do not fit
    in per_gpu trials per set.
    """
    if gpus:
        sets = len(gpus) // devices
        if sets == 0:
            raise PlacementError(f"--devices-per-trial {devices}: a trial needs {devices} GPUs, but "
                                 f"{gpu_words(gpus, source)} are available; lower --devices-per-trial "
                                 f"to {len(gpus)} or less")
        if per_gpu is not None and workers > sets * per_gpu:
            raise PlacementError(
                f"{workers} worker(s) x {devices} device(s) per trial at {per_gpu} trial(s) per GPU need "
                f"{math.ceil(workers / per_gpu) * devices} GPUs, but "
                f"{gpu_words(gpus, source)} are available: at most {sets * per_gpu} worker(s) fit; "
                f"lower --workers to {sets * per_gpu} or raise --trials-per-gpu to {math.ceil(workers / sets)}")
    processes = workers * devices
    if (user := env_threads()) is not None:
        threads, why = user, "OMP_NUM_THREADS of the environment"
    else:
        cores = allowed_cores()
        threads, why = max(1, cores // processes), f"{cores} core(s) / {processes} process(es)"
    if not gpus:
        return [WorkerPlacement(gpus, threads, why)] * workers
    chosen = [i % sets for i in range(workers)]   # worker i trains on set i mod S
    return [WorkerPlacement(gpus[s * devices:(s + 1) * devices], threads, why, chosen.count(s))
            for s in chosen]
