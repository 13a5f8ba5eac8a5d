"""`lit-attention sweep FILE [--workers N] [--storage URL] [--devices-per-trial G] [--resume]`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import optuna

from lit_attention.files import check_writable
from lit_attention.sweep import driver, progress
from lit_attention.sweep.schema import MAX_CELLS, SweepError, load_sweep
from lit_attention.sweep.storage import STORAGE_ENV, default_url, mask_url, redact


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lit-attention sweep", description=(
        "Run an Optuna study declared in a sweep YAML file; every trial is a `lit-attention fit` subprocess."))
    p.add_argument("file", type=Path, help="sweep file, e.g. sweeps/demo.yaml")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes on this machine (default: the file's `workers`, else 1)")
    p.add_argument("--storage", default=None, help=(
        f"study database URL (default: the file's `storage`, then ${STORAGE_ENV}, "
        "then sqlite under ROOT/<study>/study.db); e.g. postgresql+psycopg2://user:pass@host/db"))
    p.add_argument("--devices-per-trial", type=int, default=1,
                   help="G > 1: each trial trains with DDP on G devices (on CPU: G gloo processes)")
    p.add_argument("--accelerator", default="cpu",
                   help="accelerator of DDP trials (--devices-per-trial > 1): cpu (gloo), gpu, auto")
    p.add_argument("--resume", action="store_true",
                   help="re-queue cells of an existing study that have no finished trial (failed, interrupted)")
    p.add_argument("--root", type=Path, default=None, help="run store root (default: the file's `root`, runs)")
    p.add_argument("--tracking", choices=("none", "wandb"), default=None,
                   help="override the file's tracking (one W&B run per trial)")
    p.add_argument("--max-cells", type=int, default=MAX_CELLS,
                   help=f"refuse grids of more configurations x seeds than this (default {MAX_CELLS:,})")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # internal: one worker process
    return p


def _url(args, sweep) -> str:
    if args.worker:
        return os.environ[STORAGE_ENV]
    return args.storage or sweep.storage or os.environ.get(STORAGE_ENV) or default_url(
        args.root or sweep.root, sweep.study_name)


def report_study(study_dir: Path, metric: str) -> int:
    """The paper table of a finished study, from its run store (tables and plots in study_dir/report)."""
    from lit_attention.analysis.report import main as report_main
    try:
        return report_main([str(study_dir), "--out", str(study_dir / "report"), "--metric", metric])
    except Exception as exc:  # the sweep's results are safe in the run store; say why there is no table
        print(f"lit-attention sweep: the report failed ({type(exc).__name__}: {exc}); "
              f"the study's own table follows", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if (args.workers is not None and args.workers < 1) or args.devices_per_trial < 1:
        print("lit-attention sweep: --workers and --devices-per-trial must be >= 1", file=sys.stderr)
        return 2
    try:
        sweep = load_sweep(args.file, args.max_cells)
        root = (args.root or sweep.root).resolve()
        if not args.worker:  # before anything is written: no study, no run directory
            driver.check_trials(sweep, root, args.devices_per_trial, args.tracking, args.accelerator)
    except SweepError as e:
        print(f"lit-attention sweep: error: {e}", file=sys.stderr)
        return 2
    try:   # the default SQLite study and the trials' run directories live under the root
        url = _url(args, sweep)
        if not args.worker:
            check_writable(root / sweep.study_name)
    except OSError as e:   # refused before the study is touched: fix it, then rerun (--resume)
        print(f"lit-attention sweep: error: cannot write {e.filename or root}: {e.strerror or e}", file=sys.stderr)
        return 1
    if args.worker:
        return driver.run_worker(sweep, url, root, args.devices_per_trial, args.tracking, args.accelerator)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    total = len(driver.planned_cells(sweep)) if sweep.enumerated else sweep.n_trials
    print(f"[{sweep.study_name}] {sweep.sampler} sampler, {sweep.pruner} pruner, {total} trials "
          f"({len(sweep.seeds)} seed(s) each), storage {mask_url(url)}, runs in {root / sweep.study_name}",
          flush=True)
    try:
        study = driver.open_study(sweep, url, resume=args.resume)
    except SweepError as e:
        print(f"lit-attention sweep: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a database that cannot be reached: never echo the URL unmasked
        print(f"lit-attention sweep: cannot open the study at {mask_url(url)}: "
              f"{type(e).__name__}: {redact(str(e), url)[:500]}", file=sys.stderr)
        return 1

    last = [""]

    def show(s: optuna.Study) -> None:
        line = progress.progress_line(s, sweep.objective, total)
        if line != last[0]:
            print(line, flush=True)
            last[0] = line

    workers = args.workers or sweep.workers
    procs = driver.spawn_workers(args.file, url, workers, root, args.devices_per_trial, args.tracking,
                                 args.accelerator, args.max_cells)
    try:
        codes = driver.wait_workers(procs, study, show)
    except KeyboardInterrupt:
        print(f"[{sweep.study_name}] stopped. Continue with: lit-attention sweep {args.file} --resume", flush=True)
        return 130
    print()
    if report_study(root / sweep.study_name, sweep.objective) != 0:
        constant = tuple(p.name for p in sweep.space if p.choices is not None and len(p.choices) == 1)
        print(progress.format_table(progress.results_table(study, sweep.objective, constant)), flush=True)
    missing = driver.unfinished_cells(sweep, study)
    if any(codes):  # what was asked is judged by the cells below, not by the workers' exits
        print(f"[{sweep.study_name}] warning: a worker exited with {codes}", file=sys.stderr)
    if missing:
        print(f"[{sweep.study_name}] {len(missing)} requested cell(s) did not finish "
              f"(rerun them with: lit-attention sweep {args.file} --resume):", file=sys.stderr)
        for line in missing:
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
