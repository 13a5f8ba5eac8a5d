"""Positional encodings: every registry name says where it acts, and each module is reachable."""

import inspect

import pytest
import torch
from torch import nn

from lit_attention.models import build_seq2seq, positional
from lit_attention.registry import POSITIONAL, POSITIONAL_OPTIONS


def test_every_position_module_is_built_by_some_registered_name():
    defined = {c for _, c in inspect.getmembers(positional, inspect.isclass)
               if c.__module__ == positional.__name__ and issubclass(c, nn.Module)}
    built = {}
    for name in POSITIONAL:
        net = build_seq2seq("transformer", 10, 10, d_model=16, heads=2, enc_layers=1, dec_layers=1,
                            ffn=16, positional=name)
        built[name] = {type(m) for m in net.modules() if type(m) in defined}
    assert set().union(*built.values()) == defined
    acting = {name for name, row in POSITIONAL.items() if row.acts_on in ("embeddings", "bias", "keys")}
    assert {name for name, classes in built.items() if classes} == acting


def test_an_unknown_encoding_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="valid choices: none, sinusoidal"):
        positional.absolute_positions("wavelet", 8, 4)
    with pytest.raises(ValueError, match="valid choices: none, sinusoidal"):
        positional.score_bias("wavelet", 2, True, POSITIONAL_OPTIONS)
    assert positional.score_bias("alibi", 2, True, POSITIONAL_OPTIONS)(torch.arange(3), torch.arange(3)).shape == (2, 3, 3)
