"""Two parts of bench/gpu_throughput.py that profile `fit` on a GPU rather than rate it
(``--part profile``, ``--part writes``); the reference Transformer on Multi30k 4,096-token batches,
`fit` run in this process (lit_attention.cli.main) with every callback it adds.

profile: fit in fp32 and bf16-mixed with step_clock.StepProfile from step ``--warmup``: the spans
of each step (inside the training step, and between steps: Lightning's loop, the next batch, an
epoch's end), the share of them the main thread spent on a CPU (beside the plain loop's), and the
source lines of every call that made the host wait for the device. fp32 runs twice more: under
cProfile (its top functions printed) and with a GIL switch interval of 0.5 ms instead of Python's
5 ms (if the main thread waits for the GIL, these steps are shorter). On a GPU, last, `fit
--model.graph_step true` over padded batches, its spans from its second epoch.

writes: fit three times with its checkpoints written by the writer thread (the default on a
GPU), in line (``ChecksummedCheckpointIO(background=False)``), and by the writer thread again
(the order's effect): steps/s, the spans inside and between steps, the time a save held the
training thread, and the longest steps.
"""

from __future__ import annotations

import io
import json
import pstats
import statistics
import sys
import tempfile
from pathlib import Path

import torch

import benchlib as B

IO = "lit_attention.lightning.checksum.ChecksummedCheckpointIO"
SWITCH_INTERVAL = 0.0005   # seconds: the GIL switch interval of the extra fp32 run (Python's default: 0.005)


def main_share(cpu: dict) -> float:
    """Per cent of a span's wall time the main thread spent on a CPU (``cpu``: seconds of "wall",
    "main thread" and "process" CPU time, step_clock.cpu_span). The rest it waited: for the GIL,
    in a blocking call, or for a free core on a machine busy with other work (a CUDA wait for the
    device spins on a CPU by default, and the sync-debug count names those)."""
    return 100 * cpu["main thread"] / (cpu["wall"] or float("nan"))


def cpu_share(cpu: dict) -> str:
    """``main_share``, and how busy the other threads kept the process (loader pinning, a
    checkpoint writer, autograd's device thread)."""
    others = max(cpu["process"] - cpu["main thread"], 0.0) / (cpu["wall"] or float("nan"))
    return (f"main thread on a CPU {main_share(cpu):.0f} % of the wall time; other threads {others:.2f} "
            "CPU-s a wall second")


def describe(name: str, profile, out: Path | None) -> None:
    inside, between = (sorted(x) for x in (profile.inside, profile.between))
    n = len(inside)
    print(f"{name}: {n} steps; inside the step median {1000 * statistics.median(inside):.1f} ms, "
          f"mean {1000 * sum(inside) / n:.1f}, max {1000 * inside[-1]:.0f}; between steps median "
          f"{1000 * statistics.median(between):.2f} ms, mean {1000 * sum(between) / n:.2f}, "
          f"max {1000 * between[-1]:.0f}", flush=True)
    busy = statistics.median(c / w for c, w in zip(profile.inside_cpu, profile.inside) if w > 0)
    print(f"  inside the step: main thread on a CPU a median {100 * busy:.0f} % of the time; over all these "
          f"steps: {cpu_share(profile.cpu)}")
    print(f"  Python threads: {', '.join(profile.threads)}; GIL switch interval {1000 * profile.switch_interval:g} ms")
    print(f"  longest steps (index from the start, ms inside + between): {profile.longest(6)}")
    if profile.validations or profile.saves:
        print(f"  epoch ends: {len(profile.validations)} validations, median "
              f"{1000 * statistics.median(profile.validations or [float('nan')]):.0f} ms; {len(profile.saves)} "
              f"checkpoint saves, median {1000 * statistics.median(profile.saves or [float('nan')]):.0f} ms")
    for total, validating, saving in profile.epoch_ends:
        print(f"  an epoch's end (before its next step): {1000 * total:.0f} ms = validation {1000 * validating:.0f} + "
              f"checkpoint saves {1000 * saving:.0f} + the rest {1000 * (total - validating - saving):.0f} (epoch "
              f"hooks, callbacks, the loader's first batch)")
    total = sum(profile.syncs.values())
    print(f"  host waits for the device: {total} ({total / n:.2f} a step)")
    for site, count in profile.syncs.most_common(12):
        print(f"    {count:5d}  {site}")


def print_profile(name: str, profile, out: Path | None) -> None:
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(60)
    if out is not None:
        (out / f"profile-{name.replace(' ', '-')}.txt").write_text(text.getvalue())
    lines = [line for line in text.getvalue().splitlines() if line.strip()]
    print(f"{name}, cProfile, top by own time:")
    if sys.version_info >= (3, 12):
        print("  (Python >= 3.12: cProfile sees the calls of every thread on one stack (sys.monitoring), so a "
              "function's own time can hold another thread's work or a wait for the GIL)")
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    print("\n".join(lines[start:start + 21]), flush=True)


def profile(args) -> str:
    """The profile part; returns its summary."""
    import gpu_loops as G
    import fit_overhead as F
    from step_clock import StepProfile
    from lit_attention.lightning.translation import TranslationModule

    data, dm, batches = G.reference_batches(args)
    model = F.model_args(B.TINY_TRANSFORMER if args.quick else B.TRANSFORMER_SIZE, lr=1e-3, warmup=400)
    torch.manual_seed(args.seed)
    template = TranslationModule(**model, src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size)
    template.configure_model()
    print(G.card(args.device), flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    summary = []
    accelerator = "gpu" if args.device == "cuda" else "cpu"
    for precision in ("32-true", "bf16-mixed"):
        cpu: dict = {}
        plain = 1000 / G.plain_loop(template.net, batches, precision, False, args.warmup, args.device, cpu=cpu)
        print(f"plain loop {precision}: {plain:.1f} ms/step; {cpu_share(cpu)}", flush=True)
        # fp32 also under cProfile, and with a GIL switch interval of SWITCH_INTERVAL instead of
        # Python's 5 ms: if the main thread waits for the GIL, its steps shorten
        runs = [(None, False)] + ([(None, True), (SWITCH_INTERVAL, False)] if precision == "32-true" else [])
        for switch_interval, python_profile in runs:
            callback = {"class_path": "step_clock.StepProfile",
                        "init_args": {"start": args.warmup, "python_profile": python_profile}}
            name = f"fit {precision}" + (f", GIL switch interval {1000 * switch_interval:g} ms"
                                         if switch_interval else "")
            usual = sys.getswitchinterval()
            sys.setswitchinterval(switch_interval or usual)
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    F.fit_clock(data, model, args.steps, args.seed, Path(tmp), accelerator, precision,
                                callbacks=(callback,))
            finally:
                sys.setswitchinterval(usual)
            profile = StepProfile.last
            if python_profile:
                print_profile(name, profile.profile, args.out)
                continue
            describe(name, profile, args.out)
            fit = (f"fit median inside {statistics.median(profile.inside) * 1000:.1f} ms + between "
                   f"{statistics.median(profile.between) * 1000:.1f} ms, "
                   f"{sum(profile.syncs.values()) / len(profile.inside):.2f} waits a step, main thread on a CPU "
                   f"{main_share(profile.cpu):.0f} %")
            summary.append(f"{name.removeprefix('fit ')}: {fit}" if switch_interval else
                           f"{precision}: plain {plain:.1f} ms (main thread on a CPU {main_share(cpu):.0f} %), {fit}")
    if args.device == "cuda":   # last (a capture that fails can leave the device unusable)
        # fit's graph_step over padded batches, from its second epoch (every shape captured); the
        # waits for the device name what keeps its steps from the plain loop's captured step
        callback = {"class_path": "step_clock.StepProfile", "init_args": {"start": args.steps + args.warmup}}
        padded = {**data, "pad_to_lengths": G.padded_lengths(dm)}
        with tempfile.TemporaryDirectory() as tmp:
            F.fit_clock(padded, {**model, "graph_step": True}, 2 * args.steps, args.seed, Path(tmp), accelerator,
                        "32-true", callbacks=(callback,))
        profile = StepProfile.last
        describe("fit 32-true, padded, graph_step, after one epoch", profile, args.out)
        summary.append(f"graph_step 32-true padded: fit median inside {statistics.median(profile.inside) * 1000:.1f} ms "
                       f"+ between {statistics.median(profile.between) * 1000:.1f} ms, "
                       f"{sum(profile.syncs.values()) / len(profile.inside):.2f} waits a step")
    else:
        print("fit 32-true, padded, graph_step: not run (it replays CUDA graphs)")
    return "step profile: " + "; ".join(summary)


def writes(args) -> str:
    """The checkpoint-writer part; returns its summary."""
    import gpu_loops as G
    import fit_overhead as F
    from step_clock import StepClock, StepProfile
    StepClock.wall, StepClock.wall_sync_at = True, args.warmup

    data, _, _ = G.reference_batches(args)
    model = F.model_args(B.TINY_TRANSFORMER if args.quick else B.TRANSFORMER_SIZE, lr=1e-3, warmup=400)
    print(G.card(args.device), flush=True)
    rates = {}
    for label, background in (("writer thread", True), ("in line", False), ("writer thread again", True)):
        plugin = ["--trainer.plugins", json.dumps({"class_path": IO, "init_args": {"background": background}})]
        callback = {"class_path": "step_clock.StepProfile", "init_args": {"start": args.warmup}}
        with tempfile.TemporaryDirectory() as tmp:
            clock = F.fit_clock(data, model, args.steps, args.seed, Path(tmp), "gpu" if args.device == "cuda" else "cpu",
                                "32-true", extra=tuple(plugin), callbacks=(callback,))
        spans = StepProfile.last
        rates[label] = clock.rate(args.warmup)
        print(f"{label}: {rates[label]:.2f} steps/s; inside the step mean {statistics.mean(spans.inside) * 1e3:.1f} ms, "
              f"median {statistics.median(spans.inside) * 1e3:.1f}; between steps mean "
              f"{statistics.mean(spans.between) * 1e3:.2f} ms; {len(spans.saves)} checkpoint saves, median "
              f"{statistics.median(spans.saves or [float('nan')]) * 1e3:.1f} ms; longest (ms inside + between): "
              f"{spans.longest(5)}",
              flush=True)
    return (f"checkpoint writes: writer thread/in line steps/s {rates['writer thread'] / rates['in line']:.3f}, "
            f"again {rates['writer thread again'] / rates['in line']:.3f}")
