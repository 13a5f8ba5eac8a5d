"""Language models: ``lm(tokens [B, T], state=None) -> (logits [B, T, V], state)``.

Logits at position t score the token that follows ``tokens[:, t]``. ``state`` carries context
across consecutive batches of a stream (truncated-BPTT training): hidden states for recurrent
models, the last few tokens for the n-gram and fixed-window models (so a stream cut into batches
is scored exactly as a whole), None for the Transformer (each batch is its own context window).
Evaluation passes no state: every family scores sliding windows from a fresh start
(lit_attention.data.lm), so all see the same context.
The n-gram model has no parameters; its "logits" are normalised log-probabilities.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lit_attention import registry
from lit_attention.models import build
from lit_attention.models.base import tree_map


def build_lm(family: str, vocab_size: int, **options: Any) -> nn.Module:
    """The language model called ``family`` with ``options`` (its constructor's arguments; those
    left out take the registry's defaults)."""
    return build(registry.LM_MODELS, family, "language-model family", dict(vocab_size=vocab_size),
                 options, {})


def detach_state(state: Any) -> Any:
    """Cut the graph behind a carried state (truncated BPTT), keeping its structure."""
    return tree_map(torch.Tensor.detach, state)
