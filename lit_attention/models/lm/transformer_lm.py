"""Causal (decoder-only) Transformer language model, built from the seq2seq model's pieces.

``Embeddings`` (absolute positions, if any) + ``Stack(causal=True, cross=False)`` (relative
positions inside self-attention) + an output projection tied to the token embedding. Every
positional encoding of the registry works; each batch is its own context window (no state), so
``max_len`` must cover the longest window it is given (training block and evaluation window).
"""

from __future__ import annotations

import torch
from torch import nn

from lit_attention.models.transformer import Embeddings, Stack, init_weights


class TransformerLM(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, heads: int, layers: int, ffn: int,
                 dropout: float, norm: str, positional: str, scoring: str, tie_embeddings: bool,
                 max_len: int, rel_buckets: int, rel_max_distance: int, shaw_clip: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = Embeddings(vocab_size, d_model, positional, max_len, dropout)
        self.stack = Stack(layers, d_model, heads, ffn, dropout, norm, scoring, positional,
                           causal=True, cross=False,
                           options=dict(rel_buckets=rel_buckets, rel_max_distance=rel_max_distance,
                                        shaw_clip=shaw_clip))
        self.out = nn.Linear(d_model, vocab_size, bias=False)
        self.apply(lambda m: init_weights(m, d_model))
        if tie_embeddings:
            self.out.weight = self.embed.token.weight

    def forward(self, tokens: torch.Tensor, state=None, need_weights: bool = False):
        """Logits [B, T, V]; the state is always None (accepted for the common protocol)."""
        states, weights, _ = self.stack(self.embed(tokens), need_weights=need_weights)
        logits = self.out(states)
        return (logits, None, weights) if need_weights else (logits, None)
