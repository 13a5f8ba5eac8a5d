"""Build a model from its registry name (registry.SEQ2SEQ_MODELS / LM_MODELS) with its options."""

from __future__ import annotations

import inspect
from typing import Any, Mapping

from torch import nn

from lit_attention import registry
from lit_attention.config_check import ConfigError, unknown_option
from lit_attention.models.base import Seq2SeqModel, closest_width, count_parameters, match_width


def model_class(families: Mapping[str, registry.Family], family: str, what: str = "family") -> type:
    """The class registered for ``family`` in ``families``, imported now."""
    return registry.imported(families[registry.check(what, family, families)].model)


def constructor_options(cls: type) -> list[str]:
    """What a model's constructor takes besides the vocabulary size(s)."""
    return [p for p in inspect.signature(cls.__init__).parameters
            if p != "self" and not p.endswith("vocab_size")]


def build(families: Mapping[str, registry.Family], family: str, what: str,
          vocab_sizes: dict[str, int], options: Mapping[str, Any],
          shared: Mapping[str, Any]) -> nn.Module:
    """Instantiate the family's model; an option left unset (None) takes the registry's default,
    the family's or that of ``shared`` (the options every family of ``families`` has): model
    constructors have no defaults of their own.

    An option of another family, or of none (the nearest name or its new name suggested),
    raises ConfigError.
    """
    cls = model_class(families, family, what)
    own = constructor_options(cls)
    for key in (key for key in options if key not in own):
        owners = [f for f in families if key in constructor_options(model_class(families, f))]
        if owners:
            raise ConfigError(f"option {key} is not one of {what} {family!r}, only of {', '.join(owners)}")
        raise unknown_option(key, own)
    return cls(**vocab_sizes, **registry.defaults(families, family, options, shared))


def build_seq2seq(family: str, src_vocab_size: int, tgt_vocab_size: int, **options: Any) -> Seq2SeqModel:
    """The encoder-decoder called ``family`` with ``options`` (its constructor's arguments; those
    left out take the registry's defaults)."""
    return build(registry.SEQ2SEQ_MODELS, family, "family",
                 dict(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size), options,
                 registry.SEQ2SEQ_COMMON)


__all__ = ["Seq2SeqModel", "build", "build_seq2seq", "closest_width", "constructor_options",
           "count_parameters", "match_width", "model_class"]
