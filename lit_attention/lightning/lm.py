"""LightningModule for language models: truncated BPTT, exact token-level perplexity.

Every family reads batches ``{"tokens": [B, T], "targets": [B, T]}`` from ``LMDataModule``.
Training carries the state (hidden state or context tokens) from one batch to the next, detached,
so gradients stop at the batch boundary; it is reset at the start of every epoch.

Evaluation carries no state: every batch row is an evaluation window of the data module's
protocol (sliding window W, stride S; see lit_attention.data.lm), scored from a fresh start by
every family, so each token is predicted from the same at most W preceding tokens whatever the
model. Perplexity is exp(summed NLL of the scored (non-PAD) targets / their count), with the sums
reduced over DDP ranks: the same number for every batch size and device count. The protocol goes
into summary.json as ``eval_protocol``, and each scored token's NLL, in stream order, into the run
store (schema.token_nll_file): the analysis tests perplexities over contiguous blocks of them.

The n-gram family has no gradient: it counts the data module's training stream when fitting
starts (or when evaluation needs it), then the training epoch is skipped; `fit` refuses the
settings of gradient training for it (registry.GRADIENT_SETTINGS, ``inert_settings``).
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn.functional as F

from lit_attention import registry
from lit_attention.data.vocab import PAD
from lit_attention.config_check import Inert
from lit_attention.lightning.base import Cell, Norm, Positional, SequenceModule, check_values
from lit_attention.lightning.diagnostics import ENCODER_DECODER_OPTIONS
from lit_attention.lightning.optim import adam, stepwise, warmup_cosine
from lit_attention.lightning.steps import attached_datamodule
from lit_attention.lightning.totals import TokenLosses
from lit_attention.models.base import count_parameters
from lit_attention.models.lm import build_lm, detach_state

LM = registry.LM_MODELS
DEFAULT = registry.CONFIG_DEFAULTS["lm"]
Family = Literal[registry.LM_FAMILIES]
Scoring = Literal[tuple(registry.TRANSFORMER_SCORING)]
Smoothing = Literal[tuple(registry.NGRAM_SMOOTHING)]


class LanguageModelModule(SequenceModule):
    """Train and evaluate any registered language model on an LMDataModule.

    Every model option belongs to some families only (registry.LM_MODELS) and defaults to None:
    unset, the family's default applies; set for a family that does not use it, it is refused.
    hparams hold the resolved values, so a checkpoint rebuilds the same model.
    """

    target_key = "targets"

    def __init__(
        self,
        family: Family = DEFAULT["model.family"],
        cell: Optional[Cell] = None,
        positional: Optional[Positional] = None,
        scoring: Optional[Scoring] = None,
        norm: Optional[Norm] = None,
        order: Optional[int] = None,
        smoothing: Optional[Smoothing] = None,
        delta: Optional[float] = None,
        discount: Optional[float] = None,
        window: Optional[int] = None,
        d_model: Optional[int] = None,
        emb_size: Optional[int] = None,
        heads: Optional[int] = None,
        layers: Optional[int] = None,
        ffn: Optional[int] = None,
        dropout: Optional[float] = None,
        tie_embeddings: Optional[bool] = None,
        max_len: Optional[int] = None,
        rel_buckets: Optional[int] = None,
        rel_max_distance: Optional[int] = None,
        shaw_clip: Optional[int] = None,
        match_params: Optional[int] = None,
        lr: float = 1e-3,
        warmup: int = 100,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        n_vocab: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        h = self.hparams
        h.update(registry.resolve(LM, family, {k: h[k] for k in registry.family_options(LM)},
                                  what="language-model family"))
        if match_params and h.d_model is None:
            raise ValueError(f"option model.match_params searches model.d_model, which language-model "
                             f"family {family!r} does not have: leave it unset")
        check_values(h)
        self.net = None
        # n-gram: no optimizer, its one epoch is skipped (on_train_batch_start) after counting
        self._state = {}           # training state carried across batches ("train")
        # split -> [T] float32 NLL of each scored token, in stream order (the block test's data)
        self.token_losses: dict[str, np.ndarray] = {}

    @classmethod
    def inert_settings(cls, init_args: dict) -> dict[str, Inert]:
        inert = dict.fromkeys((f"diagnostics.{k}" for k in ENCODER_DECODER_OPTIONS),
                              Inert("a language model has no encoder: gradient flow and attention "
                                    "heatmaps are measured on encoder-decoders"))
        family = init_args.get("family")
        if family in LM and not LM[family].gradient:
            inert.update(dict.fromkeys(registry.GRADIENT_SETTINGS,
                                       Inert(f"language-model family {family!r} has no gradient (it is "
                                             f"counted from the training stream, never optimised)")))
            inert["trainer.precision"] = Inert(f"language-model family {family!r} counts in exact integers "
                                               f"and scores in fp32", harmless=("32-true", "32", 32))
        return inert

    # -- model construction ------------------------------------------------------------------

    @property
    def counted(self) -> bool:
        """A family without gradient (n-gram): counted from the training stream, no optimizer."""
        return not LM[self.hparams.family].gradient

    def _arch_options(self) -> dict:
        """The model constructor's arguments: the family's options."""
        return {k: self.hparams[k] for k in LM[self.hparams.family].options}

    def configure_model(self) -> None:
        if self.net is not None:
            return
        h = self.hparams
        dm = attached_datamodule(self)
        if dm is not None:
            h.n_vocab = dm.vocab_size_actual
            if h.max_len is not None:   # a family with position tables: cover every window
                h.max_len = max(h.max_len, dm.hparams.bptt, dm.eval_window)
        if not h.n_vocab:
            raise ValueError("vocabulary size is unknown: attach an LMDataModule or set model.n_vocab")
        self.build_net(lambda **o: build_lm(h.family, h.n_vocab, **o))

    def describe(self) -> dict:
        h = self.hparams
        dm = attached_datamodule(self)
        task = dm.hparams.task if dm is not None and hasattr(dm, "hparams") else None
        return {"task": task, "model": {k: h[k] for k in registry.lm_variant_fields(h.family, h)},
                "params": count_parameters(self.net) if self.net is not None else None}

    def forward(self, tokens: torch.Tensor, state=None):
        return self.net(tokens, state)

    # -- n-gram counting ---------------------------------------------------------------------

    def _fit_ngram(self) -> None:
        if not self.counted or self.net.fitted:
            return
        dm = attached_datamodule(self)
        if dm is None or not hasattr(dm, "streams"):
            raise RuntimeError("the n-gram family counts the LMDataModule's training stream: "
                               "pass datamodule= to trainer.fit/validate/test")
        dm.prepare()
        self.net.fit(dm.streams["train"])

    on_fit_start = on_validation_start = on_test_start = _fit_ngram

    # -- training ----------------------------------------------------------------------------

    def on_train_epoch_start(self):
        self._state["train"] = None

    def on_train_epoch_end(self):
        if self.counted:
            self.trainer.should_stop = True   # counted once; its validation has run: nothing more to learn

    def training_step(self, batch, batch_idx):
        if self.counted:
            # No gradient: the counts were taken in on_fit_start. The epoch still runs (doing
            # nothing) because returning -1 from on_train_batch_start would skip its validation.
            return None
        return super().training_step(batch, batch_idx)

    def training_loss(self, batch):
        tokens, targets = batch["tokens"], batch["targets"]
        logits, state = self.net(tokens, self._state.get("train"))
        self._state["train"] = detach_state(state)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1)), targets

    def configure_optimizers(self):
        if self.counted:
            return None
        h = self.hparams
        total = self.trainer.estimated_stepping_batches
        total = int(total) if math.isfinite(total) else 0
        return stepwise(adam(self, h.lr, h.betas, h.weight_decay, decoupled=True),
                        warmup_cosine(max(h.warmup, 1), total))

    # -- evaluation --------------------------------------------------------------------------

    def evaluation_start(self, split: str) -> None:
        self.eval_totals["losses"] = TokenLosses().to(self.device)

    def evaluate(self, split: str, batch):
        logits, _ = self.net(batch["tokens"])          # a fresh state for every window
        targets = batch["targets"]
        nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                              ignore_index=PAD, reduction="none").view(targets.shape)
        scored = targets != PAD                        # PAD targets (context only) do not count
        if "window_index" in batch:
            self.eval_totals["losses"].update(batch["window_index"], nll, scored)
        return nll.sum(), scored.sum()

    def evaluation_end(self, split: str) -> None:
        self.eval_extras[split] = {"eval_protocol": getattr(attached_datamodule(self), "eval_protocol", None)}
        losses = self.eval_totals["losses"].compute()
        if losses.numel():
            self.token_losses[split] = losses.numpy()
