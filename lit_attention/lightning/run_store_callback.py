"""The callback that keeps a run's summary.json, hypotheses and stop file in step with training."""

from __future__ import annotations

import contextlib
import shutil
import time

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_attention.data.tokenizers import tokenizer_digest
from lit_attention.lightning.budget import TrainingBudget
from lit_attention.lightning.checksum import ChecksummedCheckpointIO
from lit_attention.lightning.stop_point import inside_validation, signal_name
from lit_attention.models import sdpa_backends
from lit_attention.registry import FILES_TASK
from lit_attention.tracking import machine_speed, schema, sentence_stats
from lit_attention.tracking.identity import checkpoint_name, sha256
from lit_attention.tracking.liveness import process_identity
from lit_attention.tracking.provenance import code_fingerprint, machine
from lit_attention.tracking.run_store import RunDir, RunStoreLogger, atomic_write, git_commit, package_versions
from lit_attention.tracking.schema import (CONFIG, LAST_CHECKPOINT, Status, SummaryError, hyps_file, now_iso,
                                           refs_file, token_nll_file)


def _split(stage) -> str:
    """The summary's prefix of an evaluation stage (Lightning's "test" or "validate")."""
    return "test" if stage == "test" else "val"


def _loggers(trainer: Trainer, kind: type) -> list:
    return [logger for logger in trainer.loggers if isinstance(logger, kind)]


def _push_to_wandb(trainer: Trainer, summary: dict) -> None:
    """Mirror the run store's summary into the W&B run summary (so a W&B export groups the same)."""
    for logger in _loggers(trainer, WandbLogger):
        logger.experiment.summary.update(
            {k: v for k, v in summary.items() if k not in ("versions", "run_dir")})


class RunStoreCallback(Callback):
    # Seconds between two machine probes at epochs' ends: a probe after every short epoch costs a
    # visible share of a GPU run (docs/BENCHMARKS.md), and drift shows over hours.
    probe_every = 60.0

    def __init__(self, run_dir: RunDir, config_yaml: str, from_checkpoint: bool, identity: dict,
                 **labels):
        # labels: group, seed, name, tags, job_type: recorded with or without W&B
        self.run_dir, self.labels, self.from_checkpoint = run_dir, labels, from_checkpoint
        # the fields the run's claim adds (identity.Claim.record: uuid, takeovers, ...), filled
        # once the claim is taken (after the Trainer is built, before it runs)
        self.identity = identity
        self._evaluated: dict | None = None   # what validate/test evaluated (the `evaluated` field)
        self._checkpoint_run: str | None = None   # the uuid of the run a loaded checkpoint was trained by
        self.config_yaml = config_yaml
        self.stop: tuple[Status, str] | None = None   # what the run's STOP file asked for
        # Training time spans on_train_start..on_train_end (the window of Trainer(max_time)); a
        # resumed run starts from the time its checkpoint had already trained.
        self._trained_seconds = 0.0
        self._train_start: float | None = None
        self._machine_gflops: list[float] = []
        self._probed_at = 0.0

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # A resume takes the run over only once its checkpoint has loaded (on_fit_start): a
        # checkpoint that fails to load leaves a finished run's record as it was.
        if trainer.is_global_zero and not (stage == "fit" and self.from_checkpoint):
            self._take_over(trainer, stage)

    _set_up = False   # the run's record is this invocation's to write

    def _take_over(self, trainer: Trainer, stage: str) -> None:
        self._set_up = True
        self.run_dir.path.mkdir(parents=True, exist_ok=True)
        if stage == "fit" or not (self.run_dir.path / CONFIG).exists():
            atomic_write(self.run_dir.path / CONFIG, self.config_yaml)
        dm = trainer.datamodule
        task = getattr(dm, "task", None) or dm.hparams.get("task")
        if task == FILES_TASK:   # the data's directory (or file) names it
            task = getattr(dm, "data_dir", None) or getattr(dm, "path", None) or task
        fields = dict(run_id=self.run_dir.run_id, run_dir=str(self.run_dir.path), task=task,
                      git_commit=git_commit(), code_fingerprint=code_fingerprint(),
                      machine=machine(), versions=package_versions(),
                      world_size=trainer.world_size, **self.labels)
        afresh = stage == "fit" and not self.from_checkpoint
        summary = schema.Summary() if afresh else self.run_dir.read_summary()
        if stage != "fit" and summary.status is not None:
            # Evaluating a trained run: what trained it stays; the evaluation's code is its own field.
            fields = {k: v for k, v in fields.items() if summary.get(k) is None}
            fields[f"{_split(stage)}_git_commit"] = git_commit()
        fields.update(self.identity)
        if stage == "fit":
            fields.update(status=Status.RUNNING, error=None, started_at=now_iso(), process=process_identity(),
                          heartbeat_at=now_iso())
        if afresh:   # every step is logged anew
            for logger in _loggers(trainer, RunStoreLogger):
                logger.rewind(-1)
        if afresh and schema.summary_path(self.run_dir.path).exists():
            # A fit from scratch over an earlier record (one its claim let it replace: an attempt
            # stopped before its first checkpoint, or --run.overwrite) starts a new one: no output,
            # checkpoint or STOP of the old run is left to pass for the new one's.
            for name in (schema.CHECKPOINTS, schema.HYPS, schema.ATTENTION, schema.GRADFLOW, schema.STOP):
                old = self.run_dir.path / name
                shutil.rmtree(old) if old.is_dir() else old.unlink(missing_ok=True)
        # data pairs dropped per split and reason; each data file's lines, line ends, BOMs, ...
        for name, field in (("dropped", "data_dropped"), ("data_text", "data_text")):
            if getattr(dm, name, None):
                fields[field] = {**summary.get(field, {}), **getattr(dm, name)}
        if stage == "fit" and hasattr(dm, "tgt_tokenizer"):   # what `translate` checks
            fields["tokenizer_digest"] = tokenizer_digest({"src": dm.src_tokenizer, "tgt": dm.tgt_tokenizer})
        for logger in _loggers(trainer, WandbLogger):
            fields["wandb_run_id"] = logger.experiment.id
        schema.write_summary(self.run_dir.path, {**summary, **fields})

    def _elapsed(self) -> float:
        running = 0.0 if self._train_start is None else time.perf_counter() - self._train_start
        return self._trained_seconds + running

    def _probe_machine(self, trainer: Trainer) -> None:
        """The machine's speed now (machine_speed.py): at the start and end of training, and at an
        epoch's end ``probe_every`` seconds or more after the last probe."""
        if trainer.is_global_zero:
            self._machine_gflops.append(machine_speed.sustained_matmul_gflops())
            self._probed_at = time.perf_counter()

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._probe_machine(trainer)
        if trainer.is_global_zero:   # as asked (data.num_workers) or chosen by device
            self.run_dir.update_summary(loader_workers=getattr(trainer.train_dataloader, "num_workers", None))
        self._train_start = time.perf_counter()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if time.perf_counter() - self._probed_at >= self.probe_every:
            self._probe_machine(trainer)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._trained_seconds, self._train_start = self._elapsed(), None
        self._probe_machine(trainer)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict) -> None:
        checkpoint["run_store"] = {"uuid": self.identity.get("uuid"), "train_seconds": self._elapsed(),
                                   "train_tokens": getattr(pl_module, "train_tokens", 0),
                                   "machine_gflops": list(self._machine_gflops)}

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict) -> None:
        saved = checkpoint.get("run_store", {})
        if trainer.state.fn != "fit":
            self._checkpoint_run = saved.get("uuid")
            return
        self._trained_seconds = saved.get("train_seconds", 0.0)
        pl_module.train_tokens = saved.get("train_tokens", 0)
        self._machine_gflops = list(saved.get("machine_gflops", []))
        # Rows logged after this checkpoint (a run killed before its next one) are replayed now.
        # Lightning logs optimizer step n's metrics at step n - 1: a checkpoint after n steps
        # holds the rows up to step n - 1, and step n's row is the next step's, replayed.
        for logger in _loggers(trainer, RunStoreLogger):
            logger.rewind(checkpoint.get("global_step", 0) - 1)

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:
            if self.from_checkpoint:   # the resumed checkpoint has loaded
                self._take_over(trainer, "fit")
            backends = (sdpa_backends.describe(pl_module.device.type, str(trainer.precision))
                        if hasattr(pl_module, "attention_backends") else None)
            self.run_dir.update_summary(**pl_module.describe(), attention_backends=backends)

    def _record_eval(self, trainer: Trainer, pl_module: LightningModule, split: str) -> None:
        fields = {k: float(v) for k, v in trainer.callback_metrics.items()
                  if k.startswith(f"{split}_") and isinstance(v, (torch.Tensor, float, int))}
        if (hyps := getattr(pl_module, "hyps", {}).get(split)) is not None:
            self.run_dir.write_lines(hyps_file(split), hyps)
            self.run_dir.write_lines(refs_file(split), pl_module.refs[split])
            # Next to each split's metrics too: what decoded them and how sacreBLEU scored them.
            fields[f"{split}_decoding"] = getattr(pl_module, "last_decoding", None)
            for field in ("sacrebleu_signature", "chrf_signature"):
                fields[field] = fields[f"{split}_{field}"] = getattr(pl_module, field)
        if (losses := getattr(pl_module, "token_losses", {}).get(split)) is not None:
            self.run_dir.write_array(token_nll_file(split), losses)
        fields.update(getattr(pl_module, "eval_extras", {}).get(split, {}))
        if trainer.state.fn == "fit":   # a later `test` on the checkpoint keeps the training counts
            fields.update(steps=trainer.global_step, epochs=trainer.current_epoch, heartbeat_at=now_iso())
        else:
            fields[f"{split}_error"] = None     # an earlier failed evaluation of this split is superseded
            # The checkpoint evaluated (None: untrained weights, as asked): its path relative to
            # the runs root, its SHA-256, and the uuid of the run that trained it (null for a
            # checkpoint saved before checkpoints carried it).
            if self._evaluated is None and trainer.ckpt_path:
                self._evaluated = {
                    "checkpoint": checkpoint_name(trainer.ckpt_path, self.run_dir.path),
                    "sha256": sha256(trainer.ckpt_path), "run": self._checkpoint_run}
            fields["evaluated"] = self._evaluated
        self.run_dir.update_summary(**fields)

    def _write_sentence_stats(self, split: str) -> None:
        """The split's BLEU/chrF statistics per sentence, cached beside its hypotheses (once the
        last of them is written: at the end of fit for validation), so that a sweep's first report
        reads them instead of computing them, and a W&B run store carries them."""
        if (self.run_dir.path / hyps_file(split)).is_file():
            sentence_stats.load_or_compute(self.run_dir.path, split)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if trainer.is_global_zero:
            self._record_eval(trainer, pl_module, "val")
        if trainer.state.fn != "fit":
            return
        # The sweep driver asks a trial to stop by creating STOP; rank zero reads it, all ranks obey.
        stop = schema.stop_request(self.run_dir.path) if trainer.is_global_zero else None
        if stop := trainer.strategy.broadcast(stop, src=0):
            self.stop = stop
            trainer.should_stop = True

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:
            self._record_eval(trainer, pl_module, "test")
            self._write_sentence_stats("test")
            if self.run_dir.read_summary().status is None:   # an evaluation's own run
                self.run_dir.update_summary(status=Status.FINISHED, finished_at=now_iso())
            _push_to_wandb(trainer, self.run_dir.read_summary())

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        seconds = self._elapsed()
        # Exact token and FLOP counts (summed over ranks every step) come from the budget callback.
        budget = next(c for c in trainer.callbacks if isinstance(c, TrainingBudget))
        counts = budget.summary(trainer)
        status = Status.FINISHED
        if self.stop:
            status, reason = self.stop
            counts["stopped_by"] = f"STOP file: {reason}"
        best = trainer.checkpoint_callback.best_model_score if trainer.checkpoint_callback else None
        summary = self.run_dir.update_summary(
            status=status, finished_at=now_iso(), train_seconds=seconds, **counts,
            tokens_per_second=counts["train_tokens"] / seconds if seconds else None,
            steps=trainer.global_step, epochs=trainer.current_epoch,
            best_val_loss=float(best) if best is not None else None,
            **machine_speed.summarise(self._machine_gflops), **pl_module.describe())
        self._write_sentence_stats("val")
        _push_to_wandb(trainer, summary)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        interrupted = isinstance(exception, (KeyboardInterrupt, SIGTERMException))
        if (isinstance(exception, SIGTERMException) and trainer.state.fn == "fit"
                and not inside_validation(trainer)):
            # Lightning's stop after a whole training batch (stop_point.py): the checkpoint that
            # `fit ... --ckpt_path last` continues from exactly. Any other stop keeps the last one.
            trainer.save_checkpoint(self.run_dir.checkpoints / LAST_CHECKPOINT)
            io = trainer.strategy.checkpoint_io
            if isinstance(io, ChecksummedCheckpointIO):   # written before the record says "interrupted"
                io.flush()
        # A fit that failed before its setup (bad data, a resumed checkpoint that did not load)
        # writes no record: a new run leaves nothing, an existing one stays as it was.
        if trainer.is_global_zero:
            error = (f"interrupted ({signal_name(trainer, exception)})" if interrupted
                     else f"{type(exception).__name__}: {exception}")
            # full disk, unreadable summary: the original error matters
            with contextlib.suppress(OSError, SummaryError):
                if trainer.state.fn != "fit" and self.run_dir.read_summary().status is not None:
                    # a failed evaluation of a trained run: the training's status and counts stay
                    self.run_dir.update_summary(**{f"{_split(trainer.state.fn)}_error": error})
                elif self._set_up:
                    status = Status.INTERRUPTED if interrupted else Status.FAILED
                    self.run_dir.update_summary(status=status, finished_at=now_iso(), error=error,
                                                steps=trainer.global_step)
