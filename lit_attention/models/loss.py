"""Label-smoothed cross-entropy over the output vocabulary, without [N, V] fp32 intermediates.

``F.cross_entropy(logits, target, ignore_index=PAD, label_smoothing=eps)`` materialises, for N
target positions and a V-word vocabulary: an fp32 copy of bf16 logits (autocast runs the loss in
fp32), the log-softmax, and in the backward a zero-filled gradient of the NLL term, a second one
of the smoothing term, their sum, the log-softmax backward and the cast back to bf16: a dozen
passes over N x V floats (4,096 x 8,000 on the reference Transformer), a large share of a CPU's
training step. Here the same loss keeps one fp32 number per row (the log-sum-exp; float64 for
float64 logits) and works through the logits a block of rows at a time, so the block stays in
cache; the backward writes the gradient, in the logits' dtype, in one sweep.

Per non-ignored row with logits x and target t (lse = log sum_v exp x_v):

    loss_row = (1 - eps) (lse - x_t) + eps mean_v (lse - x_v) = lse - (1 - eps) x_t - eps mean_v x_v
    d loss_row / d x_v = softmax(x)_v - eps / V - (1 - eps) [v = t]

and the loss is the mean over non-ignored rows, as ``F.cross_entropy`` computes it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BLOCK_FLOATS = 2 ** 17   # fp32 elements per block of rows (512 KiB: stays in a core's L2 cache)


def smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                           label_smoothing: float = 0.0) -> torch.Tensor:
    """logits [N, V] (any float dtype), target [N] -> mean loss over rows whose target is not
    ignore_index (NaN if there is none, as ``F.cross_entropy``); equal to ``F.cross_entropy`` with
    the same arguments to fp32 rounding."""
    return _SmoothedCrossEntropy.apply(logits, target, ignore_index, label_smoothing)


def _blocks(n: int, v: int):
    rows = max(1, BLOCK_FLOATS // v)
    return ((start, min(start + rows, n)) for start in range(0, n, rows))


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index, eps):
        n, v = logits.shape
        keep = target != ignore_index
        safe = torch.where(keep, target, 0)[:, None]                       # [N, 1]
        acc = accumulation_dtype(logits.dtype)
        lse, mean = torch.empty(2, n, dtype=acc, device=logits.device)
        for a, b in _blocks(n, v):
            x = logits[a:b].to(acc)
            torch.logsumexp(x, 1, out=lse[a:b])
            torch.mean(x, 1, out=mean[a:b])
        rows = lse - (1 - eps) * logits.gather(1, safe).squeeze(1).to(acc) - eps * mean
        count = keep.sum()
        ctx.save_for_backward(logits, safe, lse, keep, count)
        ctx.eps = eps
        return torch.where(keep, rows, 0.0).sum() / count

    @staticmethod
    def backward(ctx, grad_loss):
        logits, safe, lse, keep, count = ctx.saved_tensors
        eps, (n, v) = ctx.eps, logits.shape
        scale = torch.where(keep, grad_loss / count, 0.0)[:, None]       # [N, 1]
        hit = torch.full(safe.shape, -(1 - eps), dtype=lse.dtype, device=logits.device)
        grad = torch.empty_like(logits)
        for a, b in _blocks(n, v):
            p = torch.sub(logits[a:b], lse[a:b, None]).exp_()             # softmax, in lse's dtype
            p.sub_(eps / v).scatter_add_(1, safe[a:b], hit[a:b]).mul_(scale[a:b])
            grad[a:b] = p
        return grad, None, None, None


def decoder_loss(out, tgt_out: torch.Tensor, label_smoothing: float, ignore_index: int) -> torch.Tensor:
    """The training loss of an encoder-decoder: ``out`` a models.base.DecoderOutput over targets
    ``tgt_out`` [B, T]; its output projection fused with the loss (``linear_cross_entropy``)."""
    readout = out.readout.reshape(-1, out.readout.size(-1))
    return linear_cross_entropy(readout, out.generator.weight, out.generator.bias, tgt_out.reshape(-1),
                                ignore_index, label_smoothing)


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         target: torch.Tensor, ignore_index: int = -100,
                         label_smoothing: float = 0.0) -> torch.Tensor:
    """x [N, D], weight [V, D], bias [V] or None, target [N] -> the loss of
    ``smoothed_cross_entropy(F.linear(x, weight, bias), target, ...)`` without its [N, V] logits.

    The output projection and the loss are worked through a block of rows at a time: the block's
    logits, its softmax, and its share of the three gradients (of x, weight, bias) are computed in
    the forward pass, while the block is still in cache. The loss is the last op of a training
    step, so the backward only scales the stored gradients. The [N, V] logits and their gradient
    (131 MB each on the reference Transformer, allocated afresh every step) never exist. Under
    autocast the products run in its dtype, as ``F.linear`` would; softmax and sums stay in fp32.
    The matrix products are those of the unfused pair (3 per block: 2 N D V FLOPs each).

    On a device other than a CPU, and under torch.compile (whose kernels fuse the pair, and which
    would unroll the blocks for every batch size), the unfused pair runs instead (``fused_pays``).
    """
    if not fused_pays(x.device.type) or torch.compiler.is_compiling():
        logits = F.linear(x, weight, bias)
        return F.cross_entropy(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing)
    return _LinearCrossEntropy.apply(x, weight, bias, target, ignore_index, label_smoothing)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """Softmax and sums run in fp32 for half-precision logits, in float64 for float64 ones."""
    return torch.promote_types(dtype, torch.float32)


def fused_pays(device_type: str) -> bool:
    """Whether the fused projection + loss beats F.linear then F.cross_entropy on this device.

    It exists for a CPU's memory traffic (the [N, V] logits do not fit its caches). On a GPU the
    logits fit its memory, and many blocks of small, launch-bound kernels per step cost more than
    two large ones (docs/BENCHMARKS.md).
    """
    return device_type == "cpu"


ROWS_PER_BLOCK = 128    # of the logits: [128, V] (4 MB fp32 at V = 8,000: a block stays in cache)
# Under autocast the weight gradient is accumulated in fp32 from bf16 products: one product per
# 512 rows (their bf16 gradients kept) rather than one per block halves those products' overhead;
# in fp32, one per block is fastest (bench/throughput.py).
ROWS_PER_WEIGHT_GRAD_LOW_PRECISION = 512


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, target, ignore_index, eps):
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
        low, acc = dtype in (torch.float16, torch.bfloat16), accumulation_dtype(dtype)
        with torch.autocast(device, enabled=False):
            xc, wc = x.to(dtype), weight.to(dtype)
            bc = None if bias is None else bias.to(dtype)
            n, v = x.shape[0], weight.shape[0]
            keep = target != ignore_index
            safe = torch.where(keep, target, 0)[:, None]                      # [N, 1]
            count = keep.sum()
            scale = (keep / count).to(acc)[:, None]                            # [N, 1]; NaN if none kept
            hit = torch.full(safe.shape, -(1 - eps), dtype=acc, device=x.device)
            rows = torch.empty(n, dtype=acc, device=x.device)
            grad_x = torch.empty(n, x.shape[1], dtype=dtype, device=x.device)
            grad_w = torch.zeros(weight.shape, dtype=acc, device=x.device)
            grad_b = None if bias is None else torch.zeros(v, dtype=acc, device=x.device)
            group = ROWS_PER_WEIGHT_GRAD_LOW_PRECISION if low else ROWS_PER_BLOCK
            if low:
                kept = torch.empty(min(group, n), v, dtype=dtype, device=x.device)   # d loss / d logits
            for g in range(0, n, group):
                h = min(g + group, n)
                for a in range(g, h, ROWS_PER_BLOCK):
                    b = min(a + ROWS_PER_BLOCK, h)
                    z = (xc[a:b] @ wc.t() if bc is None else torch.addmm(bc, xc[a:b], wc.t())).to(acc)
                    lse = torch.logsumexp(z, 1)
                    rows[a:b] = lse - (1 - eps) * z.gather(1, safe[a:b]).squeeze(1) - eps * z.mean(1)
                    p = z.sub_(lse[:, None]).exp_()                            # softmax, in place
                    p.sub_(eps / v).scatter_add_(1, safe[a:b], hit[a:b])
                    p.mul_(scale[a:b])                                         # d loss / d logits
                    if grad_b is not None:
                        grad_b += p.sum(0)
                    if low:
                        p = kept[a - g:b - g].copy_(p)
                    torch.mm(p, wc, out=grad_x[a:b])
                if low:
                    grad_w += kept[:h - g].t() @ xc[g:h]
                else:                  # (not addmm_: FlopCounterMode, hence budgets, would miss it)
                    torch.addmm(grad_w, p.t(), xc[g:h], out=grad_w)
            loss = torch.where(keep, rows, 0.0).sum() / count
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        ctx.dtypes = (x.dtype, weight.dtype)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        (x_dtype, w_dtype), g = ctx.dtypes, grad_loss.to(grad_w.dtype)
        return ((grad_x * g).to(x_dtype), (grad_w * g).to(w_dtype),
                None if grad_b is None else (grad_b * g).to(w_dtype), None, None, None)
