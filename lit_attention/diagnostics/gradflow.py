"""How much gradient reaches each encoder state, and gradient norms per module.

`gradient_flow` differentiates the loss of a fixed batch with respect to the encoder states only
(`torch.autograd.grad`), so no parameter's `.grad` is created or changed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from lit_attention.data.vocab import PAD
from lit_attention.models.base import Seq2SeqModel


def summed_cross_entropy(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """Token cross-entropy summed over non-pad targets: each sentence's gradient is then its own,
    whatever else is in the batch."""
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD,
                           reduction="sum")


def gradient_flow(model: Seq2SeqModel, batch: dict, loss_fn: Callable | None = None,
                  by: str = "distance", wrt: str = "states") -> list[dict]:
    """Mean L2 norm (over the feature dim) of the loss gradient at each source position.

    wrt="states" differentiates w.r.t. memory["states"] (the encoder output). Note what that
    measures: the gradient reaching h_t *directly* (attention, readout, the final state), not
    through later encoder states, because a fused nn.RNN/GRU/LSTM does its recurrence inside one
    op. For the vanishing-gradient curve of a recurrent encoder pass the module path of the source
    embedding instead (e.g. wrt="encoder.embed"): its output [B, S, E] is captured during
    `encode`, and the gradient there has travelled through the whole recurrence.

    Position t of a sentence with m non-pad source tokens (its EOS included) has distance
    m - 1 - t from the end of the source: 0 is the source's EOS, the last token read.
    With by="distance" (default) there is one row per distance, averaging the sentences long
    enough to have it: sentences of different lengths line up on how far the gradient travelled.
    With by="position" there is one row per position. Rows are {position, distance, norm, n};
    the grouped-by field is exact, the other is the mean over the n contributing states (with
    equal-length sources both are exact).

    The loss defaults to `summed_cross_entropy(logits, tgt_out)`. Runs in eval mode (no dropout),
    restores the caller's mode, and creates no parameter gradients.
    """
    if by not in ("distance", "position"):
        raise ValueError(f"by must be 'distance' or 'position', got {by!r}")
    loss_fn = loss_fn or summed_cross_entropy
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            memory, inputs = encode_capturing(model, batch["src"], wrt)
            logits = model.decode(memory, batch["tgt_in"]).logits
            (grad,) = torch.autograd.grad(loss_fn(logits, batch["tgt_out"]), inputs,
                                          allow_unused=True)
    finally:
        model.train(was_training)

    grad = torch.zeros_like(inputs) if grad is None else grad
    norms = grad.detach().norm(dim=-1)                                  # [B, S]
    valid = batch["src"] != PAD
    lengths = valid.sum(dim=1, keepdim=True)
    positions = torch.arange(norms.size(1), device=norms.device).expand_as(norms)
    distances = lengths - 1 - positions
    key = distances if by == "distance" else positions
    rows = []
    for k in range(int(valid.sum(dim=1).max())):
        chosen = valid & (key == k)
        n = int(chosen.sum())
        if n == 0:
            continue
        rows.append({"position": positions[chosen].double().mean().item(),
                     "distance": distances[chosen].double().mean().item(),
                     "norm": norms[chosen].double().mean().item(), "n": n})
        rows[-1][by] = k
    return rows


def encode_capturing(model: Seq2SeqModel, src: torch.Tensor, wrt: str):
    """model.encode(src) and the tensor to differentiate: memory["states"], or the output of the
    submodule `wrt` (swapped for a detached leaf, so that no parameter needs a gradient)."""
    if wrt == "states":
        memory = model.encode(src)
        return memory, memory["states"]
    captured = []

    def as_leaf(module, args, output):
        if not captured:
            captured.append(output.detach().requires_grad_())
            return captured[0]
        return None

    handle = model.get_submodule(wrt).register_forward_hook(as_leaf)
    try:
        memory = model.encode(src)
    finally:
        handle.remove()
    if not captured:
        raise ValueError(f"module {wrt!r} was not called by encode")
    return memory, captured[0]


def global_grad_norm(parameters: Iterable[torch.Tensor]) -> float:
    """L2 norm of all existing gradients together (parameters without .grad are skipped)."""
    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    # One foreach kernel per dtype instead of three ops per tensor: this runs every training step.
    return torch.nn.utils.get_total_norm(grads, 2.0, foreach=True).item() if grads else 0.0


def module_path(parameter_name: str, depth: int) -> str:
    """'encoder.layers.0.attn.q.weight' -> 'encoder.layers.0' at depth 2.

    The parameter's own name is dropped; a numeric part (ModuleList/Sequential index) stays with
    the name before it and does not count as a level. Parameters of the root module are 'root'.
    """
    parts = parameter_name.split(".")[:-1]
    levels: list[list[str]] = []
    for part in parts:
        if part.isdigit() and levels:
            levels[-1].append(part)
        else:
            levels.append([part])
    return ".".join(".".join(level) for level in levels[:depth]) or "root"


def per_module_grad_norms(model: nn.Module, depth: int = 2) -> dict[str, float]:
    """L2 gradient norm per module path (see `module_path`), over parameters that have a grad."""
    squares: dict[str, list[torch.Tensor]] = defaultdict(list)
    for name, p in model.named_parameters():
        if p.grad is not None:
            squares[module_path(name, depth)].append(p.grad.detach().double().pow(2).sum())
    return {name: math.sqrt(torch.stack(s).sum().item()) for name, s in squares.items()}
