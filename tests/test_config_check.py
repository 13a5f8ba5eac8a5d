"""The one strict-key check: nearest valid name by spelling, or a synonym from other toolkits."""

import pytest

from conftest import CONFIGS, run_cli, unset_family_options
from lit_attention.config_check import ConfigError, check_keys, suggest
from lit_attention.registry import RENAMED

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


# -- former names (registry.RENAMED) and options of another family, through the training CLI -----

def parse_error(*args) -> ConfigError:
    """The ConfigError `lit-attention fit ARGS` stops with (parsed in this process, nothing run)."""
    from lit_attention.cli import check_training_args
    with pytest.raises(ConfigError) as err:
        check_training_args(["fit", *map(str, args)])
    assert err.value.exit_code == 2
    return err.value


@pytest.mark.parametrize("old,new", RENAMED.items())
@pytest.mark.parametrize("config", ["copy.yaml", "lm-toy.yaml"])
def test_a_former_name_is_refused_naming_the_new_one(config, old, new):
    err = parse_error("--config", CONFIGS / config, f"--model.{old}", "64")
    assert str(err) == f"unknown option model.{old} — did you mean model.{new}? (renamed: docs/CONFIG.md)"


def test_a_former_name_exits_2_from_the_command_line(tmp_path):
    result = run_cli("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--model.hidden_size", "64")
    assert result.returncode == 2, result.stderr[-2000:]
    assert ("lit-attention fit: error: unknown option model.hidden_size — did you mean model.d_model? "
            "(renamed: docs/CONFIG.md)") in result.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("config,args,message", [
    ("copy.yaml", ["--model.cell", "gru"], "option model.cell is not one of family 'transformer', only of rnn"),
    ("copy.yaml", ["--model.family", "rnn"], "option model.positional is not one of family 'rnn', only of transformer"),
    ("reference/multi30k-lstm-noattn.yaml", ["--model.scoring", "dot"],
     "option model.scoring acts only with model.attention bahdanau or luong (here 'none')"),
    ("lm-toy.yaml", ["--model.family", "rnn", "--model.positional", "null", "--model.ffn", "null"],
     "option model.heads is not one of language-model family 'rnn', only of transformer"),
    ("reference/shakespeare-ngram.yaml", ["--model.dropout", "0.2"],
     "option model.dropout is not one of language-model family 'ngram', only of window, rnn, transformer")])
def test_an_option_of_another_family_is_a_config_error(config, args, message):
    err = parse_error("--config", CONFIGS / config, *args)
    assert message in str(err) and "leave it unset" in str(err)


def test_switching_family_works_once_the_configs_family_options_are_unset():
    from lit_attention.cli import check_training_args
    check_training_args(["fit", "--config", str(CONFIGS / "toy-mt.yaml"),
                         *unset_family_options(CONFIGS / "toy-mt.yaml"), "--model.family", "rnn"])


@pytest.mark.parametrize("args,message", [
    (["--model.heads", "abc"], "invalid value for model.heads: expected int, got 'abc'"),
    (["--model.positional", "wavelet"], "invalid value for model.positional: 'wavelet' is not one of: none, "
                                        "sinusoidal, learned, rotary, alibi, t5_bias, shaw"),
    (["--model.family", "rnn", "--model.cell", "lstmm"], "invalid value for model.cell: 'lstmm' is not one of: "
                                                         "elman-tanh, elman-relu, gru, lstm")])
def test_a_bad_value_of_a_family_option_names_what_it_takes(args, message):
    """Family options are Optional (None: the family's default); the message is about the value."""
    assert str(parse_error("--config", CONFIGS / "copy.yaml", *args)) == message
