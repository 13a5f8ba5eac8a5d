"""Shared by the model tests: the teacher-forced loss and a few optimiser steps on one batch."""

import torch
import torch.nn.functional as F

from lit_attention.data.vocab import PAD


def loss_of(model, src, tgt_in, tgt_out, **kw):
    logits = model(src, tgt_in, **kw).logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD)


def train_on_batch(model, src, tgt_in, tgt_out, steps: int, lr: float,
                   until: float | None = None) -> tuple[float, float]:
    """(loss before, loss after) `steps` Adam steps on the same batch, or fewer: training stops
    once the loss is below `until` (a model without dropout, so the loss after is that loss)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    first = loss_of(model, src, tgt_in, tgt_out)
    assert torch.isfinite(first)
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of(model, src, tgt_in, tgt_out)
        if until is not None and loss.item() < until:
            break
        loss.backward()
        opt.step()
    return first.item(), loss_of(model, src, tgt_in, tgt_out).item()


# A forward pass in float64: float32 sums of the logits differ between CPUs' kernels (AVX2,
# AVX-512, AMX reassociate differently) by up to ~1e-6 relative, as much as a real change of a
# constant does; in float64 that noise is ~1e-15, so the tolerance below can be tight: a one-float32-
# ulp change of the recurrent scaled_dot's 1/sqrt(d) moves its logit sum by 2.5e-11 relative, and
# each golden test checks that it is caught.
FINGERPRINT_RTOL = FINGERPRINT_ATOL = 1e-12


def fingerprint(model, src, tgt_in) -> list[float]:
    """[sum of the parameters, sum and sum of squares of the evaluation logits], computed in
    float64 (the model is converted in place): what a change in the order parameters are
    initialised in, or in what a forward pass computes, moves."""
    model = model.double().eval()
    with torch.no_grad():
        logits = model(src, tgt_in).logits
        params = sum(p.sum() for p in model.parameters())
    return [float(params), float(logits.sum()), float((logits ** 2).sum())]


def fingerprints_differing(got: dict[str, list[float]], golden: dict[str, list[float]]) -> list[str]:
    """The names whose fingerprint in ``got`` differs from ``golden`` beyond the tolerance."""
    assert got.keys() == golden.keys()
    return [name for name, expected in golden.items()
            if not torch.allclose(torch.tensor(got[name], dtype=torch.float64),
                                  torch.tensor(expected, dtype=torch.float64),
                                  rtol=FINGERPRINT_RTOL, atol=FINGERPRINT_ATOL)]
