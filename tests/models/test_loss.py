"""The blockwise label-smoothed cross-entropy equals F.cross_entropy, loss and gradient; fused with
the output projection, it equals F.linear then F.cross_entropy."""

import math

import pytest
import torch
import torch.nn.functional as F

import lit_attention.models.loss as loss_module
from lit_attention.models.loss import linear_cross_entropy, smoothed_cross_entropy

pytestmark = pytest.mark.numeric   # floating-point equivalences: they hold on every CPU kernel set

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


@pytest.mark.numeric
@pytest.mark.parametrize("fused", [False, True])
def test_float64_logits_give_a_float64_loss_and_gradients(fused):
    """A 64-true run keeps float64 through the loss: its result agrees with torch's float64 loss
    to a float64 error bound (N * V * 2**-53 relative), far tighter than a float32 pass could."""
    torch.manual_seed(0)
    n, d, v = 40, 16, 300
    x, w = torch.randn(n, d, dtype=torch.float64), torch.randn(v, d, dtype=torch.float64)
    target = torch.randint(0, v, (n,))
    target[::5] = PAD
    bound = n * v * 2.0 ** -53

    def run(fn):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        loss = fn(xs, ws)
        loss.backward()
        return loss, xs.grad, ws.grad

    ours = run((lambda a, b: linear_cross_entropy(a, b, None, target, PAD, 0.1)) if fused else
               (lambda a, b: smoothed_cross_entropy(a @ b.t(), target, PAD, 0.1)))
    theirs = run(lambda a, b: F.cross_entropy(a @ b.t(), target, ignore_index=PAD, label_smoothing=0.1))
    assert all(t.dtype == torch.float64 for t in ours)
    for mine, ref in zip(ours, theirs):
        torch.testing.assert_close(mine, ref, rtol=0, atol=bound * float(ref.abs().max()))


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


# -- the output projection fused with the loss ----------------------------------------------------

def projected_loss_and_grads(fn, x, weight, bias, target, eps, autocast=False):
    """The loss and the gradients of x, weight, bias (None without one)."""
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, weight, bias)]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = fn(*leaves, target, eps)
    loss.backward()
    return loss, [t.grad if t is not None else None for t in leaves]


def fused(x, weight, bias, target, eps):
    return linear_cross_entropy(x, weight, bias, target, ignore_index=PAD, label_smoothing=eps)


def unfused(x, weight, bias, target, eps):
    return F.cross_entropy(F.linear(x, weight, bias), target, ignore_index=PAD, label_smoothing=eps)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("n,v,d", [(37, 11, 5), (300, 500, 24)])     # 300: three blocks, the last short
def test_linear_cross_entropy_equals_linear_then_torchs_loss_in_fp32(n, v, d, bias, eps):
    torch.manual_seed(0)
    x, weight = torch.randn(n, d), torch.randn(v, d) / d ** 0.5 * 3
    b = torch.randn(v) if bias else None
    target = torch.randint(0, v, (n,))
    target[::5] = PAD
    ours, ours_grads = projected_loss_and_grads(fused, x, weight, b, target, eps)
    theirs, their_grads = projected_loss_and_grads(unfused, x, weight, b, target, eps)
    assert ours.dtype == torch.float32
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    for mine, reference in zip(ours_grads, their_grads):
        if reference is None:
            assert mine is None
            continue
        assert mine.dtype == reference.dtype
        assert torch.allclose(mine, reference, rtol=1e-4, atol=1e-5 * reference.abs().max())


def test_linear_cross_entropy_under_autocast_runs_the_products_in_bf16_like_f_linear():
    torch.manual_seed(0)
    x, weight = torch.randn(600, 32), torch.randn(3000, 32) / 32 ** 0.5 * 3
    target = torch.randint(0, 3000, (600,))
    target[:7] = PAD
    ours, ours_grads = projected_loss_and_grads(fused, x, weight, None, target, 0.1, autocast=True)
    theirs, their_grads = projected_loss_and_grads(unfused, x, weight, None, target, 0.1, autocast=True)
    exact, _ = projected_loss_and_grads(unfused, x, weight, None, target, 0.1)
    assert ours.dtype == torch.float32 and [g.dtype for g in ours_grads[:2]] == [torch.float32] * 2
    assert torch.allclose(ours, theirs, rtol=1e-4)              # the same bf16 logits
    assert abs(ours - exact) > 1e-6                              # ... which are not the fp32 ones
    for mine, reference in zip(ours_grads[:2], their_grads[:2]):
        assert torch.allclose(mine, reference, rtol=2e-2, atol=2e-2 * reference.abs().max())   # bf16 rounding


def test_linear_cross_entropy_with_every_target_ignored_is_nan_like_torch():
    x, weight = torch.randn(4, 3), torch.randn(9, 3)
    assert math.isnan(linear_cross_entropy(x, weight, None, torch.full((4,), PAD), PAD, 0.1).item())


def test_a_tied_weight_gets_the_sum_of_both_uses_gradients():
    """The Transformer's output projection shares its weight with the target embedding."""
    torch.manual_seed(0)
    embed = torch.nn.Embedding(50, 8)
    tokens, target = torch.randint(1, 50, (30,)), torch.randint(1, 50, (30,))
    grads = []
    for fn in (fused, unfused):
        embed.zero_grad()
        fn(torch.tanh(embed(tokens)), embed.weight, None, target, 0.1).backward()
        grads.append(embed.weight.grad.clone())
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_the_fused_loss_runs_on_a_cpu_only_and_counts_the_flops_of_the_unfused_pair():
    """Off a CPU, linear_cross_entropy is F.linear then F.cross_entropy (fused_pays): few large
    kernels, where the fused blocks are launch-bound on a GPU. Budgets count the same
    FLOPs for both, so a GPU run's train_flops compare with a CPU run's."""
    from torch.utils.flop_counter import FlopCounterMode

    from lit_attention.models.loss import fused_pays
    assert fused_pays("cpu") and not fused_pays("cuda") and not fused_pays("mps")
    torch.manual_seed(0)
    x, weight, b = torch.randn(300, 24), torch.randn(500, 24), torch.randn(500)
    target = torch.randint(0, 500, (300,))
    counts = []
    for loss in (fused, unfused):
        with FlopCounterMode(display=False) as mode:
            projected_loss_and_grads(loss, x, weight, b, target, 0.1)
        counts.append(mode.get_total_flops())
    assert counts[0] == counts[1] == 3 * 2 * 300 * 24 * 500
