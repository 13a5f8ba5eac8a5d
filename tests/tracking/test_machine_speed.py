"""Which precision `fit` chooses when none is given: a pure function of the CPU flags (and GPU)."""

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


def test_a_gpu_decides_by_its_own_bf16_support_not_the_cpus():
    assert default_precision({"avx2"}, cuda_bf16=True) == ("bf16-mixed", "this GPU supports bf16")
    assert default_precision({"amx_bf16"}, cuda_bf16=False)[0] == "32-true"


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
