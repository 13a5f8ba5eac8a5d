"""Build a seq2seq model from registry names; pick a width to match a parameter budget."""

from __future__ import annotations

import inspect
from typing import Any

from lit_attention import registry
from lit_attention.config_check import check_keys
from lit_attention.models.base import Seq2SeqModel, closest_width, count_parameters


def _model_class(family: str) -> type[Seq2SeqModel]:
    registry.check("family", family, registry.FAMILIES)
    if family == "transformer":
        from lit_attention.models.transformer import TransformerSeq2Seq
        return TransformerSeq2Seq
    from lit_attention.models.rnn import RNNSeq2Seq
    return RNNSeq2Seq


def _options(cls: type) -> list[str]:
    return [p for p in inspect.signature(cls.__init__).parameters
            if p not in ("self", "src_vocab_size", "tgt_vocab_size")]


def build_seq2seq(family: str, src_vocab_size: int, tgt_vocab_size: int, **options: Any) -> Seq2SeqModel:
    """Instantiate the family's model with the options its constructor accepts.

    ``width`` (the shared size knob of every family) sets d_model for the Transformer and
    hidden/embedding size for recurrent models; ``ffn_ratio`` scales the Transformer's FFN with it.
    An option of another family (``cell`` for a Transformer) is left out; an option no family has
    raises ConfigError naming the nearest valid one.
    """
    cls = _model_class(family)
    known = {p for f in registry.FAMILIES for p in _options(_model_class(f))} | {"width", "ffn_ratio"}
    check_keys(options, sorted(known))
    options = dict(options)
    width = options.pop("width", None)
    ffn_ratio = options.pop("ffn_ratio", None)
    if width is not None:
        options.update(d_model=width, hidden_size=width, emb_size=width)
        if ffn_ratio:
            options["ffn"] = int(round(width * ffn_ratio))
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in options.items() if k in accepted and v is not None}
    return cls(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **kwargs)


def match_width(family: str, target_params: int, src_vocab_size: int, tgt_vocab_size: int,
                multiple: int = 8, **options: Any) -> int:
    """The width (multiple of ``multiple``) whose model has the parameter count closest to the target."""
    def params(width: int) -> int:
        return count_parameters(build_seq2seq(family, src_vocab_size, tgt_vocab_size,
                                              width=width, **options))
    return closest_width(params, target_params, multiple)
