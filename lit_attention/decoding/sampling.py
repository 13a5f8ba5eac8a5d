"""Sampling from a language model: `lm(tokens [B, T], state=None) -> (logits [B, T, V], state)`.

The prefix is fed once; afterwards only the newest token is fed together with the returned state.
An LM that returns state None is treated as stateless: it is fed the whole sequence every step
(cropped to its last `context` tokens when given).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

LanguageModel = Callable[..., tuple[torch.Tensor, Any]]


def next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row from logits [B, V]; temperature 0 means arg-max."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)


@torch.no_grad()
def sample(lm: LanguageModel, prefix: torch.Tensor, n_tokens: int, temperature: float = 1.0,
           top_k: int | None = None, generator: torch.Generator | None = None,
           context: int | None = None) -> torch.Tensor:
    """Continue `prefix` [B, T] (T >= 1) by `n_tokens` sampled tokens; returns [B, T + n_tokens].

    The LM's train/eval mode is left as the caller set it (call lm.eval() first for dropout-free
    samples).
    """
    tokens = prefix
    logits, state = lm(prefix)
    for i in range(n_tokens):
        token = next_token(logits[:, -1], temperature, top_k, generator)
        tokens = torch.cat([tokens, token[:, None]], dim=1)
        if i == n_tokens - 1:
            break
        logits, state = (lm(tokens if context is None else tokens[:, -context:]) if state is None
                         else lm(token[:, None], state))
    return tokens
