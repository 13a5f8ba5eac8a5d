"""The one strict-key check: nearest valid name by spelling, or a synonym from other toolkits."""

import pytest

from lit_attention.config_check import ConfigError, check_keys, suggest

MODEL = [f"model.{k}" for k in ("family", "d_model", "emb_size", "heads", "enc_layers", "dec_layers",
                                "ffn", "lr", "beam_size", "length_penalty", "positional")]


@pytest.mark.parametrize("typo,near", [
    ("model.hiden_size", "model.d_model"),        # a synonym (hidden_size), misspelt
    ("model.num_heads", "model.heads"),           # a synonym
    ("model.lenght_penalty", "model.length_penalty"),
    ("model.positonal", "model.positional"),
    ("model.learning_rate", "model.lr"),
    ("model.zzzz", None),                         # nothing close: no guess
])
def test_suggest_nearest_valid_name(typo, near):
    assert suggest(typo, MODEL) == near


def test_a_synonym_is_offered_only_when_its_target_is_valid_here():
    assert suggest("hiden_size", ["hidden_size", "emb_size", "cell"]) == "hidden_size"
    assert suggest("num_heads", ["cell", "attention"]) is None


def test_check_keys_names_the_first_unknown_key_in_one_line():
    check_keys(["d_model", "heads"], ["d_model", "heads", "ffn"])
    with pytest.raises(ConfigError) as err:
        check_keys(["d_model", "hedas"], ["d_model", "heads", "ffn"], prefix="model.")
    assert str(err.value) == "unknown option model.hedas — did you mean model.heads?"
    assert err.value.exit_code == 2
