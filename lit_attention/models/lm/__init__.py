"""Language models: ``lm(tokens [B, T], state=None) -> (logits [B, T, V], state)``.

Logits at position t score the token that follows ``tokens[:, t]``. ``state`` carries context
across consecutive batches of a stream (truncated-BPTT training): hidden states for recurrent
models, the last few tokens for the n-gram and fixed-window models (so a stream cut into batches
is scored exactly as a whole), None for the Transformer (each batch is its own context window).
Evaluation passes no state: every family scores sliding windows from a fresh start
(lit_attention.data.lm), so all see the same context.
The n-gram model has no parameters; its "logits" are normalised log-probabilities.
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn

from lit_attention import registry
from lit_attention.config_check import check_keys


def _model_class(family: str) -> type[nn.Module]:
    registry.check("language-model family", family, registry.LM_FAMILIES)
    if family == "ngram":
        from lit_attention.models.lm.ngram import NGramLM
        return NGramLM
    if family == "window":
        from lit_attention.models.lm.window import WindowLM
        return WindowLM
    if family == "rnn":
        from lit_attention.models.lm.rnn_lm import RNNLM
        return RNNLM
    from lit_attention.models.lm.transformer_lm import TransformerLM
    return TransformerLM


def _options(cls: type) -> list[str]:
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "vocab_size")]


def build_lm(family: str, vocab_size: int, **options: Any) -> nn.Module:
    """Instantiate the family's model with the options its constructor accepts.

    An option of another family is left out; an option no family has raises ConfigError.
    """
    cls = _model_class(family)
    known = {p for f in registry.LM_FAMILIES for p in _options(_model_class(f))}
    check_keys(options, sorted(known))
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in options.items() if k in accepted and v is not None}
    return cls(vocab_size=vocab_size, **kwargs)


def detach_state(state: Any) -> Any:
    """Cut the graph behind a carried state (truncated BPTT), keeping its structure."""
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return type(state)(detach_state(s) for s in state)
    return state.detach()
