"""Evaluation totals that torchmetrics reduces over DDP ranks.

``TokenNLL`` sums token NLL (float64) and target counts (int64), so perplexity = exp(total NLL /
total tokens) over every rank, not a mean of per-rank perplexities. Lightning's ``self.log(...,
sync_dist=True, reduce_fx="sum")`` is no substitute: it sums Python numbers in float32 (logging
2**24 and 1 gives 16777216.0) and hands the module no reduced value to form the ratio from.
``Hypotheses`` gathers decoded token ids by example index from every rank, ``TokenLosses`` a
language model's per-token NLL by (window, position), so it comes back in stream order.

Both are made afresh for every evaluation epoch and are no children of the module: nothing of
them goes into checkpoints, and ``module.to(dtype)`` (bf16-true) cannot cast the float64 sums.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat


class TokenNLL(Metric):
    """Summed NLL of the scored target tokens and their number, summed over DDP ranks."""

    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("nll", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("tokens", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, nll: torch.Tensor, tokens: torch.Tensor) -> None:
        """``nll``: summed NLL of a batch's scored targets; ``tokens``: how many there are."""
        self.nll += nll.detach().double()
        self.tokens += tokens

    def compute(self) -> tuple[float, int]:
        return float(self.nll), int(self.tokens)


class Hypotheses(Metric):
    """Decoded token ids by example index, gathered from every DDP rank, and the decoding time
    of the slowest rank (ranks decode side by side)."""

    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("index", [], dist_reduce_fx="cat")   # [N] example index of each row
        self.add_state("width", [], dist_reduce_fx="cat")   # [N] length of each row
        self.add_state("ids", [], dist_reduce_fx="cat")     # the N rows, concatenated
        self.add_state("seconds", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="max")
        # A rank with nothing appended would send torchmetrics' float32 stand-in for an empty list,
        # which cannot be gathered with the other ranks' int64 rows: every list starts typed.
        self.update(torch.empty(0, dtype=torch.long), torch.empty(0, 0, dtype=torch.long), 0.0)

    def update(self, index: torch.Tensor, ids: torch.Tensor, seconds: float) -> None:
        """``index``: [B] example indices; ``ids``: [B, L] their decoded tokens, PAD-padded."""
        self.index.append(index)
        self.width.append(torch.full_like(index, ids.size(1)))
        self.ids.append(ids.reshape(-1))
        self.seconds += seconds

    def compute(self) -> tuple[dict[int, list[int]], float]:
        """({example index: decoded ids}, decoding seconds)."""
        index, width, ids = (dim_zero_cat(state) for state in (self.index, self.width, self.ids))
        rows = torch.split(ids, width.tolist())
        return {i: row.tolist() for i, row in zip(index.tolist(), rows)}, float(self.seconds)


class TokenLosses(Metric):
    """The NLL of every scored target token, keyed by its place in the evaluation windows
    (window index x window width + position), gathered from every DDP rank."""

    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("key", [], dist_reduce_fx="cat")    # [T] window * width + position
        self.add_state("nll", [], dist_reduce_fx="cat")    # [T] float32 NLL of that token
        self.update(torch.empty(0, dtype=torch.long), torch.empty(0, 0), torch.empty(0, 0, dtype=torch.bool))

    def update(self, window: torch.Tensor, nll: torch.Tensor, scored: torch.Tensor) -> None:
        """``window``: [B] window indices; ``nll``: [B, W] per-position NLL; ``scored``: [B, W]
        the positions whose target counts (not PAD)."""
        width = nll.size(1)
        key = window[:, None].to(nll.device) * width + torch.arange(width, device=nll.device)
        self.key.append(key[scored])
        self.nll.append(nll.detach().float()[scored])

    def compute(self) -> torch.Tensor:
        """[T] float32: the scored tokens' NLL in stream order (each target is scored once, by
        the first window that scores it, and windows follow the stream)."""
        key, nll = dim_zero_cat(self.key), dim_zero_cat(self.nll)
        return nll[torch.argsort(key)].cpu()
