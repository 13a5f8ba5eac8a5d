"""One trial = one `lit-attention fit` subprocess, watched through its run store.

The child appends validation rows to metrics.csv; we report them to the Optuna trial and, when the
pruner says so, create the run's STOP file (the child stops at its next validation end and writes
status `pruned`). Nothing of the child (process group, seed, env, W&B run) leaks into the worker.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from lit_attention import metric_facts
from lit_attention.sweep import interrupts
from lit_attention.sweep.schema import BASE_PARAM
from lit_attention.tracking.schema import config_name
from lit_attention.sweep.storage import STORAGE_ENV
from lit_attention.tracking import schema
from lit_attention.tracking.identity import checkpoint_problem
from lit_attention.tracking.liveness import run_state
from lit_attention.tracking.schema import Status, Summary, SummaryError

FIT_COMMAND_ENV = "LIT_ATTENTION_FIT_COMMAND"  # JSON list overriding the trial command (tests, debugging)
POLL_SECONDS = 0.5
# Environment of the worker that must not reach a fresh training run.
_SCRUB_ENV = (STORAGE_ENV, schema.RUN_ID_ENV, "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK",
              "MASTER_ADDR", "MASTER_PORT", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_RUN_GROUP")
_SLURM_TASKS = ("SLURM_NTASKS", "SLURM_NPROCS")
_SRUN_HINT = "ignore:The `srun` command is available on your system but is not used"
TAG_KEYS = ("family", "cell", "attention", "scoring", "positional")
# What torch, the CUDA runtime, cuBLAS and cuDNN say when a GPU allocation fails.
GPU_OUT_OF_MEMORY = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
                               r"|CUDA driver error: out of memory"
                               r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED")


class TrialFailed(Exception):
    """The training subprocess failed; the message is the reason recorded on the trial."""


@dataclass
class Outcome:
    status: Status  # FINISHED | PRUNED | FAILED | INTERRUPTED
    summary: Summary
    error: str | None = None
    value: float | None = None
    objective_absent: bool = False  # finished without ever logging the objective (no trial will)


def fit_command() -> list[str]:
    if os.environ.get(FIT_COMMAND_ENV):
        return list(json.loads(os.environ[FIT_COMMAND_ENV]))
    return [sys.executable, "-m", "lit_attention.cli", "fit"]


def launcher(nodes: int, devices: int) -> list[str]:
    """What starts a trial of several ranks where SLURM must start them: one srun step of nodes x
    devices tasks in the current allocation, whose ranks Lightning's SLURMEnvironment reads from
    each task's variables. That is a trial spanning nodes, and a DDP trial started from a job's
    batch shell (a job, no step: its tasks are srun's to start); inside a task, or outside SLURM,
    Lightning starts a trial's ranks itself."""
    batch_shell = "SLURM_JOB_ID" in os.environ and "SLURM_STEP_ID" not in os.environ
    if nodes <= 1 and not (devices > 1 and batch_shell):
        return []
    # --ntasks too: srun would take the job's SLURM_NTASKS for it
    return ["srun", f"--nodes={nodes}", f"--ntasks-per-node={devices}", "--kill-on-bad-exit=1",
            f"--ntasks={nodes * devices}"]


def flag_args(flags: dict) -> list[str]:
    """`--flag value` for each flag whose value is given (not None, False or 0)."""
    return [arg for flag, value in flags.items() if value for arg in (flag, str(value))]


def format_value(value) -> str:
    """A config value as jsonargparse reads it on the command line (true, null, [1, 2], 0.001)."""
    return json.dumps(value) if value is None or isinstance(value, (bool, list, dict)) else str(value)


def build_command(*, base: Path, root: Path, study: str, run_id: str, seed: int, params: dict,
                  fixed: dict, tracking: str, name: str, devices: int = 1,
                  accelerator: str | None = None, nodes: int = 1, resume: bool = False) -> list[str]:
    """The trial's `lit-attention fit` command. `accelerator` None: the config's (default auto).

    `base` is the config file; a `base` parameter (the chosen file's stem) becomes only a tag.
    `resume`: continue run `run_id` from its checkpoints/last.ckpt (`--ckpt_path last`).
    """
    label = params.get(BASE_PARAM)
    params = {config_name(k): v for k, v in params.items() if k != BASE_PARAM}
    tags = [f"{BASE_PARAM}:{label}"] if label is not None else []
    tags += [f"{k.rpartition('.')[2]}:{v}" for k, v in params.items() if k.rpartition(".")[2] in TAG_KEYS]
    cmd = launcher(nodes, devices) + fit_command() + [
        "--config", str(base), "--run.root", str(root), "--run.group", study, "--run.id", run_id,
        "--seed_everything", str(seed), "--tracking", tracking,
        "--run.name", name, "--run.tags", ",".join(tags) or "sweep", "--run.job_type", "trial"]
    for key, value in {**fixed, **params}.items():  # the trial's own parameters win
        cmd += [f"--{key}", format_value(value)]
    # DDP: Lightning starts the ranks itself (srun does across nodes); Optuna stays in the worker.
    ddp = devices > 1 or nodes > 1
    return cmd + flag_args({"--ckpt_path": resume and "last", "--trainer.accelerator": accelerator,
                            "--trainer.devices": ddp and devices,
                            "--trainer.strategy": ddp and "ddp",
                            "--trainer.num_nodes": nodes > 1 and nodes})


def resumable(run_dir: Path) -> Summary | None:
    """The summary of a run that an earlier attempt of a cell left and a new attempt can continue
    from its checkpoints/last.ckpt: one stopped from outside (interrupted by Ctrl-C or SIGTERM;
    killed, or "running" while its process on this host is gone: SIGKILL, a session's end).
    None for any other run (failed by its own error, finished, still alive or on another host, or
    without a complete last.ckpt): that cell starts afresh."""
    if checkpoint_problem(run_dir / schema.CHECKPOINTS / schema.LAST_CHECKPOINT):   # it would fail again
        return None
    with contextlib.suppress(SummaryError):
        summary = schema.read_summary(run_dir)
        if run_state(summary)[0] in (Status.KILLED, Status.INTERRUPTED):
            return summary
    return None


def _read_metrics(metrics_csv: Path) -> tuple[list[str], list[dict]]:
    """The columns and rows of a run's metrics.csv so far (none before its first row)."""
    try:
        with open(metrics_csv, newline="") as f:
            reader = csv.DictReader(f)
            return list(reader.fieldnames or []), list(reader)
    except FileNotFoundError:
        return [], []


def validation_values(metrics_csv: Path, metric: str) -> list[tuple[int, float]]:
    """(global step, value) of the objective metric in every validation row so far, in order: the
    step is what pruning compares across trials (a validation count differs with the interval)."""
    return [(int(r["step"]), float(r[metric])) for r in _read_metrics(metrics_csv)[1]
            if r.get(metric) not in (None, "")]


def logged_metrics(summary: Summary, metrics_csv: Path) -> list[str]:
    """The metrics of a split (val_bleu, train_loss, ...) a finished run recorded, in its summary
    or as columns of its metrics.csv, sorted."""
    numbers = [k for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sorted(n for n in {*numbers, *_read_metrics(metrics_csv)[0]} if metric_facts.split_of(n))


def _tee(stream, log, last: collections.deque) -> None:
    """Copy the child's output to trial.log (unbuffered), keeping its last lines in `last`: on a
    full or read-only disk the log loses them, and they hold the reason the trial failed."""
    for line in iter(stream.readline, b""):
        if line.strip():
            last.append(line.decode(errors="replace").strip())
        if log is not None:
            try:
                log.write(line)
            except OSError:
                log = None


def exit_reason(returncode: int) -> str:
    """`exit code 1`, or `killed by SIGKILL (signal 9)` for a process a signal ended."""
    if returncode >= 0:
        return f"exit code {returncode}"
    name = next((s.name for s in signal.Signals if s == -returncode), "signal")
    return f"killed by {name} (signal {-returncode})"


def out_of_gpu_memory(error: str, sharing: int | None) -> str:
    """`error` (the fit's own, or its exit and last lines) led by what it means when the GPU ran
    out of memory: how many trials shared the GPU and how to pack fewer."""
    if not GPU_OUT_OF_MEMORY.search(error):
        return error
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "?")
    if sharing and sharing > 1:
        advice = (f"{sharing} trials shared GPU {gpus}; pack fewer (--trials-per-gpu {sharing - 1}, or "
                  f"fewer --workers) and run the cell again with --resume")
    else:
        advice = (f"the trial ran alone on GPU {gpus}: it needs a smaller batch (data.max_tokens) or model, "
                  f"or a GPU with more memory")
    return f"out of GPU memory: {advice} | {error}"


def record_end(run_dir: Path, status: Status, error: str,
               summary: Summary | None = None) -> Summary:
    """Write `status` and `error` into a run's summary.json that still says "running" (or has
    none); returns the summary. `summary`: the run's, as read (None: read here; a missing or
    unreadable one is replaced). A run store that cannot be written is left as it is."""
    if summary is None:
        try:
            summary = schema.read_summary(run_dir, missing_ok=True)
        except SummaryError:
            summary = Summary({}, schema.summary_path(run_dir))
    fields = {**summary, "status": status, "error": error, "finished_at": schema.now_iso()}
    try:
        return schema.write_summary(run_dir, fields)
    except OSError:
        return Summary(fields, summary.path)


def _stop_group(proc: subprocess.Popen, sig: int, wait: float) -> None:
    """Signal the trial's process group (its DDP ranks and dataloader workers too, also those the
    child left behind when it exited); SIGKILL what is left of it after `wait` seconds."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        return
    try:
        proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(cmd: list[str], run_dir: Path, metric: str, report, should_prune, lost=lambda: None,
        sharing: int | None = None) -> Outcome:
    """Run one training subprocess to its end.

    `report(value, step)` is called for every new validation value, then `should_prune()`; when it
    says yes the STOP file is written. Ctrl-C (KeyboardInterrupt) interrupts the child and re-raises.
    `lost()` returns a reason once the trial is no longer this worker's (another worker failed it
    as stale): the child is killed and the run recorded as failed with that reason. `sharing`:
    the trials running at once on this trial's GPUs, said in the reason if it runs out of GPU memory.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    # A trial that is not an srun step of its own is no SLURM task: Lightning's SLURMEnvironment
    # would take it (seeing the job's task count) for one rank of that many started by srun.
    srun = cmd[:1] == ["srun"]
    scrub = _SCRUB_ENV + (() if srun else _SLURM_TASKS)
    env = {"WANDB_SILENT": "true", **{k: v for k, v in os.environ.items() if k not in scrub},
           "PYTHONUNBUFFERED": "1"}
    if not srun:   # and Lightning's hint to start it with srun (where srun is on PATH) is void
        env["PYTHONWARNINGS"] = ",".join(filter(None, (env.get("PYTHONWARNINGS"), _SRUN_HINT)))
    guarded = [sys.executable, "-m", "lit_attention.sweep.guard", str(os.getpid()), *cmd]
    reported, stop_sent = 0, False
    with open(run_dir / schema.TRIAL_LOG, "ab", buffering=0) as log:
        # A session of its own: a terminal Ctrl-C reaches the driver, which stops the trial itself.
        proc = subprocess.Popen(guarded, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        last_lines = collections.deque(maxlen=5)
        tee = threading.Thread(target=_tee, args=(proc.stdout, log, last_lines), daemon=True)
        tee.start()
        try:
            while True:
                done = proc.poll() is not None
                values = validation_values(run_dir / schema.METRICS, metric)
                for step, value in values[reported:]:
                    if not stop_sent and math.isfinite(value):
                        report(value, step)
                    reported += 1
                if not done and not stop_sent and reported and should_prune():
                    schema.request_stop(run_dir, Status.PRUNED)
                    stop_sent = True
                if done or (why_lost := lost()):
                    break
                interrupts.sleep(POLL_SECONDS, until_exit=[proc])
        except KeyboardInterrupt:
            _stop_group(proc, signal.SIGINT, wait=60)
            raise
        finally:
            _stop_group(proc, signal.SIGKILL, wait=10)
            tee.join(timeout=10)

    if not done:   # lost: the child was killed above
        return Outcome(Status.FAILED, record_end(run_dir, Status.FAILED, why_lost), why_lost)
    try:
        summary = schema.read_summary(run_dir, missing_ok=True)
    except SummaryError as exc:   # a run store that cannot be read: the trial failed, and why
        return Outcome(Status.FAILED, Summary(), str(exc))
    status = summary.status
    if proc.returncode != 0 or status in (Status.FAILED, Status.INTERRUPTED, Status.RUNNING, None):
        why = summary.error or f"{exit_reason(proc.returncode)}: {' | '.join(last_lines)}"
        error = out_of_gpu_memory(why, sharing)
        if status in (None, Status.RUNNING):   # it never recorded an end: say so in its run store too
            status = Status.KILLED if proc.returncode < 0 else Status.FAILED
            summary = record_end(run_dir, status, error, summary)
        return Outcome(Status.INTERRUPTED if status is Status.INTERRUPTED else Status.FAILED,
                       summary, error)
    if status is Status.PRUNED or (stop_sent and status is not Status.FINISHED):
        return Outcome(Status.PRUNED, summary)
    value = summary.get(metric)
    if value is None and values:   # read after the child ended: its last validation
        value = values[-1][1]
    if value is None:
        logged = logged_metrics(summary, run_dir / schema.METRICS)
        return Outcome(Status.FAILED, summary, f"objective {metric} is not among the metrics "
                       f"this run logged ({', '.join(logged) or 'nothing'})", objective_absent=True)
    if not math.isfinite(float(value)):
        return Outcome(Status.FAILED, summary, f"objective {metric} is not finite ({value})")
    return Outcome(Status.FINISHED, summary, value=float(value))
