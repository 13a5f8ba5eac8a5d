"""Which kernels ``scaled_dot_product_attention`` may use, by device and precision: decided here only.

torch picks, per call, the first enabled backend that accepts the inputs. Left to itself it puts
bf16/fp16 attention with a mask on the cuDNN backend on Hopper GPUs (torch >= 2.9), and cuDNN
builds a new execution plan for every new (batch, query length, key length), milliseconds of CPU
per call. Our batches are bucketed by token count, so their shapes change nearly every step, and
bf16 training ran many times slower than fp32 because of it (docs/BENCHMARKS.md). So cuDNN is
never enabled here. Of the others, each device gets those that can run its dtype:

- CUDA: flash (fp16/bf16 only; it takes no float mask, so it serves only unmasked and causal
  calls), memory-efficient (fp32/fp16/bf16, masks), math (any);
- CPU: flash (torch's CPU kernel, any float dtype, masks) and math; the others do not exist there;
- any other device: every backend but cuDNN, in torch's order.

Usage: ``with attention_backends(device_type, precision): ...`` around a forward pass (the
backward runs the kernel its forward chose). ``precision`` is Lightning's ("32-true",
"bf16-mixed", ...).
"""

from __future__ import annotations

from torch.nn.attention import SDPBackend, sdpa_kernel

FLASH, EFFICIENT, MATH = SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH
WHY = ("cuDNN attention is never enabled: it builds a new plan for every new batch shape "
       "(milliseconds of CPU a call), and token-bucketed batches change shape every step")


def allowed(device_type: str, precision: str) -> tuple[SDPBackend, ...]:
    """The backends attention may use on ``device_type`` ("cuda", "cpu", ...) under ``precision``."""
    if device_type == "cuda":
        # flash takes bf16/fp16 inputs only
        half = str(precision).startswith(("bf16", "16"))
        return (FLASH, EFFICIENT, MATH) if half else (EFFICIENT, MATH)
    if device_type == "cpu":
        return (FLASH, MATH)
    return (FLASH, EFFICIENT, MATH)


def attention_backends(device_type: str, precision: str):
    """A context in which only ``allowed(device_type, precision)`` run (torch's sdpa_kernel)."""
    return sdpa_kernel(list(allowed(device_type, precision)))


def describe(device_type: str, precision: str) -> dict:
    """The choice as the run's summary records it."""
    return {"device": device_type, "precision": str(precision),
            "allowed": [backend.name for backend in allowed(device_type, precision)], "why": WHY}
