"""lit_attention/models/sdpa_backends.py: which attention kernels may run, by device and precision
(checked on the CPU through torch's global backend switches, which a CUDA build reads the same)."""

import pytest
import torch
import torch.nn.functional as F

from lit_attention.models.sdpa_backends import allowed, attention_backends, describe

PRECISIONS = ["32-true", "bf16-mixed", "bf16-true", "16-mixed", "64-true"]


def enabled() -> set[str]:
    switches = {"FLASH_ATTENTION": torch.backends.cuda.flash_sdp_enabled,
                "EFFICIENT_ATTENTION": torch.backends.cuda.mem_efficient_sdp_enabled,
                "MATH": torch.backends.cuda.math_sdp_enabled,
                "CUDNN_ATTENTION": torch.backends.cuda.cudnn_sdp_enabled}
    return {name for name, on in switches.items() if on()}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("device", ["cuda", "cpu", "mps"])
def test_cudnn_never_runs_and_each_device_gets_the_kernels_for_its_dtype(device, precision):
    before = enabled()
    with attention_backends(device, precision):
        inside = enabled()
    assert enabled() == before                              # the switches are restored on exit
    assert "CUDNN_ATTENTION" not in inside                  # it re-plans for every new batch shape
    assert "MATH" in inside                                 # the kernel that runs anything
    half = precision.startswith(("bf16", "16"))
    expected = {"cuda": {"EFFICIENT_ATTENTION", "MATH"} | ({"FLASH_ATTENTION"} if half else set()),
                "cpu": {"FLASH_ATTENTION", "MATH"},          # the only two a CPU has
                "mps": {"FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"}}[device]
    assert inside == expected
    assert describe(device, precision)["allowed"] == [b.name for b in allowed(device, precision)]
    assert set(describe(device, precision)["allowed"]) == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_attention_runs_on_the_cpu_under_the_choice_and_agrees_with_the_default(dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 7, 8, dtype=dtype) for _ in range(3))
    mask = torch.zeros(7, 7, dtype=dtype).masked_fill(torch.rand(7, 7) < 0.3, float("-inf")).fill_diagonal_(0)
    default = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with attention_backends("cpu", "bf16-mixed" if dtype == torch.bfloat16 else "32-true"):
        chosen = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(chosen, default)
