"""Position information for the Transformer.

Where each encoding acts:

- ``none``: nothing; the encoder is then permutation-equivariant over source positions.
- ``sinusoidal``, ``learned``: absolute vectors added to the (scaled) token embeddings of the encoder
  and the decoder. They are the only kind that reaches cross-attention, through the embeddings.
- ``rotary``: queries and keys of every self-attention (encoder and decoder) are rotated by an angle
  proportional to their position, so q_i . k_j depends on i - j only.
- ``alibi``: a fixed per-head bias -slope_h * |i - j| added to self-attention scores.
- ``t5_bias``: a learned per-head bias looked up by a log-spaced bucket of j - i, added to
  self-attention scores; buckets are bidirectional in the encoder and causal in the decoder.
- ``shaw``: learned relative key vectors a_(j-i) (distance clipped to +-shaw_clip), so the score of
  query i for key j is computed against k_j + a_(j-i) (explicit attention path).

Cross-attention never gets relative positions: source and target positions are not comparable.
Relative encodings (rotary, alibi, t5_bias, shaw) live inside the self-attention of each stack; the
absolute ones live in ``Embeddings`` (transformer.py). Each encoding is a row of
``registry.POSITIONAL`` naming its implementation here and where it acts (``acts_on``); the
functions at the end build the implementation of a row for the place that asks.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable, Mapping

import torch
from torch import nn

from lit_attention.registry import POSITIONAL, check, implementation


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """[max_len, d_model]: sin on even dims, cos on odd dims, wavelengths 2*pi .. 10000*2*pi."""
    position = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)[:, : d_model // 2]
    return table


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal position vectors, looked up by position: [T] -> [T, d_model]."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        # not persistent: it is a function of (max_len, d_model), no need to store it in checkpoints
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions]


class LearnedPositions(nn.Module):
    """Learned absolute position vectors: [T] -> [T, d_model]."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.embedding(positions)


def rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate pairs (x[..., i], x[..., i + d/2]) of x [..., T, d] by angle positions[t] * base^(-2i/d)."""
    half = x.shape[-1] // 2
    frequency = base ** (-torch.arange(half, device=x.device, dtype=torch.float) / half)
    angle = positions.to(torch.float).unsqueeze(-1) * frequency          # [T, d/2]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def alibi_slopes(heads: int) -> torch.Tensor:
    """Geometric slopes 2^(-8/n), 2^(-16/n), ... (Press et al.); interleaved when heads is no power of 2."""
    def powers(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]
    closest = 2 ** math.floor(math.log2(heads))
    slopes = powers(closest)
    if closest < heads:
        slopes += powers(2 * closest)[0::2][: heads - closest]
    return torch.tensor(slopes)


class AlibiBias(nn.Module):
    """[H, T, S] bias -slope_h * |j - i|; symmetric, so the same module serves encoder and decoder
    (``causal`` changes nothing)."""

    def __init__(self, heads: int, causal: bool):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        distance = (k_pos[None, :] - q_pos[:, None]).abs().to(self.slopes.dtype)
        return -self.slopes[:, None, None] * distance


def t5_bucket(relative: torch.Tensor, bidirectional: bool, buckets: int,
              max_distance: int) -> torch.Tensor:
    """Bucket of relative position j - i: exact for small distances, log-spaced up to max_distance.

    Bidirectional: half the buckets for keys after the query, half for keys before it. Causal: all
    buckets for keys at or before the query (keys after it map to bucket 0; the causal mask hides them).
    """
    offset = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        offset = (relative > 0).long() * buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    exact = buckets // 2
    log_ratio = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (buckets - exact)).long()).clamp(max=buckets - 1)
    return offset + torch.where(distance < exact, distance, far)


def check_t5_buckets(rel_buckets: int, rel_max_distance: int) -> None:
    """ValueError unless ``t5_bucket`` can bucket with these both ways: at least one distance
    bucketed exactly (a quarter of the buckets, bidirectional), and log-spaced buckets beyond the
    exact ones up to a larger distance (half of the buckets are exact, causal)."""
    if rel_buckets < 4 or rel_max_distance <= rel_buckets // 2:
        raise ValueError(f"model.rel_buckets must be >= 4 and model.rel_max_distance > rel_buckets / 2 "
                         f"(the distances a causal stack buckets exactly), got {rel_buckets} and {rel_max_distance}")


class T5Bias(nn.Module):
    """Learned per-head scalar bias for each relative-position bucket, shared by all layers of a
    stack: ``rel_buckets`` buckets (bidirectional unless ``causal``), log-spaced up to
    ``rel_max_distance``."""

    def __init__(self, heads: int, causal: bool, rel_buckets: int, rel_max_distance: int):
        super().__init__()
        self.bidirectional, self.buckets, self.max_distance = not causal, rel_buckets, rel_max_distance
        self.embedding = nn.Embedding(rel_buckets, heads)

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        bucket = t5_bucket(k_pos[None, :] - q_pos[:, None], self.bidirectional, self.buckets,
                           self.max_distance)
        return self.embedding(bucket).permute(2, 0, 1)                     # [H, T, S]


class ShawRelative(nn.Module):
    """Relative key vectors a_(j-i), one per clipped distance in [-shaw_clip, shaw_clip] (Shaw et
    al., 2018)."""

    def __init__(self, d_head: int, shaw_clip: int):
        super().__init__()
        self.clip = shaw_clip
        self.embedding = nn.Embedding(2 * shaw_clip + 1, d_head)

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        relative = (k_pos[None, :] - q_pos[:, None]).clamp(-self.clip, self.clip)
        return self.embedding(relative + self.clip)                        # [T, S, d_head]


# -- The implementation of a registry.POSITIONAL row, for the place it acts on (else None) ---------
# ``options`` holds the config options of the positional encodings (registry.POSITIONAL_OPTIONS);
# each implementation gets those its row names.

def _acting(kind: str, where: str, options: Mapping[str, Any] | None = None) -> Callable | None:
    """The implementation of ``kind`` with the options its row names, if it acts on ``where``."""
    row = POSITIONAL[check("positional encoding", kind, POSITIONAL)]
    return (partial(implementation(POSITIONAL, kind), **{k: options[k] for k in row.options})
            if row.acts_on == where else None)


def absolute_positions(kind: str, max_len: int, d_model: int) -> nn.Module | None:
    """The absolute position vectors of ``kind`` (a module: positions [T] -> [T, d_model])."""
    build = _acting(kind, "embeddings")
    return build(max_len, d_model) if build else None


def rotation(kind: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    """The rotation of self-attention queries and keys of ``kind``: (x [..., T, d], positions [T])."""
    return _acting(kind, "rotation")


def score_bias(kind: str, heads: int, causal: bool, options: Mapping[str, Any]) -> nn.Module | None:
    """The self-attention score bias of ``kind`` (a module: positions -> [H, T, S])."""
    build = _acting(kind, "bias", options)
    return build(heads, causal) if build else None


def relative_keys(kind: str, options: Mapping[str, Any]) -> Callable[[int], nn.Module] | None:
    """d_head -> the relative key vectors of ``kind`` (a module: positions -> [T, S, d_head])."""
    return _acting(kind, "keys", options)
