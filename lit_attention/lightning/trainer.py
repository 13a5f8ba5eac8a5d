"""Lightning's Trainer, with the batch limits read as the user wrote them, and the one home of the
checks of trainer values: those Lightning would take without acting on them as written
(refuse_trainer_values, at parse time) and those it makes against the data only once a stage
runs (Trainer.plan, before anything is written).

Lightning types ``limit_*_batches`` as ``float | int``: an int counts batches, a float is a share of
the epoch. A command-line parser tries the types in that order, so ``limit_train_batches: 1`` (one
batch) arrived as ``1.0`` (the whole epoch). Here int comes first: ``1`` stays one batch and
``1.0`` or ``0.25`` stay shares.
"""

from __future__ import annotations

import math

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
        if datamodule is None:
            return {}
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


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Trainer values Lightning takes without acting on them as written: a negative clipping norm
# scales every gradient by a negative factor (the model climbs its loss), an interval of 0 divides
# by zero once training has started, a negative minimum or logging interval is read as none.
# key -> (whether a number passes, what it must be); None (Lightning's default) always passes.
TRAINER_VALUES = {
    "gradient_clip_val": (lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0 (0: no clipping)"),
    "accumulate_grad_batches": (lambda v: v >= 1, "an integer >= 1"),
    "check_val_every_n_epoch": (lambda v: v >= 1, "an integer >= 1 (or null: validate by "
                                                  "trainer.val_check_interval alone)"),
    "val_check_interval": (lambda v: v > 0, "> 0: a number of training batches, or a fraction of "
                                            "the epoch in (0, 1]"),
    "log_every_n_steps": (lambda v: v >= 0, "an integer >= 0 (0: no per-step logging)"),
    "min_epochs": (lambda v: v >= 0, "an integer >= 0"),
    "min_steps": (lambda v: v >= 0, "an integer >= 0"),
    "num_sanity_val_steps": (lambda v: v >= -1, "an integer >= -1 (-1: every validation batch)"),
}


def refuse_trainer_values(trainer) -> None:
    """Stop (ConfigError) at a trainer limit of 0 (max_epochs, max_steps, limit_train_batches):
    `fit` would stop before its first step and call the untrained run finished; and at a value of
    TRAINER_VALUES that Lightning would take without acting on it as written."""
    for key in ("max_epochs", "max_steps", "limit_train_batches"):
        if trainer.get(key) == 0:
            raise ConfigError(f"invalid value for trainer.{key}: 0 trains nothing (a run is finished "
                              f"once it has trained); give a positive number")
    if trainer.get("fast_dev_run"):
        raise ConfigError(f"invalid value for trainer.fast_dev_run: {trainer.get('fast_dev_run')}: Lightning then "
                          "turns off the run store's logger and the checkpoints, and the run would be recorded "
                          "as a finished run beside real ones; for a smoke test give --trainer.max_steps 1 "
                          "--trainer.limit_val_batches 1 (and a --run.group of its own)")
    seconds = duration_seconds(trainer.get("max_time"))
    if seconds is not None and seconds <= 0:
        raise ConfigError(f"invalid value for trainer.max_time: {trainer.get('max_time')} trains nothing (a run "
                          f"is finished once it has trained); give a positive duration, DD:HH:MM:SS")
    for key, (passes, rule) in TRAINER_VALUES.items():
        value = trainer.get(key)
        if is_number(value) and not passes(value):
            raise ConfigError(f"invalid value for trainer.{key}: {value}: it must be {rule}")
    accelerator = trainer.get("accelerator")
    if isinstance(accelerator, str) and (why := accelerator_unusable(accelerator)):
        raise ConfigError(f"invalid value for trainer.accelerator: {accelerator}: {why}")


def accelerator_unusable(name: str) -> str | None:
    """Why Lightning's Trainer would refuse accelerator ``name`` on this machine, or None. Asked
    here so that a sweep refuses it before its first trial (as it did not: every trial failed)."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    if name in ("auto", "gpu"):     # Lightning's own choice; gpu: whichever GPU kind is here
        return None if name == "auto" or any(
            AcceleratorRegistry[k]["accelerator"].is_available() for k in ("cuda", "mps")) else "no GPU here"
    if name not in AcceleratorRegistry:
        return f"not an accelerator name ({', '.join(sorted({'auto', 'gpu', *AcceleratorRegistry}))})"
    return None if AcceleratorRegistry[name]["accelerator"].is_available() else f"no {name} device here"


def duration_seconds(value) -> float | None:
    """Seconds of a Trainer ``max_time`` ("DD:HH:MM:SS", {"hours": 2}, a timedelta), or None
    (none given, or a form Lightning itself will refuse)."""
    import datetime
    try:
        if isinstance(value, str):
            days, hours, minutes, seconds = map(int, value.split(":"))
            value = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        elif isinstance(value, dict):
            value = datetime.timedelta(**value)
    except (ValueError, TypeError):
        return None
    return value.total_seconds() if isinstance(value, datetime.timedelta) else None
