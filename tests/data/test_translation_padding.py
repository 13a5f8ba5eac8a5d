"""``data.pad_to_lengths``: training batches padded to a few listed lengths, so that training sees
few batch shapes, with the same losses and gradients as unpadded batches."""

import pytest
import torch

from conftest import CONFIGS, cli_in_process
from lit_attention import registry
from lit_attention.data.batching import collate
from lit_attention.data.text import DataError
from lit_attention.data.translation import TranslationDataModule
from lit_attention.data.vocab import PAD
from lit_attention.lightning.translation import TranslationModule

LISTED = [8, 12, 16, 24, 32, 48, 129]     # 129: a pair of max_len 128 tokens and EOS


def toy_mt(tmp_path, **kwargs):
    settings = dict(task="toy-mt", n_train=2000, n_val=50, n_test=50, tokenizer="word", max_tokens=512,
                    cache_dir=str(tmp_path))
    dm = TranslationDataModule(**{**settings, **kwargs})
    dm.setup("fit")
    return dm


def shapes(batches) -> list[tuple]:
    return [tuple(b["src"].shape) + tuple(b["tgt_in"].shape) + tuple(b["tgt_out"].shape) for b in batches]


def test_training_batches_take_listed_lengths_and_few_shapes(tmp_path):
    plain, padded = toy_mt(tmp_path), toy_mt(tmp_path, pad_to_lengths=LISTED)
    plain_batches, padded_batches = list(plain.train_dataloader()), list(padded.train_dataloader())
    for b in padded_batches:
        B, L = b["src"].shape
        assert L in LISTED and b["tgt_in"].shape == b["tgt_out"].shape == (B, L)
        assert B * L <= 512                                   # max_tokens bounds the padded batch
    # every example once, its tokens as unpadded (padding is PAD columns on the right)
    examples = {ex["idx"]: ex for ex in plain.dataset("train")}
    seen = []
    for b in padded_batches:
        seen += b["idx"].tolist()
        unpadded = collate([examples[i] for i in b["idx"].tolist()])
        for key in ("src", "tgt_in", "tgt_out"):
            width = unpadded[key].size(1)
            assert torch.equal(b[key][:, :width], unpadded[key]) and (b[key][:, width:] == PAD).all()
    assert sorted(seen) == sorted(examples)
    # per listed length: full batches of one size and one partial batch
    n_plain, n_padded = len(set(shapes(plain_batches))), len(set(shapes(padded_batches)))
    print(f"toy-mt, 2,000 pairs, 512-token batches: {n_plain} shapes in {len(plain_batches)} steps "
          f"unpadded, {n_padded} in {len(padded_batches)} padded to {LISTED}")
    assert n_padded <= 2 * len(LISTED) < n_plain


def test_evaluation_batches_are_not_padded(tmp_path):
    plain, padded = toy_mt(tmp_path), toy_mt(tmp_path, pad_to_lengths=LISTED)
    for a, b in zip(plain.val_dataloader(), padded.val_dataloader(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_setup_that_resumes_or_shards_still_does(tmp_path):
    dm = toy_mt(tmp_path, pad_to_lengths=LISTED)
    full = [b["idx"].tolist() for b in dm.train_dataloader()]
    loader = dm.train_dataloader()
    it = iter(loader)
    consumed = [next(it)["idx"].tolist() for _ in range(3)]
    resumed = dm.train_dataloader()
    resumed.load_state_dict(loader.state_dict())
    assert consumed + [b["idx"].tolist() for b in resumed] == full
    shards = []
    for rank in (0, 1):
        dm.trainer = type("TwoRanks", (), {"world_size": 2, "global_rank": rank, "current_epoch": 0})()
        shards.append([b["idx"].tolist() for b in dm.train_dataloader()])
    assert len(shards[0]) == len(shards[1]) and shards[0] == full[0::2]


# ---- padding is invisible to the models --------------------------------------------------

def models():
    """(name, TranslationModule options): every Transformer (positional, scoring) of the registry
    and the rnn family with and without attention."""
    for positional, scoring in registry.transformer_variants():
        yield f"transformer-{positional}-{scoring}", dict(family="transformer", positional=positional,
                                                          scoring=scoring, heads=2, ffn=32)
    for attention in ("bahdanau", "none"):
        yield f"rnn-{attention}", dict(family="rnn", attention=attention)


MODELS = dict(models())


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """Six toy-mt sources, each with another pair's target (toy-mt's sides have equal lengths):
    a batch whose rows and sides all differ in length."""
    dm = TranslationDataModule(task="toy-mt", n_train=200, n_val=10, n_test=10, tokenizer="word",
                               cache_dir=str(tmp_path_factory.mktemp("cache")))
    data = dm.dataset("train")
    pairs = [{"idx": k, "src": a["src"], "tgt": b["tgt"]} for k, (a, b) in enumerate(zip(data[:6], data[6:12]))]
    assert len({len(ex["src"]) for ex in pairs}) > 2 and any(len(ex["src"]) != len(ex["tgt"]) for ex in pairs)
    return pairs, dm.src_vocab_size, dm.tgt_vocab_size


def loss_and_grads(module, batch):
    module.zero_grad()
    loss, _ = module.training_loss(batch)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


# Padding changes which terms a kernel sums and in what order (wider matrices, masked positions), so
# the two losses agree up to rounding only. In float64 an error bound of that rounding is far below
# anything padding could leak: each value carries at most DEPTH * u relative error (u = 2**-53,
# DEPTH bounding the accumulations along the longest path through these tiny nets), relative to the
# largest magnitude in play. float32 would need a bound 2**29 times wider, near a real leak's size.
U64, DEPTH = 2.0 ** -53, 10_000


@pytest.mark.numeric
@pytest.mark.parametrize("name", MODELS)
def test_a_padded_batch_gives_the_loss_and_gradients_of_the_unpadded_one(name, examples):
    pairs, src_vocab, tgt_vocab = examples
    torch.manual_seed(0)
    module = TranslationModule(**MODELS[name], d_model=16, enc_layers=2, dec_layers=2, dropout=0.0,
                               val_bleu=False, src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab)
    module.configure_model()
    module.double().train()
    plain = collate(pairs)
    padded = collate(pairs, pad_to=[plain["src"].size(1) + plain["tgt_in"].size(1) + 7])
    assert padded["src"].size(1) > plain["src"].size(1) + 6
    loss, grads = loss_and_grads(module, plain)
    padded_loss, padded_grads = loss_and_grads(module, padded)
    assert loss.dtype == torch.float64
    torch.testing.assert_close(padded_loss, loss, rtol=DEPTH * U64, atol=0)
    assert padded_grads.keys() == grads.keys()
    # relative to the model's largest gradient: some are 0 in exact arithmetic (the attention keys'
    # bias: softmax ignores a shift per query), what they hold is rounding of the others
    scale = max(float(grad.abs().max()) for grad in grads.values())
    for key, grad in grads.items():
        torch.testing.assert_close(padded_grads[key], grad, rtol=0, atol=DEPTH * U64 * scale, msg=key)


# ---- refused settings ----------------------------------------------------------------------

@pytest.mark.parametrize("lengths, message", [
    ([], "data.pad_to_lengths is an empty list"),
    ([16, 8, 129], r"data.pad_to_lengths \[16, 8, 129\]: the lengths must be positive and increasing"),
    ([0, 8, 129], "must be positive and increasing"),
    ([8, 8, 129], "must be positive and increasing"),
    ([8, 64], r"the largest length, 64, cannot hold a training pair of data.max_len 128 tokens and EOS \(129\): "
              r"list a length of 129 or more, or give --data.max_len 63"),
])
def test_a_list_that_cannot_pad_every_training_batch_is_refused(tmp_path, lengths, message):
    with pytest.raises(ValueError, match=message):
        TranslationDataModule(task="toy-mt", cache_dir=str(tmp_path), pad_to_lengths=lengths)
    TranslationDataModule(task="toy-mt", cache_dir=str(tmp_path), pad_to_lengths=[8, 64], max_len=63)


def test_a_bad_list_exits_2_from_the_command_line(tmp_path):
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--data.pad_to_lengths", "[16, 8]",
                            "--run.root", tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "error: invalid configuration: data.pad_to_lengths [16, 8]: the lengths must be positive" in result.stderr
    assert not list(tmp_path.iterdir())


def test_padding_past_the_models_positions_is_refused_naming_the_key(tmp_path):
    dm = toy_mt(tmp_path, pad_to_lengths=[600])
    with pytest.raises(DataError, match="data.pad_to_lengths pads training batches to 600 positions, more than "
                                        "the 512 positions of the table"):
        dm.check_lengths(512, "the table")
    toy_mt(tmp_path, pad_to_lengths=[8, 16, 32, 48, 600]).check_lengths(512, "the table")   # 600 unused


@pytest.mark.slow   # a fit and a test, 2 CPU-s
def test_fit_trains_on_padded_batches_and_its_checkpoint_tests(tmp_path):
    tiny = ["--data.n_train", "300", "--data.n_val", "20", "--data.n_test", "20", "--model.d_model", "32",
            "--model.ffn", "64", "--model.enc_layers", "1", "--model.dec_layers", "1",
            "--trainer.enable_progress_bar", "false", "--trainer.limit_val_batches", "1"]
    fit = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "padded",
                         "--data.pad_to_lengths", "[16, 32, 48, 129]", "--trainer.max_steps", "2", *tiny)
    assert fit.returncode == 0, fit.stderr[-2000:]
    run = tmp_path / "default" / "padded"
    assert "pad_to_lengths:\n    - 16\n    - 32\n    - 48\n    - 129\n" in (run / "config.yaml").read_text()
    test = cli_in_process("test", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, *tiny,
                          "--ckpt_path", run / "checkpoints" / "last.ckpt")
    assert test.returncode == 0, test.stderr[-2000:]
