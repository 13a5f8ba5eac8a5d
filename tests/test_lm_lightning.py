"""LanguageModelModule with real Trainers: every family fits, perplexity is exact, BPTT carries state."""

import math
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, Trainer, seed_everything

from lit_attention.data.lm import LMDataModule
from lit_attention.lightning.lm import LanguageModelModule

SHAKESPEARE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
SMALL = dict(d_model=32, heads=4, layers=1, ffn=64, window=3, lr=1e-2, warmup=5)


@pytest.fixture(autouse=True)
def quiet_one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        warnings.filterwarnings("ignore", ".*returned `None`.*")
        yield
    torch.set_num_threads(before)


def trainer(**kwargs):
    options = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False)
    return Trainer(**{**options, **kwargs})


def toy_data(tmp_path, **kwargs):
    options = dict(task="toy-mt", tokenizer="word", n_sentences=300, batch_size=8, bptt=16,
                   cache_dir=str(tmp_path / "cache"))
    return LMDataModule(**{**options, **kwargs})


class Record(Callback):
    def __init__(self):
        self.losses, self.states, self.batches = [], [], []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))
        self.states.append(module._state["train"])
        self.batches.append(batch["tokens"].clone())


@pytest.mark.parametrize("family,options", [("window", {}), ("rnn", {"cell": "gru"}),
                                            ("transformer", {"positional": "rotary"})])
def test_each_family_fits_with_decreasing_loss(family, options, tmp_path):
    seed_everything(0)
    record = Record()
    module = LanguageModelModule(family=family, **{**SMALL, **options})
    fit = trainer(max_steps=40, callbacks=[record], num_sanity_val_steps=0)
    fit.fit(module, toy_data(tmp_path))
    first, last = sum(record.losses[:5]) / 5, sum(record.losses[-5:]) / 5
    assert last < first - 0.5, (first, last)
    metrics = fit.callback_metrics
    assert math.isfinite(metrics["val_ppl"]) and metrics["val_ppl"] < 30
    assert float(metrics["val_ppl"]) == pytest.approx(math.exp(float(metrics["val_loss"])), rel=1e-5)
    summary = module.describe()
    assert summary["task"] == "toy-mt" and summary["model"]["family"] == family
    assert summary["params"] == sum(p.numel() for p in module.net.parameters())
    for key, value in options.items():
        assert summary["model"][key] == value


def test_ngram_fits_without_gradients_and_reports_exact_perplexity(tmp_path):
    dm = toy_data(tmp_path, eval_batch_size=3, bptt=7)
    module = LanguageModelModule(family="ngram", order=3, delta=0.1)
    fit = trainer(max_steps=20)
    fit.fit(module, dm)
    assert module.net.fitted and module.describe()["params"] == 0
    assert fit.current_epoch == 1, "counted once: no further epochs"
    [result] = fit.validate(module, dm, verbose=False)
    # Independently: each of the 3 parallel val streams scored as a whole; its first token only
    # serves as context (it is never a target of a batch).
    data = dm.batches("val", rank=0, world=1).data
    nll = sum(-module.net.log_prob(row)[1:].sum().item() for row in data)
    count = data.shape[0] * (data.shape[1] - 1)
    assert result["val_ppl"] == pytest.approx(math.exp(nll / count), rel=1e-5)


def test_validation_perplexity_is_exact_token_level(tmp_path):
    seed_everything(0)
    dm = toy_data(tmp_path, eval_batch_size=3, bptt=7)     # the last batch is shorter
    module = LanguageModelModule(family="rnn", cell="lstm", dropout=0.0, **SMALL)
    fit = trainer(max_steps=10, num_sanity_val_steps=0)
    fit.fit(module, dm)
    [result] = fit.validate(module, dm, verbose=False)
    # The state carried across batches makes the batched pass equal one pass over whole rows.
    data = dm.batches("val", rank=0, world=1).data
    assert (data.shape[1] - 1) % 7 != 0
    module.net.eval()
    with torch.no_grad():
        logits, _ = module.net(data[:, :-1])
    logp = F.log_softmax(logits.double(), -1).gather(2, data[:, 1:, None])
    assert result["val_loss"] == pytest.approx(-logp.mean().item(), rel=1e-5)
    assert result["val_ppl"] == pytest.approx(math.exp(-logp.mean().item()), rel=1e-5)


def test_training_carries_the_detached_state_across_batches(tmp_path):
    seed_everything(0)
    record = Record()
    module = LanguageModelModule(family="rnn", cell="gru", dropout=0.0, **{**SMALL, "lr": 0.0})
    fit = trainer(max_steps=3, callbacks=[record], limit_val_batches=0)
    fit.fit(module, toy_data(tmp_path))
    net = module.net.train()
    first, second = record.states[0], record.states[1]
    assert first.grad_fn is None and not first.requires_grad and first.abs().sum() > 0
    with torch.no_grad():                      # lr 0: the weights did not move
        _, expected_first = net(record.batches[0])
        _, carried = net(record.batches[1], expected_first)
        _, fresh = net(record.batches[1])
    assert torch.allclose(first, expected_first, atol=1e-6)
    assert torch.allclose(second, carried, atol=1e-6)
    assert not torch.allclose(second, fresh, atol=1e-4)


def test_state_is_reset_at_each_epoch(tmp_path):
    seed_everything(0)
    record = Record()
    dm = toy_data(tmp_path)
    module = LanguageModelModule(family="rnn", cell="elman-tanh", dropout=0.0, **{**SMALL, "lr": 0.0})
    per_epoch = len(dm.batches("train", rank=0, world=1))
    fit = trainer(max_epochs=2, callbacks=[record], limit_val_batches=0)
    fit.fit(module, dm)
    assert len(record.states) == 2 * per_epoch
    # Same weights, same first batch, a fresh state: the second epoch starts where the first did.
    assert torch.allclose(record.states[per_epoch], record.states[0], atol=1e-6)


def test_unknown_choice_fails_at_construction():
    with pytest.raises(ValueError, match="valid choices: none, sinusoidal"):
        LanguageModelModule(positional="relative")
    with pytest.raises(ValueError, match="elman-tanh, elman-relu, gru, lstm"):
        LanguageModelModule(family="rnn", cell="tanh")


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason=f"Tiny Shakespeare not found at {SHAKESPEARE}")
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_tiny_shakespeare_char_smoke(family, tmp_path):
    seed_everything(0)
    dm = LMDataModule(path=str(SHAKESPEARE), tokenizer="char", batch_size=16, bptt=32,
                      cache_dir=str(tmp_path / "cache"))
    module = LanguageModelModule(family=family, d_model=48, heads=4, layers=1, ffn=96, lr=1e-2,
                                 warmup=5)
    fit = trainer(max_steps=30, val_check_interval=30, limit_val_batches=4, num_sanity_val_steps=0)
    fit.fit(module, dm)
    # 65 characters: uniform guessing is ppl ~68; 30 steps already learn character frequencies.
    assert float(fit.callback_metrics["val_ppl"]) < 30
    [result] = fit.test(module, dm, verbose=False)
    assert math.isfinite(result["test_ppl"]) and result["test_ppl"] < 30


@pytest.mark.slow
def test_ddp_perplexity_sums_over_ranks(tmp_path):
    """Two ranks with B streams each score exactly what one device with 2B streams scores."""
    one = toy_data(tmp_path, eval_batch_size=4, bptt=7)
    two = toy_data(tmp_path, eval_batch_size=2, bptt=7)
    [single] = trainer().validate(LanguageModelModule(family="ngram"), one, verbose=False)
    ddp = trainer(devices=2, strategy="ddp_spawn")
    [spread] = ddp.validate(LanguageModelModule(family="ngram"), two, verbose=False)
    assert spread["val_ppl"] == pytest.approx(single["val_ppl"], rel=1e-6)
    assert spread["val_loss"] == pytest.approx(single["val_loss"], rel=1e-6)


def test_match_params_picks_the_closest_width():
    for family in ("window", "rnn", "transformer"):
        module = LanguageModelModule(family=family, match_params=60_000, n_vocab=70)
        module.configure_model()
        params = module.describe()["params"]
        assert abs(params - 60_000) < 0.25 * 60_000, (family, params)
        wider = LanguageModelModule(family=family, d_model=module.hparams.d_model + 8,
                                    ffn=module.hparams.ffn, n_vocab=70)
        wider.configure_model()
        assert abs(wider.describe()["params"] - 60_000) >= abs(params - 60_000)


@pytest.mark.parametrize("family", ["ngram", "rnn"])
def test_checkpoint_restores_the_model(family, tmp_path):
    seed_everything(0)
    dm = toy_data(tmp_path)
    module = LanguageModelModule(family=family, **SMALL)
    fit = trainer(max_steps=3, limit_val_batches=0)
    fit.fit(module, dm)
    [before] = trainer().validate(module, dm, verbose=False)
    path = tmp_path / "model.ckpt"
    fit.save_checkpoint(path)
    restored = LanguageModelModule.load_from_checkpoint(path)
    [after] = trainer().validate(restored, dm, verbose=False)
    assert after["val_ppl"] == pytest.approx(before["val_ppl"], rel=1e-6)
