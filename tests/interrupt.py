"""Callbacks for tests: the process sends itself a real signal at a chosen point of training."""

import os
import signal

from lightning.pytorch import Callback


class SignalAfterSteps(Callback):
    """A real signal (SIGINT is Ctrl-C; SIGTERM a session's end) after N optimizer steps."""

    def __init__(self, steps: int = 10, signal_name: str = "SIGTERM"):
        self.steps = steps
        self.signum = signal.Signals[signal_name]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.steps:
            os.kill(os.getpid(), self.signum)


class SigkillAtFirstValidation(Callback):
    """kill -9 of the process at the end of its first validation: the validation row is in
    metrics.csv, the checkpoint (saved by ModelCheckpoint, which Lightning runs after every other
    callback) is not written yet — a run killed before its first checkpoint."""

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            os.kill(os.getpid(), signal.SIGKILL)


class SignalDuringValidation(Callback):
    """A real signal (SIGINT is Ctrl-C; SIGTERM a session's end) in the middle of the validation
    that ends epoch `epoch`, after each of its first `times` batches."""

    def __init__(self, signal_name: str = "SIGINT", epoch: int = 1, times: int = 1):
        self.signum = signal.Signals[signal_name]
        self.epoch, self.times = epoch, times

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking and trainer.current_epoch == self.epoch and batch_idx < self.times:
            os.kill(os.getpid(), self.signum)
