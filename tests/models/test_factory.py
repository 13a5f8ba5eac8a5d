"""build_seq2seq: options of another family are left out, options of no family are refused."""

import pytest

from lit_attention.config_check import ConfigError
from lit_attention.models import build_seq2seq


def test_an_option_no_family_has_is_refused_with_the_nearest_name():
    with pytest.raises(ConfigError, match=r"unknown option hiden_size — did you mean hidden_size\?"):
        build_seq2seq("rnn", 11, 11, hiden_size=8, emb_size=8)


def test_an_option_of_the_other_family_is_left_out():
    net = build_seq2seq("transformer", 11, 11, d_model=16, heads=2, enc_layers=1, dec_layers=1, ffn=32,
                        cell="gru", bidirectional=False)   # recurrent-only options
    assert type(net).__name__ == "TransformerSeq2Seq"
