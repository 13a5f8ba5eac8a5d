"""Dropout whose mask costs a quarter of a random draw per element on the CPU.

``torch.nn.functional.dropout`` on the CPU draws its mask with ``bernoulli_``: one Mersenne
Twister draw per element, serially (the CPU generator takes a lock): a noticeable share of a
CPU training step of the reference Transformer. Here each 64-bit draw
gives four 16-bit lanes, each compared with a threshold straight into a mask of x's dtype: the same
Bernoulli mask at a fraction of the cost (bench/throughput.py),
with the drop probability rounded to a multiple of 2**-16 (0.1 -> 0.100006; the scale uses the
rounded value, so the expectation is exact). The draws come from torch's default generator, so
``seed_everything`` makes them reproducible. On other devices, and under torch.compile (whose
kernels draw the mask inside the fused kernel), this is ``F.dropout``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

LANES = 2 ** 16


def dropout_mask(shape: torch.Size, p: float, dtype: torch.dtype) -> torch.Tensor:
    """[shape] in dtype: 0 with probability q = round(p * 2**16) / 2**16, else 1 / (1 - q)."""
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-2 ** 63, None)   # all 64 bits
    lanes = words.view(torch.int16)[:n].view(shape)                                 # uniform int16
    dropped = round(p * LANES)
    mask = torch.ge(lanes, dropped - LANES // 2, out=torch.empty(shape, dtype=dtype))
    return mask.mul_(LANES / (LANES - dropped))


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """x with each element zeroed with probability p and the rest scaled by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0 or torch.compiler.is_compiling():
        return F.dropout(x, p, training)
    return x * dropout_mask(x.shape, p, x.dtype)


class Dropout(nn.Dropout):
    """``nn.Dropout`` with the cheaper CPU mask of ``dropout``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
