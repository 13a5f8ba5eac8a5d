"""Scoring functions: batched scores equal a per-position reference; each scorer owns exactly the
parameters of its formula; masked softmax."""

import math

import pytest
import torch

from lit_attention.models.base import count_parameters
from lit_attention.models.scoring import attend, build_scorer, masked_softmax
from lit_attention.registry import PARAMETER_FREE_SCORING, SCORING

pytestmark = pytest.mark.numeric   # floating-point equivalences: they hold on every CPU kernel set

B, TQ, S, DQ, DK = 3, 4, 6, 5, 8


def reference_score(name, scorer, s, h):
    """Score of one query vector s [DQ] against one key vector h [DK], written from the formula."""
    if name in ("dot", "scaled_dot"):
        return (s @ h) / (math.sqrt(len(s)) if name == "scaled_dot" else 1.0)
    if name == "general":
        return s @ scorer.W.weight @ h
    if name == "low_rank":
        return (scorer.U.weight @ s) @ (scorer.V.weight @ h)
    if name == "additive":
        return scorer.v.weight[0] @ torch.tanh(scorer.W1.weight @ h + scorer.W2.weight @ s)
    return scorer.v.weight[0] @ torch.tanh(scorer.W.weight @ torch.cat([s, h]))


def _sizes():
    for name in SCORING:
        yield name, DQ
        if name not in PARAMETER_FREE_SCORING:
            yield name, DK


@pytest.mark.parametrize("name,key_size", list(_sizes()))
def test_batched_scores_match_per_position_loop(name, key_size):
    torch.manual_seed(0)
    scorer = build_scorer(name, DQ, key_size, DQ, {"rank": 3})
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


A, R = 7, 3
OWN_PARAMETERS = {"dot": 0, "scaled_dot": 0, "general": DQ * DK, "low_rank": R * (DQ + DK),
                  "additive": A * (DQ + DK + 1), "concat": A * (DQ + DK + 1)}


@pytest.mark.parametrize("name", list(SCORING))
def test_each_scorer_owns_exactly_the_parameters_of_its_formula(name):
    key_size = DQ if name in PARAMETER_FREE_SCORING else DK
    scorer = build_scorer(name, DQ, key_size, A, {"rank": R})
    assert count_parameters(scorer) == OWN_PARAMETERS[name]


@pytest.mark.parametrize("name", PARAMETER_FREE_SCORING)
def test_parameter_free_scorers_refuse_keys_of_another_size(name):
    with pytest.raises(ValueError, match="no parameters"):
        build_scorer(name, DQ, DK, DQ, {})


def test_unknown_scoring_is_rejected():
    with pytest.raises(ValueError, match="valid choices"):
        build_scorer("cosine", DQ, DK, DQ, {})


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


def test_every_scorer_class_is_the_implementation_of_a_registered_scoring():
    from lit_attention.models import scoring
    built = {name: build_scorer(name, DK, DK, DK, {"rank": 2}) for name in SCORING}
    defined = {c for c in vars(scoring).values()
               if isinstance(c, type) and issubclass(c, scoring.Scorer) and c is not scoring.Scorer}
    assert {type(s) for s in built.values()} == defined
    with pytest.raises(ValueError, match="valid choices: dot, scaled_dot"):
        build_scorer("cosine", DQ, DK, DQ, {})
