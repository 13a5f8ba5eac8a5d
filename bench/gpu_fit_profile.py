"""Where `fit`'s step time goes on a GPU, step by step: spans, host-device syncs, Python profile.

`fit` (the reference Transformer on Multi30k 4,096-token batches, 150 steps; lit_attention.cli.main
in this process, every callback it adds) in fp32 and bf16-mixed with step_clock.StepProfile from
step 20: the spans of each step (inside the training step, and between steps: Lightning's loop,
the next batch, an epoch's end), the share of them the main thread spent on a CPU (against the
plain loop's: a launch-bound step keeps it busy, so the rest is waiting, for the GIL that other
threads hold or in a blocking call), and the source lines of every call that waited for the
device. fp32 runs twice more: under cProfile (slower: its spans are not reported), whose top
functions by own and by cumulative time are printed, and with a GIL switch interval of 0.5 ms
instead of Python's 5 (a thread that holds the GIL is asked to let it go ten times sooner: if the
main thread waits for the GIL, these steps are shorter). Last, on a GPU, `fit --model.graph_step
true` (fp32, batches padded to multiples of 8) for 300 steps, its spans and waits from step 170
(its second epoch). The plain loop's ms/step of bench/gpu_throughput.py is measured first, as the
baseline. Without a CUDA GPU it says so and exits 0; ``--device cpu --quick`` runs it on the CPU
with tiny sizes (a check of the script).

    source .gpu/env.sh; python3 bench/gpu_fit_profile.py [--steps 150] [--out DIR]
"""

from __future__ import annotations

import io
import pstats
import statistics
import sys
import tempfile
from pathlib import Path

import torch

import benchlib as B

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


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="folder for the whole profiles")
    import gpu_throughput as G
    args = G.fit_script_args(p, "gpu_fit_profile")
    if args is None:
        return
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
        # fit's graph_step over padded batches, from its second epoch (every shape captured): its
        # steps are far from the plain loop's captured step (18.5 against 13.6 ms, session 23), as if
        # host and device took turns; the waits for the device name what makes them
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
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (not a GPU figure)"
    B.summary(f"gpu_fit_profile: {name}: " + "; ".join(summary))


if __name__ == "__main__":
    main()
