"""Ctrl-C and SIGTERM stop `fit` where its checkpoint can be continued exactly.

Lightning resumes faithfully only from a few points of its loops: after a whole training batch
(where it acts on SIGTERM itself) or after a whole validation. A KeyboardInterrupt lands anywhere:
in the middle of a batch, the checkpoint then holds a data loader one batch ahead of the loop, and
the continued run trains a step less; in a validation, the continued run skips that validation
(that epoch has no validation row and is no candidate for the best checkpoint) or finishes it from
the middle (its loss then covers part of the validation set).

So while `fit` trains, SIGINT and SIGTERM are taken here. The first one is handed to Lightning's
SIGTERM handling, which stops after the running training batch; one that comes during a
validation waits until training goes on (the next training batch) or ends, so the validation
is logged and ModelCheckpoint has seen it. Training that ends before the stop is carried out
simply finishes. The run store callback then leaves the checkpoint that `--ckpt_path last`
continues from, and the CLI reports the signal that was sent (`requested`).

A second Ctrl-C acts at once, as it would without this callback. No checkpoint is written for
such a stop (see RunStoreCallback.on_exception): the run continues from its last one.
"""

from __future__ import annotations

import signal
import sys
import threading

from lightning.pytorch import Callback, LightningModule, Trainer

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def inside_validation(trainer: Trainer) -> bool:
    """Is `fit` in a validation (or its sanity check), where no resumable checkpoint can be taken?"""
    return trainer.state.fn == "fit" and (trainer.validating or trainer.sanity_checking)


def signal_name(trainer: Trainer, exception: BaseException) -> str:
    """What interrupted the run, as the CLI says it: `Ctrl-C` or `SIGTERM`."""
    # the signal that stopped this trainer at a clean point, if one did
    signum = next((c.requested for c in trainer.callbacks if isinstance(c, StopAtCleanPoint)), None)
    if signum is None:
        signum = signal.SIGINT if isinstance(exception, KeyboardInterrupt) else signal.SIGTERM
    return "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"


class StopAtCleanPoint(Callback):
    def __init__(self):
        self._previous: dict[int, object] = {}   # the handlers replaced while training
        self.requested: int | None = None        # the first signal received while training
        self._waiting = False                    # it waits for a validation to end
        self._validating = False
        self._says = True                        # rank 0 prints what it does with a signal

    def _receive(self, signum: int, frame) -> None:
        if self.requested is not None:
            # A second Ctrl-C acts now, as without this callback. Other repeats are dropped: the
            # stop is under way, and Lightning's DDP launcher passes the first one on as SIGTERM
            # to ranks that have their own already.
            if signum == signal.SIGINT == self.requested:
                self._restore()
                signal.raise_signal(signum)
            return
        self.requested = signum
        if self._validating:
            self._waiting = True
            if self._says:
                print(f"lit-attention: {signal.Signals(signum).name}: the run stops when this validation ends "
                      "(Ctrl-C again stops now, from the last checkpoint)", file=sys.stderr, flush=True)
        else:
            self._hand_to_lightning()

    def _hand_to_lightning(self) -> None:
        """Lightning's SIGTERM handling: the loop stops after the running training batch."""
        self._waiting = False
        handler = self._previous.get(signal.SIGTERM)
        if callable(handler):
            handler(signal.SIGTERM, None)
        else:   # Lightning installed no handler: the signal acts as it would without this callback
            self._restore()
            signal.raise_signal(self.requested)

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._says = trainer.is_global_zero
        self.requested, self._waiting = None, False
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._receive)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._validating = trainer.state.fn == "fit" and not trainer.sanity_checking

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._validating = False   # what waits is handed on at the next training batch

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        if self._waiting:
            self._hand_to_lightning()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._waiting and self._says:
            print(f"lit-attention: {signal.Signals(self.requested).name} came during the last validation: "
                  "training had ended, so the run finishes", file=sys.stderr, flush=True)
        self._restore()
        self.requested, self._waiting = None, False

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._restore()

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._restore()
