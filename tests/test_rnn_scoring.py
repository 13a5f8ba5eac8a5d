"""Scoring functions: batched scores equal a per-position reference; masked softmax."""

import math

import pytest
import torch

from lit_attention.models.scoring import attend, build_scorer, masked_softmax
from lit_attention.registry import SCORING

B, TQ, S, DQ, DK = 3, 4, 6, 5, 8


def reference_score(name, scorer, s, h):
    """Score of one query vector s [DQ] against one key vector h [DK], written from the formula."""
    if name in ("dot", "scaled_dot"):
        k = h if isinstance(scorer.key_proj, torch.nn.Identity) else scorer.key_proj.weight @ h
        return (s @ k) / (math.sqrt(len(s)) if name == "scaled_dot" else 1.0)
    if name == "general":
        return s @ scorer.W.weight @ h
    if name == "low_rank":
        return (scorer.U.weight @ s) @ (scorer.V.weight @ h)
    if name == "additive":
        return scorer.v.weight[0] @ torch.tanh(scorer.W1.weight @ h + scorer.W2.weight @ s
                                              + scorer.W2.bias)
    return scorer.v.weight[0] @ torch.tanh(scorer.W.weight @ torch.cat([s, h]))


@pytest.mark.parametrize("key_size", [DQ, DK], ids=["same-size", "wider-keys"])
@pytest.mark.parametrize("name", list(SCORING))
def test_batched_scores_match_per_position_loop(name, key_size):
    torch.manual_seed(0)
    scorer = build_scorer(name, DQ, key_size, rank=3)
    query, keys = torch.randn(B, TQ, DQ), torch.randn(B, S, key_size)
    scores = scorer(query, keys)
    assert scores.shape == (B, TQ, S)
    expected = torch.empty(B, TQ, S)
    with torch.no_grad():
        for b in range(B):
            for i in range(TQ):
                for j in range(S):
                    expected[b, i, j] = reference_score(name, scorer, query[b, i], keys[b, j])
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    # precompute + score is the same computation split in two
    torch.testing.assert_close(scorer.score(query, scorer.precompute(keys)), scores)


def test_dot_projects_keys_only_when_sizes_differ():
    assert isinstance(build_scorer("dot", DQ, DQ).key_proj, torch.nn.Identity)
    assert build_scorer("scaled_dot", DQ, DK).key_proj.weight.shape == (DQ, DK)


def test_unknown_scoring_is_rejected():
    with pytest.raises(ValueError, match="valid choices"):
        build_scorer("cosine", DQ, DK)


def test_masked_softmax_zero_on_padding_and_no_nan_on_empty_rows():
    torch.manual_seed(0)
    scores = torch.randn(3, 2, 5, requires_grad=True)
    src_pad = torch.tensor([[False, False, False, True, True],
                            [False] * 5,
                            [True] * 5])                      # third row: nothing to attend to
    weights = masked_softmax(scores, src_pad)
    assert (weights[0, :, 3:] == 0).all()
    torch.testing.assert_close(weights[:2].sum(-1), torch.ones(2, 2))
    assert (weights[2] == 0).all()
    weights.sum().backward()
    assert torch.isfinite(scores.grad).all()

    values = torch.randn(3, 5, 4)
    context, w = attend(scores.detach(), values, src_pad)
    torch.testing.assert_close(context, w @ values)
    assert (context[2] == 0).all()


def test_large_scores_do_not_overflow():
    scores = torch.tensor([[[1e30, -1e30, 0.0]]])
    weights = masked_softmax(scores, torch.tensor([[False, False, True]]))
    torch.testing.assert_close(weights, torch.tensor([[[1.0, 0.0, 0.0]]]))
