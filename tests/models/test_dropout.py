"""The Transformer's dropout: a Bernoulli mask drawn four 16-bit lanes per 64-bit draw."""

import pytest
import torch
import torch.nn.functional as F

from lit_attention.models.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_drops_at_rate_p_and_keeps_the_expectation(p, dtype):
    torch.manual_seed(0)
    y = dropout(torch.ones(2_000_003, dtype=dtype), p)       # not a multiple of four lanes
    assert y.dtype == dtype
    dropped = (y == 0).double().mean().item()
    assert abs(dropped - p) < 5 * (p * (1 - p) / y.numel()) ** 0.5
    kept = y[y != 0].double()
    assert torch.allclose(kept, torch.full_like(kept, 1 / (1 - p)), rtol=4e-3)   # bf16 rounding
    assert abs(y.double().mean().item() - 1) < 3e-3


def test_lanes_are_independent_of_their_neighbours():
    torch.manual_seed(0)
    drop = dropout(torch.ones(4_000_000), 0.5) == 0
    both = (drop[0::2] & drop[1::2]).double().mean().item()   # neighbours share a 64-bit draw
    assert abs(both - 0.25) < 2e-3
    by_lane = drop.view(-1, 4).double().mean(0)
    assert torch.allclose(by_lane, torch.full_like(by_lane, 0.5), atol=3e-3)


def test_reproducible_under_the_seed_and_identity_in_eval():
    x = torch.randn(7, 11, 13)
    torch.manual_seed(3)
    a = dropout(x, 0.2)
    torch.manual_seed(3)
    assert torch.equal(a, dropout(x, 0.2))
    module = Dropout(0.2).eval()
    assert module(x) is x and dropout(x, 0.0) is x and dropout(x, 0.2, training=False) is x
    assert torch.equal(F.dropout(x, 1.0), dropout(x, 1.0))     # p = 1 is torch's (all zeros)


def test_gradient_is_the_same_mask():
    torch.manual_seed(0)
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.25)
    y.sum().backward()
    assert torch.equal(y.detach(), x.detach() * x.grad)        # dy/dx is the scaled mask
