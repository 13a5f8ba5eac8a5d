"""`lit-attention sweep FILE [--workers N] [--gpus LIST] [--devices-per-trial G] [--trials-per-gpu K]
[--storage URL] [--resume] [--dry-run] [--test | --test-only]`."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from pathlib import Path

import optuna

from lit_attention.files import check_writable
from lit_attention.registry import TRACKING
from lit_attention.sweep import driver, evaluate, progress
from lit_attention.sweep.placement import (PlacementError, check_visible, default_trials_per_gpu, gpu_memory_gib,
                                           gpu_words, parse_gpus, place, visible_gpus)
from lit_attention.threads import allowed_cores
from lit_attention.tracking.schema import config_name
from lit_attention.sweep.schema import MAX_CELLS, OVERRIDES, Sweep, SweepError, default, load_sweep
from lit_attention.sweep.storage import STORAGE_ENV, default_url, mask_url, redact


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lit-attention sweep", description=(
        "Run an Optuna study declared in a sweep YAML file; every trial is a `lit-attention fit` subprocess."))
    p.add_argument("file", type=Path, help="sweep file, e.g. sweeps/demo.yaml")
    p.add_argument("--workers", type=int, default=None, help=(
        "trials in flight on this machine, one worker process each (default: the file's `workers`, "
        f"else {default('workers')})"))
    p.add_argument("--storage", default=None, help=(
        f"study database URL (default: the file's `storage`, then ${STORAGE_ENV}, "
        "then sqlite under ROOT/<study>/study.db); e.g. postgresql+psycopg2://user:pass@host/db"))
    p.add_argument("--devices-per-trial", type=int, default=1,
                   help="G > 1: each trial trains with DDP on G devices (on CPU: G gloo processes)")
    p.add_argument("--gpus", default=None, help=(
        "GPUs to share out, among those this process sees, e.g. 0,1,2,3: cut into sets of G, worker i "
        "gets set i mod (sets) as CUDA_VISIBLE_DEVICES (default: every visible GPU; none: hide them "
        "all, CPU trials)"))
    p.add_argument("--trials-per-gpu", type=int, default=None, help=(
        "K: at most K trials at once on each GPU (each set of G GPUs with --devices-per-trial G); "
        "more workers than sets x K is refused (default: as many as the workers need, with what "
        "the GPU memory and the cores hold printed beside it)"))
    p.add_argument("--nodes-per-trial", type=int, default=1, help=(
        "M > 1: each trial is one srun step of M nodes x G tasks (--trainer.num_nodes M); "
        "only inside a SLURM allocation"))
    p.add_argument("--accelerator", default=None, help=(
        "trainer.accelerator of every trial: auto, cpu, gpu (default: the config's, `auto`: "
        "a GPU when there is one, else the CPU with gloo for DDP)"))
    p.add_argument("--dry-run", action="store_true", help=(
        "print each worker's CUDA_VISIBLE_DEVICES, threads and first trial command; train nothing, "
        "write nothing"))
    p.add_argument("--resume", action="store_true",
                   help="re-queue cells of an existing study that have no finished trial (failed, interrupted)")
    p.add_argument("--test", action="store_true", help=(
        "then evaluate every finished run's best checkpoint on its test split (`lit-attention "
        "test`, the run's own decoding settings; runs already tested are skipped) and report the "
        "objective's test metric (val_bleu -> test_bleu)"))
    p.add_argument("--test-only", action="store_true", help=(
        "start no trial: test the finished runs as --test does and print the test-metric table "
        "(a sweep still under way, between two --resume sessions)"))
    p.add_argument("--root", type=Path, default=None,
                   help=f"run store root (default: the file's `root`, {default('root')})")
    p.add_argument("--tracking", choices=tuple(TRACKING), default=None,
                   help="override the file's tracking (one W&B run per trial)")
    p.add_argument("--max-cells", type=int, default=MAX_CELLS,
                   help=f"refuse grids of more configurations x seeds than this (default {MAX_CELLS:,})")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # internal: one worker process
    return p


def _placements(args, sweep) -> tuple[list, str]:
    """Each worker's GPUs and threads, and the line that says how the trials are placed and why;
    raises PlacementError on a request that cannot be met."""
    gpus, source = (parse_gpus(args.gpus), "--gpus") if args.gpus is not None else visible_gpus()
    if args.gpus is None:
        gpus = gpus or None  # no GPU here: leave CUDA_VISIBLE_DEVICES alone
    elif gpus and (note := check_visible(gpus, args.gpus, args.accelerator, planning=args.dry_run)):
        print(note, file=sys.stderr)
    if args.accelerator:
        from lit_attention.lightning.cli import accelerator_unusable
        why = (f"no GPU to give the trials ({source}: none)" if args.accelerator in ("gpu", "cuda")
               and not gpus else accelerator_unusable(args.accelerator))
        if why:
            raise PlacementError(f"--accelerator {args.accelerator}: {why}")
        keys = [f"fixed.{k}" for k in sweep.fixed if k == "trainer.accelerator"] + [
            f"space.{p.name}" for p in sweep.space if config_name(p.name) == "trainer.accelerator"]
        if keys:
            raise PlacementError(f"--accelerator {args.accelerator} and the sweep's {keys[0]} both "
                                 "set the accelerator; keep one")
    if args.nodes_per_trial > 1 and not os.environ.get("SLURM_JOB_ID"):
        raise PlacementError(f"--nodes-per-trial {args.nodes_per_trial}: a trial spanning nodes is an srun "
                             "step; run the sweep inside a SLURM allocation (sweeps/slurm-workers.sbatch)")
    if args.trials_per_gpu is not None and not gpus:
        raise PlacementError(f"--trials-per-gpu {args.trials_per_gpu}: no GPU to put trials on "
                             f"({'--gpus none' if gpus == [] else 'none visible'}); the workers share the CPU cores")
    workers, devices = sweep.workers, args.devices_per_trial
    placements = place(workers, devices, gpus, source, args.trials_per_gpu)
    if not gpus:
        where = "every GPU hidden by --gpus none" if gpus == [] else "no GPU, CUDA_VISIBLE_DEVICES unchanged"
        return placements, f"placement: {workers} trial(s) at once on the CPU ({where})"
    k, why = args.trials_per_gpu, "--trials-per-gpu"
    if k is None:
        memory, _ = gpu_memory_gib()
        k, why = default_trials_per_gpu(len(gpus), memory, allowed_cores(), workers, devices)
    unit = "GPU" if devices == 1 else f"set of {devices} GPUs"
    return placements, (f"placement: {workers} trial(s) at once on {gpu_words(gpus, source)}, "
                        f"at most {k} per {unit} ({why})")


def _error(message: str, code: int = 2) -> int:
    print(f"lit-attention sweep: error: {message}", file=sys.stderr)
    return code


def _test_and_report(args, sweep: Sweep, study_dir: Path, test: bool) -> int:
    """With ``test`` (--test, --test-only): every finished run's best checkpoint on its test split.
    Then the paper table of the objective (its test metric with ``test``), from the study's run
    store (tables and plots in study_dir/report). 1 when a run could not be tested or there is no
    table, else 0."""
    from lit_attention.analysis.report import main as report_main
    name, failed, metric = sweep.study_name, [], sweep.objective
    if test:
        print(f"[{name}] testing the best checkpoint of every finished run", flush=True)
        tested = evaluate.test_study(study_dir, args.accelerator, args.tracking,
                                     log=lambda line: print(line, flush=True))
        print(f"[{name}] {tested.line()}", flush=True)
        failed, metric = tested.failed, evaluate.test_metric(sweep.objective)
    try:
        reported = report_main([str(study_dir), "--out", str(study_dir / "report"),
                                "--metric", metric])
    except Exception as exc:  # the sweep's results are safe in the run store; say why there is no table
        print(f"lit-attention sweep: the report failed ({type(exc).__name__}: {exc})", file=sys.stderr)
        reported = 1
    if failed:
        print(f"[{name}] {len(failed)} run(s) could not be tested:", file=sys.stderr)
        for run_id, why in failed:
            print(f"  {run_id}: {why}", file=sys.stderr)
    return 1 if failed or reported != 0 else 0


# the options that only shape trials: --test-only starts none
TRIAL_OPTIONS = ("resume", "dry_run", "test", "workers", "gpus", "storage", "devices_per_trial", "trials_per_gpu",
                 "nodes_per_trial")


def main(argv: list[str] | None = None) -> int:
    options = parser()
    args = options.parse_args(argv)
    inert = [f"--{name.replace('_', '-')}" for name in TRIAL_OPTIONS
             if getattr(args, name) != options.get_default(name)]
    if args.test_only and inert:
        return _error(f"--test-only starts no trial: {', '.join(inert)} would do nothing")
    if any(n is not None and n < 1 for n in (args.workers, args.devices_per_trial, args.nodes_per_trial,
                                               args.trials_per_gpu)):
        return _error("--workers, --devices-per-trial, --nodes-per-trial and --trials-per-gpu "
                      "must be >= 1")
    try:
        # the options that override the file's keys (--workers, --root, ...) applied
        sweep = load_sweep(args.file, args.max_cells).with_overrides(
            **{k: getattr(args, k) for k in OVERRIDES})
        root = sweep.root.resolve()
        launch = dict(devices=args.devices_per_trial, accelerator=args.accelerator,
                      nodes=args.nodes_per_trial)
        # before anything is written: no study, no run directory
        if not (args.worker or args.test_only):
            placements, placed = _placements(args, sweep)
            driver.check_trials(sweep, root, **launch)
    except (SweepError, PlacementError) as e:
        return _error(str(e))
    if args.test_only:   # the finished runs in the study's run store; no study database
        if not (root / sweep.study_name).is_dir():
            return _error(f"no runs of study {sweep.study_name!r} in {root / sweep.study_name}: "
                          "run the sweep first")
        return _test_and_report(args, sweep, root / sweep.study_name, test=True)
    if args.worker:
        return driver.run_worker(sweep, os.environ[STORAGE_ENV], root, args.trials_per_gpu, **launch)
    if args.dry_run:
        print(placed)
        cells = driver.planned_cells(sweep) if sweep.enumerated else []
        commands = driver.first_commands(sweep, root, max(sweep.workers, len(cells)), **launch)
        for i, (placement, cmd) in enumerate(zip(placements, commands)):
            print(f"worker {i}: {placement.describe()} first trial: {shlex.join(cmd)}")
        print(progress.trial_list(sweep, cells, commands))
        return 0
    try:   # the default SQLite study and the trials' run directories live under the root
        url = (sweep.storage or os.environ.get(STORAGE_ENV)
               or default_url(sweep.root, sweep.study_name))
        check_writable(root / sweep.study_name)
    except OSError as e:   # refused before the study is touched: fix it, then rerun (--resume)
        return _error(f"cannot write {e.filename or root}: {e.strerror or e}", 1)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    total = len(driver.planned_cells(sweep)) if sweep.enumerated else sweep.n_trials
    print(progress.fit(f"[{sweep.study_name}] {sweep.sampler} sampler, {sweep.pruner} pruner, {total} "
                       f"trials ({len(sweep.seeds)} seed(s) each), storage {mask_url(url)}, runs in "
                       f"{root / sweep.study_name}"), flush=True)
    print(f"[{sweep.study_name}] {placed}", flush=True)
    try:
        study = driver.open_study(sweep, url, resume=args.resume)
    except SweepError as e:
        return _error(str(e))
    except Exception as e:  # a database that cannot be reached: never echo the URL unmasked
        print(f"lit-attention sweep: cannot open the study at {mask_url(url)}: "
              f"{type(e).__name__}: {redact(str(e), url)[:500]}", file=sys.stderr)
        return 1

    last = [""]

    def show(s: optuna.Study) -> None:
        if (line := progress.progress_line(s, sweep.objective, total)) != last[0]:
            print(line, flush=True)
            last[0] = line

    # SIGTERM (a session's or a batch job's end) stops the sweep as Ctrl-C does: the running trials
    # write a checkpoint of the step they reached, which --resume continues. Without this, the
    # driver died at once and took its workers and their trials down with SIGKILL.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    procs = driver.spawn_workers(args.file, url, placements, root, args.devices_per_trial, args.tracking,
                                 args.accelerator, args.max_cells, args.nodes_per_trial)
    try:
        codes = driver.wait_workers(procs, study, show)
    except KeyboardInterrupt:
        print(f"[{sweep.study_name}] stopped. Continue with: lit-attention sweep {args.file} --resume", flush=True)
        return 130
    print()
    reported = _test_and_report(args, sweep, root / sweep.study_name, test=args.test)
    missing = driver.unfinished_cells(sweep, study)
    if any(codes):  # what was asked is judged by the cells below, not by the workers' exits
        print(f"[{sweep.study_name}] warning: a worker exited with {codes}", file=sys.stderr)
    if halted := study.user_attrs.get(driver.HALT):
        print(f"[{sweep.study_name}] stopped: {halted}; no other trial was started, as none would log it. "
              f"Name a metric the trials log in objective.metric (or make them log it) and run the sweep as a "
              f"new study: an objective, like the settings, belongs to the study", file=sys.stderr)
    elif missing:
        print(f"[{sweep.study_name}] {len(missing)} requested cell(s) did not finish "
              f"(rerun them with: lit-attention sweep {args.file} --resume):", file=sys.stderr)
    for line in missing:
        print(f"  {line}", file=sys.stderr)
    return 2 if halted else 1 if missing else reported


if __name__ == "__main__":
    sys.exit(main())
