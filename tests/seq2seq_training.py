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


# Golden fingerprints: what a model computes, comparable between CPUs. The model is built and run
# in float64 (float64 is the default dtype while it is built, so its initial parameters are drawn in
# float64: a float32 draw differs in its last bit between torch's kernel sets). The tolerance is
# an error bound of that computation, not a measured spread: each summed value carries a relative
# rounding error of at most DEPTH * u (u = 2**-53 and DEPTH bounds the accumulations on the longest
# path through these tiny nets), and summing N of them adds N * u, so a sum of N values moves by at
# most (DEPTH + N) * u * sum(|x|) between kernel sets that reassociate differently.
U64 = 2.0 ** -53
DEPTH = 10_000


def fingerprint(build, src, tgt_in) -> tuple[list[float], list[float]]:
    """([sum of the parameters, sum and sum of squares of the evaluation logits], [their error
    bounds]) of the model ``build()`` returns, built and run in float64: what a change in the order
    parameters are initialised in, or in what a forward pass computes, moves."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = build().double().eval()
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():
        logits = model(src, tgt_in).logits
        params = torch.cat([p.flatten() for p in model.parameters()])
    values = [params, logits, logits ** 2]
    return ([float(v.sum()) for v in values],
            [(DEPTH + v.numel()) * U64 * float(v.abs().sum()) for v in values])


def fingerprints_differing(got: dict[str, tuple], expected: dict[str, list[float]]) -> list[str]:
    """The names whose fingerprint in ``got`` ((values, bounds), as ``fingerprint`` returns) is
    farther from ``expected`` than its error bound."""
    assert got.keys() == expected.keys()
    return [name for name, (values, bounds) in got.items()
            if any(abs(v - e) > b for v, e, b in zip(values, expected[name], bounds, strict=True))]
