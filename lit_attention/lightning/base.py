"""The training and evaluation skeleton both task modules share.

A task module (translation.py, lm.py) builds ``self.net`` and says what a batch means:

    training_loss(batch) -> (loss, targets [B, T])   # PAD targets are not counted as tokens
    evaluate(split, batch) -> (summed NLL, number of scored targets)
    evaluation_start(split), evaluation_end(split)    # optional: more than perplexity (BLEU, ...)

The skeleton counts the target tokens trained on (``train_tokens``, which budgets and the run
store read), stops on a non-finite loss, logs ``train_loss`` and ``lr`` on the steps the logger
writes, and reports ``<split>_loss`` and exact ``<split>_ppl`` from NLL totals summed over DDP
ranks (totals.TokenNLL). Validation and test run the same code; the split is the trainer's stage.
Every step runs under the attention kernels models/sdpa_backends.py allows.

No training step reads a value back from an accelerator (each read waits for every queued
kernel; a launch-bound GPU step then idles): a task module that names its ``target_key`` has its
tokens counted on the CPU batch before it moves to the device, and the loss is checked for a
non-finite value every ``finite_check_every()`` steps, on all the losses since the last check
(on a CPU, where a read costs nothing, every step).

A module whose hyperparameters set ``graph_step`` replays its loss's forward and backward from a
CUDA graph per batch shape (graphed_step.py). A module whose hyperparameters set ``compile_step``
trains through ``torch.compile`` of its
``training_loss`` with dynamic shapes (one graph for every batch shape, built on the first step;
our token batches change shape nearly every step, and a graph per shape would recompile all run).
``self.net`` stays the eager module, so checkpoints, evaluation and decoding are unchanged.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import torch
from lightning.pytorch import LightningModule
from torchmetrics import Metric

from lit_attention import registry
from lit_attention.config_check import Inert
from lit_attention.data.vocab import PAD
from lit_attention.diagnostics import global_grad_norm
from lit_attention.lightning.process_group import destroy_at_exit
from lit_attention.lightning.steps import attached_trainer, logs_this_step
from lit_attention.lightning.totals import TokenNLL
from lit_attention.metrics import perplexity
from lit_attention.models.base import match_width
from lit_attention.models.sdpa_backends import attention_backends


# Lightning warns whenever a module with this hook trains on a data module (which could have its
# own); ours counts tokens, the data modules define none.
warnings.filterwarnings("ignore", message="You have overridden `on_before_batch_transfer` in `LightningModule`")


# The choices of the model options both task modules have
Cell = Literal[tuple(registry.CELLS)]
Positional = Literal[tuple(registry.POSITIONAL)]
Norm = Literal[tuple(registry.NORM)]

# model option -> (whether a value passes, what it must be), for each option a module has and sets
MODEL_VALUES = {
    "lr": (lambda v: isinstance(v, (int, float)) and math.isfinite(v) and v > 0,
           "a finite number > 0 (at 0 nothing trains)"),
    "warmup": (lambda v: v >= 0, ">= 0"),
    "weight_decay": (lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
    "betas": (lambda v: all(0 <= b < 1 for b in v), "two numbers in [0, 1)"),
    **dict.fromkeys(("dropout", "label_smoothing"), (lambda v: 0 <= v < 1, "in [0, 1)")),
    **dict.fromkeys(("d_model", "heads", "emb_size", "ffn", "layers", "enc_layers", "dec_layers", "window",
                     "order", "max_len", "match_params", "rel_max_distance"), (lambda v: v >= 1, ">= 1")),
    "shaw_clip": (lambda v: v >= 0, ">= 0 (the relative distances kept apart: -shaw_clip .. shaw_clip)"),
}


def check_values(h) -> None:
    """ValueError naming the first model option (of the resolved hyperparameters ``h``) whose value
    no model can train with: raised from ``__init__``, so that `fit` stops with one line (exit 2)
    before a run directory is written, instead of failing inside the optimizer or the network."""
    for key, (passes, rule) in MODEL_VALUES.items():
        if h.get(key) is not None and not passes(h[key]):
            raise ValueError(f"model.{key} must be {rule}, got {h[key]!r}")
    if h.get("rel_buckets") is not None:
        from lit_attention.models.positional import check_t5_buckets
        check_t5_buckets(h["rel_buckets"], h["rel_max_distance"])
    if h.get("delta") is not None or h.get("discount") is not None:
        from lit_attention.models.lm.ngram import check_smoothing
        check_smoothing(h.get("delta"), h.get("discount"))
    if h.get("heads") and h.get("d_model") and not h.get("match_params") and h["d_model"] % h["heads"]:
        raise ValueError(f"model.heads {h['heads']} does not divide model.d_model {h['d_model']}: "
                         f"each head gets d_model / heads dimensions")


class SequenceModule(LightningModule):
    """LightningModule skeleton: a subclass defines ``training_loss`` and ``evaluate``."""

    target_key: str | None = None   # the batch's targets [B, T], counted on the CPU (else on the device)
    loss_inputs: tuple[str, ...] = ()   # the batch keys training_loss reads (for graph_step)

    def __init__(self):
        super().__init__()
        self.train_tokens = 0                       # target tokens this rank trained on
        self._host_tokens: int | None = None        # the next training batch's, counted on the CPU
        self._unchecked: list[tuple[int, torch.Tensor]] = []   # (step, loss) not yet checked finite
        self.eval_extras: dict[str, dict] = {}      # split -> summary fields beyond logged metrics
        # The evaluation under way's torchmetrics totals, by name ("nll", ...). A plain dict, so
        # they are no children of the module (see totals.py).
        self.eval_totals: dict[str, Metric] = {}
        self._compiled_loss = None                  # torch.compile(training_loss), on the first step
        self._graphed_loss = None                   # graphed_step.GraphedLoss, with graph_step
        self._grad_norm: torch.Tensor | None = None   # of the gradients since the last backward
        self._clips_own_parameters: bool | None = None
        self._parameters_list: list[torch.nn.Parameter] | None = None

    # -- what a task module defines ----------------------------------------------------------

    def training_loss(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, targets [B, T]) of a training batch."""
        raise NotImplementedError

    def evaluate(self, split: str, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed NLL, number of scored targets) of an evaluation batch, padding repeats removed."""
        raise NotImplementedError

    def evaluation_start(self, split: str) -> None:
        pass

    def evaluation_end(self, split: str) -> None:
        pass

    @classmethod
    def inert_settings(cls, init_args: dict) -> dict[str, Inert]:
        """Settings (config keys such as "model.lr", "trainer.gradient_clip_val") that the module
        built from ``init_args`` (defaults filled in) would ignore, each with the reason: `fit`
        refuses one set to a value other than its default or a harmless one
        (cli.refuse_inert_settings)."""
        return {}

    def build_net(self, build) -> None:
        """``self.net = build(**self._arch_options())`` (the task module's constructor arguments);
        with model.match_params, at the width whose parameter count is closest to it."""
        h = self.hparams
        if h.match_params:
            h.update(match_width(build, self._arch_options(), h.match_params))
            h.match_params = None  # the checkpoint records the chosen width, not the search
        self.net = build(**self._arch_options())

    # -- training ----------------------------------------------------------------------------

    def attention_backends(self):
        """The context under which this module's attention runs (models/sdpa_backends.py)."""
        trainer = attached_trainer(self)
        return attention_backends(self.device.type, str(trainer.precision) if trainer else "32-true")

    def finite_check_every(self) -> int:
        """Steps between checks of the training loss: 1 on a CPU, else the logging interval."""
        trainer = attached_trainer(self)
        if self.device.type == "cpu" or trainer is None:
            return 1
        return max(trainer.log_every_n_steps, 1)

    def check_finite(self) -> None:
        """FloatingPointError naming the first non-finite loss since the last check and its step."""
        if not self._unchecked:
            return
        steps, losses = zip(*self._unchecked)
        self._unchecked = []
        finite = torch.isfinite(torch.stack(losses)).tolist()        # one read for all of them
        if not all(finite):
            bad = finite.index(False)
            raise FloatingPointError(f"non-finite training loss ({losses[bad].item()}) at step {steps[bad]}")

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        trainer = attached_trainer(self)
        if (self.target_key and trainer is not None and trainer.training and isinstance(batch, dict)
                and self.target_key in batch):
            self._host_tokens = int((batch[self.target_key] != PAD).sum())
        return batch

    def step_loss(self):
        """The function a training step calls: ``training_loss``, or its graphed or compiled form."""
        if self.hparams.get("graph_step"):
            if self._graphed_loss is None:
                from lit_attention.lightning.graphed_step import GraphedLoss
                self._graphed_loss = GraphedLoss(self)
            return self._graphed_loss
        if not self.hparams.get("compile_step"):
            return self.training_loss
        if self._compiled_loss is None:
            self._compiled_loss = torch.compile(self.training_loss, dynamic=True)
        return self._compiled_loss

    def training_step(self, batch, batch_idx):
        with self.attention_backends():
            loss, targets = self.step_loss()(batch)
        self._unchecked.append((self.global_step, loss.detach()))
        if len(self._unchecked) >= self.finite_check_every():
            self.check_finite()
        host_tokens, self._host_tokens = self._host_tokens, None
        self.train_tokens += host_tokens if host_tokens is not None else int((targets != PAD).sum())
        if logs_this_step(self):
            self.log("train_loss", loss, batch_size=targets.size(0))   # not prog_bar: see steps.py
            self.log("lr", self.optimizers().param_groups[0]["lr"], batch_size=1)
        return loss

    def grad_norm(self) -> torch.Tensor:
        """The L2 norm of all gradients as the last backward left them (0-dim, on their device, not
        read back), computed once: the diagnostics log it and clipping scales by it."""
        if self._grad_norm is None:
            params = self._parameters_list if self._parameters_list is not None else self.parameters()
            self._grad_norm = global_grad_norm(params)
        return self._grad_norm

    def setup(self, stage: str) -> None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            destroy_at_exit()   # a DDP rank: its gloo group is not left to the interpreter's end

    def on_train_start(self) -> None:
        # what each step's norm and clipping walk, found once rather than by walking the modules
        self._parameters_list, self._clips_own_parameters = list(self.parameters()), None

    def on_after_backward(self) -> None:
        self._grad_norm = None     # new gradients

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        # 16-mixed: Lightning's plugin checks its gradient scaler's conditions; it clips.
        if not gradient_clip_val or str(self.trainer.precision) == "16-mixed":
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        # Else clipped here: Lightning's mixed-precision plugin refuses to clip for a fused optimizer
        # (which would unscale inside its step; bf16-mixed has no scaler, so clipping is exact),
        # and by norm with the norm the diagnostics computed (one norm per step, not two).
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if gradient_clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
            return
        if self._clips_own_parameters is None:
            self._clips_own_parameters = {id(p) for p in params} == {id(p) for p in self.parameters()}
        norm = self.grad_norm() if self._clips_own_parameters else global_grad_norm(params)
        torch.nn.utils.clip_grads_with_norm_(params, gradient_clip_val, norm)

    # -- evaluation --------------------------------------------------------------------------

    @property
    def split(self) -> str:
        """The evaluation under way: "test" in ``trainer.test``, else "val"."""
        return "test" if self.trainer.testing else "val"

    def on_train_end(self) -> None:
        self.check_finite()

    def on_validation_epoch_start(self) -> None:
        self.check_finite()   # before a checkpoint could keep the weights of a diverged run
        self.eval_totals = {"nll": TokenNLL().to(self.device)}
        self.evaluation_start(self.split)

    def validation_step(self, batch, batch_idx) -> None:
        if "keep" in batch and not batch["keep"].all():
            # padding repeats that give every DDP rank a batch: not part of the metrics
            batch = {k: v[batch["keep"]] for k, v in batch.items()}
            if batch["keep"].numel() == 0:
                return
        with self.attention_backends():
            self.eval_totals["nll"].update(*self.evaluate(self.split, batch))

    def on_validation_epoch_end(self) -> None:
        split = self.split
        nll, tokens = self.eval_totals["nll"].compute()          # summed over DDP ranks
        self.log(f"{split}_loss", nll / max(tokens, 1), batch_size=1)
        self.log(f"{split}_ppl", perplexity(nll, tokens), batch_size=1, prog_bar=True)
        self.evaluation_end(split)
        self.eval_totals = {}

    # testing runs the same evaluation; `split` tells the two apart
    on_test_epoch_start = on_validation_epoch_start
    test_step = validation_step
    on_test_epoch_end = on_validation_epoch_end
