"""lit_attention/lightning/totals.py: evaluation totals summed (NLL, tokens) and gathered
(hypotheses) over two real gloo ranks, exactly."""

import pytest
import torch

import gloo_ranks
from lit_attention.lightning.totals import Hypotheses, TokenLosses, TokenNLL


@pytest.fixture(scope="module")
def ranks() -> list[dict]:
    """What each of two gloo ranks computed (tests/gloo_ranks.py: totals_on_rank)."""
    return gloo_ranks.run(gloo_ranks.totals_on_rank)


@pytest.mark.slow
def test_token_nll_sums_every_rank_in_float64_and_counts_tokens_exactly(ranks):
    batches = [b for rank in gloo_ranks.NLL_BATCHES.values() for b in rank]
    nll = sum(float(torch.tensor(n)) for n, _ in batches)     # each batch's float32 NLL, summed exactly
    tokens = sum(t for _, t in batches)
    assert tokens == 2**24 + 9 and float(torch.tensor(tokens, dtype=torch.float32)) != tokens
    assert nll - 3.875 > 5e-10, "the 1e-9 of the last batch counts"
    for rank in ranks:                                          # every rank holds the global totals
        got_nll, got_tokens = rank["nll"]
        assert got_tokens == tokens
        assert got_nll == pytest.approx(nll, rel=1e-15, abs=0)


@pytest.mark.parametrize("scenario", list(gloo_ranks.HYP_BATCHES))
@pytest.mark.slow
def test_hypotheses_gather_every_ranks_rows_by_example_index(ranks, scenario):
    batches = gloo_ranks.HYP_BATCHES[scenario]
    expected = {i: row for rank in batches.values() for index, ids, _ in rank for i, row in zip(index, ids)}
    slowest = max(sum(seconds for *_, seconds in rank) for rank in batches.values())
    for rank in ranks:
        decoded, seconds = rank[scenario]
        assert decoded == expected
        assert seconds == slowest


@pytest.mark.slow
def test_token_losses_come_back_from_every_rank_in_stream_order(ranks):
    for rank in ranks:
        assert rank["losses"] == [1, 2, 3, 4, 5, 6, 7]


def test_without_a_process_group_the_totals_are_this_process_alone():
    totals, hyps = TokenNLL(), Hypotheses()
    assert hyps.compute() == ({}, 0.0)
    totals.update(torch.tensor(2.0), torch.tensor(5))
    hyps.update(torch.tensor([1]), torch.tensor([[4, 3]]), 0.25)
    assert totals.compute() == (2.0, 5)
    assert hyps.compute() == ({1: [4, 3]}, 0.25)
    losses = TokenLosses()
    assert losses.compute().tolist() == []
    losses.update(torch.tensor([1, 0]), torch.tensor([[9., 3.], [1., 2.]]), torch.tensor([[0, 1], [1, 1]]).bool())
    assert losses.compute().tolist() == [1, 2, 3], "window 0 before window 1, whatever the batch order"
