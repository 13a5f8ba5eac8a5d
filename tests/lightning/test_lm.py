"""LanguageModelModule with real Trainers: every family fits, training carries state across
batches, evaluation scores every token once under one sliding-window protocol, perplexity is exact."""

import json
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, Trainer, seed_everything

from conftest import CONFIGS, cli_in_process
from ddp_callbacks import GroupAtExit
from lit_attention import registry
from lit_attention.data.lm import LMDataModule
from lit_attention.data.synthetic import generate
from lit_attention.data.vocab import PAD
from lit_attention.lightning.lm import LanguageModelModule
from lit_attention.models.base import at_width
from lit_attention.tracking.schema import token_nll_file

FAMILIES = [("ngram", {"order": 3}), ("window", {}), ("rnn", {"cell": "lstm"}),
            ("transformer", {"positional": "sinusoidal"})]
# Each family's own options only: an option of another family is refused.
SIZES = {"ngram": {}, "window": dict(window=3, d_model=64, emb_size=32), "rnn": dict(d_model=32, layers=1),
         "transformer": dict(d_model=32, heads=4, layers=1, ffn=64)}


def small(family, **options):
    return {**SIZES[family], "lr": 1e-2, "warmup": 5, **options}


def no_dropout(family) -> dict:
    return {"dropout": 0.0} if "dropout" in registry.LM_MODELS[family].options else {}


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
    module = LanguageModelModule(family=family, **small(family, **options))
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


@pytest.mark.parametrize("options,message", [
    # before: refused by the network's constructor once the run had started (exit 1, a failed run)
    (dict(family="ngram", order=0), "model.order must be >= 1, got 0"),
    (dict(family="ngram", delta=-1.0), r"model.delta must be positive \(unseen tokens need mass\), got -1.0"),
    (dict(family="ngram", discount=2.0), r"model.discount must be in \[0, 1\), got 2.0"),
    (dict(family="window", window=0), "model.window must be >= 1, got 0"),           # ZeroDivisionError
    (dict(family="transformer", positional="t5_bias", rel_buckets=2),               # ZeroDivisionError
     r"model.rel_buckets must be >= 4 and model.rel_max_distance > rel_buckets / 2 .*got 2 and 128"),
    (dict(family="transformer", positional="t5_bias", rel_buckets=32, rel_max_distance=12),  # negative buckets
     "got 32 and 12"),
    (dict(family="transformer", positional="shaw", shaw_clip=-1), "model.shaw_clip must be >= 0"),
    # before: taken (a position table raised to the training window; a width search for -5 parameters)
    (dict(family="transformer", max_len=0), "model.max_len must be >= 1, got 0"),
    (dict(family="transformer", match_params=-5), "model.match_params must be >= 1, got -5"),
])
def test_a_value_the_network_cannot_take_is_refused_when_the_module_is_built(options, message):
    with pytest.raises(ValueError, match=message):
        LanguageModelModule(**options)


def test_ngram_fits_without_gradients_and_reports_exact_perplexity(tmp_path):
    dm = toy_data(tmp_path, eval_batch_size=3, bptt=7)
    module = LanguageModelModule(family="ngram", order=3, delta=0.1)
    fit = trainer(max_steps=20)
    fit.fit(module, dm)
    assert module.net.fitted and module.describe()["params"] == 0
    assert fit.current_epoch == 1, "counted once: no further epochs"
    [result] = fit.validate(module, dm, verbose=False)
    # Independently: the val stream scored as a whole, its first token only as context. Every
    # window (7 tokens, stride 3) gives a scored token at least 5 tokens of context, more than
    # the trigram's 2, so the window protocol changes nothing for it.
    stream = dm.streams["val"]
    logp, _ = module.net(stream[None, :-1])
    nll = -logp[0].gather(1, stream[1:, None]).sum().item()
    assert result["val_ppl"] == pytest.approx(math.exp(nll / (len(stream) - 1)), rel=1e-5)


class TokenScores(Callback):
    """NLL of every scored (non-PAD) target of a validation pass, in the order the batches score
    them, from the logits the model itself returned (a forward hook on ``module.net``)."""

    def on_validation_start(self, trainer, module):
        self.nll, self._logits = [], None
        self._hook = module.net.register_forward_hook(lambda net, args, out: setattr(self, "_logits", out[0]))

    def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
        targets = batch["targets"]
        logp = F.log_softmax(self._logits.double(), -1)
        nll = -logp.gather(2, targets.clamp(min=0)[..., None]).squeeze(2)
        self.nll.extend(nll[targets != PAD].tolist())

    def on_validation_end(self, trainer, module):
        self._hook.remove()


def fitted(family, options, dm, steps=20):
    seed_everything(0)
    module = LanguageModelModule(family=family, **small(family, **no_dropout(family), **options))
    trainer(max_steps=steps, limit_val_batches=0).fit(module, dm)
    return module


def scores(module, dm) -> tuple[list[float], dict]:
    record = TokenScores()
    [result] = trainer(callbacks=[record]).validate(module, dm, verbose=False)
    return record.nll, result


def window_reference(net, stream, window, stride) -> list[float]:
    """NLL of each token j >= 1 predicted by a fresh run over the tokens of the window that scores
    it: window k = 0 for j <= W, else ceil((j - W) / S), covering stream[k*S : j] (1..W tokens)."""
    net.eval()
    out = []
    with torch.no_grad():
        for j in range(1, len(stream)):
            k = 0 if j <= window else math.ceil((j - window) / stride)
            logits, _ = net(stream[k * stride:j][None])
            out.append(-F.log_softmax(logits[0, -1].double(), -1)[stream[j]].item())
    return out


@pytest.mark.parametrize("family,options", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_every_family_scores_each_token_once_from_its_window_alone(family, options, tmp_path):
    dm = toy_data(tmp_path, eval_batch_size=3, bptt=8)           # window 8, stride 4
    module = fitted(family, options, dm)
    nll, result = scores(module, dm)
    stream = dm.streams["val"]
    assert len(nll) == len(stream) - 1, "every token but the first is scored exactly once"
    expected = window_reference(module.net, stream, 8, 4)
    assert nll == pytest.approx(expected, abs=1e-5)
    assert result["val_loss"] == pytest.approx(sum(expected) / len(expected), rel=1e-5)
    assert result["val_ppl"] == pytest.approx(math.exp(sum(expected) / len(expected)), rel=1e-5)
    # what the run store keeps for the block test: each token's NLL, in stream order
    assert module.token_losses["val"].dtype == np.float32
    assert module.token_losses["val"].tolist() == pytest.approx(expected, abs=1e-5)


@pytest.fixture
def char_files(tmp_path):
    """A character corpus whose validation split is one line: stream position = character index."""
    train = generate("toy-mt", 300, seed=1)[1]
    (tmp_path / "train.txt").write_text("\n".join(train) + "\n")
    val = "a dog sees the big cat near the old house and the small bird"
    (tmp_path / "val.txt").write_text(val + "\n")
    return tmp_path, val


@pytest.mark.parametrize("family,options", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_a_tokens_score_depends_on_the_same_window_for_every_family(family, options, char_files):
    """Perturb the token at position p. Under one protocol (window W = 8, stride 4) the scores of
    tokens j > p + W must not move for any family (no carried state), and those of p + 1 and
    p + 2 must (the window keeps at least W - S + 1 = 5 tokens of context, so a Transformer sees
    position p when scoring p + 2 even though p + 1 starts a block of the training layout)."""
    root, val = char_files
    p, window = 7, 8
    changed = val[:p] + ("x" if val[p] != "x" else "y") + val[p + 1:]
    runs = {}
    for name, text in (("original", val), ("changed", changed)):
        (root / f"{name}.txt").write_text(text + "\n")
        dm = LMDataModule(path=str(root / "train.txt"), val_path=str(root / f"{name}.txt"),
                          test_path=str(root / f"{name}.txt"), tokenizer="char", batch_size=8,
                          eval_batch_size=1, bptt=window, cache_dir=str(root / "cache"))
        if name == "original":
            module = fitted(family, options, dm)
        runs[name] = scores(module, dm)[0]                      # index j - 1 = token j
    before, after = runs["original"], runs["changed"]
    assert len(before) == len(after) == len(val)                # the line's EOS is scored too
    far = range(p + window + 1, len(val) + 1)
    assert [after[j - 1] for j in far] == pytest.approx([before[j - 1] for j in far], abs=1e-6)
    for j in (p + 1, p + 2):
        assert abs(after[j - 1] - before[j - 1]) > 1e-4, (family, j)


def test_training_carries_the_detached_state_across_batches(tmp_path):
    seed_everything(0)
    record = Record()
    module = LanguageModelModule(family="rnn", **small("rnn", cell="gru", dropout=0.0))
    module.hparams.lr = 0.0   # frozen weights (a user's lr 0 is refused by __init__: it trains nothing)
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
    module = LanguageModelModule(family="rnn", **small("rnn", cell="elman-tanh", dropout=0.0))
    module.hparams.lr = 0.0   # frozen weights (a user's lr 0 is refused by __init__: it trains nothing)
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


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_tiny_shakespeare_char_smoke(family, shared_data, tmp_path):
    seed_everything(0)
    dm = LMDataModule(path=str(shared_data / "tinyshakespeare" / "input.txt"), tokenizer="char",
                      batch_size=16, bptt=32,
                      cache_dir=str(tmp_path / "cache"))
    sizes = dict(heads=4, ffn=96) if family == "transformer" else {}
    module = LanguageModelModule(family=family, d_model=48, layers=1, lr=1e-2, warmup=5, **sizes)
    fit = trainer(max_steps=30, val_check_interval=30, limit_val_batches=4, num_sanity_val_steps=0)
    fit.fit(module, dm)
    # 65 characters: uniform guessing is ppl ~68; 30 steps already learn character frequencies.
    assert float(fit.callback_metrics["val_ppl"]) < 30
    [result] = fit.test(module, dm, verbose=False)
    assert math.isfinite(result["test_ppl"]) and result["test_ppl"] < 30


@pytest.mark.slow
@pytest.mark.parametrize("family", ["ngram", "transformer"])
def test_ddp_perplexity_sums_over_ranks(family, tmp_path):
    """Two ranks reading disjoint runs of evaluation windows score exactly what one device scores
    (whatever the batch size: every window is scored on its own). Each rank destroys its gloo
    group before its interpreter exits: left to the interpreter's end, gloo's threads now and then
    abort a rank that had finished (SIGABRT, "terminate called without an active exception")."""
    one = toy_data(tmp_path, eval_batch_size=3, bptt=7)
    two = toy_data(tmp_path, eval_batch_size=2, bptt=7)
    module = LanguageModelModule(family=family, **small(family), n_vocab=one.vocab_size_actual)
    module.configure_model()        # built before spawning, so both ranks get the same weights
    [single] = trainer().validate(module, one, verbose=False)
    ddp = trainer(devices=2, strategy="ddp_spawn", callbacks=[GroupAtExit(str(tmp_path))])
    [spread] = ddp.validate(module, two, verbose=False)
    assert spread["val_ppl"] == pytest.approx(single["val_ppl"], rel=1e-6)
    assert spread["val_loss"] == pytest.approx(single["val_loss"], rel=1e-6)
    assert [(tmp_path / str(rank)).read_text() for rank in (0, 1)] == ["destroyed", "destroyed"]


def test_match_params_picks_the_closest_width():
    for family in ("window", "rnn", "transformer"):
        module = LanguageModelModule(family=family, match_params=60_000, n_vocab=70)
        module.configure_model()
        params = module.describe()["params"]
        assert abs(params - 60_000) < 0.25 * 60_000, (family, params)
        sizes = {k: module.hparams[k] for k in ("d_model", "emb_size", "ffn") if module.hparams[k]}
        wider = LanguageModelModule(family=family, **at_width(sizes, sizes["d_model"] + 8), n_vocab=70)
        wider.configure_model()
        assert abs(wider.describe()["params"] - 60_000) >= abs(params - 60_000)


@pytest.mark.parametrize("family", ["ngram", "rnn"])
def test_checkpoint_restores_the_model(family, tmp_path):
    seed_everything(0)
    dm = toy_data(tmp_path)
    module = LanguageModelModule(family=family, **small(family))
    fit = trainer(max_steps=3, limit_val_batches=0)
    fit.fit(module, dm)
    [before] = trainer().validate(module, dm, verbose=False)
    path = tmp_path / "model.ckpt"
    fit.save_checkpoint(path)
    restored = LanguageModelModule.load_from_checkpoint(path)
    [after] = trainer().validate(restored, dm, verbose=False)
    assert after["val_ppl"] == pytest.approx(before["val_ppl"], rel=1e-6)


@pytest.mark.slow
def test_the_run_store_records_the_evaluation_protocol(tmp_path):
    fit = cli_in_process("fit", "--config", CONFIGS / "lm-toy.yaml", "--run.root", tmp_path, "--run.id", "lm",
                         "--data.n_sentences", "200", "--data.eval_window", "16", "--data.eval_stride", "8",
                         "--model.d_model", "16", "--model.layers", "1", "--model.ffn", "32",
                         "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false")
    assert fit.returncode == 0, fit.stderr[-3000:]
    summary = json.loads((tmp_path / "default" / "lm" / "summary.json").read_text())
    assert summary["eval_protocol"] == "sliding window 16, stride 8"
    assert math.isfinite(summary["val_ppl"])
    losses = np.load(tmp_path / "default" / "lm" / token_nll_file("val"))    # the block test's data
    assert losses.mean(dtype=np.float64) == pytest.approx(summary["val_loss"], rel=1e-5)


@pytest.mark.parametrize("family,options,message", [
    ("ngram", dict(d_model=64), "option model.d_model is not one of language-model family 'ngram', "
                                "only of window, rnn, transformer"),
    ("rnn", dict(heads=4), "option model.heads is not one of language-model family 'rnn', only of transformer"),
    ("transformer", dict(window=3), "option model.window is not one of language-model family 'transformer', "
                                    "only of window"),
    ("window", dict(ffn=256), "option model.ffn is not one of language-model family 'window': it reads "
                              "model.d_model instead"),
    ("ngram", dict(match_params=1000), "option model.match_params searches model.d_model")])
def test_an_option_another_family_uses_is_refused(family, options, message):
    with pytest.raises(ValueError, match=message):
        LanguageModelModule(family=family, **options)


def test_only_the_counted_family_has_no_gradient_and_the_window_width_is_d_model():
    assert [LanguageModelModule(family=f).counted for f in registry.LM_FAMILIES] == [
        not registry.LM_MODELS[f].gradient for f in registry.LM_FAMILIES] == [True, False, False, False]
    module = LanguageModelModule(family="window", d_model=48, emb_size=8, window=2, n_vocab=20)
    module.configure_model()
    assert module.net.hidden.weight.shape == (48, 2 * 8)
    assert module.describe()["model"] == {"family": "window", "window": 2, "d_model": 48, "emb_size": 8,
                                          "dropout": 0.1}
