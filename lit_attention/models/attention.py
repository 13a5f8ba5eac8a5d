"""Multi-head attention with pluggable scoring, for the Transformer.

Scores of query q_i and key k_j, per head (d = d_head):

- ``scaled_dot``: q . k / sqrt(d)           (fused kernel)
- ``dot``:        q . k                      (fused kernel, scale=1)
- ``general``:    q^T W k                    (fused kernel on the transformed query q^T W, scale=1)
- ``additive``:   v^T tanh(W1 q + W2 k)      (explicit path, [B, H, T, S, d] intermediate)

Each scoring is a row of ``registry.TRANSFORMER_SCORING`` whose implementation is a ``HeadScoring``
below. Position hooks: ``rotate`` (rotary) rotates queries and keys (after the ``general`` map, so
q^T W k still depends only on i - j; with additive scoring it would not, and the registry refuses
that pair); additive biases (ALiBi, T5) come in as ``bias``; ``relative_keys`` (shaw) make the
score of (i, j) the score against k_j + a_(j-i) and force the explicit path.

``torch.nn.functional.scaled_dot_product_attention`` computes the product whenever it can; the
explicit path (softmax of the score matrix) serves additive scoring, Shaw, need_weights=True and
attention dropout on the CPU (whose fused kernels have none: there the call would fall back to the
same explicit computation, with torch's slower dropout mask). Both see the same float mask, so they
agree to rounding.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from lit_attention.models.dropout import dropout as drop
from lit_attention.registry import TRANSFORMER_SCORING, implementation


class AttentionMask(NamedTuple):
    """What a query may see, prepared once per stack and shared by its layers.

    ``additive`` is a float mask (``-inf`` where blocked, plus any position bias) or None;
    ``dead`` [.., T, 1] marks query rows that see no key at all: their mask row is left open (so
    softmax never computes 0/0) and the attention zeroes their output; ``causal`` means "query i
    sees keys 0..i and nothing else is blocked", which lets the fused kernel skip the masked half.
    """
    additive: torch.Tensor | None = None
    dead: torch.Tensor | None = None
    causal: bool = False

    def explicit(self, t: int, s: int, device) -> torch.Tensor | None:
        """The additive mask as a tensor, the causal triangle included."""
        return (torch.full((t, s), float("-inf"), device=device).triu(s - t + 1) if self.causal
                else self.additive)


def reads_are_free(t: torch.Tensor) -> bool:
    """Whether looking at a value of ``t`` costs nothing: on a CPU. On an accelerator a read waits
    for every kernel queued so far, and a launch-bound training step then idles, so the
    model never branches on a device value there (it takes the branch that is right either way).
    Nor under torch.compile: a branch on a value would break the graph in two."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def combine_mask(blocked: torch.Tensor | None, bias: torch.Tensor | None,
                 dtype: torch.dtype) -> AttentionMask:
    """One additive float mask from a bool ``blocked`` pattern (True = may not attend) and a bias."""
    if blocked is None:
        return AttentionMask(bias)
    dead = blocked.all(dim=-1, keepdim=True)
    mask = torch.zeros(blocked.shape, dtype=dtype, device=blocked.device)
    mask = mask.masked_fill(blocked & ~dead, float("-inf"))
    if bias is not None:
        mask = mask + bias.to(dtype)
    # zeroing the dead rows' output is right whether or not there are any: off a CPU, always done
    return AttentionMask(mask, dead if not reads_are_free(dead) or dead.any() else None)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: queries from x, keys/values from ``keys_values`` (cacheable).

    scoring: a registry.TRANSFORMER_SCORING name. rotate: the rotation of queries and keys
    (positional.rotation), or None. relative_keys: d_head -> the relative key vectors
    (positional.relative_keys), or None. Cross-attention has neither.
    """

    def __init__(self, d_model: int, heads: int, dropout: float, scoring: str,
                 rotate: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
                 relative_keys: Callable[[int], nn.Module] | None):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.heads, self.d_head = heads, d_model // heads
        if rotate is not None and self.d_head % 2:
            raise ValueError(f"rotary needs an even head size, got {self.d_head}")
        self.rotate, self.dropout = rotate, dropout
        self.head_scoring = implementation(TRANSFORMER_SCORING, scoring)
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        d = self.d_head
        self.shaw = relative_keys(d) if relative_keys is not None else None
        # the fused kernel computes the scores, unless Shaw's keys need the explicit path
        self.fused = TRANSFORMER_SCORING[scoring].fused and self.shaw is None
        # Xavier-uniform: a d x d map has fan-in + fan-out 2d, a vector v (d -> 1 score) d + 1
        for name, axes in self.head_scoring.parameters:                   # [H, d, d] maps, [H, d] vectors
            bound = math.sqrt(6.0 / (d + (d if axes == 2 else 1)))
            weight = torch.empty(heads, *(d,) * axes).uniform_(-bound, bound)
            setattr(self, name, nn.Parameter(weight))

    def split(self, x: torch.Tensor) -> torch.Tensor:                     # [B, T, D] -> [B, H, T, d]
        return x.view(x.shape[0], x.shape[1], self.heads, self.d_head).transpose(1, 2)

    def project(self, x: torch.Tensor, positions: torch.Tensor | None, *layers: nn.Linear):
        """x [B, T, D] through ``layers`` (some of query, key, value) in one [D, nD] matrix product
        (it fills the CPU's matrix units better than n [D, D] ones, and under autocast x is cast to
        bf16 once instead of n times), split into heads [B, H, T, d] each; the keys rotated when
        rotary."""
        weight = torch.cat([layer.weight for layer in layers])
        bias = torch.cat([layer.bias for layer in layers])
        out = [self.split(y) for y in F.linear(x, weight, bias).chunk(len(layers), dim=-1)]
        if self.rotate is not None:
            k = layers.index(self.key)
            out[k] = self.rotate(out[k], positions)
        return out

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor | None = None):
        """Keys and values [B, H, S, d] of x [B, S, D]; keys are rotated when rotary (cache them
        as is)."""
        return tuple(self.project(x, positions, self.key, self.value))

    def queries(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Queries [B, H, T, d] of x [B, T, D]: for ``general`` already mapped by W, so that the
        score is a dot product with the keys; rotated when rotary (after W: q^T W k stays relative)."""
        return self.prepare_queries(self.split(self.query(x)), positions)

    def prepare_queries(self, q: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        q = self.head_scoring.queries(self, q)
        if self.rotate is not None:
            q = self.rotate(q, positions)
        return q

    def queries_keys_values(self, x: torch.Tensor, positions: torch.Tensor | None = None):
        """``queries(x)`` and ``keys_values(x)`` of self-attention in one matrix product.
        Returns q, k, v [B, H, T, d]."""
        q, k, v = self.project(x, positions, self.query, self.key, self.value)
        return self.prepare_queries(q, positions), k, v

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                q_pos: torch.Tensor | None = None, k_pos: torch.Tensor | None = None,
                blocked: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                need_weights: bool = False, mask: AttentionMask | None = None,
                q: torch.Tensor | None = None):
        """x [B, T, D]; k, v [B, H, S, d]; q_pos [T] and k_pos [S] (rotary/shaw only);
        blocked bool broadcastable to [B, H, T, S]; bias float broadcastable to [B, H, T, S];
        or, instead of those two, ``mask`` already combined (see ``Stack``); q [B, H, T, d]: the
        queries of x if already computed (``queries_keys_values``).
        Returns (output [B, T, D], weights [B, H, T, S] or None)."""
        if q is None:
            q = self.queries(x, q_pos)
        if mask is None:
            mask = combine_mask(blocked, bias, q.dtype)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if self.fused and not need_weights and not (dropout and q.device.type == "cpu"):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.additive, dropout_p=dropout,
                                                 is_causal=mask.causal, scale=self.head_scoring.fused_scale)
        else:
            scores = self.scores(q, k, q_pos, k_pos)
            additive = mask.explicit(q.shape[2], k.shape[2], q.device)
            if additive is not None:
                scores = scores + additive
            weights = scores.softmax(dim=-1)
            if mask.dead is not None:
                weights = weights.masked_fill(mask.dead, 0.0)
            out = drop(weights, dropout, self.training) @ v
        if mask.dead is not None:
            out = out.masked_fill(mask.dead, 0.0)
        out = out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return self.out(out), weights

    def scores(self, q, k, q_pos, k_pos) -> torch.Tensor:
        """Explicit score matrix [B, H, T, S] (before masking)."""
        relative = self.shaw(q_pos, k_pos) if self.shaw is not None else None  # [T, S, d]
        return self.head_scoring.scores(self, q, k, relative)


# -- Scoring functions of the heads: what each adds to MultiHeadAttention ------------------------
# q [B, H, T, d] (after ``queries``), k [B, H, S, d], relative: Shaw's key vectors [T, S, d] or None.

def _dot_scores(attn: MultiHeadAttention, q, k, relative) -> torch.Tensor:
    scores = q @ k.transpose(-1, -2)
    if relative is not None:
        scores = scores + torch.einsum("bhtd,tsd->bhts", q, relative)
    return scores


def _additive_scores(attn: MultiHeadAttention, q, k, relative) -> torch.Tensor:
    q1 = torch.einsum("bhtd,hed->bhte", q, attn.w_query)
    k2 = torch.einsum("bhsd,hed->bhse", k, attn.w_key)
    hidden = q1.unsqueeze(3) + k2.unsqueeze(2)                             # [B, H, T, S, d]
    if relative is not None:
        hidden = hidden + torch.einsum("tsd,hed->htse", relative, attn.w_key)
    return torch.einsum("bhtse,he->bhts", torch.tanh(hidden), attn.v)


class HeadScoring(NamedTuple):
    """One scoring function of the heads (the implementation of a registry.TRANSFORMER_SCORING row)."""
    parameters: tuple[tuple[str, int], ...]     # (name, d axes: 2 a [H, d, d] map, 1 a [H, d] vector)
    queries: Callable[[MultiHeadAttention, torch.Tensor], torch.Tensor]   # q -> what meets the keys
    fused_scale: float | None                   # the fused kernel's scale (None: its 1/sqrt(d))
    scores: Callable[..., torch.Tensor]         # (attn, q, k, relative) -> explicit scores [B, H, T, S]


def _scaled_dot_scores(attn: MultiHeadAttention, q, k, relative) -> torch.Tensor:
    return _dot_scores(attn, q, k, relative) / math.sqrt(attn.d_head)


def _as_is(attn: MultiHeadAttention, q: torch.Tensor) -> torch.Tensor:
    return q


def _general_queries(attn: MultiHeadAttention, q: torch.Tensor) -> torch.Tensor:
    return q @ attn.w                                                     # (q^T W) . k


# The scorings of registry.TRANSFORMER_SCORING (see the module docstring). Named functions, not
# lambdas: a DDP rank started by spawn receives the model pickled, with these in it.
SCALED_DOT_HEADS = HeadScoring((), _as_is, None, _scaled_dot_scores)
DOT_HEADS = HeadScoring((), _as_is, 1.0, _dot_scores)
GENERAL_HEADS = HeadScoring((("w", 2),), _general_queries, 1.0, _dot_scores)
ADDITIVE_HEADS = HeadScoring((("w_query", 2), ("w_key", 2), ("v", 1)), _as_is, None, _additive_scores)
