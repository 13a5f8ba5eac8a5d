"""build_seq2seq: the family's class from the registry; an option of another family or of none is refused."""

import pickle

import pytest

from lit_attention import registry
from lit_attention.config_check import ConfigError
from lit_attention.models import build_seq2seq


def test_an_option_no_family_has_is_refused_with_the_nearest_name():
    with pytest.raises(ConfigError, match=r"unknown option d_modle — did you mean d_model\?"):
        build_seq2seq("rnn", 11, 11, d_modle=8, emb_size=8)


def test_a_former_name_is_refused_with_the_new_one():
    with pytest.raises(ConfigError, match=r"unknown option hidden_size — did you mean d_model\? \(renamed"):
        build_seq2seq("rnn", 11, 11, hidden_size=8, emb_size=8)


def test_an_option_of_the_other_family_is_refused():
    with pytest.raises(ConfigError, match=r"option cell is not one of family 'transformer', only of rnn"):
        build_seq2seq("transformer", 11, 11, d_model=16, heads=2, cell="gru")
    with pytest.raises(ConfigError, match=r"option heads is not one of family 'rnn', only of transformer"):
        build_seq2seq("rnn", 11, 11, d_model=16, heads=2)


def test_an_option_left_none_takes_the_constructor_default():
    net = build_seq2seq("transformer", 11, 11, d_model=16, heads=2, enc_layers=1, dec_layers=1,
                        ffn=32, norm=None)
    assert type(net).__name__ == "TransformerSeq2Seq"


@pytest.mark.parametrize("family,options", [
    *[("transformer", {"scoring": s}) for s in registry.TRANSFORMER_SCORING],
    *[("rnn", {"attention": a, "scoring": "general", "enc_output": e})
      for a in registry.ATTENTION for e in registry.ENC_OUTPUT],
])
def test_every_model_pickles(family, options):
    """A DDP rank started by spawn receives the model pickled: every choice it holds must pickle."""
    net = build_seq2seq(family, 11, 11, d_model=16, **({"heads": 2} if family == "transformer" else {}),
                        **({"bidirectional": True} if family == "rnn" else {}), **options)
    assert isinstance(pickle.loads(pickle.dumps(net)), type(net))
