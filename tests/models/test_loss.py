"""The blockwise label-smoothed cross-entropy equals F.cross_entropy, loss and gradient."""

import math

import pytest
import torch
import torch.nn.functional as F

import lit_attention.models.loss as loss_module
from lit_attention.models.loss import smoothed_cross_entropy

PAD = 0


def loss_and_grad(fn, logits, target, eps, autocast=False):
    x = logits.detach().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = fn(x, target, ignore_index=PAD, label_smoothing=eps)
    loss.backward()
    return loss, x.grad


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("n,v", [(37, 11), (300, 1000), (5, 70000)])   # 70000: one row per block
def test_equals_torch_in_fp32(n, v, eps):
    torch.manual_seed(0)
    logits = torch.randn(n, v) * 4
    target = torch.randint(0, v, (n,))
    target[::5] = PAD
    ours, ours_grad = loss_and_grad(smoothed_cross_entropy, logits, target, eps)
    theirs, their_grad = loss_and_grad(F.cross_entropy, logits, target, eps)
    assert ours.dtype == torch.float32
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    scale = their_grad.abs().max()
    assert torch.allclose(ours_grad, their_grad, rtol=1e-5, atol=1e-5 * scale)   # fp32 rounding


def test_bf16_logits_under_autocast_match_torchs_fp32_loss_and_bf16_gradient():
    torch.manual_seed(0)
    logits = (torch.randn(200, 3000) * 4).bfloat16()
    target = torch.randint(0, 3000, (200,))
    target[:7] = PAD
    ours, ours_grad = loss_and_grad(smoothed_cross_entropy, logits, target, 0.1, autocast=True)
    theirs, their_grad = loss_and_grad(F.cross_entropy, logits, target, 0.1, autocast=True)
    assert ours.dtype == theirs.dtype == torch.float32 and ours_grad.dtype == torch.bfloat16
    assert torch.allclose(ours, theirs, rtol=1e-6)
    assert torch.allclose(ours_grad.float(), their_grad.float(), rtol=1e-2, atol=1e-7)   # bf16 rounding


def test_blocks_do_not_change_the_result(monkeypatch):
    torch.manual_seed(0)
    logits, target = torch.randn(50, 64), torch.randint(1, 64, (50,))
    whole, whole_grad = loss_and_grad(smoothed_cross_entropy, logits, target, 0.1)
    monkeypatch.setattr(loss_module, "BLOCK_FLOATS", 3 * 64)            # 17 blocks, the last short
    blocked, blocked_grad = loss_and_grad(smoothed_cross_entropy, logits, target, 0.1)
    assert torch.allclose(whole, blocked) and torch.allclose(whole_grad, blocked_grad)


def test_all_targets_ignored_is_nan_like_torch():
    logits = torch.randn(4, 9)
    target = torch.full((4,), PAD)
    assert math.isnan(smoothed_cross_entropy(logits, target, PAD, 0.1).item())
    assert math.isnan(F.cross_entropy(logits, target, ignore_index=PAD, label_smoothing=0.1).item())
