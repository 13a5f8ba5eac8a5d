"""Callbacks a ddp_spawn test hands to its ranks (a spawned rank imports them by name, so they
live here, on sys.path, not in a test file)."""

import pickle
from pathlib import Path

from lightning.pytorch import Callback


class SaveHypotheses(Callback):
    """Rank zero pickles the module's hypotheses (split -> lines) at the end of validation."""

    def __init__(self, path: str):
        self.path = path

    def on_validation_end(self, trainer, module):
        if trainer.is_global_zero:
            Path(self.path).write_bytes(pickle.dumps(module.hyps))
