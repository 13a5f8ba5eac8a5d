"""Transformer building blocks: relative positions, attention paths, a decoder-only LM from the pieces."""

import pytest
import torch
from torch import nn

from lit_attention import registry
from lit_attention.data.vocab import PAD
from lit_attention.models.attention import AttentionMask, MultiHeadAttention
from lit_attention.models.positional import (AlibiBias, T5Bias, alibi_slopes, relative_keys, rotation,
                                             sinusoidal_table, t5_bucket)
from lit_attention.models.transformer import Block, Embeddings, Stack, init_weights

pytestmark = pytest.mark.numeric   # floating-point equivalences: they hold on every CPU kernel set


# every (relative encoding, scoring) pair the registry allows
RELATIVE = [(p, s) for p, s in registry.transformer_variants() if p in registry.RELATIVE_POSITIONAL]
OPTIONS = registry.POSITIONAL_OPTIONS           # the positional encodings' options, as by default


def attention(d_model, heads, scoring="scaled_dot", positional="none", options=OPTIONS):
    """Multi-head self-attention with the hooks of ``positional``, without dropout."""
    return MultiHeadAttention(d_model, heads, 0.0, scoring, rotation(positional),
                              relative_keys(positional, options))


def stack(layers, d_model, heads, ffn, norm="pre", scoring="scaled_dot", positional="none", causal=False):
    return Stack(layers, d_model, heads, ffn, 0.0, norm, scoring, positional, causal, False, OPTIONS)


def _position_bias(kind, heads):
    if kind == "alibi":
        return AlibiBias(heads, causal=False)
    if kind == "t5_bias":
        bias = T5Bias(heads, causal=False, rel_buckets=8, rel_max_distance=16)
        nn.init.normal_(bias.embedding.weight)
        return bias
    return None


@pytest.mark.parametrize("kind,scoring", RELATIVE)
def test_relative_attention_is_translation_invariant(kind, scoring):
    """Shifting every position leaves weights and outputs unchanged, for every allowed pair."""
    torch.manual_seed(0)
    attn = attention(16, 2, scoring, kind, {**OPTIONS, "shaw_clip": 4}).eval()
    if kind == "shaw":
        nn.init.normal_(attn.shaw.embedding.weight)
    bias = _position_bias(kind, heads=2)
    x = torch.randn(2, 5, 16)
    pos = torch.arange(5)

    def run(p):
        k, v = attn.keys_values(x, p)
        return attn(x, k, v, p, p, bias=None if bias is None else bias(p, p), need_weights=True)

    out, w = run(pos)
    shifted, w_shifted = run(pos + 9)
    torch.testing.assert_close(w, w_shifted, rtol=0, atol=1e-5)
    torch.testing.assert_close(out, shifted, rtol=0, atol=1e-5)
    assert (w - run(pos * 2)[1]).abs().max() > 1e-4        # relative positions do matter


@pytest.mark.parametrize("positional,scoring", list(registry.INCOMPATIBLE_POSITIONAL_SCORING))
def test_refused_pairs_are_refused_by_every_builder(positional, scoring):
    from lit_attention.lightning.lm import LanguageModelModule
    from lit_attention.lightning.translation import TranslationModule
    with pytest.raises(ValueError, match="does not go with"):
        stack(1, 16, 2, 32, scoring=scoring, positional=positional)
    with pytest.raises(ValueError, match="does not go with"):
        TranslationModule(family="transformer", positional=positional, scoring=scoring)
    with pytest.raises(ValueError, match="does not go with"):
        LanguageModelModule(family="transformer", positional=positional, scoring=scoring)


def test_rotary_with_additive_scoring_would_not_be_relative():
    """Why the pair is refused: built by hand, shifting positions changes its scores."""
    torch.manual_seed(0)
    attn = attention(16, 2, "additive").eval()
    x, pos = torch.randn(1, 5, 16), torch.arange(5)
    from lit_attention.models.positional import rotary

    def scores(p):
        q, k = rotary(attn.queries(x), p), rotary(attn.keys_values(x)[0], p)
        return attn.scores(q, k, p, p)
    assert (scores(pos) - scores(pos + 9)).abs().max() > 1e-3


def test_mha_fused_equals_explicit_with_bias_and_dead_rows():
    torch.manual_seed(0)
    attn = attention(16, 4).eval()
    x, memory = torch.randn(3, 4, 16), torch.randn(3, 6, 16, requires_grad=True)
    blocked = torch.zeros(3, 1, 4, 6, dtype=torch.bool)
    blocked[0, :, :, 4:] = True
    blocked[1] = True                                      # every query of row 1 sees nothing
    blocked[2, :, 1] = True                                # one dead query in row 2
    bias = AlibiBias(4, causal=False)(torch.arange(4), torch.arange(6))
    k, v = attn.keys_values(memory)
    fused, _ = attn(x, k, v, blocked=blocked, bias=bias)
    explicit, w = attn(x, k, v, blocked=blocked, bias=bias, need_weights=True)
    torch.testing.assert_close(fused, explicit, rtol=0, atol=1e-5)
    assert torch.all(w[blocked.expand_as(w)] == 0)
    assert torch.all(w[1] == 0) and torch.all(w[2, :, 1] == 0)
    torch.testing.assert_close(w[0].sum(-1), torch.ones(4, 4))
    # a dead query gets no attention output, only the output projection's bias
    torch.testing.assert_close(fused[1], attn.out.bias.expand(4, 16))
    fused.sum().backward()
    assert torch.isfinite(memory.grad).all()


@pytest.mark.parametrize("norm", registry.NORM)
def test_norm_placement_computes_its_residual_formula(norm):
    """pre: x + f(LN(x)) per branch and one LayerNorm after the stack; post: LN(x + f(x))."""
    torch.manual_seed(0)
    block = Block(16, 2, 24, 0.0, norm, "scaled_dot", "none", False, OPTIONS).eval()
    for ln in (block.self_norm, block.ffn_norm):                   # not the identity LayerNorm
        nn.init.normal_(ln.weight)
        nn.init.normal_(ln.bias)
    x, pos = torch.randn(2, 5, 16), torch.arange(5)

    def attend(h):
        return block.self_attn(h, *block.self_attn.keys_values(h), mask=AttentionMask())[0]
    if norm == "pre":
        h = x + attend(block.self_norm(x))
        expected = h + block.ffn(block.ffn_norm(h))
    else:
        h = block.self_norm(x + attend(x))
        expected = block.ffn_norm(h + block.ffn(h))
    out = block(x, pos, pos, AttentionMask())[0]
    torch.testing.assert_close(out, expected)
    final = stack(1, 16, 2, 24, norm=norm).norm
    assert isinstance(final, nn.LayerNorm if norm == "pre" else nn.Identity)


def test_t5_buckets():
    rel = torch.arange(-200, 201)
    bi = t5_bucket(rel, bidirectional=True, buckets=32, max_distance=128)
    causal = t5_bucket(rel, bidirectional=False, buckets=32, max_distance=128)
    assert bi.min() == 0 and bi.max() == 31 and causal.max() == 31
    assert torch.equal(bi[200 - torch.arange(5)], torch.arange(5))     # exact for small distances,
    assert torch.equal(bi[201:205], 16 + torch.arange(1, 5))           # keys after: the upper half
    assert set(bi[rel > 0].tolist()).isdisjoint(bi[rel < 0].tolist())  # before/after apart
    assert torch.all(causal[rel >= 0][1:] == 0)                   # future keys: bucket 0 (masked)
    assert torch.equal(causal[200 - torch.arange(8)], torch.arange(8))
    far = causal[rel <= 0].flip(0)                                # distance 0, 1, 2, ...
    assert torch.all(far[1:] >= far[:-1]) and far[-1] == 31       # monotone, saturates
    bias = T5Bias(2, causal=False, rel_buckets=32, rel_max_distance=128)(torch.arange(3), torch.arange(5))
    assert bias.shape == (2, 3, 5)


def test_alibi_and_sinusoids():
    torch.testing.assert_close(alibi_slopes(8), 2.0 ** -torch.arange(1, 9).float())
    assert len(set(alibi_slopes(6).tolist())) == 6
    bias = AlibiBias(2, causal=False)(torch.arange(3), torch.arange(3))
    torch.testing.assert_close(bias[0], -0.0625 * torch.tensor([[0., 1, 2], [1, 0, 1], [2, 1, 0]]))
    table = sinusoidal_table(50, 8)
    torch.testing.assert_close(table[0], torch.tensor([0., 1] * 4))
    assert table.abs().max() <= 1


class TinyLM(nn.Module):
    """A decoder-only LM from the pieces (how the Transformer LM is meant to be built)."""

    def __init__(self, vocab=20, d_model=32, positional="rotary"):
        super().__init__()
        self.embed = Embeddings(vocab, d_model, positional, max_len=64, dropout=0.0)
        self.stack = stack(2, d_model, 2, 64, positional=positional, causal=True)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.apply(lambda m: init_weights(m, d_model))
        self.head.weight = self.embed.token.weight

    def forward(self, tokens, cache=None):
        offset = 0 if cache is None else cache["pad"].shape[1]
        states, _, cache = self.stack(self.embed(tokens, offset), tokens == PAD, cache=cache)
        return self.head(states), cache


@pytest.mark.parametrize("positional", registry.POSITIONAL)
def test_decoder_only_lm_from_blocks(positional):
    torch.manual_seed(0)
    lm = TinyLM(positional=positional).eval()
    tokens = torch.randint(4, 20, (2, 9))
    full, _ = lm(tokens)
    cache, steps = lm.stack.init_cache(2), []
    for chunk in (tokens[:, :4], tokens[:, 4:5], tokens[:, 5:]):     # prompt, then steps, then a chunk
        logits, cache = lm(chunk, cache)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-5)
    assert set(cache) == {"pad", "self_k.0", "self_v.0", "self_k.1", "self_v.1"}
