"""lit_attention/lightning/optim.py: the schedules' shapes, that both modules step them once per
optimizer step, and when Adam is fused."""

import pytest
import torch
from lightning.pytorch import Callback, Trainer

from lit_attention.data.lm import LMDataModule
from lit_attention.data.translation import TranslationDataModule
from lit_attention.lightning.lm import LanguageModelModule
from lit_attention.lightning.optim import inverse_sqrt_warmup, warmup_cosine
from lit_attention.lightning.translation import TranslationModule

QUIET = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
             enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)


def test_inverse_sqrt_warmup_rises_linearly_then_decays_as_one_over_sqrt_step():
    factor = inverse_sqrt_warmup(4)
    assert [factor(s) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert factor(15) == pytest.approx(0.5)          # step 16 = 4 * warmup: sqrt(4 / 16)
    assert factor(399) == pytest.approx(0.1)         # step 400 = 100 * warmup
    after = [factor(s) for s in range(3, 200)]
    assert all(a > b for a, b in zip(after, after[1:]))
    assert inverse_sqrt_warmup(0)(0) == inverse_sqrt_warmup(1)(0) == 1.0   # no warm-up: full rate at once


def test_warmup_cosine_rises_linearly_then_falls_to_its_floor_at_the_total():
    factor = warmup_cosine(4, 24, floor=0.1)
    assert [factor(s) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert factor(4) == pytest.approx(1.0)
    assert factor(14) == pytest.approx(0.1 + 0.9 * 0.5)            # half way through the decay
    assert factor(24) == pytest.approx(0.1) and factor(1000) == pytest.approx(0.1)
    decay = [factor(s) for s in range(4, 25)]
    assert all(a > b for a, b in zip(decay, decay[1:]))
    assert warmup_cosine(4, 3)(10) == 1.0                          # no room to decay: stays at the base rate


class Rates(Callback):
    """The learning rate each optimizer step ran with."""

    def __init__(self):
        self.rates = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.rates.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_translation_steps_the_inverse_sqrt_schedule_once_per_optimizer_step():
    torch.manual_seed(0)
    dm = TranslationDataModule(task="copy", n_train=80, n_val=4, n_test=4, min_len=2, max_len_words=6,
                               max_tokens=32, tokenizer="word")
    module = TranslationModule(family="transformer", d_model=16, heads=2, enc_layers=1, dec_layers=1,
                               ffn=32, lr=2e-3, warmup=3, val_bleu=False)
    rates = Rates()
    Trainer(max_steps=8, callbacks=[rates], **QUIET).fit(module, dm)
    assert rates.rates == pytest.approx([2e-3 * inverse_sqrt_warmup(3)(s) for s in range(8)])


def test_lm_decays_to_the_floor_over_the_whole_run(tmp_path):
    torch.manual_seed(0)
    dm = LMDataModule(task="toy-mt", tokenizer="word", n_sentences=300, batch_size=8, bptt=16,
                      cache_dir=str(tmp_path / "cache"))
    module = LanguageModelModule(family="window", window=3, d_model=32, emb_size=16, lr=1e-2, warmup=2)
    rates = Rates()
    Trainer(max_steps=10, callbacks=[rates], **QUIET).fit(module, dm)
    assert rates.rates == pytest.approx([1e-2 * warmup_cosine(2, 10)(s) for s in range(10)])
    assert module.optimizers().param_groups[0]["lr"] == pytest.approx(1e-3)   # floor 0.1 at step 10


class GradNorms(Callback):
    """The total gradient norm (and largest entry) each optimizer step was taken with: after
    clipping, as the step left them (zeroed only before the next batch)."""

    def __init__(self):
        self.norms, self.largest = [], []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        self.largest.append(max(float(g.abs().max()) for g in grads))


@pytest.mark.parametrize("precision,fused", [("32-true", True), ("bf16-mixed", True)])
@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_adam_is_fused_and_its_gradients_clipped_in_both_cpu_precisions(precision, fused, algorithm):
    # bf16-mixed has no gradient scaler: a fused step after clipping is exact (Lightning refuses it
    # for any fused optimizer under a mixed-precision plugin; the module clips itself)
    torch.manual_seed(0)
    dm = TranslationDataModule(task="copy", n_train=40, n_val=8, n_test=4, min_len=2, max_len_words=6,
                               max_tokens=64, tokenizer="word")
    module = TranslationModule(family="transformer", d_model=16, heads=2, enc_layers=1, dec_layers=1,
                               ffn=32, dropout=0.0, val_bleu=False)
    grads = GradNorms()
    clip = 1e-3        # far below the gradients' size: every step is clipped
    trainer = Trainer(precision=precision, max_steps=3, gradient_clip_val=clip, gradient_clip_algorithm=algorithm,
                      callbacks=[grads], **QUIET)
    trainer.fit(module, dm)
    opt = trainer.optimizers[0]
    assert bool(opt.defaults["fused"]) is fused
    assert trainer.global_step == 3 and len(grads.norms) == 3
    if algorithm == "norm":
        assert grads.norms == pytest.approx([clip] * 3, rel=1e-3)
    else:
        assert grads.largest == pytest.approx([clip] * 3, rel=1e-6)
    assert all(torch.isfinite(p).all() for p in module.parameters())


class NormsBeforeClipping(Callback):
    """Each step's gradient norm before clipping, computed here (the reference)."""

    def __init__(self):
        self.norms = []

    def on_after_backward(self, trainer, module):
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack([g.double().norm() for g in grads]))))


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_one_gradient_norm_per_step_serves_the_diagnostics_and_clipping(tmp_path, monkeypatch, precision):
    # The diagnostics log every step's total norm before clipping; clipping by norm needs the same
    # number. Computed once (a foreach norm over every gradient: kernels per parameter on a GPU).
    from lit_attention.lightning.diagnostics import DiagnosticsCallback
    from lit_attention.tracking.run_store import RunDir

    calls = []
    real = torch._foreach_norm
    monkeypatch.setattr(torch, "_foreach_norm", lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.manual_seed(0)
    dm = TranslationDataModule(task="copy", n_train=40, n_val=8, n_test=4, min_len=2, max_len_words=6,
                               max_tokens=64, tokenizer="word")
    module = TranslationModule(family="transformer", d_model=16, heads=2, enc_layers=1, dec_layers=1,
                               ffn=32, dropout=0.0, val_bleu=False)
    diagnostics = DiagnosticsCallback(RunDir(tmp_path / "run"), module_norm_every=0, gradflow_every=0, heatmaps=0)
    reference, after = NormsBeforeClipping(), GradNorms()
    clip = 1e-3
    trainer = Trainer(precision=precision, max_steps=4, gradient_clip_val=clip,
                      callbacks=[reference, diagnostics, after], **QUIET)
    trainer.fit(module, dm)
    assert len(calls) == 4                                          # not 8: one per step
    diagnostics._read_norms()
    assert diagnostics.norms == pytest.approx(reference.norms, rel=1e-5)
    assert after.norms == pytest.approx([clip] * 4, rel=1e-3)         # clipped by that norm
    assert diagnostics.clipped == 4
