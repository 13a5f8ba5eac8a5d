"""Training FLOPs of a model: the matrix products of the forward and backward pass, step by step.

What counts: matrix-product FLOPs (2 per multiply-add) of the forward and the backward pass, as
``torch.utils.flop_counter.FlopCounterMode`` counts them (linear layers, matmuls, attention
products, convolutions). Elementwise work, softmax, norms, embedding look-ups and the optimizer
do not count, as usual in MFU accounting. Attention counts the whole query x key square, also
when it is causal (torch's own formula; the explicit-mask path does compute all of it).

Counting under FlopCounterMode (a dispatch mode: a Python call for every forward and backward
kernel) slows a step 2-3x, which shows when a step is cheap: every new batch shape is counted,
and token batches change shape nearly every step. So a new shape is counted by ``MatmulFlops``, a function mode that
sees only the forward pass's torch calls: each matrix product (``F.linear``, ``@``, ``mm``,
``bmm``, ``addmm``, ``baddbmm``, a two-operand ``einsum``, ``scaled_dot_product_attention``)
counts its forward FLOPs, and its backward as one more product of the same size for each operand
that needs a gradient (two for attention: the gradients of its two products' four operands, as
the explicit computation forms them; see ``ATTENTION_FORMULAS`` below).
The first counted step of a run is counted both ways; if the two differ (a product the function
mode does not know), the run counts every new shape under FlopCounterMode, and says so once.

FlopCounterMode alone miscounts two kinds of layer here (torch 2.13), so they are filled in:

- fused attention (``ATTENTION_FORMULAS``): the CPU kernel
  (``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward) has no formula, so the
  Transformer's attention products counted 0 on a CPU; and torch's formula for the GPU kernels'
  backward (flash, memory-efficient, cuDNN) adds a fifth product, the recomputation of the scores,
  which the explicit products (and the CPU) do not have. Every fused kernel is counted with the
  products of the explicit computation instead: the same count whichever kernel runs, so that the
  function mode's count agrees with FlopCounterMode's on a GPU too and never falls back to it.
- a fused recurrent kernel (oneDNN's LSTM on a CPU, cuDNN on a GPU) counts 0, while the unrolled
  ones (GRU and Elman on a CPU, a packed LSTM) count their products. So every nn.RNN/GRU/LSTM
  call is counted with ``recurrent_flops`` instead, whichever kernel ran.

``recurrent_flops``, per layer and direction, with G gates (LSTM 4, GRU 3, Elman 1), hidden size
H, layer input size I (the input size, then H times the directions) and N = the time steps summed
over the sequences (B*T, or the sum of the lengths of a packed batch)::

    forward  = 2*G*H*(I + H) * N           input and recurrent products of every step
    backward = forward                      weight gradients
             + 2*G*H*I * N                  input gradient (not for a layer-0 input without grad)
             + 2*G*H*H * (N - R)            gradient of the incoming state, where R = 0 when the
                                            initial state needs a gradient, else the rows that
                                            start from it: B (a packed batch: its first batch size
                                            forwards, its last one backwards)

Bias additions and gate nonlinearities are elementwise and not counted. The formula equals
FlopCounterMode's count of the unrolled kernels exactly (tests/models/test_flops.py).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Hashable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _attention_forward(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    """q [B, H, Tq, d] . k [B, H, Tk, d] and weights [B, H, Tq, Tk] . v [B, H, Tk, dv]."""
    b, h, tq, d = query_shape
    tk, dv = key_shape[2], value_shape[3]
    return 2 * b * h * tq * tk * d + 2 * b * h * tq * tk * dv


def _attention_backward(grad_out_shape, *shapes, **kwargs) -> int:
    """Gradients of v and of the weights, then of q and k: two products of the size of each of
    the forward's two."""
    return 2 * _attention_forward(*shapes)


# The fused attention kernels (aten op names), each forward with its backward.
FUSED_ATTENTION = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
                   "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
ATTENTION_FORMULAS = {op: formula for name in FUSED_ATTENTION
                      for op, formula in ((getattr(torch.ops.aten, name, None), _attention_forward),
                                          (getattr(torch.ops.aten, f"{name}_backward", None), _attention_backward))
                      if op is not None}


def _product(a: torch.Size, b: torch.Size) -> int:
    """FLOPs of ``a @ b`` under matmul's broadcasting: 2 * batch * n * k * m (1-D operands as
    torch.matmul treats them)."""
    a = (1, *a) if len(a) == 1 else tuple(a)
    b = (*b, 1) if len(b) == 1 else tuple(b)
    batch = math.prod(torch.broadcast_shapes(a[:-2], b[:-2]))
    return 2 * batch * a[-2] * a[-1] * b[-1]


def _grads(*tensors) -> int:
    """How many of ``tensors`` the backward pass will form a gradient for."""
    return (sum(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)
            if torch.is_grad_enabled() else 0)


def _linear(input, weight, bias=None, **_):
    flops = 2 * input.numel() // input.shape[-1] * weight.shape[0] * weight.shape[1]
    return flops * (1 + _grads(input, weight))


def _matmul(a, b, **_):
    return _product(a.shape, b.shape) * (1 + _grads(a, b))


def _einsum(equation, *operands):
    """A product of two operands: 2 x the product of the sizes of every index that is kept or
    shared (an index of one operand only that is summed away is a reduction, not a product).
    Other forms (three operands, an ellipsis) count 0: the first step's check then finds the
    difference."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    inputs, _, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(operands) != 2 or "." in equation or not _:
        return 0
    sizes = {i: n for term, t in zip(terms, operands) for i, n in zip(term, t.shape)}
    kept = set(output) | (set(terms[0]) & set(terms[1]))
    return 2 * math.prod(sizes[i] for i in kept) * (1 + _grads(*operands))


def _attention(q, k, v, *args, **kwargs):
    """q [B, H, T, d], k [B, H, S, d], v [B, H, S, dv]: the fused kernels' formula (above)."""
    return _attention_forward(q.shape, k.shape, v.shape) * (3 if _grads(q, k, v) else 1)


# torch function -> FLOPs of its forward and (predicted) backward matrix products
PRODUCTS = {
    F.linear: _linear,
    torch.matmul: _matmul, torch.Tensor.matmul: _matmul, torch.Tensor.__matmul__: _matmul,
    torch.Tensor.__rmatmul__: lambda b, a, **_: _matmul(a, b),
    torch.mm: _matmul, torch.Tensor.mm: _matmul, torch.bmm: _matmul, torch.Tensor.bmm: _matmul,
    **dict.fromkeys((torch.addmm, torch.Tensor.addmm, torch.baddbmm, torch.Tensor.baddbmm),
                    lambda input, a, b, **_: _matmul(a, b)),
    torch.einsum: _einsum,
    F.scaled_dot_product_attention: _attention,
}


class MatmulFlops(TorchFunctionMode):
    """While active: ``flops``, the training FLOPs of the matrix products called (formula: module
    doc), except inside recurrent modules (``paused``), which are counted by formula."""

    flops = 0
    paused = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        formula = PRODUCTS.get(func)
        if formula is not None and not self.paused:
            self.flops += formula(*args, **kwargs)
        return func(*args, **kwargs)


def recurrent_flops(rnn: nn.RNNBase, input, hx=None) -> tuple[int, int]:
    """(forward, forward + backward) FLOPs of the call ``rnn(input, hx)`` (formula: module doc).

    input: [B, T, I] (batch_first), [T, B, I], unbatched [T, I], or a PackedSequence.
    """
    if rnn.proj_size:
        raise ValueError("recurrent_flops: an LSTM with proj_size is not covered by the formula")
    if isinstance(input, PackedSequence):
        sizes = input.batch_sizes
        steps, first, last = int(sizes.sum()), int(sizes[0]), int(sizes[-1])
        input_grad = input.data.requires_grad
    else:
        batch = 1 if input.dim() == 2 else input.shape[0 if rnn.batch_first else 1]
        steps, first, last = input.shape[:-1].numel(), batch, batch
        input_grad = input.requires_grad
    hx = hx if isinstance(hx, (tuple, list)) else (hx,)
    starts_without_grad = not any(isinstance(t, torch.Tensor) and t.requires_grad for t in hx)
    G, H = GATES[rnn.mode], rnn.hidden_size
    directions = 2 if rnn.bidirectional else 1
    forward = backward = 0
    for layer in range(rnn.num_layers):
        I = rnn.input_size if layer == 0 else H * directions
        for direction in range(directions):
            step = 2 * G * H * (I + H) * steps
            skipped = (first if direction == 0 else last) if starts_without_grad else 0
            forward += step
            backward += (step + (2 * G * H * I * steps if layer > 0 or input_grad else 0)
                         + 2 * G * H * H * (steps - skipped))
    return forward, forward + backward


def batch_key(batch: Any) -> Hashable:
    """What a step's non-recurrent FLOPs depend on: the shapes of the batch's tensors. (Not the
    batch size times a function of the lengths: Shaw's relative keys, for one, are multiplied
    once per batch.)"""
    if isinstance(batch, torch.Tensor):
        return tuple(batch.shape)
    if isinstance(batch, dict):
        return tuple((k, batch_key(v)) for k, v in sorted(batch.items()))
    if isinstance(batch, (tuple, list)):
        return tuple(batch_key(v) for v in batch)
    return type(batch).__name__


class TrainingFlopCounter:
    """Training FLOPs of ``module``, one step at a time::

        counter = TrainingFlopCounter(module)
        counter.start(batch_key(batch))   # before the forward pass
        ...                               # forward and backward
        flops = counter.stop()            # after the backward pass
        counter.remove()                  # detaches its hooks

    The first step of every key is counted by ``MatmulFlops`` (the run's first one under
    FlopCounterMode too, as a check: module doc); later steps with that key reuse its count.
    1,200 Multi30k steps of 4,096-token batches have 104 distinct shapes, a third of them in the
    first epoch. Recurrent calls are counted by formula on every step: a packed encoder's work
    depends on the lengths.
    """

    def __init__(self, module: nn.Module):
        self.cached: dict[Hashable, int] = {}
        self._key: Hashable = None
        self.counting = False    # between start and stop
        self._mode: FlopCounterMode | None = None
        self._fast: MatmulFlops | None = None
        self.checked = False     # the function mode's count was compared with FlopCounterMode's
        self.fast = True         # ... and agreed (else every new key runs under FlopCounterMode)
        self._recurrent = 0   # this step's recurrent FLOPs (formula)
        self._seen = 0        # the part of them FlopCounterMode counted too (unrolled kernels)
        self._mark = 0
        self._handles = []
        for rnn in (m for m in module.modules() if isinstance(m, nn.RNNBase)):
            self._handles += [rnn.register_forward_pre_hook(self._before_rnn, with_kwargs=True),
                              rnn.register_forward_hook(self._after_rnn, with_kwargs=True)]

    def start(self, key: Hashable) -> None:
        if self.counting:
            raise RuntimeError("TrainingFlopCounter.start: the previous step was not stopped")
        self._key, self.counting, self._recurrent, self._seen = key, True, 0, 0
        if key not in self.cached:
            if not self.checked or not self.fast:
                self._mode = FlopCounterMode(display=False, custom_mapping=ATTENTION_FORMULAS)
                self._mode.__enter__()
            if self.fast:
                self._fast = MatmulFlops()
                self._fast.__enter__()

    def stop(self) -> int:
        """The FLOPs of the step since ``start``."""
        key, mode, matmuls = self._key, self._mode, self._fast
        self.cancel()   # leaves both modes
        if matmuls is not None:
            self.cached[key] = matmuls.flops
        if mode is not None:
            self.cached[key] = mode.get_total_flops() - self._seen
            if matmuls is not None and not self.checked:
                self.checked = True
                if matmuls.flops != self.cached[key]:
                    self.fast = False
                    print(f"note: the matrix-product count ({matmuls.flops} FLOPs) differs from "
                          f"FlopCounterMode's ({self.cached[key]}) on the first step: every new batch "
                          "shape is counted under FlopCounterMode (slower)", file=sys.stderr)
        return self.cached[key] + self._recurrent

    def cancel(self) -> None:
        """Abandon the current step (an exception interrupted it)."""
        if self._fast is not None:
            self._fast.__exit__(None, None, None)
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
        self.counting, self._mode, self._fast = False, None, None

    def remove(self) -> None:
        self.cancel()
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _before_rnn(self, module, args, kwargs) -> None:
        if self._mode is not None:
            self._mark = self._mode.get_total_flops()
        if self._fast is not None:
            self._fast.paused += 1

    def _after_rnn(self, module, args, kwargs, output) -> None:
        if self._fast is not None:
            self._fast.paused -= 1
        if not self.counting:
            return
        input = args[0] if args else kwargs["input"]
        hx = args[1] if len(args) > 1 else kwargs.get("hx")
        forward, training = recurrent_flops(module, input, hx)
        flops = training if torch.is_grad_enabled() else forward
        self._recurrent += flops
        if self._mode is not None:
            seen = self._mode.get_total_flops() - self._mark
            if seen and seen != forward:
                raise RuntimeError(f"recurrent_flops counts {forward} forward FLOPs for {module}, "
                                   f"FlopCounterMode {seen}: the formula no longer matches the kernel")
            if seen:   # an unrolled kernel: FlopCounterMode counts its forward and its backward
                self._seen += flops
