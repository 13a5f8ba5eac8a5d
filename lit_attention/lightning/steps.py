"""Small questions a LightningModule asks about its Trainer: is there one, and is this step logged.

Lightning's logger writes on-step values only every `log_every_n_steps` optimizer steps, yet each
`self.log` call costs about a millisecond of Python (it walks the stored metric to move it to the
value's device): on a small model's CPU step, four such calls a step are a noticeable share of
training time, spent on values that are then dropped.

A value logged with ``prog_bar=True`` is read back from its device after every later step
(Lightning converts the progress-bar metrics to numbers at each batch end), and on a GPU a read
waits for all the work queued so far. So ``train_loss`` goes to the loggers only, and the
progress bar (``progress_bar``) is redrawn at the logging interval, showing the last logged
``train_loss`` itself.
"""

from __future__ import annotations

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar


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


class IntervalProgressBar(TQDMProgressBar):
    """Lightning's progress bar, with the last logged ``train_loss`` read when it is redrawn."""

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        loss = trainer.logged_metrics.get("train_loss")
        if loss is not None:
            metrics["train_loss"] = f"{float(loss):.3g}"
        return metrics


def progress_bar(trainer_config: dict) -> IntervalProgressBar | None:
    """A progress bar redrawn every ``log_every_n_steps`` steps, for Trainer(**trainer_config); None
    where it has none or brings its own."""
    given = trainer_config.get("callbacks") or []
    if trainer_config.get("enable_progress_bar") is False or any(
            isinstance(c, ProgressBar) for c in (given if isinstance(given, list) else [given])):
        return None
    return IntervalProgressBar(refresh_rate=max(int(trainer_config.get("log_every_n_steps") or 1), 1))
