"""Lightning's Trainer, with the batch limits read as the user wrote them and the checks Lightning
makes of them against the data made before anything is written.

Lightning types ``limit_*_batches`` as ``float | int``: an int counts batches, a float is a share of
the epoch. A command-line parser tries the types in that order, so ``limit_train_batches: 1`` (one
batch) arrived as ``1.0`` (the whole epoch). Here int comes first: ``1`` stays one batch and
``1.0`` or ``0.25`` stay shares.
"""

from __future__ import annotations

import lightning.pytorch as L
from lightning.pytorch.plugins.io import CheckpointIO

from lit_attention.config_check import ConfigError
from lit_attention.lightning.checksum import ChecksummedCheckpointIO

# The loaders each subcommand reads, by the name of their limit (limit_<split>_batches)
SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}


class Trainer(L.Trainer):
    def __init__(self, *, limit_train_batches: int | float | None = None,
                 limit_val_batches: int | float | None = None,
                 limit_test_batches: int | float | None = None,
                 limit_predict_batches: int | float | None = None, **kwargs):
        plugins = kwargs.pop("plugins", None) or []
        plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
        if not any(isinstance(p, CheckpointIO) for p in plugins):   # checksummed checkpoints (checksum.py)
            plugins.append(ChecksummedCheckpointIO())
        kwargs["plugins"] = plugins
        super().__init__(limit_train_batches=limit_train_batches, limit_val_batches=limit_val_batches,
                         limit_test_batches=limit_test_batches,
                         limit_predict_batches=limit_predict_batches, **kwargs)

    def plan(self, datamodule, stage: str) -> dict[str, int]:
        """The batches of each split ``stage`` reads (per process), the data set up for it; raises
        ConfigError at a limit Lightning refuses only once the stage runs (after the run's record
        is started): a share of the batches that rounds to none, a validation interval longer
        than the epoch. A split of unknown length is not counted."""
        datamodule.trainer = self   # (Lightning attaches it again when the stage starts)
        datamodule.setup(stage)
        batches = {}
        for split in SPLITS[stage]:
            try:
                n = len(getattr(datamodule, f"{split}_dataloader")())
            except TypeError:   # an iterable of no length
                continue
            limit = getattr(self, f"limit_{split}_batches")
            if isinstance(limit, float) and limit > 0 and n and int(n * limit) == 0:
                raise ConfigError(f"invalid value for trainer.limit_{split}_batches: {limit} of the {n} {split} "
                                  f"batches is none: give at least {1 / n:.3g}, or a number of batches (an integer)")
            batches[split] = min(n, limit) if isinstance(limit, int) else int(n * limit)
        interval, train = self.val_check_interval, batches.get("train")
        if (isinstance(interval, int) and train is not None and interval > train
                and self.check_val_every_n_epoch is not None and self.limit_val_batches > 0):
            raise ConfigError(f"invalid value for trainer.val_check_interval: {interval}: an epoch has {train} "
                              f"training batches here; give at most {train}, a share of the epoch (a float in "
                              f"(0, 1]), or also --trainer.check_val_every_n_epoch null to count batches "
                              f"across epochs")
        return batches
