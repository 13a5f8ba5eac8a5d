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
from lit_attention.models.base import count_parameters
from lit_attention.models.base import closest_width
from lit_attention.models.lm import build_lm, detach_state
from lit_attention.models.lm.ngram import SMOOTHING

Family = Literal[registry.LM_FAMILIES]
Cell = Literal[registry.CELLS]
Positional = Literal[tuple(registry.POSITIONAL)]
Scoring = Literal[registry.TRANSFORMER_SCORING]
Norm = Literal[registry.NORM]
Smoothing = Literal[SMOOTHING]



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
    """Train and evaluate any registered language model on an LMDataModule."""

    def __init__(
        self,
        family: Family = "transformer",
        cell: Cell = "lstm",
        positional: Positional = "sinusoidal",
        scoring: Scoring = "scaled_dot",
        norm: Norm = "pre",
        order: int = 3,
        smoothing: Smoothing = "interp",
        delta: float = 0.1,
        discount: float = 0.75,
        window: int = 5,
        d_model: int = 128,
        emb_size: Optional[int] = None,
        heads: int = 4,
        layers: int = 4,
        ffn: int = 512,
        dropout: float = 0.1,
        tie_embeddings: bool = True,
        max_len: int = 512,
        match_params: Optional[int] = None,
        lr: float = 1e-3,
        warmup: int = 100,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        n_vocab: int = 0,
    ):
        super().__init__()
        registry.check("language-model family", family, registry.LM_FAMILIES)
        registry.check("cell", cell, registry.CELLS)
        registry.check_positional_scoring(positional, scoring)
        registry.check("n-gram smoothing", smoothing, SMOOTHING)
        self.save_hyperparameters()
        self.net = None
        # n-gram: no optimizer, its one epoch is skipped (on_train_batch_start) after counting
        self._state = {}           # training state carried across batches ("train")
        self._eval: dict[str, list[float]] = {}
        self.eval_extras: dict[str, dict] = {}
        self.train_tokens = 0

    # -- model construction ------------------------------------------------------------------

    def _arch_options(self) -> dict:
        h = self.hparams
        emb = h.emb_size or h.d_model
        if h.family == "ngram":
            return dict(order=h.order, delta=h.delta, discount=h.discount, smoothing=h.smoothing)
        if h.family == "window":
            return dict(window=h.window, d_embed=emb, d_hidden=h.ffn, dropout=h.dropout)
        if h.family == "rnn":
            return dict(cell=h.cell, d_embed=emb, d_hidden=h.d_model, layers=h.layers,
                        dropout=h.dropout, tie_embeddings=h.tie_embeddings)
        return dict(d_model=h.d_model, heads=h.heads, layers=h.layers, ffn=h.ffn,
                    dropout=h.dropout, norm=h.norm, positional=h.positional, scoring=h.scoring,
                    tie_embeddings=h.tie_embeddings, max_len=h.max_len)

    def configure_model(self) -> None:
        if self.net is not None:
            return
        h = self.hparams
        dm = self._datamodule()
        if dm is not None:
            h.n_vocab = dm.vocab_size_actual
            h.max_len = max(h.max_len, dm.hparams.bptt, dm.eval_window)
        if not h.n_vocab:
            raise ValueError("vocabulary size is unknown: attach an LMDataModule or set model.n_vocab")
        if h.match_params and h.family != "ngram":
            self._match_width(h.match_params)
        self.net = build_lm(h.family, h.n_vocab, **self._arch_options())

    def _match_width(self, target: int) -> None:
        """Set d_model (and ffn in proportion) so the model has about ``target`` parameters."""
        h = self.hparams
        ratio = h.ffn / h.d_model

        def params(width: int) -> int:
            h.d_model, h.ffn = width, max(1, round(width * ratio))
            return count_parameters(build_lm(h.family, h.n_vocab, **self._arch_options()))

        width = closest_width(params, target, multiple=max(8, h.heads) if h.family == "transformer" else 8)
        h.d_model, h.ffn = width, max(1, round(width * ratio))
        h.match_params = None  # the checkpoint records the chosen width, not the search

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
        if self.hparams.family != "ngram" or self.net.fitted:
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
        if self.hparams.family == "ngram":
            self.trainer.should_stop = True   # counted once; its validation has run: nothing more to learn

    def training_step(self, batch, batch_idx):
        if self.hparams.family == "ngram":
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
        if self.hparams.family == "ngram":
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
