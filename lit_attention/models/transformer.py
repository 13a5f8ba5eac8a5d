"""Transformer encoder-decoder (Vaswani et al., 2017) with ablation switches.

Pieces, smallest first:

- ``Embeddings``: token embedding * sqrt(d_model) (+ absolute positions) + dropout. The scaling keeps
  token vectors (initialised with std d_model**-0.5, as suits a tied output projection) at unit
  scale next to the unit-scale sinusoids.
- ``Block``: self-attention [+ cross-attention] + feed-forward, pre-norm or post-norm.
- ``Stack``: N blocks, the self-attention position bias (ALiBi/T5) shared by its blocks, the causal
  mask, the key/value cache and, for pre-norm, the final LayerNorm.
- ``TransformerSeq2Seq``: source ``Embeddings`` + encoder ``Stack`` + target ``Embeddings`` +
  causal decoder ``Stack`` with cross-attention + output projection (the Seq2SeqModel protocol).

A decoder-only language model is ``Embeddings`` + ``Stack(causal=True, cross=False)`` + a Linear
(tied to the token embedding); ``Stack.init_cache`` / ``Stack(x, pad, cache=...)`` decode it
incrementally exactly as the seq2seq decoder does.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from lit_attention.data.vocab import PAD
from lit_attention.models.attention import AttentionMask, MultiHeadAttention, combine_mask, reads_are_free
from lit_attention.models.base import DecoderOutput, Seq2SeqModel
from lit_attention.models.dropout import Dropout
from lit_attention.models.positional import absolute_positions, relative_keys, rotation, score_bias
from lit_attention.registry import NORM, check, check_positional_scoring


def pre_norm(norm: str) -> bool:
    """Whether registry.NORM ``norm`` puts LayerNorm before each residual branch (the stack then
    ends in one more LayerNorm), not after each residual sum."""
    return NORM[check("norm", norm, NORM)].pre_norm


class Embeddings(nn.Module):
    """tokens [B, T] -> dropout(embedding * sqrt(d_model) + absolute position) [B, T, d_model]."""

    def __init__(self, vocab_size: int, d_model: int, positional: str, max_len: int, dropout: float,
                 token: nn.Embedding | None = None):
        super().__init__()
        self.token = token if token is not None else nn.Embedding(vocab_size, d_model)
        self.max_len = max_len
        self.scale = math.sqrt(d_model)
        self.position = absolute_positions(positional, max_len, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        x = self.token(tokens) * self.scale
        if self.position is not None:
            if offset + tokens.shape[1] > self.max_len:
                raise ValueError(f"position {offset + tokens.shape[1] - 1} beyond max_len {self.max_len}")
            x = x + self.position(torch.arange(offset, offset + tokens.shape[1], device=tokens.device))
        return self.dropout(x)


class Block(nn.Module):
    """Self-attention [+ cross-attention] + feed-forward, each a residual branch (pre- or post-norm).

    positional acts here only where it rotates or adds relative keys to the self-attention;
    ``options`` holds the positional encodings' config options (registry.POSITIONAL_OPTIONS)."""

    def __init__(self, d_model: int, heads: int, ffn: int, dropout: float, norm: str, scoring: str,
                 positional: str, cross: bool, options: dict):
        super().__init__()
        self.pre_norm = pre_norm(norm)
        self.self_attn = MultiHeadAttention(d_model, heads, dropout, scoring, rotation(positional),
                                            relative_keys(positional, options))
        self.self_norm = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, heads, dropout, scoring, None, None) if cross else None
        self.cross_norm = nn.LayerNorm(d_model) if cross else None
        self.ffn = nn.Sequential(nn.Linear(d_model, ffn), nn.ReLU(), Dropout(dropout),
                                 nn.Linear(ffn, d_model))
        self.ffn_norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x, q_pos, k_pos, mask: AttentionMask, past=None, cross_kv=None,
                cross_mask: AttentionMask | None = None, need_weights=False):
        """x [B, T, D]; past: cached self-attention (k, v) of earlier positions; cross_kv: (k, v) of
        the memory. Returns (x, (k, v) of all self-attention keys so far, self weights, cross weights)."""
        h = self.branch_input(x, self.self_norm)
        q, k, v = self.self_attn.queries_keys_values(h, q_pos)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        out, self_weights = self.self_attn(h, k, v, q_pos, k_pos, need_weights=need_weights, mask=mask,
                                           q=q)
        x = self.add(x, out, self.self_norm)
        cross_weights = None
        if self.cross_attn is not None:
            h = self.branch_input(x, self.cross_norm)
            out, cross_weights = self.cross_attn(h, *cross_kv, need_weights=need_weights,
                                                 mask=cross_mask)
            x = self.add(x, out, self.cross_norm)
        x = self.add(x, self.ffn(self.branch_input(x, self.ffn_norm)), self.ffn_norm)
        return x, (k, v), self_weights, cross_weights

    def branch_input(self, x, norm):
        return norm(x) if self.pre_norm else x

    def add(self, x, out, norm):
        """Residual connection: x + out (pre-norm) or norm(x + out) (post-norm)."""
        x = x + self.dropout(out)
        return x if self.pre_norm else norm(x)


class Stack(nn.Module):
    """N blocks sharing one self-attention position bias; causal for decoders, cross for seq2seq."""

    def __init__(self, layers: int, d_model: int, heads: int, ffn: int, dropout: float, norm: str,
                 scoring: str, positional: str, causal: bool, cross: bool, options: dict):
        """options: the positional encodings' config options (registry.POSITIONAL_OPTIONS)."""
        super().__init__()
        check_positional_scoring(positional, scoring)
        self.causal, self.cross, self.heads, self.d_head = causal, cross, heads, d_model // heads
        self.layers = nn.ModuleList(
            Block(d_model, heads, ffn, dropout, norm, scoring, positional, cross, options)
            for _ in range(layers))
        self.bias = score_bias(positional, heads, causal, options)
        self.norm = nn.LayerNorm(d_model) if pre_norm(norm) else nn.Identity()

    def init_cache(self, batch: int, memory: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Empty cache: per layer self-attention k/v [B, H, 0, d], ``pad`` [B, 0] (its length is the
        number of positions decoded so far) and, given memory [B, S, D], cross-attention k/v."""
        ref = next(self.parameters())
        empty = ref.new_zeros(batch, self.heads, 0, self.d_head)
        cache = {"pad": torch.zeros(batch, 0, dtype=torch.bool, device=ref.device)}
        for i, block in enumerate(self.layers):
            cache[f"self_k.{i}"], cache[f"self_v.{i}"] = empty, empty
            if memory is not None and block.cross_attn is not None:
                cache[f"cross_k.{i}"], cache[f"cross_v.{i}"] = block.cross_attn.keys_values(memory)
        return cache

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None = None,
                memory: torch.Tensor | None = None, memory_pad: torch.Tensor | None = None,
                cache: dict[str, torch.Tensor] | None = None, need_weights: bool = False):
        """x [B, T, D] embedded input at positions offset.. (offset = positions already cached);
        pad [B, T] True on padding keys; memory [B, S, D] (cross, unless cached) and memory_pad [B, S].
        Returns (states [B, T, D], weights {"self.i"/"cross.i": [B, H, T, S]}, updated cache or None)."""
        B, T, _ = x.shape
        if pad is None:
            pad = torch.zeros(B, T, dtype=torch.bool, device=x.device)
        offset = 0 if cache is None else cache["pad"].shape[1]
        key_pad = pad if cache is None else torch.cat([cache["pad"], pad], dim=1)
        q_pos = torch.arange(offset, offset + T, device=x.device)
        k_pos = torch.arange(offset + T, device=x.device)
        bias = self.bias(q_pos, k_pos) if self.bias is not None else None  # [H, T, S]
        if self.causal and offset == 0 and bias is None and reads_are_free(key_pad) and not key_pad.any():
            mask = AttentionMask(causal=True)                              # the fused kernel's fast path
        else:
            blocked = key_pad[:, None, None, :]                            # [B, 1, 1, S]
            if self.causal:
                blocked = blocked | (k_pos[None, :] > q_pos[:, None])      # [B, 1, T, S]
            mask = combine_mask(blocked, bias, x.dtype)
        cross_mask = (combine_mask(memory_pad[:, None, None, :], None, x.dtype)
                      if memory_pad is not None else AttentionMask())

        # the cross-attention keys and values of a cache stay as they are
        weights, new_cache = {}, ({**cache, "pad": key_pad} if cache is not None else None)
        for i, block in enumerate(self.layers):
            past = (cache[f"self_k.{i}"], cache[f"self_v.{i}"]) if cache is not None else None
            cross_kv = None
            if self.cross:
                cross_kv = ((cache[f"cross_k.{i}"], cache[f"cross_v.{i}"]) if cache is not None
                            else block.cross_attn.keys_values(memory))
            x, (k, v), self_w, cross_w = block(x, q_pos, k_pos, mask, past, cross_kv, cross_mask,
                                               need_weights)
            if cache is not None:
                new_cache[f"self_k.{i}"], new_cache[f"self_v.{i}"] = k, v
            if need_weights:
                weights[f"self.{i}"] = self_w
                if self.cross:
                    weights[f"cross.{i}"] = cross_w
        return self.norm(x), weights, new_cache


def init_weights(module: nn.Module, d_model: int) -> None:
    """Xavier-uniform linear weights with zero bias, normal(0, d_model**-0.5) embeddings.
    Use as ``model.apply(lambda m: init_weights(m, d_model))``."""
    if isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=d_model ** -0.5)


class TransformerSeq2Seq(Seq2SeqModel):
    """Encoder-decoder Transformer following the Seq2SeqModel protocol.

    tie_embeddings: the decoder input embedding is the output projection. share_embeddings: when
    the vocabularies have the same size, the encoder uses the decoder's input embedding too.
    ``teacher_forcing`` is accepted for the protocol and ignored: a Transformer decoder always reads
    the given target prefix (in parallel).
    """

    source_embedding = "src_embed"

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int, heads: int,
                 enc_layers: int, dec_layers: int, ffn: int, dropout: float, norm: str,
                 tie_embeddings: bool, share_embeddings: bool, positional: str, scoring: str,
                 max_len: int, rel_buckets: int, rel_max_distance: int, shaw_clip: int):
        super().__init__()
        options = dict(rel_buckets=rel_buckets, rel_max_distance=rel_max_distance, shaw_clip=shaw_clip)
        common = dict(d_model=d_model, heads=heads, ffn=ffn, dropout=dropout, norm=norm,
                      scoring=scoring, positional=positional, options=options)
        self.encoder = Stack(enc_layers, causal=False, cross=False, **common)
        self.decoder = Stack(dec_layers, causal=True, cross=True, **common)
        self.tgt_embed = Embeddings(tgt_vocab_size, d_model, positional, max_len, dropout)
        shared = self.tgt_embed.token if share_embeddings and src_vocab_size == tgt_vocab_size else None
        self.src_embed = Embeddings(src_vocab_size, d_model, positional, max_len, dropout, token=shared)
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)
        self.apply(lambda m: init_weights(m, d_model))
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.token.weight
        self.max_positions = max_len if self.tgt_embed.position is not None else None

    def encode(self, src: torch.Tensor, need_weights: bool = False) -> dict[str, Any]:
        src_pad = src == PAD
        states, weights, _ = self.encoder(self.src_embed(src), src_pad, need_weights=need_weights)
        memory = {"states": states, "src_pad": src_pad}
        if need_weights:
            memory["attention"] = {f"enc_{name}": w for name, w in weights.items()}
        return memory

    def decode(self, memory: dict[str, Any], tgt_in: torch.Tensor, need_weights: bool = False,
               teacher_forcing: float = 1.0) -> DecoderOutput:
        states, weights, _ = self.decoder(self.tgt_embed(tgt_in), tgt_in == PAD, memory["states"],
                                          memory["src_pad"], need_weights=need_weights)
        attention = None
        if need_weights:
            attention = dict(memory.get("attention", {}))
            attention.update({(f"dec_{n}" if n.startswith("self") else n): w for n, w in weights.items()})
        return DecoderOutput(states, self.generator, attention)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False,
                teacher_forcing: float = 1.0) -> DecoderOutput:
        return self.decode(self.encode(src, need_weights), tgt_in, need_weights, teacher_forcing)

    def init_state(self, memory: dict[str, Any]) -> dict[str, Any]:
        return self.decoder.init_cache(memory["states"].shape[0], memory["states"])

    def step(self, memory: dict[str, Any], state: dict[str, Any],
             last_tokens: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        tokens = last_tokens[:, None]
        x = self.tgt_embed(tokens, offset=state["pad"].shape[1])
        states, _, state = self.decoder(x, tokens == PAD, memory_pad=memory["src_pad"], cache=state)
        return self.generator(states[:, -1]), state
