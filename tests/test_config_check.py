"""The one strict-key check: nearest valid name by spelling, or a synonym from other toolkits."""

import functools

import pytest

from conftest import CONFIGS, cli_in_process, unset_family_options
from lit_attention.config_check import ConfigError, suggest, unknown_option
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


def test_an_unknown_option_is_one_line_with_the_nearest_name():
    err = unknown_option("model.hedas", ["model.d_model", "model.heads", "model.ffn"])
    assert isinstance(err, ConfigError) and err.exit_code == 2
    assert str(err) == "unknown option model.hedas — did you mean model.heads?"


# -- former names (registry.RENAMED) and options of another family, through the training CLI -----

@functools.cache
def checker():
    """lit_attention.lightning.cli.check_training_args with one parser for this module's tests
    (building the parser costs about what a parse costs; see the last test of this module)."""
    from lit_attention.lightning.cli import training_args_checker
    return training_args_checker()


def parse_error(*args) -> ConfigError:
    """The ConfigError `lit-attention fit ARGS` stops with (parsed in this process, nothing run)."""
    with pytest.raises(ConfigError) as err:
        checker()(["fit", *map(str, args)])
    assert err.value.exit_code == 2
    return err.value


@pytest.mark.parametrize("old,new", RENAMED.items())
@pytest.mark.parametrize("config", ["copy.yaml", "lm-toy.yaml"])
def test_a_former_name_is_refused_naming_the_new_one(config, old, new):
    err = parse_error("--config", CONFIGS / config, f"--model.{old}", "64")
    assert str(err) == f"unknown option model.{old} — did you mean model.{new}? (renamed: docs/CONFIG.md)"


def test_a_former_name_exits_2_from_the_command_line(tmp_path):
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--model.hidden_size", "64")
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
    checker()(["fit", "--config", str(CONFIGS / "toy-mt.yaml"),
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


# -- settings the model would ignore: gradient training for the n-gram (registry.GRADIENT_SETTINGS),
# encoder-decoder diagnostics for every language model -------------------------------------------

NGRAM = CONFIGS / "reference" / "shakespeare-ngram.yaml"
NO_GRADIENT = ("language-model family 'ngram' has no gradient (it is counted from the training stream, "
               "never optimised)")
# a value other than its default for every gradient setting
GRADIENT_VALUES = {"model.lr": "0.01", "model.warmup": "10", "model.betas": "[0.8, 0.9]",
                   "model.weight_decay": "0.01", "trainer.gradient_clip_val": "0.5",
                   "trainer.gradient_clip_algorithm": "value", "trainer.accumulate_grad_batches": "2",
                   "budget.steps": "10", "budget.tokens": "1000", "budget.flops": "1e9",
                   "diagnostics.module_norm_every": "5", "diagnostics.module_depth": "3"}


def test_every_gradient_setting_has_a_case_here():
    from lit_attention.registry import GRADIENT_SETTINGS
    assert set(GRADIENT_VALUES) == set(GRADIENT_SETTINGS)


@pytest.mark.parametrize("setting", GRADIENT_VALUES)
def test_a_gradient_setting_is_refused_for_the_ngram_and_taken_by_a_trained_family(setting):
    err = parse_error("--config", NGRAM, f"--{setting}", GRADIENT_VALUES[setting])
    assert str(err) == f"option {setting} has no effect here: {NO_GRADIENT}: leave it unset (remove it from the config)"
    checker()(["fit", "--config", str(NGRAM), *unset_family_options(NGRAM), "--model.family", "rnn",
                         f"--{setting}", GRADIENT_VALUES[setting]])


def test_a_precision_is_refused_for_the_ngram_except_fp32():
    err = parse_error("--config", NGRAM, "--trainer.precision", "bf16-mixed")
    assert str(err) == ("option trainer.precision has no effect here: language-model family 'ngram' counts in "
                        "exact integers and scores in fp32: leave it unset (remove it from the config, or set "
                        "it to 32-true or 32)")
    for harmless in ("32-true", "32"):
        checker()(["fit", "--config", str(NGRAM), "--trainer.precision", harmless])


def test_a_gradient_setting_in_a_config_file_is_refused_too(tmp_path):
    import yaml
    config = yaml.safe_load(NGRAM.read_text())
    config["trainer"]["gradient_clip_val"] = 0.5
    path = tmp_path / "ngram.yaml"
    path.write_text(yaml.safe_dump(config))
    assert str(parse_error("--config", path)).startswith("option trainer.gradient_clip_val has no effect here")


def test_a_setting_at_its_default_asks_for_nothing_and_validate_test_check_nothing():
    """So a run's config.yaml, which spells every default, reads back."""
    defaults = ["--model.lr", "0.001", "--model.betas", "[0.9, 0.99]", "--trainer.gradient_clip_val", "1.0",
                "--budget.steps", "null", "--diagnostics.heatmaps", "4"]
    checker()(["fit", "--config", str(NGRAM), *defaults])
    checker()(["test", "--config", str(NGRAM), "--model.lr", "0.01"])


@pytest.mark.parametrize("option,value", [("gradflow_every", "10"), ("gradflow_sentences", "8"),
                                          ("gradflow_distance", "5"), ("heatmaps", "0")])
def test_encoder_decoder_diagnostics_are_refused_for_a_language_model(option, value):
    from lit_attention.lightning.diagnostics import ENCODER_DECODER_OPTIONS
    assert option in ENCODER_DECODER_OPTIONS
    err = parse_error("--config", CONFIGS / "lm-toy.yaml", f"--diagnostics.{option}", value)
    assert str(err) == (f"option diagnostics.{option} has no effect here: a language model has no encoder: "
                        "gradient flow and attention heatmaps are measured on encoder-decoders: leave it "
                        "unset (remove it from the config)")
    checker()(["fit", "--config", str(CONFIGS / "copy.yaml"), f"--diagnostics.{option}", value])


def test_heatmaps_of_a_model_without_attention_are_refused_but_switching_them_off_is_not():
    """A sweep over attention arms may share `heatmaps: 0`; asking the none arm for 8 is refused."""
    copy = CONFIGS / "copy.yaml"
    rnn = ["--config", str(copy), *unset_family_options(copy), "--model.family", "rnn"]
    err = parse_error(*rnn, "--model.attention", "none", "--diagnostics.heatmaps", "8")
    assert str(err) == ("option diagnostics.heatmaps has no effect here: a model with attention none has no "
                        "attention weights to draw: leave it unset (remove it from the config, or set it to 0)")
    for value in ("0", "4"):                       # off, and the default (a run's config.yaml spells it)
        checker()(["fit", *rnn, "--model.attention", "none", "--diagnostics.heatmaps", value])
    checker()(["fit", *rnn, "--model.attention", "bahdanau", "--diagnostics.heatmaps", "8"])
    checker()(["fit", *rnn, "--diagnostics.heatmaps", "8"])          # the family's default attends


def test_a_setting_the_ngram_ignores_exits_2_from_the_command_line(tmp_path):
    result = cli_in_process("fit", "--config", NGRAM, "--run.root", tmp_path, "--model.lr", "0.01")
    assert result.returncode == 2, result.stderr[-2000:]
    assert (f"lit-attention fit: error: option model.lr has no effect here: {NO_GRADIENT}: "
            "leave it unset (remove it from the config)") in result.stderr
    assert not any(tmp_path.iterdir())


# -- values taken without acting on them as given are refused (docs/RELIABILITY.md):
# `fit` stops with the same message before writing anything (three of them end to end in
# tests/lightning/test_cli_robust.py), and a sweep before its first trial ---------------------------

NOT_AS_GIVEN = [
    # an accelerator Lightning has no name for, or this machine lacks: refused by the Trainer only,
    # which a sweep's check does not build, so every trial of the sweep failed
    (["--trainer.accelerator", "cpus"], "invalid value for trainer.accelerator: cpus: not an accelerator name "
                                        "(auto, cpu, cuda, gpu, mps, tpu)"),
    (["--trainer.accelerator", "tpu"], "invalid value for trainer.accelerator: tpu: no tpu device here"),
    # a zero time limit stops before the first step: the run would be untrained yet finished
    (["--trainer.max_time", "00:00:00:00"], "invalid value for trainer.max_time: 00:00:00:00 trains nothing"),
    (["--trainer.max_time", '{"minutes": 0}'], "invalid value for trainer.max_time: {'minutes': 0} trains nothing"),
    # Lightning's debug run turns loggers and checkpoints off: a run store without metrics.csv or
    # checkpoints, recorded as a finished run of its group
    (["--trainer.fast_dev_run", "true"], "invalid value for trainer.fast_dev_run: True: Lightning then turns off"),
    (["--trainer.fast_dev_run", "3"], "invalid value for trainer.fast_dev_run: 3: "),
    (["--run.project", "nmt"], "option run.project has no effect here: it names the W&B project, and tracking is none"),
    # a negative clipping norm flipped every gradient (the model climbed its loss); the others
    # failed after the run had started (a 0 interval divided by zero), or were read as none or
    # as greedy decoding
    (["--trainer.gradient_clip_val", "-1"],
     "invalid value for trainer.gradient_clip_val: -1: it must be a finite number >= 0 (0: no clipping)"),
    (["--trainer.val_check_interval", "0"], "invalid value for trainer.val_check_interval: 0: it must be > 0"),
    (["--trainer.check_val_every_n_epoch", "0"], "invalid value for trainer.check_val_every_n_epoch: 0: it must be"),
    (["--trainer.accumulate_grad_batches", "0"], "invalid value for trainer.accumulate_grad_batches: 0: it must be"),
    (["--trainer.log_every_n_steps", "-1"], "invalid value for trainer.log_every_n_steps: -1: it must be"),
    (["--trainer.min_steps", "-1"], "invalid value for trainer.min_steps: -1: it must be an integer >= 0"),
    (["--trainer.num_sanity_val_steps", "-2"], "invalid value for trainer.num_sanity_val_steps: -2: it must be"),
    (["--seed_everything", "-1"], "invalid value for seed_everything: -1: a seed is an integer in [0, 4294967295]"),
    (["--data.max_tokens", "0"], "invalid configuration: data.max_tokens must be >= 1"),
    # the word vocabulary is capped at vocab_size, specials included: every word would be <unk>
    (["--data.vocab_size", "4"], "invalid configuration: data.vocab_size must be more than the 4 special tokens"),
    (["--data.data_seed", "-1"], "invalid configuration: data.data_seed must be >= 0"),
    (["--data.limit_train", "-1"], "invalid configuration: data.limit_train must be >= 1"),
    (["--data.min_len", "20"], "invalid configuration: data.min_len 20, data.max_len_words 10, data.n_symbols 20: "
                               "task 'copy' cannot generate pairs with them"),
    (["--model.beam_size", "0"], "invalid configuration: model.beam_size must be >= 1 (1: greedy decoding), got 0"),
    (["--model.max_len_b", "-5"], "invalid configuration: model.max_len_a and model.max_len_b must be >= 0"),
    (["--model.length_buckets", "[20,10]"],
     "invalid configuration: model.length_buckets: bucket upper bounds must be positive and increasing"),
    (["--diagnostics.module_depth", "-1"], "invalid value for diagnostics.module_depth: Not of type NonNegativeInt"),
    (["--model.positional", "t5_bias", "--model.rel_buckets", "2"],      # ZeroDivisionError in the first step
     "invalid configuration: model.rel_buckets must be >= 4 and model.rel_max_distance > rel_buckets / 2"),
    (["--model.positional", "shaw", "--model.shaw_clip", "-1"], "invalid configuration: model.shaw_clip must be >= 0"),
]


@pytest.mark.parametrize("args,message", NOT_AS_GIVEN, ids=[" ".join(a) for a, _ in NOT_AS_GIVEN])
def test_a_value_that_would_not_act_as_given_is_refused(args, message):
    err = parse_error("--config", CONFIGS / "copy.yaml", *args)
    assert message in str(err), str(err)


# -- data settings the chosen task or tokenizer does not read (were taken without a word) ---------

SHAKESPEARE = CONFIGS / "shakespeare-char.yaml"   # a language model on a text file, characters
NOT_READ = [
    ("copy.yaml", ["--data.data_dir", "/tmp"], "option data.data_dir has no effect here: synthetic task 'copy' "
                                                "generates its pairs; this locates files"),
    ("copy.yaml", ["--data.src_lang", "de"], "option data.src_lang has no effect here"),
    ("toy-mt.yaml", ["--data.n_symbols", "30"], "option data.n_symbols has no effect here: task 'toy-mt' draws no symbols"),
    ("copy.yaml", ["--data.spm_model", "bpe"], "option data.spm_model has no effect here: tokenizer 'word' does not "
                                               "read it (only sentencepiece does)"),
    ("multi30k-transformer.yaml", ["--data.n_train", "500"],
     "option data.n_train has no effect here: task 'files' reads its pairs from data.data_dir"),
    ("lm-toy.yaml", ["--data.val_fraction", "0.1"], "option data.val_fraction has no effect here: synthetic task "
                                                    "'toy-mt' generates its sentences"),
    ("shakespeare-char.yaml", ["--data.n_sentences", "10"], "option data.n_sentences has no effect here: task 'files' "
                                                            "reads data.path"),
    ("shakespeare-char.yaml", ["--data.val_path", "v.txt", "--data.test_path", "t.txt", "--data.test_fraction", "0.2"],
     "option data.test_fraction has no effect here: data.val_path and data.test_path give the evaluation splits"),
]


@pytest.mark.parametrize("config,args,message", NOT_READ, ids=[" ".join(a) for _, a, _ in NOT_READ])
def test_a_data_setting_the_task_or_tokenizer_does_not_read_is_refused(config, args, message):
    err = parse_error("--config", CONFIGS / config, *args)
    assert message in str(err) and "leave it unset" in str(err), str(err)


@pytest.mark.parametrize("subcommand", ["validate", "test"])
def test_validate_and_test_refuse_a_data_setting_not_read_too(subcommand):
    """They read their data as fit does; `test --data.data_dir D` on a synthetic task tested the
    generated pairs without a word (training settings they do ignore, of any family: a config is
    shared with fit)."""
    with pytest.raises(ConfigError, match="option data.data_dir has no effect here: synthetic task 'copy'"):
        checker()([subcommand, "--config", str(CONFIGS / "copy.yaml"), "--data.data_dir", "/tmp"])
    checker()([subcommand, "--config", str(CONFIGS / "copy.yaml"), "--model.lr", "0.5"])


def test_a_data_setting_without_null_is_unset_by_its_default_which_the_message_names():
    err = parse_error("--config", CONFIGS / "copy.yaml", "--data.task", "files", "--data.data_dir", "/tmp")
    assert str(err).endswith("option data.n_train has no effect here: task 'files' reads its pairs from "
                             "data.data_dir; this shapes generated pairs: leave it unset (remove it from the "
                             "config, or set it to 10000)"), str(err)


def test_a_data_setting_that_is_read_or_at_its_default_asks_for_nothing():
    checker()(["fit", "--config", str(CONFIGS / "copy.yaml"), "--data.n_symbols", "30", "--data.vocab_size", "50",
               "--data.data_dir", "null", "--data.src_lang", "src"])      # read; the defaults
    checker()(["fit", "--config", str(CONFIGS / "copy.yaml"), "--data.tokenizer", "sentencepiece",
               "--data.spm_model", "bpe"])
    checker()(["fit", "--config", str(SHAKESPEARE), "--data.val_fraction", "0.1"])   # cut from data.path


def test_one_checker_parses_every_argument_list_as_a_check_of_its_own_would():
    """The sweep driver checks its trials with one parser (lit_attention/sweep/driver.py): nothing
    one list sets leaks into the next, and a refused list leaves the checker working."""
    from lit_attention.lightning.cli import check_training_args, training_args_checker
    check = training_args_checker()
    copy = ["fit", "--config", str(CONFIGS / "copy.yaml")]
    first = check([*copy, "--model.heads", "2", "--trainer.max_epochs", "3"])
    assert first.fit.model.init_args.heads == 2 and first.fit.trainer.max_epochs == 3
    with pytest.raises(ConfigError) as err:
        check([*copy, "--model.heads", "abc"])
    assert str(err.value) == str(parse_error("--config", CONFIGS / "copy.yaml", "--model.heads", "abc"))
    assert check(copy) == check_training_args(copy)
    assert check(copy).fit.model.init_args.heads != 2 and check(copy).fit.trainer.max_epochs != 3
    ngram = ["fit", "--config", str(NGRAM), "--trainer.precision", "bf16-mixed"]
    with pytest.raises(ConfigError, match="option trainer.precision has no effect here"):
        check(ngram)
