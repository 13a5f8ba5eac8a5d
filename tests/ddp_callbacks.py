"""Callbacks a ddp_spawn test hands to its ranks (a spawned rank imports them by name, so they
live here, on sys.path, not in a test file)."""

import atexit
import pickle
from pathlib import Path

import torch.distributed as dist
from lightning.pytorch import Callback


class SaveHypotheses(Callback):
    """Rank zero pickles the module's hypotheses (split -> lines) at the end of validation."""

    def __init__(self, path: str):
        self.path = path

    def on_validation_end(self, trainer, module):
        if trainer.is_global_zero:
            Path(self.path).write_bytes(pickle.dumps(module.hyps))


class GroupAtExit(Callback):
    """Each rank writes, as its interpreter exits, whether its process group was still up then:
    `<dir>/<rank>` reads "up" or "destroyed". Registered at setup, before the module's own setup,
    so it runs after any exit handler the module registers (atexit runs them last in, first out)."""

    def __init__(self, directory: str):
        self.directory = directory

    def setup(self, trainer, module, stage):
        atexit.register(_write_group_state, Path(self.directory) / str(trainer.global_rank))


def _write_group_state(path: Path) -> None:
    path.write_text("up" if dist.is_initialized() else "destroyed")
