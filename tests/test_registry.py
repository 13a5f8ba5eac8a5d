"""The one registry: every choice is buildable, unknown ones fail with the valid list."""

import pytest
import torch

from lit_attention import registry
from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.lightning.translation import TranslationModule
from lit_attention.models import build_seq2seq, count_parameters
from seq2seq_training import train_on_batch


def _valid_seq2seq():
    for positional in registry.POSITIONAL:
        for scoring in registry.TRANSFORMER_SCORING:
            yield dict(family="transformer", positional=positional, scoring=scoring)
    for cell in registry.CELLS:
        for context in registry.CONTEXT:
            yield dict(family="rnn", cell=cell, attention="none", context=context)
        for attention in ("bahdanau", "luong"):
            for scoring in registry.SCORING:
                yield dict(family="rnn", cell=cell, attention=attention, scoring=scoring)


@pytest.mark.parametrize("choice", list(_valid_seq2seq()), ids=lambda c: "-".join(c.values()))
def test_every_registered_combination_builds_through_the_factory(choice):
    net = build_seq2seq(src_vocab_size=11, tgt_vocab_size=11, d_model=16, heads=2, enc_layers=1,
                        dec_layers=1, ffn=32, hidden_size=16, emb_size=16, **choice)
    assert count_parameters(net) > 0


@pytest.mark.parametrize("field,value,valid", [("family", "cnn", "transformer"),
                                               ("scoring", "cosine", "additive"),
                                               ("cell", "mlstm", "elman-tanh")])
def test_unknown_choice_lists_the_valid_ones(field, value, valid):
    options = {"family": "rnn", "attention": "bahdanau", field: value}
    with pytest.raises(ValueError, match=valid):
        TranslationModule(**options)


def test_transformer_only_scoring_is_rejected_for_transformers():
    with pytest.raises(ValueError, match="scaled_dot"):
        TranslationModule(family="transformer", scoring="low_rank")


@pytest.mark.parametrize("family", registry.FAMILIES)
def test_match_params_picks_the_width_closest_to_the_budget(family):
    from lit_attention.models import match_width
    target = 200_000
    options = dict(heads=4, enc_layers=2, dec_layers=2, ffn_ratio=2.0, cell="gru", attention="bahdanau")
    width = match_width(family, target, 500, 500, multiple=8, **options)
    count = lambda w: count_parameters(build_seq2seq(family, 500, 500, width=w, **options))
    best = count(width)
    assert abs(best - target) <= abs(count(width - 8) - target)
    assert abs(best - target) <= abs(count(width + 8) - target)
    assert abs(best - target) / target < 0.15


def test_choices_cover_the_issue_lists():
    data = registry.as_dict()
    assert len(data["scoring"]) == 6 and len(data["positional"]) == 7
    assert {"copy", "reverse", "sort", "toy-mt"} <= set(data["tasks"])


def _reverse_pairs(n=8, vocab=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    src, tgt_in, tgt_out = (torch.full((n, 7), PAD) for _ in range(3))
    for b in range(n):
        m = 4 + b % 3
        x = torch.randint(4, vocab, (m,), generator=g)
        src[b, :m], src[b, m] = x, EOS
        tgt_in[b, 0], tgt_in[b, 1:m + 1] = BOS, x.flip(0)
        tgt_out[b, :m], tgt_out[b, m] = x.flip(0), EOS
    return src, tgt_in, tgt_out


def _family_scoring_positional():
    """family x scoring x positional, within what is valid (the issue's ablation grid)."""
    for positional in registry.POSITIONAL:
        for scoring in registry.TRANSFORMER_SCORING:
            yield dict(family="transformer", positional=positional, scoring=scoring)
    yield dict(family="rnn", cell="lstm", attention="none")
    for attention in ("bahdanau", "luong"):
        for scoring in registry.SCORING:
            yield dict(family="rnn", cell="lstm", attention=attention, scoring=scoring)


@pytest.mark.slow
@pytest.mark.parametrize("choice", list(_family_scoring_positional()), ids=lambda c: "-".join(c.values()))
def test_every_combination_overfits_a_batch_of_8_pairs(choice):
    torch.manual_seed(0)
    net = build_seq2seq(src_vocab_size=12, tgt_vocab_size=12, d_model=32, heads=2, enc_layers=1,
                        dec_layers=1, ffn=64, hidden_size=32, emb_size=32, dropout=0.0, rank=8, **choice)
    first, last = train_on_batch(net, *_reverse_pairs(), steps=200, lr=5e-3)
    assert last < 0.5 < first, (first, last)
