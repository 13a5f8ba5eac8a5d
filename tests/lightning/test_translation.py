"""TranslationModule: exact perplexity and 1-vs-2-rank agreement of its evaluation; its options (the
family's defaults, refusal of another family's options and of options that do not act, resolved values
in hparams so a checkpoint rebuilds the same model)."""

import math
import pickle

import pytest
import torch
from lightning.pytorch import Trainer

from ddp_callbacks import SaveHypotheses
from lit_attention.data.translation import TranslationDataModule
from lit_attention.data.vocab import PAD
from lit_attention.lightning.translation import TranslationModule
from lit_attention.models import count_parameters

# the data module shards evaluation over ranks itself, as under the CLI
QUIET = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
             enable_model_summary=False, use_distributed_sampler=False)
TINY = dict(family="transformer", d_model=16, heads=2, enc_layers=1, dec_layers=1, ffn=32, dropout=0.0)


def test_validation_perplexity_is_exp_of_mean_token_nll_over_all_batches():
    torch.manual_seed(0)
    dm = TranslationDataModule(task="reverse", n_train=60, n_val=23, n_test=5, min_len=2, max_len_words=9,
                               max_tokens=64, tokenizer="word")
    module = TranslationModule(**TINY, val_bleu=False)
    trainer = Trainer(devices=1, **QUIET)
    reported = trainer.validate(module, dm, verbose=False)[0]["val_ppl"]

    # Independently: log-softmax and gather, token by token, over every validation batch.
    module.eval()
    total, count, per_batch_ppl = 0.0, 0, []
    with torch.no_grad():
        for batch in dm.val_dataloader():
            logp = torch.log_softmax(module.net(batch["src"], batch["tgt_in"]).logits, dim=-1)
            gold = logp.gather(-1, batch["tgt_out"].unsqueeze(-1)).squeeze(-1)
            mask = batch["tgt_out"] != PAD
            total -= float(gold[mask].sum())
            count += int(mask.sum())
            per_batch_ppl.append(math.exp(-float(gold[mask].mean())))
    assert len(per_batch_ppl) > 1, "the check needs several batches of different sizes"
    assert count == sum(len(t.split()) + 1 for t in dm.references("val"))
    assert reported == pytest.approx(math.exp(total / count), rel=1e-5)
    assert reported != pytest.approx(sum(per_batch_ppl) / len(per_batch_ppl), rel=1e-4)


@pytest.mark.slow
def test_two_ddp_ranks_score_and_decode_what_one_process_does(tmp_path):
    """Perplexity, BLEU and every hypothesis, in order, from 2 gloo ranks equal one process's; 23
    sentences in an odd number of batches, so one rank also gets a marked padding batch."""
    torch.manual_seed(0)
    dm = TranslationDataModule(task="copy", n_train=400, n_val=23, n_test=5, min_len=2, max_len_words=9,
                               max_tokens=40, tokenizer="word")
    module = TranslationModule(**TINY, lr=1e-2, warmup=5, val_bleu=False)
    # trained a little, so that hypotheses differ from sentence to sentence
    Trainer(devices=1, max_steps=80, limit_val_batches=0, **QUIET).fit(module, dm)
    module.hparams.val_bleu = True
    assert len(dm.val_dataloader()) % 2 == 1
    results, hyps = {}, {}
    for devices, strategy in ((1, "auto"), (2, "ddp_spawn")):
        saved = tmp_path / f"hyps-{devices}.pkl"
        trainer = Trainer(devices=devices, strategy=strategy, callbacks=[SaveHypotheses(str(saved))], **QUIET)
        [results[devices]] = trainer.validate(module, dm, verbose=False)
        hyps[devices] = pickle.loads(saved.read_bytes())["val"]
    assert results[2]["val_ppl"] == pytest.approx(results[1]["val_ppl"], rel=1e-6)
    assert results[2]["val_bleu"] == pytest.approx(results[1]["val_bleu"], abs=1e-6)
    assert results[2]["val_chrf"] == pytest.approx(results[1]["val_chrf"], abs=1e-6)
    assert hyps[2] == hyps[1] and len(hyps[1]) == 23
    assert len(set(hyps[1])) > 5, "hypotheses that differ by sentence, so an order mix-up would show"


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
