"""The protocol every encoder-decoder model follows (see docs/ARCHITECTURE.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import torch
from torch import nn


@dataclass
class DecoderOutput:
    """What the decoder computed over a whole target. The logits are the output projection of
    ``readout``, computed on first use: a training loss may fuse the projection with itself
    (models/loss.linear_cross_entropy) and never form the [B, T, V] logits."""
    readout: torch.Tensor                                 # [B, T, D], the output projection's input
    generator: nn.Linear                                  # D -> V
    attention: dict[str, torch.Tensor] | None = None     # name -> [B, heads, T, S]

    @cached_property
    def logits(self) -> torch.Tensor:                     # [B, T, V]
        return self.generator(self.readout)


class Seq2SeqModel(nn.Module):
    """Base class of the encoder-decoders. A subclass implements

    - ``encode(src [B, S]) -> memory``, a dict;
    - ``decode(memory, tgt_in [B, T], need_weights=False, teacher_forcing=1.0) -> DecoderOutput``;
    - ``init_state(memory) -> state``, a dict, before the first decoder ``step``;
    - ``step(memory, state, last_tokens [B]) -> (logits [B, V], state)``: one decoder step.
    """

    # Module whose output is the encoder's per-position input (the first encoder layer's input):
    # gradient-flow diagnostics measure an encoder without recurrence there.
    source_embedding: str = "encoder.embed"
    # The most positions a source or target sequence may take (absolute position tables); None:
    # no limit. Decoding caps its output budget here.
    max_positions: int | None = None

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False,
                teacher_forcing: float = 1.0) -> DecoderOutput:
        return self.decode(self.encode(src), tgt_in, need_weights, teacher_forcing)


def tree_map(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """``obj`` with ``fn`` applied to every tensor in it (nested dicts, lists and tuples)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: tree_map(fn, v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(tree_map(fn, v) for v in obj)
    return obj


def select(obj: Any, index: torch.Tensor) -> Any:
    """Index-select dim 0 of every tensor in a nested dict/list/tuple (beam reordering)."""
    return tree_map(lambda t: t.index_select(0, index), obj)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def closest_width(params: Callable[[int], int], target: int, multiple: int = 8) -> int:
    """The width (a multiple of ``multiple``) whose parameter count ``params(width)`` is closest to
    ``target``. The count grows with width, so doubling then bisection needs few model builds."""
    lo, hi = 1, 2
    while params(hi * multiple) < target and hi < 1024:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if params(mid * multiple) < target:
            lo = mid
        else:
            hi = mid
    return min((lo * multiple, hi * multiple), key=lambda w: abs(params(w) - target))


# Sizes that keep their ratio to d_model when the width is searched (match_width).
SCALED_WITH_WIDTH = ("emb_size", "ffn")


def at_width(options: dict[str, Any], width: int) -> dict[str, Any]:
    """``options`` with d_model = ``width``; emb_size and ffn, where set, keep their ratio to it."""
    scale = width / options["d_model"]
    sized = {k: max(1, round(options[k] * scale)) for k in SCALED_WITH_WIDTH if options.get(k)}
    return {**options, **sized, "d_model": width}


def match_width(build: Callable[..., nn.Module], options: dict[str, Any], target: int) -> dict[str, Any]:
    """``options`` at the width whose model ``build(**options)`` has the parameter count closest to
    ``target``. The width is a multiple of 8 and of the number of heads (if any)."""
    multiple = math.lcm(8, options.get("heads") or 1)
    width = closest_width(lambda w: count_parameters(build(**at_width(options, w))), target, multiple)
    return at_width(options, width)
