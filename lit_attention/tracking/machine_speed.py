"""How fast the machine is right now, so runs under a wall-clock budget can be compared.

A shared or virtual machine's speed drifts by tens of per cent over a day; two runs of the same
config with the same `max_time` then train different numbers of steps. The run store records a
short matmul probe at the start and end of training and after an epoch at least a minute after the
last probe, so a report can tell a slow machine from a slow model.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch


def sustained_matmul_gflops(n: int = 512, seconds: float = 0.05) -> float:
    """fp32 n x n matmul GFLOP/s averaged over a window of `seconds` at the current thread count.

    An average rather than a best-of: time the machine lends to others is what slows training.
    """
    # A private generator: the probe must not move the training run's random stream.
    generator = torch.Generator().manual_seed(0)
    a, b = torch.rand(n, n, generator=generator), torch.rand(n, n, generator=generator)
    a @ b
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        a @ b
        done += 1
    return 2 * n ** 3 * done / elapsed / 1e9


def summarise(probes: list[float]) -> dict:
    """Summary fields of a run's probes: their median and the probes themselves (rounded)."""
    return {"machine_gflops": statistics.median(probes),
            "machine_gflops_probes": [round(p, 1) for p in probes]} if probes else {}


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpuinfo(field: str) -> list[str]:
    """The values of ``field`` ("flags", "model name") in /proc/cpuinfo, one per core; none where
    there is no such file (macOS, Windows)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    return [line.partition(":")[2].strip() for line in text.splitlines() if line.startswith(field)]


def cpu_flags() -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo); empty where there is no such file."""
    return {flag for line in cpuinfo("flags") for flag in line.split()}


def cpu_has_native_bf16(flags: set[str] | None = None) -> bool:
    """Whether this CPU does bf16 arithmetic in hardware (AVX512-BF16 or AMX). Without it torch
    emulates bf16 matmuls: slower than fp32 with AVX512, and far slower on an AVX2-only CPU (docs/BENCHMARKS.md)."""
    return any(flag in (cpu_flags() if flags is None else flags) for flag in NATIVE_BF16_FLAGS)


# The precision measured fastest on a GPU for the reference Transformer: its step is launch-bound,
# so bf16's casts cost more than its matmuls save (the readings: docs/BENCHMARKS.md,
# bench/gpu_throughput.py). Change it when a measurement says so.
GPU_PRECISION = ("32-true", "measured fastest on a GPU for the reference Transformer (its step is "
                 "launch-bound and bf16-mixed adds casts; docs/BENCHMARKS.md)")


def default_precision(flags: set[str], cuda_bf16: bool | None = None) -> tuple[str, str]:
    """(precision, why) that `fit` trains in when none is given: on a GPU the precision measured
    fastest there (GPU_PRECISION; 32-true on a GPU without bf16 in any case); on a CPU bf16-mixed
    where it does bf16 natively, 32-true elsewhere. ``flags``: the CPU's flags; ``cuda_bf16``: None
    when training on the CPU, else ``torch.cuda.is_bf16_supported()``."""
    if cuda_bf16 is not None:
        if not cuda_bf16 and GPU_PRECISION[0].startswith("bf16"):
            return "32-true", "this GPU has no bf16"
        return GPU_PRECISION
    if native := [flag for flag in NATIVE_BF16_FLAGS if flag in flags]:
        return "bf16-mixed", f"this CPU has native bf16 ({', '.join(native)})"
    return "32-true", "this CPU has no native bf16 (avx512_bf16 or amx_bf16), where bf16 is slower than fp32"
