"""LightningModule for language models: truncated BPTT, exact token-level perplexity.

Every family reads batches ``{"tokens": [B, T], "targets": [B, T]}`` from ``LMDataModule``.
Training carries the state (hidden state or context tokens) from one batch to the next, detached,
so gradients stop at the batch boundary; it is reset at the start of every epoch.

Evaluation carries no state: every batch row is an evaluation window of the data module's
protocol (sliding window W, stride S; see lit_attention.data.lm), scored from a fresh start by
every family, so each token is predicted from the same at most W preceding tokens whatever the
model. Perplexity is exp(summed NLL of the scored (non-PAD) targets / their count), with the sums
reduced over DDP ranks: the same number for every batch size and device count. The protocol goes
into summary.json as ``eval_protocol``.

The n-gram family has no gradient: it counts the data module's training stream when fitting
starts (or when evaluation needs it), then the training epoch is skipped.
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from lightning.pytorch import LightningModule

from lit_attention import registry
from lit_attention.lightning.optim import adam
from lit_attention.lightning.steps import attached_datamodule, logs_this_step
from lit_attention.metrics import perplexity, token_nll
from lit_attention.models.base import count_parameters, match_width
from lit_attention.models.lm import build_lm, detach_state

LM = registry.LM_MODELS
Family = Literal[registry.LM_FAMILIES]
Cell = Literal[registry.CELLS]
Positional = Literal[tuple(registry.POSITIONAL)]
Scoring = Literal[registry.TRANSFORMER_SCORING]
Norm = Literal[registry.NORM]
Smoothing = Literal[registry.NGRAM_SMOOTHING]



def warmup_cosine(warmup: int, total: int, floor: float = 0.1):
    """Linear warm-up to the base rate, then cosine decay to ``floor`` of it at ``total`` steps."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if total <= warmup:
            return 1.0
        progress = min((step - warmup) / (total - warmup), 1.0)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


class LanguageModelModule(LightningModule):
    """Train and evaluate any registered language model on an LMDataModule.

    Every model option belongs to some families only (registry.LM_MODELS) and defaults to None:
    unset, the family's default applies; set for a family that does not use it, it is refused.
    hparams hold the resolved values, so a checkpoint rebuilds the same model.
    """

    def __init__(
        self,
        family: Family = "transformer",
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
        self.net = None
        # n-gram: no optimizer, its one epoch is skipped (on_train_batch_start) after counting
        self._state = {}           # training state carried across batches ("train")
        self._eval: dict[str, list[float]] = {}
        self.eval_extras: dict[str, dict] = {}
        self.train_tokens = 0

    # -- model construction ------------------------------------------------------------------

    @property
    def counted(self) -> bool:
        """A family without gradient (n-gram): counted from the training stream, no optimizer."""
        return not LM[self.hparams.family].gradient

    def _arch_options(self) -> dict:
        """The model constructor's arguments: the family's options."""
        h = self.hparams
        return {k: h[k] for k in LM[h.family].options}

    def configure_model(self) -> None:
        if self.net is not None:
            return
        h = self.hparams
        dm = self._datamodule()
        if dm is not None:
            h.n_vocab = dm.vocab_size_actual
            if h.max_len is not None:   # a family with position tables: cover every window
                h.max_len = max(h.max_len, dm.hparams.bptt, dm.eval_window)
        if not h.n_vocab:
            raise ValueError("vocabulary size is unknown: attach an LMDataModule or set model.n_vocab")
        if h.match_params:
            h.update(match_width(lambda **o: build_lm(h.family, h.n_vocab, **o), self._arch_options(),
                                 h.match_params))
            h.match_params = None  # the checkpoint records the chosen width, not the search
        self.net = build_lm(h.family, h.n_vocab, **self._arch_options())

    def _datamodule(self):
        return attached_datamodule(self)

    def describe(self) -> dict:
        h = self.hparams
        dm = self._datamodule()
        task = dm.hparams.task if dm is not None and hasattr(dm, "hparams") else None
        return {"task": task, "model": {k: h[k] for k in registry.lm_variant_fields(h.family)},
                "params": count_parameters(self.net) if self.net is not None else None}

    def forward(self, tokens: torch.Tensor, state=None):
        return self.net(tokens, state)

    # -- n-gram counting ---------------------------------------------------------------------

    def _fit_ngram(self) -> None:
        if not self.counted or self.net.fitted:
            return
        dm = self._datamodule()
        if dm is None or not hasattr(dm, "streams"):
            raise RuntimeError("the n-gram family counts the LMDataModule's training stream: "
                               "pass datamodule= to trainer.fit/validate/test")
        dm.prepare()
        self.net.fit(dm.streams["train"])

    def on_fit_start(self):
        self._fit_ngram()

    def on_validation_start(self):
        self._fit_ngram()

    def on_test_start(self):
        self._fit_ngram()

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
        tokens, targets = batch["tokens"], batch["targets"]
        logits, state = self.net(tokens, self._state.get("train"))
        self._state["train"] = detach_state(state)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite training loss ({loss.item()}) at step {self.global_step}")
        self.train_tokens += targets.numel()
        if logs_this_step(self):
            self.log("train_loss", loss, prog_bar=True, batch_size=targets.shape[0])
            self.log("lr", self.optimizers().param_groups[0]["lr"], batch_size=1)
        return loss

    def configure_optimizers(self):
        if self.counted:
            return None
        h = self.hparams
        opt = adam(self, h.lr, h.betas, h.weight_decay, decoupled=True)
        total = self.trainer.estimated_stepping_batches
        total = int(total) if math.isfinite(total) else 0
        sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(max(h.warmup, 1), total))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # -- evaluation --------------------------------------------------------------------------

    def _eval_start(self, split: str) -> None:
        self._eval[split] = [0.0, 0.0]

    def _eval_step(self, split: str, batch) -> None:
        logits, _ = self.net(batch["tokens"])          # a fresh state for every window
        nll, n = token_nll(logits, batch["targets"])   # PAD targets (context only) do not count
        self._eval[split][0] += float(nll)
        self._eval[split][1] += float(n)

    def _eval_end(self, split: str) -> None:
        totals = torch.tensor(self._eval.pop(split), dtype=torch.float64)
        if dist.is_available() and dist.is_initialized() and self.trainer.world_size > 1:
            dist.all_reduce(totals)
        nll, tokens = totals.tolist()
        self.log(f"{split}_loss", nll / max(tokens, 1), batch_size=1)
        self.log(f"{split}_ppl", perplexity(nll, tokens), batch_size=1, prog_bar=True)
        dm = self._datamodule()
        self.eval_extras[split] = {"eval_protocol": getattr(dm, "eval_protocol", None)}

    def on_validation_epoch_start(self):
        self._eval_start("val")

    def validation_step(self, batch, batch_idx):
        self._eval_step("val", batch)

    def on_validation_epoch_end(self):
        self._eval_end("val")

    def on_test_epoch_start(self):
        self._eval_start("test")

    def test_step(self, batch, batch_idx):
        self._eval_step("test", batch)

    def on_test_epoch_end(self):
        self._eval_end("test")
