"""GPU sweeps: aggregate target tokens/s of 1, 2, 4, 8 reference-size trials packed on one GPU (ratio
to one trial alone), and the wall time of a reference sweep with its trials packed on that GPU.

Packed trials: N `lit-attention fit` processes of the reference Transformer
(configs/reference/multi30k-transformer.yaml, fp32, its 2,048-token batches) started at once on the
first visible GPU, each --steps optimizer steps without validation, with the threads a sweep gives
them (cores / N). Aggregate = their target tokens / the span from the first training start to the
last training end (from their run stores). Reference sweep: `lit-attention sweep --test` of
sweeps/reference-multi30k.yaml (7 rows) with --seeds seeds, every trial at --budget-fraction of the
FLOP budget, all trials at once on the GPU (the default packing), from start to its table.

    python bench/gpu_sweep.py [--quick] [--steps 300] [--packs 1,2,4,8] [--budget-fraction 0.1] [--seeds 1]
    # on the GPU machine of ../shared/gpu/README.md: source .gpu/env.sh; python3 bench/gpu_sweep.py

Without a GPU it says so and exits 0 (--cpu runs it on the CPU anyway, to check the script).
--time-limit bounds the whole script; goal: >= 4x one trial's
aggregate throughput with 8 packed, and the whole reference sweep (--budget-fraction 1 --seeds 3)
in <= 15 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import torch
import yaml

import benchlib as B
from lit_attention.threads import allowed_cores

REFERENCE = B.REPO / "configs" / "reference" / "multi30k-transformer.yaml"
REFERENCE_SWEEP = B.REPO / "sweeps" / "reference-multi30k.yaml"
GOAL_RATIO = 4.0


def gpu_name(gpu: str) -> str:
    """`NVIDIA H200 (GPU 0, 143771 MiB)` from nvidia-smi, or `GPU 0`."""
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi, "-i", gpu, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            name, _, memory = out.stdout.strip().partition(", ")
            return f"{name} (GPU {gpu}, {memory})"
    return f"GPU {gpu}"


def gpu_memory_of(pids: set[int]) -> dict[int, float]:
    """MiB of GPU memory each of `pids` uses now, by nvidia-smi (empty where it lists no processes,
    e.g. in a container with its own process ids)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    out = subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    used = {}
    for line in out.stdout.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and int(pid) in pids and mib.strip().replace(".", "", 1).isdigit():
            used[int(pid)] = float(mib)
    return used


def fit_command(root: Path, group: str, run_id: str, steps: int) -> list[str]:
    return [sys.executable, "-m", "lit_attention.cli", "fit", "--config", str(REFERENCE),
            "--run.root", str(root), "--run.group", group, "--run.id", run_id, "--tracking", "none",
            "--budget.flops", "null", "--trainer.max_steps", str(steps), "--trainer.limit_val_batches", "0",
            "--trainer.num_sanity_val_steps", "0", "--trainer.enable_progress_bar", "false"]


def packed(n: int, steps: int, root: Path, gpu: str | None, timeout: float) -> dict:
    """N fit processes at once on `gpu` (None: the CPU); their aggregate target tokens/s."""
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, allowed_cores() // n)), PYTHONUNBUFFERED="1")
    env["MKL_NUM_THREADS"] = env["OMP_NUM_THREADS"]
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    logs = [open(root / f"pack{n}-{i}.log", "wb") for i in range(n)]
    procs = [subprocess.Popen(fit_command(root, f"pack{n}", f"p{i}", steps), cwd=B.REPO, env=env,
                              stdout=log, stderr=subprocess.STDOUT) for i, log in enumerate(logs)]
    deadline, peak = time.monotonic() + timeout, {}
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if gpu is not None:   # the trials' GPU memory, to check the driver's assumed TRIAL_GPU_GIB
            for pid, mib in gpu_memory_of({p.pid for p in procs}).items():
                peak[pid] = max(peak.get(pid, 0.0), mib)
        time.sleep(2)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for log in logs:
        log.close()
    windows, tokens, failed = [], 0, []
    for i, p in enumerate(procs):
        summary_file = root / f"pack{n}" / f"p{i}" / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        if p.returncode != 0 or summary.get("status") != "finished":
            tail = (root / f"pack{n}-{i}.log").read_text(errors="replace").strip().splitlines()[-1:]
            failed.append(f"p{i}: exit {p.returncode}: {' '.join(tail)[:300]}")
            continue
        end = datetime.fromisoformat(summary["finished_at"]).timestamp()
        windows.append((end - summary["train_seconds"], end))
        tokens += summary["train_tokens"]
    if failed:
        return {"n": n, "failed": failed}
    span = max(e for _, e in windows) - min(s for s, _ in windows)
    return {"n": n, "tokens_per_s": tokens / span, "span_s": span,
            "each_s": sorted(e - s for s, e in windows), "peak_mib": max(peak.values(), default=float("nan"))}


def reference_sweep(root: Path, fraction: float, seeds: int, rows: int | None, gpu: str | None,
                    timeout: float) -> dict:
    """`lit-attention sweep --test` of the reference rows at `fraction` of their FLOP budget, every
    trial at once; its wall time from start to table."""
    spec = yaml.safe_load(REFERENCE_SWEEP.read_text())
    choices = [str((REFERENCE_SWEEP.parent / c).resolve()) for c in spec["space"]["base"]["choices"]]
    spec["space"]["base"]["choices"] = choices[:rows] if rows else choices
    reference_flops = yaml.safe_load(REFERENCE.read_text())["budget"]["flops"]
    trials = len(spec["space"]["base"]["choices"]) * seeds
    spec.update(study_name="gpu-sweep-bench", root=str(root / "sweep"), seeds=seeds, workers=trials)
    spec["fixed"] = {**spec.get("fixed", {}), "budget.flops": reference_flops * fraction}
    path = root / "reference-sweep.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""   # --cpu: the trials must not find a GPU either
    start = time.monotonic()
    with open(root / "reference-sweep.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "lit_attention.cli", "sweep", str(path), "--test"],
                                cwd=B.REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGINT)   # the driver stops its workers' trials and records them
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code = None
    seconds = time.monotonic() - start
    lines = (root / "reference-sweep.log").read_text(errors="replace").splitlines()
    placement = next((line for line in lines if "] placement: " in line), "placement line missing")
    tested = sum(1 for d in (root / "sweep" / "gpu-sweep-bench").glob("t*")
                 if json.loads((d / "summary.json").read_text() if (d / "summary.json").exists() else "{}")
                 .get("test_bleu") is not None)
    return {"trials": trials, "seconds": seconds, "exit": code, "tested": tested, "placement": placement,
            "tail": lines[-3:]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="packs of 1 and 2 trials of 5 steps, a 1-row sweep, "
                   "at most 100 s (smoke test)")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps of each packed fit")
    p.add_argument("--packs", default="1,2,4,8", help="trials packed on the GPU at once, in turn")
    p.add_argument("--budget-fraction", type=float, default=0.1,
                   help="reference sweep: this fraction of the rows' FLOP budget (1: the real one)")
    p.add_argument("--seeds", type=int, default=1, help="reference sweep: seeds per row (3: the real one)")
    p.add_argument("--rows", type=int, default=None, help="reference sweep: only its first N rows (default: all 7)")
    p.add_argument("--no-sweep", action="store_true", help="skip the reference sweep")
    p.add_argument("--time-limit", type=float, default=450, help="seconds for the whole script")
    p.add_argument("--cpu", action="store_true", help="run on the CPU when there is no GPU (checks the script)")
    args = p.parse_args()
    if args.quick:
        args.steps, args.packs, args.budget_fraction, args.rows = 5, "1,2", 0.001, 1
        args.time_limit = min(args.time_limit, 100)
    begin = time.monotonic()
    gpu = None
    if torch.cuda.device_count() > 0:   # NVML: no CUDA context here to take memory from the trials
        gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
        name = gpu_name(gpu)
    elif not args.cpu:
        print(f"no GPU here (torch {torch.__version__}: torch.cuda.device_count() is 0): nothing measured. "
              "Run it on a GPU machine (../shared/gpu/README.md).")
        B.summary("gpu_sweep: no GPU, nothing measured")
        return
    else:
        name = f"no GPU, the CPU ({B.cpu_model()})"
    if not B.have_multi30k():
        sys.exit(f"skipped: Multi30k not found at {B.MULTI30K} (the reference configs train on it)")
    print(f"machine: {name}; {allowed_cores()} cores; torch {torch.__version__}; packs {args.packs}, "
          f"{args.steps} steps each")
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-sweep-") as tmp:
        root = Path(tmp)
        for n in map(int, args.packs.split(",")):
            left = args.time_limit - (time.monotonic() - begin)
            if left < 30:
                print(f"{n} packed: skipped, {left:.0f} s of --time-limit left")
                break
            r = packed(n, args.steps, root, gpu, timeout=left * (0.5 if not args.no_sweep else 1))
            results.append(r)
            print(f"{n} packed: " + (f"{r['tokens_per_s']:,.0f} target tok/s in {r['span_s']:.0f} s (each trained "
                                     f"{r['each_s'][0]:.0f}-{r['each_s'][-1]:.0f} s)" if "failed" not in r
                                     else "FAILED: " + "; ".join(r["failed"])), flush=True)
        base = next((r["tokens_per_s"] for r in results if r["n"] == 1 and "failed" not in r), float("nan"))
        rows_out = [[r["n"], r.get("tokens_per_s", float("nan")), r.get("tokens_per_s", float("nan")) / base,
                     r.get("span_s", float("nan")), r.get("peak_mib", float("nan"))] for r in results]
        sweep = None
        if not args.no_sweep:
            left = args.time_limit - (time.monotonic() - begin)
            sweep = reference_sweep(root, args.budget_fraction, args.seeds, args.rows, gpu,
                                    timeout=max(10.0, left - 20))
    print()
    B.table(["trials on the GPU", "aggregate target tok/s", "x one trial", "span s",
             "GPU MiB of a trial (max seen)"], rows_out)
    most = rows_out[-1] if rows_out else [0, float("nan"), float("nan"), float("nan")]   # the goal: the most packed
    met = "met" if most[2] >= GOAL_RATIO else "NOT met"
    text = (f"gpu_sweep: {most[0]} packed trials {most[1]:,.0f} target tok/s = {most[2]:.2f}x one trial "
            f"(goal >= {GOAL_RATIO:g}: {met})")
    if sweep is not None:
        done = "finished" if sweep["exit"] == 0 else (f"exit {sweep['exit']}" if sweep["exit"] is not None
                                                      else "stopped at the time limit")
        print(f"\nreference sweep: {sweep['trials']} trials ({sweep['trials'] // args.seeds} rows x {args.seeds} "
              f"seed(s)) at {args.budget_fraction:g} of the FLOP budget, tested: {sweep['seconds']:.0f} s wall, "
              f"{done}, {sweep['tested']} tested\n  {sweep['placement']}\n  " + "\n  ".join(sweep["tail"]))
        text += (f"; reference sweep {sweep['trials']} trials at {args.budget_fraction:g} budget "
                 f"{sweep['seconds']:.0f} s wall ({done})")
    print(f"machine: {name}")
    B.summary(text)


if __name__ == "__main__":
    main()
