"""Step timing for the bench scripts that run a Trainer, and the rate over a run's steps."""

from __future__ import annotations

import time

import torch
from lightning.pytorch import Callback

from lit_attention.models.flops import batch_key


def clock() -> float:
    """CPU seconds of this process: on a shared machine wall time also counts other people's work,
    and an overhead is CPU work (run with one torch thread, so that this is the step's time)."""
    return time.process_time()


def steps_per_second(times: list[float], warmup: int, keys: list | None = None,
                     excluded: list[tuple[float, float]] = ()) -> float:
    """Steps after the first ``warmup`` over their time (``times[i]``: the clock at the end of step
    i), less the ``excluded`` (start, end) spans (validation). With ``keys`` (each step's batch
    shape): only the steps whose shape came before, i.e. those whose FLOPs the budget did not
    count anew (models/flops.py counts each new shape once)."""
    seen = set(keys[:warmup]) if keys else set()
    steps = seconds = 0
    for i in range(warmup, len(times)):
        if keys is not None:
            first = keys[i] not in seen
            seen.add(keys[i])
            if first:
                continue
        span = times[i] - times[i - 1] - sum(b - a for a, b in excluded if times[i - 1] <= a and b <= times[i])
        steps, seconds = steps + 1, seconds + span
    return steps / seconds if seconds else float("nan")


class StepClock(Callback):
    """The clock at the end of every training batch, each batch's shape, and the spans spent
    validating. ``StepClock.last`` is the instance the CLI made (it builds callbacks from their
    class path)."""

    last: "StepClock | None" = None
    # On a GPU (bench/gpu_throughput.py): wall time, the device synchronized at the end of step
    # ``wall_sync_at`` and of the last step, so that the span between them is the device's too.
    wall, wall_sync_at = False, 0

    def __init__(self):
        self.times: list[float] = []
        self.keys: list = []
        self.validating: list[tuple[float, float]] = []
        StepClock.last = self

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.keys.append(batch_key(batch))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if not self.wall:
            self.times.append(clock())
            return
        if len(self.times) + 1 in (self.wall_sync_at, trainer.max_steps) and torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())

    def on_validation_start(self, trainer, pl_module):
        self.validating.append((clock(), float("nan")))

    def on_validation_end(self, trainer, pl_module):
        self.validating[-1] = (self.validating[-1][0], clock())

    def rate(self, warmup: int, seen_shapes_only: bool = False) -> float:
        return steps_per_second(self.times, warmup, self.keys if seen_shapes_only else None, self.validating)
