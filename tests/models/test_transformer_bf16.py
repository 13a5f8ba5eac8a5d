"""bf16 autocast trains the Transformer as fp32 does: the loss curves track each other."""

import pytest
import torch

from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.models.loss import smoothed_cross_entropy
from lit_attention.models import build_seq2seq

V, STEPS = 24, 40


def copy_batches(n: int, B: int = 16, L: int = 9):
    """Copy task batches: src `x.. EOS`, tgt_in `BOS x..`, tgt_out `x.. EOS`."""
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        x = torch.randint(4, V, (B, L), generator=g)
        eos, bos = torch.full((B, 1), EOS), torch.full((B, 1), BOS)
        yield torch.cat([x, eos], 1), torch.cat([bos, x], 1), torch.cat([x, eos], 1)


def losses(bf16: bool) -> list[float]:
    torch.manual_seed(0)   # the same initial weights and the same dropout masks in both runs
    net = build_seq2seq("transformer", V, V, d_model=64, heads=4, enc_layers=2, dec_layers=2, ffn=128, dropout=0.1)
    opt = torch.optim.Adam(net.parameters(), lr=5e-3, betas=(0.9, 0.98))
    curve = []
    for src, tgt_in, tgt_out in copy_batches(STEPS):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = net(src, tgt_in).logits
            loss = smoothed_cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), PAD, 0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        curve.append(loss.item())
    return curve


@pytest.mark.slow   # two training curves, 2 CPU-s
def test_bf16_autocast_loss_tracks_fp32_on_a_tiny_transformer():
    fp32, bf16 = losses(False), losses(True)
    assert fp32[-1] < 0.75 * fp32[0] and bf16[-1] < 0.75 * bf16[0]        # both learn
    gaps = [abs(b - f) / f for f, b in zip(fp32, bf16)]
    assert max(gaps[:10]) < 0.02, gaps[:10]                                # same start, to bf16 rounding
    assert max(gaps) < 0.15, gaps                                          # never drifts apart
    late = lambda c: sum(c[-10:]) / 10
    assert abs(late(bf16) - late(fp32)) < 0.05 * late(fp32)
