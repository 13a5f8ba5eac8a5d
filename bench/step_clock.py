"""Step timing for the bench scripts that run a Trainer, and the rate over a run's steps."""

from __future__ import annotations

import statistics
import sys
import time

import torch
from lightning.pytorch import Callback

from lit_attention.models.flops import batch_key


def clock() -> float:
    """CPU seconds of this process: on a shared machine wall time also counts other people's work,
    and an overhead is CPU work (run with one torch thread, so that this is the step's time)."""
    return time.process_time()


def clocks() -> tuple[float, float, float]:
    """Wall time, the calling thread's CPU time, this process's CPU time (seconds): the start of a
    span for ``cpu_span``."""
    return time.perf_counter(), time.thread_time(), time.process_time()


def cpu_span(began: tuple[float, float, float]) -> dict[str, float]:
    """Seconds since ``began`` (``clocks()``, taken in this thread) of wall time ("wall"), of this
    thread's CPU time ("main thread": the bench scripts call it from the training thread) and of
    the whole process's ("process")."""
    return dict(zip(("wall", "main thread", "process"), (b - a for a, b in zip(began, clocks()))))


def known_shapes(keys: list, warmup: int) -> list[bool]:
    """For each step after the first ``warmup`` (``keys``: each step's batch shape): whether its
    shape came before, i.e. the budget did not count its FLOPs anew (models/flops.py counts each
    new shape once)."""
    seen, known = set(keys[:warmup]), []
    for key in keys[warmup:]:
        known.append(key in seen)
        seen.add(key)
    return known


def steps_per_second(times: list[float], warmup: int, keys: list | None = None,
                     excluded: list[tuple[float, float]] = ()) -> float:
    """Steps after the first ``warmup`` over their time (``times[i]``: the clock at the end of step
    i), less the ``excluded`` (start, end) spans (validation). With ``keys`` (each step's batch
    shape): only the steps of a known shape (``known_shapes``)."""
    known = known_shapes(keys, warmup) if keys is not None else None
    steps = seconds = 0
    for i in range(warmup, len(times)):
        if known is not None and not known[i - warmup]:
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

    def now(self) -> float:
        """The clock of ``times``: CPU seconds, or in ``wall`` mode wall seconds with the device
        synchronized (a validation span then holds no training step's kernels, nor they its)."""
        if not self.wall:
            return clock()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_validation_start(self, trainer, pl_module):
        self.validating.append((self.now(), float("nan")))

    def on_validation_end(self, trainer, pl_module):
        self.validating[-1] = (self.validating[-1][0], self.now())

    def rate(self, warmup: int, seen_shapes_only: bool = False) -> float:
        return steps_per_second(self.times, warmup, self.keys if seen_shapes_only else None, self.validating)


class PairedPlainStep(Callback):
    """After each of `fit`'s training steps, one step of a plain loop on the same batch, timed
    apart (bench/fit_overhead.py): a copy of the model taken when training starts, with its own
    fused Adam, schedule, fused loss and clipping (benchlib.train_step).

    The two alternate step by step, so both see the same machine: measured as two separate runs,
    the plain loop's own rate moves across the rounds of one invocation by more than the
    difference of a few per cent measured. ``fit_spans[i]`` is `fit`'s step i, from the end of
    the plain step before it to this hook (its other callbacks, Lightning's loop, the next batch's
    fetch, the step itself), less any validation in between; ``plain_spans[i]`` the plain step."""

    last: "PairedPlainStep | None" = None

    def __init__(self, lr: float = 1e-3, warmup: int = 400):
        self.lr, self.warmup = lr, warmup
        self.fit_spans: list[float] = []
        self.plain_spans: list[float] = []
        self.keys: list = []
        self._mark = self._validating = self._validation_began = 0.0
        PairedPlainStep.last = self

    def on_train_start(self, trainer, pl_module):
        import copy

        import benchlib as B
        self._step = B.train_step
        self.net = copy.deepcopy(pl_module.net).train()
        self.opt, self.sched = B.adam_with_warmup(self.net.parameters(), self.lr, self.warmup)
        self._mark = clock()

    def on_validation_start(self, trainer, pl_module):
        self._validation_began = clock()

    def on_validation_end(self, trainer, pl_module):
        self._validating += clock() - self._validation_began

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = clock()
        self.fit_spans.append(now - self._mark - self._validating)
        self.keys.append(batch_key(batch))
        self._step(self.net, self.opt, self.sched, batch)
        self._mark, self._validating = clock(), 0.0
        self.plain_spans.append(self._mark - now)

    def median_extra_ms(self, warmup: int) -> float:
        """The median, over the steps of a known batch shape after the first ``warmup``, of the
        Trainer's step less the plain step, in ms."""
        extra = [f - p for known, f, p in zip(known_shapes(self.keys, warmup), self.fit_spans[warmup:],
                                              self.plain_spans[warmup:]) if known]
        return 1000 * statistics.median(extra)

    def ratio(self, warmup: int, seen_shapes_only: bool = False) -> float:
        """Plain time over `fit` time (= fit/plain steps/s) of the steps after the first ``warmup``;
        with ``seen_shapes_only`` only those of a known batch shape (``known_shapes``)."""
        fit = plain = 0.0
        for known, f, p in zip(known_shapes(self.keys, warmup), self.fit_spans[warmup:], self.plain_spans[warmup:]):
            if seen_shapes_only and not known:
                continue
            fit, plain = fit + f, plain + p
        return plain / fit if fit else float("nan")


class StepProfile(Callback):
    """Where `fit`'s wall time goes on a GPU, from step ``start`` to the last: each step's span
    inside the training step (batch start to batch end) and between steps (Lightning's loop, the
    next batch's fetch, validation and checkpoints at an epoch's end); the main thread's CPU time
    inside each step (what it did not spend on a CPU it waited: for the GIL, which other threads
    hold, or in a blocking call) and, over all those steps, the CPU time of the main thread and of
    the whole process (``cpu``); every call that made the host wait for the device
    (``torch.cuda.set_sync_debug_mode("warn")``), counted by the source line that made it; the
    validations' and the checkpoint saves' spans among them (an epoch's end); the Python threads
    alive and the GIL switch interval; with ``python_profile``, the Python profile (cProfile,
    which slows Python and so the spans) of those steps. ``StepProfile.last`` is the instance the
    CLI made."""

    last: "StepProfile | None" = None

    def __init__(self, start: int = 20, python_profile: bool = False):
        import collections
        self.start, self.python_profile = start, python_profile
        self.inside: list[float] = []      # per step from `start`: seconds in the step
        self.inside_cpu: list[float] = []  # ... of them on a CPU, in the main thread
        self.between: list[float] = []     # ... and since the end of the step before
        # from `start` to the end: seconds of wall time, of the main thread's and the process's CPU time
        self.cpu: dict[str, float] = {}
        self.threads: list[str] = []       # the Python threads alive at `start`, by name
        self.switch_interval = 0.0         # ... and the GIL switch interval then (seconds)
        self.syncs: collections.Counter = collections.Counter()
        self.validations: list[float] = []  # seconds of each validation after `start`
        self.saves: list[float] = []        # ... and of each checkpoint save
        # per epoch's end (the span before an epoch's first step): (seconds, of them validating, saving)
        self.epoch_ends: list[tuple[float, float, float]] = []
        self._validating = self._saving = 0.0   # since the last step's end
        self.profile = None
        self.active = False
        self._began = self._ended = self._began_cpu = 0.0
        self._clocks = (0.0, 0.0, 0.0)
        self._warnings = None
        StepProfile.last = self

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._began, self._began_cpu = time.perf_counter(), time.thread_time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now, now_cpu = time.perf_counter(), time.thread_time()
        step = trainer.global_step
        if self.active:
            self.inside.append(now - self._began)
            self.inside_cpu.append(now_cpu - self._began_cpu)
            self.between.append(self._began - self._ended)
            if batch_idx == 0:
                self.epoch_ends.append((self._began - self._ended, self._validating, self._saving))
        self._validating = self._saving = 0.0
        if step == self.start:
            self._begin()
            self._time_saves(trainer)
        elif step >= trainer.max_steps and self.active:
            self._end()
        self._ended = time.perf_counter()

    def on_validation_start(self, trainer, pl_module):
        self._validation_began = time.perf_counter()

    def on_validation_end(self, trainer, pl_module):
        if self.active:
            self.validations.append(time.perf_counter() - self._validation_began)
            self._validating += self.validations[-1]

    def longest(self, k: int) -> str:
        """The ``k`` longest steps (inside + between), as 'index: ms inside+ms between', longest first."""
        worst = sorted(range(len(self.inside)), key=lambda i: -(self.inside[i] + self.between[i]))[:k]
        return ", ".join(f"{i}: {1000 * self.inside[i]:.0f}+{1000 * self.between[i]:.0f}" for i in worst)

    def _time_saves(self, trainer) -> None:
        io = trainer.strategy.checkpoint_io
        save = io.save_checkpoint

        def timed(*args, **kwargs):
            began = time.perf_counter()
            save(*args, **kwargs)
            if self.active:
                self.saves.append(time.perf_counter() - began)
                self._saving += self.saves[-1]
        io.save_checkpoint = timed

    def _begin(self) -> None:
        import cProfile
        import threading
        import warnings
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.synchronize()
        self.threads = sorted(thread.name for thread in threading.enumerate())
        self.switch_interval = sys.getswitchinterval()
        self._clocks = clocks()
        self._warnings = warnings.catch_warnings(record=True)
        self._records = self._warnings.__enter__()
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        self.active = True
        if self.python_profile:
            self.profile = cProfile.Profile()
            self.profile.enable()

    def _end(self) -> None:
        self.active = False
        if self.profile is not None:
            self.profile.disable()
        if torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
        self.cpu = cpu_span(self._clocks)
        self._warnings.__exit__(None, None, None)
        for record in self._records:
            if "synchroniz" in str(record.message):
                self.syncs[f"{record.filename}:{record.lineno}"] += 1
