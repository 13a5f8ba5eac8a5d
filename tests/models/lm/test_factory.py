"""build_lm: the family's class from the registry; an option of another family or of none is refused."""

import pytest

from lit_attention.config_check import ConfigError
from lit_attention.models.lm import build_lm


def test_an_option_no_language_model_has_is_refused():
    with pytest.raises(ConfigError, match=r"unknown option d_modl — did you mean d_model\?"):
        build_lm("rnn", 20, cell="gru", emb_size=8, d_modl=8)


@pytest.mark.parametrize("old,new", [("d_hidden", "d_model"), ("d_embed", "emb_size")])
def test_a_former_name_is_refused_with_the_new_one(old, new):
    with pytest.raises(ConfigError, match=rf"unknown option {old} — did you mean {new}\? \(renamed"):
        build_lm("window", 20, **{old: 8})


def test_an_option_of_another_language_model_is_refused():
    with pytest.raises(ConfigError, match="option heads is not one of language-model family 'window', "
                                          "only of transformer"):
        build_lm("window", 20, window=3, emb_size=8, d_model=8, heads=4)
