"""Small questions a LightningModule asks about its Trainer: is there one, and is this step logged.

Lightning's logger writes on-step values only every `log_every_n_steps` optimizer steps, yet each
`self.log` call costs about a millisecond of Python (it walks the stored metric to move it to the
value's device). On a 40 ms CPU step, four such calls a step were ~10 % of training time, spent on
values that were then dropped.
"""

from __future__ import annotations

from lightning.pytorch import LightningModule, Trainer


def attached_trainer(module: LightningModule) -> Trainer | None:
    """The module's Trainer, or None when it has none (built by hand, in a test, for a benchmark)."""
    try:
        return module.trainer                      # public property; raises when detached
    except RuntimeError:
        return None


def attached_datamodule(module: LightningModule):
    """The Trainer's data module, or None."""
    return getattr(attached_trainer(module), "datamodule", None)


def logs_this_step(module: LightningModule) -> bool:
    """True on the training steps whose on-step values the logger writes (same rule as Lightning)."""
    trainer = attached_trainer(module)
    if trainer is None:
        return True
    n = trainer.log_every_n_steps
    return n > 0 and (trainer.global_step + 1) % n == 0
