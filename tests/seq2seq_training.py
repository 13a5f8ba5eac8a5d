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


def fingerprint(model, src, tgt_in) -> list[float]:
    """[sum of the parameters, sum and sum of squares of the evaluation logits] (float64): what a
    change in the order parameters are initialised in, or in what a forward pass computes, moves."""
    with torch.no_grad():
        logits = model.eval()(src, tgt_in).logits.double()
        params = sum(p.double().sum() for p in model.parameters())
    return [float(params), float(logits.sum()), float((logits ** 2).sum())]
