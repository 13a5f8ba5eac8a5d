"""build_lm: options of another family are left out, options of no family are refused."""

import pytest

from lit_attention.config_check import ConfigError
from lit_attention.models.lm import build_lm


def test_an_option_no_language_model_has_is_refused():
    with pytest.raises(ConfigError, match=r"unknown option d_hiden — did you mean d_hidden\?"):
        build_lm("rnn", 20, cell="gru", d_embed=8, d_hiden=8)


def test_an_option_of_another_language_model_is_left_out():
    lm = build_lm("window", 20, window=3, d_embed=8, d_hidden=8, heads=4)   # heads: Transformer only
    assert type(lm).__name__ == "WindowLM"
