"""Batched greedy decoding on the Seq2SeqModel protocol (encode, init_state, step)."""

from __future__ import annotations

import torch

from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.models.base import Seq2SeqModel


def check_length_budget(max_len_a: float, max_len_b: int) -> None:
    """ValueError unless floor(a * source length + b) can be a budget as given: a and b >= 0 and
    not both 0 (a negative or zero budget would be raised to 1 token without a word)."""
    if not (max_len_a >= 0 and max_len_b >= 0 and (max_len_a > 0 or max_len_b >= 1)):
        raise ValueError(f"model.max_len_a and model.max_len_b must be >= 0 and not both 0 (the output "
                         f"budget is a * source length + b), got {max_len_a} and {max_len_b}")


def max_output_lengths(src: torch.Tensor, max_len_a: float, max_len_b: int,
                       most: int | None = None) -> torch.Tensor:
    """Per-sentence output budget: floor(a * non-pad source length + b), at least 1 and at most
    ``most`` (the model's max_positions: its decoder takes no longer input). [B] long."""
    src_len = (src != PAD).sum(dim=1).double()
    return torch.floor(max_len_a * src_len + max_len_b).long().clamp(min=1, max=most)


@torch.no_grad()
def greedy_decode(model: Seq2SeqModel, src: torch.Tensor, max_len_a: float = 1.5,
                  max_len_b: int = 10) -> torch.Tensor:
    """Pick the arg-max token at every step, for the whole batch at once.

    Returns token ids [B, L] without BOS. A row that produced EOS keeps that EOS and is PAD after
    it; a row that hit its budget (`max_output_lengths`) has no EOS. L is the longest row.
    The model's train/eval mode is left as the caller set it.
    """
    budget = max_output_lengths(src, max_len_a, max_len_b, model.max_positions)
    memory = model.encode(src)
    state = model.init_state(memory)
    last = torch.full_like(budget, BOS)
    finished = torch.zeros_like(budget, dtype=torch.bool)
    out = []
    for t in range(int(budget.max())):
        logits, state = model.step(memory, state, last)
        last = logits.argmax(dim=-1).masked_fill(finished, PAD)
        out.append(last)
        finished |= (last == EOS) | (budget <= t + 1)
        if bool(finished.all()):
            break
    return torch.stack(out, dim=1)
