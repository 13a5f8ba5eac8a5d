"""The training CLI, `lit-attention fit|validate|test`: LightningCLI with the run options, the
checks that refuse a request that would be ignored, and the run store every run lands in
(`<run.root>/<run.group>/<run.id>/`) whatever the tracking choice. lit_attention/cli.py
dispatches to `train`; the sweep driver checks trials' arguments with `check_training_args`.
"""

from __future__ import annotations

import errno
import inspect
import os
import pickle
import re
import shutil
import sys
import traceback
import warnings
from argparse import ArgumentError
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import torch
import yaml
from jsonargparse import Namespace, get_loader, set_loader
from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_attention import registry
from lit_attention.config_check import SEED_RANGE, ConfigError
from lit_attention.data.text import DataError
from lit_attention.files import FileError, check_writable, read_yaml
from lit_attention.lightning.budget import TrainingBudget, step_limit
from lit_attention.lightning.parse_errors import class_at, first_lines, short_parse_error
from lit_attention.lightning.steps import progress_bar
from lit_attention.lightning.checksum import ChecksumError
from lit_attention.lightning.stop_point import StopAtCleanPoint, signal_name
from lit_attention.lightning.diagnostics import DiagnosticsCallback
from lit_attention.lightning.trainer import Trainer, is_number, refuse_trainer_values
from lit_attention.lightning.trainer import accelerator_unusable  # noqa: F401 (the sweep asks it here)
from lit_attention.lightning.run_store_callback import RunStoreCallback
from lit_attention.lightning.translation import DECODING_HPARAMS
from lit_attention.threads import use_allowed_cores
from lit_attention.tracking import identity
from lit_attention.tracking.run_store import RunDir, RunStoreLogger
from lit_attention.tracking.machine_speed import cpu_flags, cpu_has_native_bf16, default_precision
from lit_attention.tracking.schema import BEST_CHECKPOINT, LAST_CHECKPOINT, Status
from lit_attention.tracking.wandb import finish

STRICT_YAML = "strict_yaml"   # jsonargparse's parser mode that reads YAML through files.read_yaml


def _load_strict(value: str, path: str = "", _yaml=get_loader("yaml")):
    """jsonargparse's YAML loader behind files.read_yaml. What the reader refuses stops the command
    (ConfigError is no loader exception: jsonargparse passes it on), except a command-line value
    that is no YAML at all: jsonargparse reads that one as a string."""
    try:
        read_yaml(value, path or "(value)", mapping=bool(path))
    except FileError as exc:
        if exc.key == "(yaml)" and not path:
            raise yaml.YAMLError(str(exc)) from None
        raise
    return _yaml(value)


set_loader(STRICT_YAML, _load_strict, (yaml.YAMLError,))
# Options are never abbreviated: `--trainer.max_epoch` is a typo, not `--trainer.max_epochs`.
PARSER_KWARGS = {"exit_on_error": False, "allow_abbrev": False, "parser_mode": STRICT_YAML,
                 **{c: {"allow_abbrev": False, "parser_mode": STRICT_YAML} for c in LightningCLI.subcommands()}}
# log_every_n_steps: Lightning's own default. Each logged value costs a Lightning `self.log` call
# and a read from the device (bench/fit_overhead.py measures the share of a step).
TRAINER_DEFAULTS = {"use_distributed_sampler": False, "gradient_clip_val": 1.0, "log_every_n_steps": 50,
                    # token batches are re-bucketed each epoch, so their count varies
                    "reload_dataloaders_every_n_epochs": 1}


@dataclass
class RunOptions:
    """Where the run is stored and how it is named.

    Args:
        root: run store root directory.
        group: group (study) the run belongs to.
        id: run id; default: a new one (or, with ``--ckpt_path last``, the newest run of the group).
        name: display name (summary.json's ``name``, and W&B's); default: the run id.
        tags: comma-separated tags (summary.json's ``tags``, and W&B's).
        job_type: job type (summary.json's ``job_type``, and W&B's).
        project: W&B project (only with ``--tracking wandb``).
        overwrite: fit: train afresh over an existing trained run (recorded as ``overwritten``).
        untrained: validate/test: evaluate untrained weights, without --ckpt_path (recorded).
    """
    root: str = "runs"
    group: str = "default"
    id: Optional[str] = None
    name: Optional[str] = None
    tags: str = ""
    job_type: str = "train"
    project: str = "lit-attention"
    overwrite: bool = False
    untrained: bool = False


@dataclass
class DiagnosticsOptions:
    """Gradient and attention diagnostics (0 turns one off).

    Args:
        module_norm_every: log per-module gradient norms every N steps.
        module_depth: module path depth of those norms (2: encoder.layers.0; 0: the whole model).
        gradflow_every: measure gradient flow through time (‖∂L/∂h_t‖ by distance to the loss)
            every N steps (gradflow.csv).
        gradflow_sentences: validation sentences it is measured on (a fixed-seed sample, the same
            for every run on the same data). Default: 32, or the whole split if smaller.
        gradflow_distance: largest distance measured; only sentences reaching it are sampled.
            Default: 20, or the longest distance gradflow_sentences sentences reach if less.
        heatmaps: attention heatmaps saved at the end of fit.
    """
    module_norm_every: NonNegativeInt = 50
    module_depth: NonNegativeInt = 2
    gradflow_every: NonNegativeInt = 100
    gradflow_sentences: Optional[PositiveInt] = None
    gradflow_distance: Optional[PositiveInt] = None
    heatmaps: NonNegativeInt = 4


@dataclass
class BudgetOptions:
    """Training budget: training stops at the first optimizer step that uses one up (counts
    summed over DDP ranks, carried across --ckpt_path last; see lit_attention/lightning/budget.py).

    Args:
        steps: optimizer steps (also sets trainer.max_steps).
        tokens: training target tokens (padding excluded).
        flops: training FLOPs: forward + backward matrix products (lit_attention/models/flops.py).
    """
    steps: Optional[PositiveInt] = None
    tokens: Optional[PositiveInt] = None
    flops: Optional[PositiveFloat] = None


class LitAttentionCLI(LightningCLI):
    session: dict = {}   # run_dir and trainer, for the exit status and messages of train

    def __init__(self, args):
        super().__init__(LightningModule, LightningDataModule, subclass_mode_model=True,
                         subclass_mode_data=True, save_config_callback=None,
                         seed_everything_default=1, args=args, parser_kwargs=PARSER_KWARGS,
                         auto_configure_optimizers=False, trainer_defaults=TRAINER_DEFAULTS,
                         trainer_class=Trainer)

    def add_arguments_to_parser(self, parser):
        self.__dict__.setdefault("subcommand_parsers", []).append(parser)
        parser.add_class_arguments(RunOptions, "run")
        parser.add_class_arguments(DiagnosticsOptions, "diagnostics")
        parser.add_class_arguments(BudgetOptions, "budget")
        parser.add_argument("--tracking", type=Literal[tuple(registry.TRACKING)],
                            default=registry.NO_TRACKING,
                            help="also log to Weights & Biases (offline without a key or network)")

    def parse_arguments(self, parser, args):
        check_config_files(sys.argv[1:] if args is None else args)
        try:
            super().parse_arguments(parser, args)
            given = parser.parse_args(args, defaults=False)   # what the files and flags say
        except ArgumentError as exc:
            raise ConfigError(short_parse_error(str(exc), self.subcommand_parsers)) from None
        sub = self.config.subcommand   # (a parse without one is refused)
        config, given = self.config[sub], given[sub]
        self.session["ckpt_path"] = config.get("ckpt_path")   # (train's messages)
        check_checkpoint_file(config.get("ckpt_path"))
        if isinstance(given.get("trainer.logger"), bool):
            # Lightning's default logger or none: the run store is always written, W&B is --tracking
            raise ConfigError(
                f"--trainer.logger {str(given.get('trainer.logger')).lower()}: the run store is "
                "always written (and W&B is --tracking wandb); --trainer.logger takes a logger "
                "class to add besides it, e.g. lightning.pytorch.loggers.CSVLogger")
        if sub == "fit":   # (validate and test ignore every training setting, of any family)
            # trainer.*, budget.* and diagnostics.* defaults are those of every subcommand
            refuse_inert_settings(config, given, self.subcommand_parsers[0].get_defaults())
            refuse_trainer_values(config.trainer)
        else:   # the data they evaluate on is read as for fit
            refuse_inert_settings(config, given, {}, groups=("data",))
        # --trainer.default_root_dir: Lightning's directory for a run's files, here the run store's
        # root (--run.root: each run writes under <root>/<group>/<id>)
        root_dir, root = given.get("trainer.default_root_dir"), given.get("run.root")
        if root_dir is not None and root is not None and Path(root) != Path(root_dir):
            raise ConfigError(
                f"--trainer.default_root_dir {root_dir} and --run.root {root}: both name the root "
                "every run is stored under (in <root>/<group>/<id>); give one")
        if root_dir is not None:
            config.run.root = str(root_dir)
        seed = config.get("seed_everything")   # (true: a random seed)
        if is_number(seed) and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
            raise ConfigError(f"invalid value for seed_everything: {seed}: a seed is an integer in "
                              f"[{SEED_RANGE[0]}, {SEED_RANGE[1]}] (or true: a random one)")
        project = given.get("run.project")   # only W&B reads it
        if project not in (None, RunOptions.project) and config.tracking == registry.NO_TRACKING:
            raise ConfigError(
                "option run.project has no effect here: it names the W&B project, and tracking is "
                f"{registry.NO_TRACKING}: leave it unset or add --tracking wandb")
        # Decoding settings belong to this invocation, not to the checkpoint (see before_...).
        init_args = config.get("model.init_args") or {}
        self.decoding_given = {k: init_args[k] for k in DECODING_HPARAMS if k in init_args}

    def instantiate_classes(self):
        try:
            super().instantiate_classes()
        except (ConfigError, DataError):
            raise
        except Exception as exc:  # a value the model, data or trainer class refuses
            raise ConfigError(f"invalid configuration: {first_lines(str(exc))}") from exc

    def before_instantiate_classes(self):
        cfg = self.config[self.subcommand]
        if self.subcommand != "fit":   # over the checkpoint's (LightningCLI loads its hparams)
            cfg.model.init_args.update(Namespace(**self.decoding_given))
        try:   # the run directory: named, not made (the claim makes it, in instantiate_trainer)
            self.run_dir = RunDir(identity.resolve(cfg.run, self.subcommand, cfg.get("ckpt_path")))
        except ValueError as exc:   # an unsafe id/group, options at odds, nothing to resume
            raise ConfigError(str(exc)) from None
        self.claim = self.session["claim"] = identity.Claim(
            self.run_dir.path, self.subcommand, cfg.get("ckpt_path"), cfg.run.overwrite, cfg.run.untrained)
        self.precision_notice = None   # said once the config has proved valid (instantiate_trainer)
        if self.subcommand == "fit" and cfg.trainer.get("precision") is None:
            if "trainer.precision" in inert_settings(cfg.model):     # nothing to choose: no notice
                cfg.trainer.precision = "32-true"
            else:
                cfg.trainer.precision, self.precision_notice = choose_precision(cfg.trainer.get("accelerator"))
        # the subcommand's config as the run's config.yaml (the parser's public dump of the
        # whole config, then only this subcommand's part)
        whole = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        for permission in ("overwrite", "untrained"):   # this invocation's, recorded in the summary:
            whole[self.subcommand]["run"].pop(permission)   # a run started from its config asks anew
        self.config_yaml = yaml.safe_dump(whole[self.subcommand], sort_keys=False)

    def instantiate_trainer(self, **kwargs):
        cfg = self.config[self.subcommand]
        run = cfg.run
        labels = dict(name=run.name or self.run_dir.run_id, tags=[t for t in run.tags.split(",") if t], job_type=run.job_type)
        one_file = dict(dirpath=self.run_dir.checkpoints, save_top_k=1,
                        enable_version_counter=False)
        # The budget before the diagnostics callback (see budget.py); on validate and test too,
        # where it has nothing to count, so that a checkpoint's budget state finds its callback.
        # last.ckpt by a checkpoint of its own, written at every epoch's end: ModelCheckpoint's
        # save_last copy is written (Lightning >= 2.6) only when the best one is, so it would stay
        # at the last improvement, and `--ckpt_path last` would go back to it.
        callbacks = [TrainingBudget(**vars(cfg.budget)),
                     *([StopAtCleanPoint()] if self.subcommand == "fit" else []),
                     RunStoreCallback(self.run_dir, self.config_yaml, bool(cfg.get("ckpt_path")),
                                      self.claim.record, group=run.group,
                                      seed=cfg.get("seed_everything"), **labels),
                     DiagnosticsCallback(self.run_dir, **vars(cfg.diagnostics)),
                     ModelCheckpoint(filename=BEST_CHECKPOINT, monitor="val_loss", mode="min",
                                     **one_file),
                     ModelCheckpoint(filename=Path(LAST_CHECKPOINT).stem, monitor=None, **one_file)]
        trainer_config = {**(self.config_init[self.subcommand].get("trainer") or {}), **kwargs}
        if cfg.budget.steps is not None:
            try:
                trainer_config["max_steps"] = step_limit(cfg.budget.steps, trainer_config.get("max_steps"))
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        warn_emulated_bf16(trainer_config)
        given_loggers = trainer_config.get("logger") or []   # --trainer.logger: loggers besides ours
        trainer_config["logger"] = [RunStoreLogger(self.run_dir), *(
            given_loggers if isinstance(given_loggers, list) else [given_loggers])]
        trainer_config["default_root_dir"] = str(self.run_dir.path)
        bar = progress_bar(trainer_config)   # redrawn at the logging interval (steps.py)
        given = trainer_config.get("callbacks") or []
        trainer_config["callbacks"] = [*(given if isinstance(given, list) else [given]), *callbacks,
                                       *([bar] if bar else [])]
        trainer = self.trainer_class(**trainer_config)
        if self.subcommand == "fit":
            check_graph_step(cfg.model.init_args, cfg.data.init_args, trainer)
        # once the config is valid, before anything is written: what Lightning would refuse only
        # once the stage runs, and a run directory that cannot be made
        trainer.plan(self.datamodule, self.subcommand)
        check_run_dir(self.run_dir.path, self.subcommand)
        try:   # once the config is valid (a bad one writes nothing): the run directory is taken by
            if trainer.global_rank == 0:   # rank 0 of all the run's processes, for all of them
                self.claim.acquire()
                # the highest directory it made: removed again if the run is refused (exit 2:
                # bad data found once the model is built)
                self.session["created"] = self.claim.created
            check_writable(self.run_dir.path)   # an unwritable root, a read-only or full file system
        except identity.RunRefused as exc:
            raise ConfigError(str(exc)) from None
        except OSError as exc:
            fault = write_fault(exc) or f"cannot write {exc.filename or self.run_dir.path}: {exc.strerror or exc}"
            print(f"lit-attention {self.subcommand}: error: {fault}", file=sys.stderr)
            raise SystemExit(1) from None
        if self.precision_notice and os.environ.get("LOCAL_RANK", "0") == "0":
            print(self.precision_notice, file=sys.stderr, flush=True)
        # besides the run store; it writes into the run: once it is ours
        if (make_logger := registry.implementation(registry.TRACKING, cfg.tracking)) is not None:
            tracker_id = re.sub(r"[^A-Za-z0-9_-]", "-", f"{run.group}-{self.run_dir.run_id}")
            trainer.loggers = [*trainer.loggers, make_logger(
                self.run_dir.path, run.project, run.group, labels["name"], run.job_type, labels["tags"], tracker_id,
                config=yaml.safe_load(self.config_yaml))]
        self.session.update(trainer=trainer, run_dir=self.run_dir.path)
        if os.environ.get("LOCAL_RANK", "0") == "0":
            print(f"run directory: {self.run_dir.path}", file=sys.stderr, flush=True)
        return trainer


WRITE_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT)


def write_fault(exc: BaseException, directory: Path | None = None) -> str | None:
    """`cannot write PATH: No space left on device` for an exception caused by a file system
    refusing a write (somewhere in its chain of causes); None for any other exception. A write
    to an open file names no path: then `under DIRECTORY` (the run directory)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
            where = f" {exc.filename}" if exc.filename else f" under {directory}" if directory else ""
            return f"cannot write{where}: {exc.strerror}"
        exc = exc.__cause__ or exc.__context__
    return None


def check_run_dir(path: Path, command: str) -> None:
    """Before anything is written, where the run directory ``path`` cannot be made: ConfigError at
    a file where a directory must be, or a directory the file system refuses to write in (no
    permission, read-only); one line and exit 1 at a file system without room."""
    existing = next(p for p in (path, *path.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        raise ConfigError(f"cannot make the run directory {path}: {existing} is a file, not a directory")
    try:
        check_writable(existing)   # a probe file, removed again: nothing is made on the way
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            print(f"lit-attention {command}: error: cannot write {existing}: {exc.strerror}", file=sys.stderr)
            raise SystemExit(1) from None
        raise ConfigError(f"cannot write {existing}: {exc.strerror or exc}") from None


class _Parsed(Exception):
    """Raised by a parse-only CLI once the arguments are parsed (carries the CLI)."""


def refuse_inert_settings(config, given, defaults, groups=("model", "data")) -> None:
    """Stop (ConfigError) at a setting that the model or data module ``config`` builds would ignore
    (its class's ``inert_settings``: a family without a gradient has no optimizer to take a learning
    rate, a synthetic task reads no files, ...) when the files and flags (``given``: the
    subcommand's config without defaults) set it to a value other than its default (``defaults``;
    for model.* and data.*, the class's). A default is no request: a run's config.yaml, which spells
    every default, still reads back."""
    inert, arguments = {}, {}
    for group in groups:   # (a parsed config has both, with a class_path)
        inert.update(inert_settings(config[group]))
        arguments[group] = inspect.signature(class_at(config[group].class_path).__init__).parameters
    for key in given.keys():
        setting = key.replace(".init_args.", ".", 1)    # model.init_args.lr -> model.lr
        if setting not in inert:
            continue
        group, _, option = setting.partition(".")
        default = arguments[group][option].default if group in arguments else defaults.get(key)
        reason, harmless = inert[setting]
        if given.get(key) != default and given.get(key) not in harmless:
            if group == "data" and default is not None:   # no null to unset it with: its default asks for nothing
                harmless = (*harmless, default)
            allowed = " or ".join(dict.fromkeys(map(str, harmless)))
            raise ConfigError(f"option {setting} has no effect here: {reason}: leave it unset "
                              f"(remove it from the config{', or set it to ' + allowed if allowed else ''})")


def check_config_files(args) -> None:
    """Read each ``--config FILE`` of ``args`` with files.read_yaml before jsonargparse does, which
    takes a file of any size and encoding and names only its base name (its loader, _load_strict,
    checks every other YAML it reads)."""
    for i, arg in enumerate(args):
        value = args[i + 1] if arg in ("-c", "--config") and i + 1 < len(args) else \
            arg.partition("=")[2] if str(arg).startswith("--config=") else None
        if value is not None and os.path.isfile(value):
            read_yaml(Path(value))   # its FileError is the command's ConfigError


# --ckpt_path values that name no file: ours ("last": the latest run's last.ckpt) and Lightning's
CHECKPOINT_NAMES = ("last", "best", "hpc", "registry")


def check_checkpoint_file(path) -> None:
    """Stop (ConfigError) at a --ckpt_path (None: none given) that cannot be a checkpoint, before
    a run store is made: a missing file, or one that is no zip archive (what torch.save writes):
    cut short, or another kind of file. A zip archive is loaded later, by
    torch.load(weights_only=True)."""
    named = str(path) in CHECKPOINT_NAMES or str(path).startswith("registry:")
    if path and not named and (why := identity.checkpoint_problem(path)):
        raise ConfigError(f"--ckpt_path {path}: {why}")


def inert_settings(section) -> dict:
    """The settings the model or data module a config's ``model`` or ``data`` section builds would
    ignore (its class's ``inert_settings``: setting -> Inert(reason, harmless values))."""
    cls = class_at(section.class_path)
    return cls.inert_settings(section.init_args.as_dict()) if hasattr(cls, "inert_settings") else {}


def check_training_args(argv: list[str]):
    """Parse `lit-attention fit|validate|test ARGS` exactly as the command would, without running it;
    returns the parsed config (a jsonargparse Namespace, by subcommand).

    Raises ConfigError with the message the command would print (the sweep driver checks every
    trial's arguments with it before the first trial starts).
    """
    return training_args_checker()(argv)


def training_args_checker():
    """`check_training_args` for many argument lists: one function that builds the parser once
    (building it costs about what a parse costs) and parses each list it is given with it."""
    class ParseOnly(LitAttentionCLI):
        def parse_arguments(self, parser, args):
            super().parse_arguments(parser, args)
            raise _Parsed(self)

    built = []   # the parse-only CLI, once one has parsed

    def check(argv: list[str]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "args given while sys.argv differs": intended here
            try:
                if built:
                    built[0].parse_arguments(built[0].parser, list(argv))
                else:
                    ParseOnly(list(argv))
            except _Parsed as parsed:
                built[:] = parsed.args
        config = built[0].config
        sub = config["subcommand"]
        for part in ("model", "data"):   # their own checks; cheap: no network is built, no data read
            try:
                class_at(config[sub][part].class_path)(**config[sub][part].init_args.as_dict())
            except Exception as exc:
                raise ConfigError(f"invalid configuration: {first_lines(str(exc))}") from None
        return config
    return check


def choose_precision(accelerator) -> tuple[str, str]:
    """`fit`'s precision when none is given (tracking/machine_speed.py: bf16-mixed where the
    hardware does bf16 natively, 32-true elsewhere) and the one-line notice that says why."""
    on_gpu = accelerator in (None, "auto", "gpu", "cuda") and torch.cuda.is_available()
    precision, why = default_precision(cpu_flags(), torch.cuda.is_bf16_supported() if on_gpu else None)
    return precision, f"precision: {precision}: {why}; --trainer.precision overrides"


def check_graph_step(model, data, trainer) -> None:
    """ConfigError unless ``model.graph_step`` is off or can act on this trainer (graphed_step.py):
    batches padded to few shapes, a family whose step reads nothing back, one CUDA device."""
    if not model.get("graph_step"):
        return
    why = None
    if not data.get("pad_to_lengths"):
        why = ("needs data.pad_to_lengths (a graph is captured for each batch shape, and unpadded "
               "batches change shape nearly every step)")
    elif not registry.SEQ2SEQ_MODELS[model.get("family")].graphable:
        graphable = [name for name, row in registry.SEQ2SEQ_MODELS.items() if row.graphable]
        why = (f"captures the step of the {', '.join(graphable)} family only, not {model.get('family')!r} "
               "(its step reads values back to the host)")
    elif model.get("compile_step"):
        why = "and model.compile_step: choose one"
    elif str(trainer.precision) not in ("32-true", "bf16-mixed"):
        why = f"runs in 32-true or bf16-mixed, not {trainer.precision}"
    elif trainer.accumulate_grad_batches != 1:
        why = ("replays each batch's gradients into the same memory: not with "
               f"trainer.accumulate_grad_batches {trainer.accumulate_grad_batches}")
    elif trainer.strategy.root_device.type != "cuda":
        why = f"replays CUDA graphs: it needs a CUDA GPU, and this run trains on {trainer.strategy.root_device}"
    elif trainer.world_size != 1:
        why = f"captures one process's step: it runs on one device, not {trainer.world_size}"
    if why:
        raise ConfigError(f"invalid configuration: model.graph_step {why}")


def warn_emulated_bf16(trainer_config: dict) -> None:
    """bf16 precision on a CPU without bf16 hardware trains, but far slower than fp32: say so."""
    on_cpu = trainer_config.get("accelerator") == "cpu" or not torch.cuda.is_available()
    if str(trainer_config.get("precision")).startswith("bf16") and on_cpu and not cpu_has_native_bf16():
        print("warning: bf16 is emulated on this CPU (no AVX512-BF16 or AMX): bf16 precision will "
              "train slower than --trainer.precision 32-true, on an AVX2-only CPU dozens of times "
              "slower", file=sys.stderr)


def train(argv: list[str]) -> int:
    """`lit-attention fit|validate|test ARGS`: the exit status (docs/ERRORS.md)."""
    use_allowed_cores()  # OMP_NUM_THREADS (a sweep trial's share), else the cores we may use
    session = LitAttentionCLI.session = {}
    status = Status.FAILED
    try:
        LitAttentionCLI(None if argv == sys.argv[1:] else argv)
        status = Status.FINISHED
    except (ConfigError, DataError, ChecksumError) as exc:
        print(f"lit-attention {argv[0]}: error: {exc}", file=sys.stderr)
        created = session.get("created")   # the highest directory this invocation made
        trainer = session.get("trainer")
        if created is not None and created.is_dir() and (trainer is None or trainer.global_step == 0):
            # A refusal before the first step (bad data found once the model is built, after the
            # run's record was started) leaves no trace: everything under `created` is this
            # invocation's. One found later (a split first read at a validation) keeps its run.
            finish()   # before its files go (an offline W&B run writes under the run directory)
            shutil.rmtree(created, ignore_errors=True)
            session.pop("run_dir", None)
        return 2
    except pickle.UnpicklingError as exc:   # torch.load(weights_only=True) refused a crafted checkpoint
        print(f"lit-attention {argv[0]}: error: --ckpt_path {session.get('ckpt_path')}: "
              f"refused to load: {_refusal(str(exc))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, SystemExit) as exc:
        trainer = session.get("trainer")
        # Lightning turns Ctrl-C into sys.exit(1) after its stop; SIGTERMException is a SystemExit
        interrupted = trainer is not None and trainer.interrupted
        if isinstance(exc, SystemExit) and not (interrupted or isinstance(exc, SIGTERMException)):
            raise
        status = Status.INTERRUPTED
        run_id = session["run_dir"].name if session.get("run_dir") else "<id>"
        name = signal_name(trainer, exc) if trainer is not None else "Ctrl-C"
        print(f"interrupted ({name}): resume with --run.id {run_id} --ckpt_path last", file=sys.stderr)
        return 130 if name == "Ctrl-C" else 143
    except Exception as exc:  # the run store already says "failed"; keep the traceback for the user
        # disk full, read-only file system: one line, what and where; a diverged model: the
        # numbers, not the code, failed
        fault = write_fault(exc, session.get("run_dir"))
        if fault or isinstance(exc, FloatingPointError):
            why = fault or f"FloatingPointError: {exc}"
            print(f"lit-attention {argv[0]}: error: {why}", file=sys.stderr)
            return 1
        traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        finish(session.get("run_dir"))
        if session.get("claim"):
            session["claim"].release()
        if session.get("run_dir") and os.environ.get("LOCAL_RANK", "0") == "0":
            # of validate/test, the invocation's outcome: the run's own status is its training's
            outcome = status if argv[0] == "fit" else f"{argv[0]} {status}"
            print(f"run directory: {session['run_dir']} ({outcome})", file=sys.stderr, flush=True)
    return 0


def _refusal(message: str) -> str:
    """The line of torch's weights-only refusal that names what the file wanted to load."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    why = next((line for line in lines if "GLOBAL" in line or "Unsupported" in line), lines[-1] if lines else "")
    return f"{why} (checkpoints are loaded with torch.load(weights_only=True))"
