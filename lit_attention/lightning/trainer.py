"""Lightning's Trainer, with the batch limits read as the user wrote them.

Lightning types ``limit_*_batches`` as ``float | int``: an int counts batches, a float is a share of
the epoch. A command-line parser tries the types in that order, so ``limit_train_batches: 1`` (one
batch) arrived as ``1.0`` (the whole epoch). Here int comes first: ``1`` stays one batch and
``1.0`` or ``0.25`` stay shares.
"""

from __future__ import annotations

import lightning.pytorch as L
from lightning.pytorch.plugins.io import CheckpointIO

from lit_attention.lightning.checksum import ChecksummedCheckpointIO


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
