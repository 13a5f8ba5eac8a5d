"""`lit-attention fit|validate|test|choices|sweep|report`.

Training goes through LightningCLI; every run lands in the run store
(`<run.root>/<run.group>/<run.id>/`) whatever the tracking choice.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from jsonargparse.typing import PositiveFloat, PositiveInt

TRAINING_COMMANDS = ("fit", "validate", "test")


@dataclass
class RunOptions:
    """Where the run is stored and how it is named.

    Args:
        root: run store root directory.
        group: group (study) the run belongs to.
        id: run id; default: a new one (or, with ``--ckpt_path last``, the newest run of the group).
        name: display name (W&B); default: the run id.
        tags: comma-separated tags (W&B).
        job_type: W&B job type.
        project: W&B project.
    """
    root: str = "runs"
    group: str = "default"
    id: Optional[str] = None
    name: Optional[str] = None
    tags: str = ""
    job_type: str = "train"
    project: str = "lit-attention"


@dataclass
class DiagnosticsOptions:
    """Gradient and attention diagnostics (0 turns one off).

    Args:
        module_norm_every: log per-module gradient norms every N steps.
        module_depth: module path depth of those norms (2: encoder.layers.0).
        gradflow_every: measure gradient flow through time (‖∂L/∂h_t‖ by distance to the loss)
            every N steps (gradflow.csv).
        gradflow_sentences: validation sentences it is measured on (a fixed-seed sample, the same
            for every run on the same data). Default: 32, or the whole split if smaller.
        gradflow_distance: largest distance measured; only sentences reaching it are sampled.
            Default: 20, or the longest distance gradflow_sentences sentences reach if less.
        heatmaps: attention heatmaps saved at the end of fit.
    """
    module_norm_every: int = 50
    module_depth: int = 2
    gradflow_every: int = 100
    gradflow_sentences: Optional[int] = None
    gradflow_distance: Optional[int] = None
    heatmaps: int = 4


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


def _build_cli_class():
    from lightning.pytorch import LightningDataModule, LightningModule
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.cli import LightningCLI

    from lit_attention.lightning.budget import TrainingBudget, step_limit
    from lit_attention.lightning.diagnostics import DiagnosticsCallback
    from lit_attention.tracking.callback import RunStoreCallback
    from lit_attention.tracking.run_store import (RUN_ID_ENV, RunDir, RunStoreLogger, find_latest_run,
                                                 new_run_id, run_path)

    class LitAttentionCLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_class_arguments(RunOptions, "run")
            parser.add_class_arguments(DiagnosticsOptions, "diagnostics")
            parser.add_class_arguments(BudgetOptions, "budget")
            parser.add_argument("--tracking", type=Literal["none", "wandb"], default="none",
                                help="also log to Weights & Biases (offline without a key or network)")

        def _resolve_run_dir(self, cfg) -> Path:
            run = cfg.run
            ckpt_path = cfg.get("ckpt_path")
            if os.environ.get("LOCAL_RANK", "0") != "0" and os.environ.get(RUN_ID_ENV):
                run_id = os.environ[RUN_ID_ENV]  # a DDP rank relaunched by Lightning: same run
            elif run.id:
                run_id = run.id
            elif ckpt_path == "last":
                latest = find_latest_run(run.root, run.group)
                if latest is None:
                    raise SystemExit(f"error: --ckpt_path last: no run with checkpoints/last.ckpt "
                                     f"in {Path(run.root) / run.group}")
                run_id = latest.name
            elif ckpt_path and Path(ckpt_path).parent.name == "checkpoints":
                return Path(ckpt_path).resolve().parent.parent
            else:
                run_id = new_run_id()
            os.environ[RUN_ID_ENV] = run_id
            return run_path(run.root, run.group, run_id)

        def before_instantiate_classes(self):
            cfg = self.config[self.subcommand]
            try:
                self.run_dir = RunDir(self._resolve_run_dir(cfg))
            except ValueError as exc:                      # an unsafe --run.id / --run.group
                print(f"error: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
            self.config_yaml = self._parser(self.subcommand).dump(cfg, skip_none=False)

        def instantiate_trainer(self, **kwargs):
            cfg = self.config[self.subcommand]
            run = cfg.run
            callbacks = [self._get(self.config_init, c) for c in self._parser(self.subcommand).callback_keys]
            if self.subcommand == "fit":   # before the diagnostics callback (see budget.py)
                callbacks.append(TrainingBudget(**vars(cfg.budget)))
            callbacks.append(RunStoreCallback(self.run_dir, run.group, self.config_yaml,
                                              cfg.get("seed_everything"), self.subcommand))
            callbacks.append(DiagnosticsCallback(self.run_dir, **vars(cfg.diagnostics)))
            callbacks.append(ModelCheckpoint(dirpath=self.run_dir.checkpoints, filename="best",
                                             monitor="val_loss", mode="min", save_last=True,
                                             save_top_k=1, enable_version_counter=False))
            loggers = [RunStoreLogger(self.run_dir)]
            if cfg.tracking == "wandb":
                from lit_attention.tracking.wandb import make_wandb_logger
                wandb_id = re.sub(r"[^A-Za-z0-9_-]", "-", f"{run.group}-{self.run_dir.run_id}")
                loggers.append(make_wandb_logger(
                    self.run_dir.path, run.project, run.group, run.name or self.run_dir.run_id,
                    run.job_type, [t for t in run.tags.split(",") if t], wandb_id))
            trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
            if cfg.budget.steps is not None:
                try:
                    trainer_config["max_steps"] = step_limit(cfg.budget.steps, trainer_config.get("max_steps"))
                except ValueError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    raise SystemExit(2) from None
            warn_emulated_bf16(trainer_config)
            trainer_config["logger"] = loggers
            trainer_config["default_root_dir"] = str(self.run_dir.path)
            return self._instantiate_trainer(trainer_config, callbacks)

    return LitAttentionCLI, LightningModule, LightningDataModule


def warn_emulated_bf16(trainer_config: dict) -> None:
    """bf16 precision on a CPU without bf16 hardware trains, but far slower than fp32: say so."""
    import torch

    from lit_attention.tracking.machine_speed import cpu_has_native_bf16
    on_cpu = trainer_config.get("accelerator") == "cpu" or not torch.cuda.is_available()
    if str(trainer_config.get("precision")).startswith("bf16") and on_cpu and not cpu_has_native_bf16():
        print("warning: bf16 is emulated on this CPU (no AVX512-BF16 or AMX): bf16 precision will "
              "train slower than --trainer.precision 32-true, on an AVX2-only CPU dozens of times "
              "slower", file=sys.stderr)


def _choices(argv: list[str]) -> int:
    from lit_attention import registry
    data = registry.as_dict()
    if "--json" in argv:
        print(json.dumps(data, indent=2))
    else:
        for key, values in data.items():
            print(f"{key:20s} {', '.join(values)}")
    return 0


def _train(argv: list[str]) -> int:
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from lit_attention.data.text import DataError
    from lit_attention.tracking.wandb import finish

    cli_class, module_base, data_base = _build_cli_class()
    try:
        cli_class(module_base, data_base, subclass_mode_model=True, subclass_mode_data=True,
                  save_config_callback=None, seed_everything_default=1,
                  args=None if argv == sys.argv[1:] else argv,
                  auto_configure_optimizers=False,
                  trainer_defaults={"use_distributed_sampler": False, "gradient_clip_val": 1.0,
                                    "log_every_n_steps": 10,
                                    # token batches are re-bucketed each epoch, so their count varies
                                    "reload_dataloaders_every_n_epochs": 1})
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except SIGTERMException:
        print("interrupted by SIGTERM: resume with --run.id <id> --ckpt_path last", file=sys.stderr)
        return 143
    except Exception as exc:  # the run store already says "failed"; keep the traceback for the user
        traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        finish()
    return 0


USAGE = """usage: lit-attention {fit,validate,test,choices,sweep,report} ...

  fit|validate|test   train or evaluate (LightningCLI; `lit-attention fit --help`)
  choices [--json]    the registry of families, cells, scoring functions, positional encodings, tasks
  sweep FILE          run an Optuna study declared in a sweep YAML file
  report RUNS_DIR     tables and plots from a run store
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    if command == "choices":
        return _choices(argv[1:])
    if command == "sweep":
        from lit_attention.sweep.cli import main as sweep_main
        return sweep_main(argv[1:])
    if command == "report":
        from lit_attention.analysis.report import main as report_main
        return report_main(argv[1:])
    if command in TRAINING_COMMANDS:
        return _train(argv)
    print(USAGE, file=sys.stderr if command not in ("-h", "--help") else sys.stdout)
    return 0 if command in ("-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main())
