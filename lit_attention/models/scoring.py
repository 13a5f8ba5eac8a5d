"""Attention scoring functions for recurrent encoder-decoders, one module each.

Every scorer maps ``query [B, Tq, Dq]`` and ``keys [B, S, Dk]`` to ``scores [B, Tq, S]`` in one
batched operation (no loop over source positions). Scoring is split in two so a decoder can run
the key-side work once per source sentence and reuse it at every step:

    prepared = scorer.precompute(keys)      # once, after encoding
    scores = scorer.score(query, prepared)  # every decoder step
    scores = scorer(query, keys)            # both at once

``attend`` turns scores into weights (masked softmax) and a context vector. Each scorer is the
implementation of one row of ``registry.SCORING``, built by ``build_scorer`` from (query size, key
size, attention size) and the config options its row names (``low_rank``'s ``rank``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from lit_attention.registry import SCORING, check, implementation


class Scorer(nn.Module):
    """Base class: identity precompute; subclasses implement ``score(query, prepared) -> scores``.
    A subclass is built as ``Scorer(query_size, key_size, attn_size, **options)``, options as its
    registry row names."""

    def precompute(self, keys: torch.Tensor) -> torch.Tensor:
        return keys

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return self.score(query, self.precompute(keys))


class Dot(Scorer):
    """s^T h (s^T h / sqrt(d) when ``scaled``, ScaledDot). No parameters: query and key sizes must
    match (a bidirectional encoder's 2H states are made H by the model's ``enc_output`` choice,
    which every scorer sees alike, never by a projection of the dot scorer's own)."""

    scaled = False

    def __init__(self, query_size: int, key_size: int, attn_size: int):
        super().__init__()
        if key_size != query_size:
            raise ValueError(f"dot scoring compares queries of size {query_size} with keys of size "
                             f"{key_size}: it has no parameters to map one to the other")
        self.scale = 1.0 / math.sqrt(query_size) if self.scaled else 1.0

    def score(self, query, prepared):
        return (query @ prepared.transpose(1, 2)) * self.scale


class ScaledDot(Dot):
    """s^T h / sqrt(d)."""

    scaled = True


class General(Scorer):
    """s^T W h (Luong's "general"): a bilinear form, so query and key sizes may differ."""

    def __init__(self, query_size: int, key_size: int, attn_size: int):
        super().__init__()
        self.W = nn.Linear(key_size, query_size, bias=False)

    def precompute(self, keys):
        return self.W(keys)                                   # W h: [B, S, Dq]

    def score(self, query, prepared):
        return query @ prepared.transpose(1, 2)


class LowRank(Scorer):
    """(U s)^T (V h): a bilinear form whose matrix U^T V has rank at most ``rank``."""

    def __init__(self, query_size: int, key_size: int, attn_size: int, rank: int):
        super().__init__()
        self.U = nn.Linear(query_size, rank, bias=False)
        self.V = nn.Linear(key_size, rank, bias=False)

    def precompute(self, keys):
        return self.V(keys)                                   # V h: [B, S, r]

    def score(self, query, prepared):
        return self.U(query) @ prepared.transpose(1, 2)


class Additive(Scorer):
    """v^T tanh(W1 h + W2 s) (Bahdanau). W1 h is the expensive half and does not depend on the
    decoder, so it is computed once in ``precompute``."""

    def __init__(self, query_size: int, key_size: int, attn_size: int):
        super().__init__()
        self.W1 = nn.Linear(key_size, attn_size, bias=False)
        self.W2 = nn.Linear(query_size, attn_size, bias=False)
        self.v = nn.Linear(attn_size, 1, bias=False)

    def precompute(self, keys):
        return self.W1(keys)                                  # [B, S, A]

    def score(self, query, prepared):
        hidden = torch.tanh(prepared.unsqueeze(1) + self.W2(query).unsqueeze(2))  # [B, Tq, S, A]
        return self.v(hidden).squeeze(-1)


class Concat(Scorer):
    """v^T tanh(W [s; h]) (Luong's "concat"), computed as written: every (query, key) pair is
    concatenated and multiplied by one W. Algebraically this is the additive form with W split in
    two; keeping the literal form makes its cost (no precompute) visible in timing ablations."""

    def __init__(self, query_size: int, key_size: int, attn_size: int):
        super().__init__()
        self.W = nn.Linear(query_size + key_size, attn_size, bias=False)
        self.v = nn.Linear(attn_size, 1, bias=False)

    def score(self, query, prepared):
        B, Tq, S = query.size(0), query.size(1), prepared.size(1)
        pairs = torch.cat([query.unsqueeze(2).expand(B, Tq, S, -1),
                           prepared.unsqueeze(1).expand(B, Tq, S, -1)], dim=-1)
        return self.v(torch.tanh(self.W(pairs))).squeeze(-1)


def build_scorer(name: str, query_size: int, key_size: int, attn_size: int,
                 options: dict[str, object]) -> Scorer:
    """The scorer of row ``name`` of ``registry.SCORING``, given the config options its row names
    (``options`` may hold more); additive/concat have ``attn_size`` hidden units."""
    row = SCORING[check("scoring", name, SCORING)]
    return implementation(SCORING, name)(query_size, key_size, attn_size,
                                         **{k: options[k] for k in row.options})


def masked_softmax(scores: torch.Tensor, src_pad: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of ``scores [B, Tq, S]`` ignoring ``src_pad [B, S]`` (True on
    padding). Padding gets exactly 0; a row whose keys are all padding gives all zeros (not NaN)."""
    pad = src_pad.unsqueeze(1)
    # A finite fill instead of -inf keeps all-padding rows finite (uniform, then zeroed below).
    weights = scores.masked_fill(pad, torch.finfo(scores.dtype).min).softmax(dim=-1)
    return weights.masked_fill(pad, 0.0)


def attend(scores: torch.Tensor, values: torch.Tensor,
           src_pad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax of ``scores [B, Tq, S]`` and the weighted sum of ``values [B, S, Dv]``.
    Returns ``(context [B, Tq, Dv], weights [B, Tq, S])``."""
    weights = masked_softmax(scores, src_pad)
    return weights @ values, weights
