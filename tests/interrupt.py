"""A callback for tests: the process sends itself a real SIGTERM after N optimizer steps."""

import os
import signal

from lightning.pytorch import Callback


class SigtermAfterSteps(Callback):
    def __init__(self, steps: int = 10):
        self.steps = steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.steps:
            os.kill(os.getpid(), signal.SIGTERM)


class SigkillAtFirstValidation(Callback):
    """kill -9 of the process at the end of its first validation: the validation row is in
    metrics.csv, the checkpoint (saved by ModelCheckpoint, which Lightning runs after every other
    callback) is not written yet — a run killed before its first checkpoint."""

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            os.kill(os.getpid(), signal.SIGKILL)
