"""TranslationModule's options: the family's defaults, refusal of another family's options and of
options that do not act, resolved values in hparams (a checkpoint rebuilds the same model)."""

import pytest

from lit_attention.lightning.translation import TranslationModule
from lit_attention.models import count_parameters


@pytest.mark.parametrize("family,option,value,owner", [
    ("transformer", "cell", "gru", "rnn"), ("transformer", "emb_size", 64, "rnn"),
    ("transformer", "teacher_forcing", 0.5, "rnn"), ("rnn", "heads", 8, "transformer"),
    ("rnn", "ffn", 512, "transformer"), ("rnn", "positional", "rotary", "transformer")])
def test_an_option_of_the_other_family_is_refused_naming_it_and_its_family(family, option, value, owner):
    with pytest.raises(ValueError, match=rf"option model\.{option} is not one of family '{family}', "
                                         rf"only of {owner}: leave it unset"):
        TranslationModule(family=family, **{option: value})


@pytest.mark.parametrize("options,message", [
    (dict(attention="none", scoring="dot"), "option model.scoring acts only with model.attention bahdanau or luong"),
    (dict(attention="none", input_feeding=False), "option model.input_feeding acts only with model.attention"),
    (dict(attention="luong", context="init"), "option model.context acts only with model.attention none"),
    (dict(scoring="additive", rank=8), "option model.rank acts only with model.scoring low_rank"),
    (dict(attention="none", input_feeding=True), "model.attention 'none' has none: leave model.input_feeding unset"),
    (dict(attention="luong", context="every-step"), "leave model.context unset")])
def test_an_option_that_does_not_act_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        TranslationModule(family="rnn", **options)


def test_hparams_hold_the_resolved_options_and_rebuild_the_same_module():
    module = TranslationModule(family="rnn", d_model=32, scoring="low_rank", rank=4,
                               src_vocab_size=30, tgt_vocab_size=30)
    h = module.hparams
    assert (h.cell, h.attention, h.emb_size, h.rank, h.context, h.heads) == ("lstm", "bahdanau", 32, 4, None, None)
    again = TranslationModule(**dict(h))          # what load_from_checkpoint does with the hparams
    assert dict(again.hparams) == dict(h)
    module.configure_model()
    again.configure_model()
    assert count_parameters(again.net) == count_parameters(module.net)


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_match_params_searches_d_model_and_keeps_the_other_sizes_in_proportion(family):
    sizes = dict(heads=4, ffn=512) if family == "transformer" else {}
    module = TranslationModule(family=family, d_model=256, match_params=150_000, src_vocab_size=50,
                               tgt_vocab_size=50, enc_layers=1, dec_layers=1, **sizes)
    module.configure_model()
    h = module.hparams
    assert h.match_params is None and h.d_model % 8 == 0 and h.d_model != 256
    assert abs(count_parameters(module.net) - 150_000) < 0.15 * 150_000
    if family == "transformer":
        assert h.ffn == 2 * h.d_model and h.emb_size is None
    else:
        assert h.emb_size == h.d_model and h.ffn is None
