"""Which precision `fit` chooses when none is given: a pure function of the CPU flags (and GPU)."""

import re

import pytest

from lit_attention.tracking.machine_speed import cpu_flags, cpu_has_native_bf16, default_precision


@pytest.mark.parametrize("flags,precision", [
    ({"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "bf16-mixed"),  # Xeon with AMX
    ({"avx2", "fma", "avx512f", "avx512_bf16"}, "bf16-mixed"),                        # Zen 4 EPYC
    ({"avx512f", "amx_bf16", "amx_tile"}, "bf16-mixed"),
    ({"avx2", "fma", "avx512f", "avx512_vnni", "avx512_fp16"}, "32-true"),            # AVX512, no bf16
    ({"avx2", "fma"}, "32-true"),                                                     # AVX2-only EPYC
    (set(), "32-true"),                                                               # no /proc/cpuinfo
])
def test_cpu_precision_is_bf16_exactly_where_the_flags_say_native(flags, precision):
    chosen, why = default_precision(flags)
    assert chosen == precision
    assert cpu_has_native_bf16(flags) == (precision == "bf16-mixed")
    native = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    assert all(f in why for f in native) and ("no native bf16" in why) == (not native)


@pytest.mark.parametrize("flags", [{"avx2"}, {"avx512f", "amx_bf16", "amx_tile"}])
@pytest.mark.parametrize("cuda_bf16", [True, False])
def test_a_gpu_trains_in_the_precision_measured_fastest_there_whatever_the_cpu(flags, cuda_bf16):
    """bf16-mixed measured slower than fp32 under fit on a GPU (docs/BENCHMARKS.md), so a GPU,
    bf16-capable or not, defaults to 32-true, and the notice states the policy and points to the
    readings instead of quoting one machine's."""
    precision, why = default_precision(flags, cuda_bf16=cuda_bf16)
    assert precision == "32-true"
    assert "measured fastest on a GPU" in why and "docs/BENCHMARKS.md" in why
    assert not re.search(r"[HA]100|H200|\d\.\d+x", why), why
    assert "CPU" not in why


def test_cpu_flags_are_whole_flag_names_of_this_machine():
    flags = cpu_flags()
    assert cpu_has_native_bf16() == cpu_has_native_bf16(flags)
    assert all(" " not in f and f for f in flags)
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        assert flags == set()
    else:
        assert ("fpu" in flags) == (" fpu " in text)
