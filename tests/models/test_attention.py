"""Multi-head attention: every registered scoring of the heads computes its formula."""

import math

import pytest
import torch

from lit_attention.models.attention import MultiHeadAttention
from lit_attention.registry import TRANSFORMER_SCORING

pytestmark = pytest.mark.numeric   # floating-point equivalences: they hold on every CPU kernel set

D, HEADS = 16, 2
d = D // HEADS


def reference(attn, scoring, x, memory, pad):
    """Attention of x [B, T, D] over memory [B, S, D] (pad [B, S]) written out from the formulas
    in lit_attention/models/attention.py's docstring, with the module's own weights."""
    def heads(y, linear):                                          # [B, L, D] -> [B, H, L, d]
        return (y @ linear.weight.T + linear.bias).view(y.shape[0], -1, HEADS, d).transpose(1, 2)
    q, k, v = heads(x, attn.query), heads(memory, attn.key), heads(memory, attn.value)
    if scoring == "additive":                                      # v^T tanh(W1 q + W2 k)
        hidden = (q @ attn.w_query.transpose(-1, -2)).unsqueeze(3) + (k @ attn.w_key.transpose(-1, -2)).unsqueeze(2)
        scores = (torch.tanh(hidden) * attn.v[None, :, None, None, :]).sum(-1)
    elif scoring == "general":                                     # q^T W k
        scores = torch.einsum("bhtd,hde,bhse->bhts", q, attn.w, k)
    else:                                                          # q . k, / sqrt(d) when scaled
        scores = q @ k.transpose(-1, -2) / (math.sqrt(d) if scoring == "scaled_dot" else 1.0)
    weights = scores.masked_fill(pad[:, None, None, :], float("-inf")).softmax(-1)
    out = (weights @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], D)
    return out @ attn.out.weight.T + attn.out.bias, weights


@pytest.mark.parametrize("scoring", TRANSFORMER_SCORING)
def test_each_scoring_computes_its_formula_on_either_path(scoring):
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, HEADS, 0.0, scoring, None, None).eval()
    x, memory = torch.randn(3, 4, D), torch.randn(3, 5, D)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[1, 3:] = True
    expected, expected_weights = reference(attn, scoring, x, memory, pad)
    k, v = attn.keys_values(memory)
    blocked = pad[:, None, None, :]
    explicit, weights = attn(x, k, v, blocked=blocked, need_weights=True)
    torch.testing.assert_close(explicit, expected)
    torch.testing.assert_close(weights, expected_weights)
    default, _ = attn(x, k, v, blocked=blocked)                    # fused where the scoring allows
    torch.testing.assert_close(default, expected)


@pytest.mark.parametrize("scoring", TRANSFORMER_SCORING)
def test_each_scoring_owns_exactly_its_parameters(scoring):
    """Beyond the four projections: general a [H, d, d] map, additive two maps and a vector, each
    Xavier-uniform (a map's bound sqrt(6 / 2d), the vector's sqrt(6 / (d + 1)))."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, HEADS, 0.0, scoring, None, None)
    own = {name: p for name, p in attn.named_parameters() if "." not in name}
    shapes = {"scaled_dot": {}, "dot": {}, "general": {"w": (HEADS, d, d)},
              "additive": {"w_query": (HEADS, d, d), "w_key": (HEADS, d, d), "v": (HEADS, d)}}[scoring]
    assert {name: tuple(p.shape) for name, p in own.items()} == shapes
    for name, p in own.items():
        bound = math.sqrt(6 / (2 * d)) if p.dim() == 3 else math.sqrt(6 / (d + 1))
        assert p.abs().max() <= bound and p.abs().max() > bound / 2
