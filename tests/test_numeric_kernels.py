"""The `numeric` tests under another CPU's kernels: a tolerance that holds only for the kernels of
the machine it was written on fails here, where it is written, not on the next kind of CPU.

torch picks its own kernels by ATEN_CPU_CAPABILITY; the GEMM libraries beneath it (MKL, oneDNN)
pick theirs by MKL_ENABLE_INSTRUCTIONS and ONEDNN_MAX_CPU_ISA, so all three are set together.
"""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

# The kernel set the numeric tests run under: the portable one, unless that is this host's own.
EMULATIONS = {"default": "AVX2", "avx2": "AVX2"}


def other_kernels() -> str | None:
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    native = torch.backends.cpu.get_cpu_capability().lower()
    return next((name for name in EMULATIONS if name != native), None)


@pytest.mark.slow
def test_numeric_tests_pass_under_another_cpus_kernels():
    kernels = other_kernels()
    if kernels is None:
        pytest.skip("ATEN_CPU_CAPABILITY emulates x86 kernel sets only")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": kernels, "MKL_ENABLE_INSTRUCTIONS": EMULATIONS[kernels],
           "ONEDNN_MAX_CPU_ISA": EMULATIONS[kernels], "OMP_NUM_THREADS": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
                             "numeric and not slow", "-W", "ignore", "tests"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-2000:]
    assert result.returncode == 0, f"under ATEN_CPU_CAPABILITY={kernels}: {summary}\n{result.stdout[-4000:]}"
    assert " passed" in summary and "deselected" in summary, summary


def test_the_emulation_reaches_torch():
    """ATEN_CPU_CAPABILITY is read when torch loads: a child process reports the set it was given."""
    kernels = other_kernels()
    if kernels is None:
        pytest.skip("ATEN_CPU_CAPABILITY emulates x86 kernel sets only")
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         env={**os.environ, "ATEN_CPU_CAPABILITY": kernels}, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip().lower() == kernels
