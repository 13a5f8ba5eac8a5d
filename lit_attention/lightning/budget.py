"""Training budgets: stop at the first optimizer step that uses up a step, token or FLOP budget.

``--budget.steps N``, ``--budget.tokens N``, ``--budget.flops X``, alone or together (the first one
used up stops training). The check runs after every optimizer step on counts summed over DDP
ranks, so every rank stops at the same step, and Lightning validates that last step as it does
for any callback that stops training. A step budget also becomes ``trainer.max_steps``, which
learning-rate schedules read. What was used is kept in the checkpoint: a run continued with
``--ckpt_path last`` counts on from there.

Tokens are the module's ``train_tokens`` (target tokens, padding excluded); FLOPs are
``models.flops.TrainingFlopCounter``'s forward + backward matrix products. Both are counted
whether or not a budget is set, so every run records them (``train_tokens``, ``train_flops`` in
summary.json, with ``stopped_by`` and, under a budget, ``budget_reached``).

Both counts are host integers (tokens counted on the CPU batch, see base.py; FLOPs cached by batch
shape): on one device no step reads anything back from it. Under DDP the per-step sum over ranks
is one collective of two integers.

The FLOP count of a step spans on_train_batch_start .. on_before_optimizer_step: this callback
must come before the diagnostics callback, whose gradient-flow probe is not training.
"""

from __future__ import annotations

import sys

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import Timer

from lit_attention.models.flops import TrainingFlopCounter, batch_key


def step_limit(budget_steps: int, max_steps: int | None) -> int:
    """trainer.max_steps under a step budget; a different max_steps beside it is a config error."""
    if max_steps not in (None, -1, budget_steps):
        raise ValueError(f"--budget.steps {budget_steps} and --trainer.max_steps {max_steps} "
                         "disagree: give one of them")
    return budget_steps


class TrainingBudget(Callback):
    """Counts training tokens and FLOPs every step and stops at the first budget used up."""

    def __init__(self, steps: int | None = None, tokens: int | None = None,
                 flops: float | None = None):
        self.budget = {"steps": steps, "tokens": tokens, "flops": flops}
        self.asked = {name: value for name, value in self.budget.items() if value is not None}
        for name, value in self.asked.items():
            if value <= 0:
                raise ValueError(f"--budget.{name} must be positive, got {value}")
        self.used = {"tokens": 0, "flops": 0}        # summed over ranks, carried in the checkpoint
        self.stopped_by: str | None = None
        self._counter: TrainingFlopCounter | None = None
        self._pending = [0, 0]                        # this rank's tokens, FLOPs since the last step
        self._tokens_before = 0
        self._step = 0

    # -- checkpoint --------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return dict(self.used)

    def load_state_dict(self, state: dict) -> None:
        self.used = {"tokens": int(state["tokens"]), "flops": int(state["flops"])}

    # -- counting ----------------------------------------------------------------------------

    def _used(self, name: str, trainer: Trainer) -> int:
        return trainer.global_step if name == "steps" else self.used[name]

    def _reached(self, trainer: Trainer) -> list[str]:
        return [name for name, value in self.asked.items() if self._used(name, trainer) >= value]

    def _stop_if_reached(self, trainer: Trainer) -> None:
        if reached := self._reached(trainer):
            self.stopped_by = f"budget.{reached[0]}"
            trainer.should_stop = True

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.budget["tokens"] is not None and not hasattr(pl_module, "train_tokens"):
            raise ValueError(f"--budget.tokens: {type(pl_module).__name__} does not count training tokens")
        self._counter = TrainingFlopCounter(pl_module)
        self._step = trainer.global_step
        self._stop_if_reached(trainer)   # a resumed run that had used its budget up already

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        self._tokens_before = getattr(pl_module, "train_tokens", 0)
        self._counter.start(batch_key(batch))

    def _stop_counting(self) -> None:
        if self._counter is not None and self._counter.counting:
            self._pending[1] += self._counter.stop()

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer) -> None:
        self._stop_counting()   # forward and backward are done; what follows is not counted

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        self._stop_counting()
        self._pending[0] += getattr(pl_module, "train_tokens", 0) - self._tokens_before
        if trainer.global_step == self._step:
            return   # no optimizer step yet (gradient accumulation)
        self._step = trainer.global_step
        if trainer.world_size > 1:   # a collective every step: every rank must stop at the same one
            step = torch.tensor(self._pending, dtype=torch.int64, device=pl_module.device)
            tokens, flops = trainer.strategy.reduce(step, reduce_op="sum").tolist()
        else:                        # host counts: nothing goes to the device and back
            tokens, flops = self._pending
        self.used["tokens"] += tokens
        self.used["flops"] += flops
        self._pending = [0, 0]
        self._stop_if_reached(trainer)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self._counter is not None:
            self._counter.cancel()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._counter is not None:
            self._counter.remove()
            self._counter = None

    # -- what the run store records ----------------------------------------------------------

    def other_limit(self, trainer: Trainer) -> str:
        """The limit that ended training when no budget did."""
        if trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps:
            return "max_steps"
        timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
        if timer is not None and (timer.time_remaining("train") or 0) <= 0:
            return "max_time"
        if trainer.max_epochs not in (None, -1) and trainer.current_epoch >= trainer.max_epochs:
            return "max_epochs"
        return "should_stop" if trainer.should_stop else "end of data"

    def summary(self, trainer: Trainer) -> dict:
        """summary.json fields: tokens and FLOPs used, the budget asked for, what ended training."""
        return {"train_tokens": self.used["tokens"], "train_flops": self.used["flops"],
                "stopped_by": self.stopped_by or self.other_limit(trainer),
                "budget_reached": bool(self._reached(trainer)) if self.asked else None,
                **{f"budget_{name}": value for name, value in self.budget.items()}}

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero and self.asked and not self._reached(trainer):
            used = ", ".join(f"{name} {self._used(name, trainer):.4g} of {value:.4g}"
                             for name, value in self.asked.items())
            print(f"warning: training ended by {self.other_limit(trainer)} before its budget was used "
                  f"up ({used}): this run is not budget-matched", file=sys.stderr)
