"""GPU training throughput: a plain PyTorch loop vs `lit-attention fit`, fp32 and bf16, eager and compiled.

The reference Transformer (configs/reference/multi30k-transformer.yaml's size) on Multi30k
4,096-token batches (synthetic toy-mt when ../shared/data is missing). Rows:

- plain loop: the model, fused loss, fused Adam, schedule and clipping, batches collated before
  timing and pinned, moved with non_blocking copies; attention under models/sdpa_backends.py's
  choice; ``torch.compile(net, dynamic=True)`` for the compiled rows (one graph for all shapes);
- fit: ``lit_attention.cli.main(["fit", ...])`` in this process, every callback it adds; the
  compiled rows with ``--model.compile_step true``;
- "padded": the plain loop over batches padded to multiples of 8 (``data.pad_to_lengths``: 11
  shapes in an epoch instead of 35, 1.2x the steps), eager, compiled
  (dynamic), and compiled with CUDA graphs (``mode="reduce-overhead"``: a graph recorded per
  shape, which only few shapes make affordable). Their tokens/s count the target tokens of their
  own batches, so they compare with the unpadded rows in useful work; on a GPU also bf16 over
  padded batches with cuDNN's attention allowed (it builds a plan per shape: the
  reason sdpa_backends.py never allows it for unpadded batches);
- "whole step in a CUDA graph" (on a GPU, last): the padded plain loop with each shape's whole
  step (forward, loss, backward, clipping, Adam) captured once with ``torch.cuda.graph`` and
  replayed: the eager kernels without launching them one by one from Python, nothing compiled.
- "graph_step's forward and backward" (on a GPU, last): the padded plain loop with the loss's
  forward and backward from graph_step's graphs (lightning/graphed_step.GraphedLoss), clipping and
  Adam eager, timed after a first epoch as the next rows;
- "graph_step" (on a GPU, last): `fit` over the padded batches with ``--model.graph_step true``
  (lightning/graphed_step.py: forward and backward replayed from a graph per shape, the rest eager),
  twice the steps, timed after the first ``--steps`` (a first epoch: each shape's graph is
  captured at its second step, as in a run's first epoch).

Rows run eager first, then compiled (compiling takes tens of seconds a row); those not started
when ``--time-limit`` has passed are skipped and said so.

Printed: target tokens/s, ms/step, and the ratios with goals: fit/plain (>= 0.9), bf16-mixed/fp32
under fit (>= 1.3), compiled/eager plain (>= 1.5). On a machine without a CUDA GPU it says so and
exits 0. ``--part profile`` and ``--part writes`` run gpu_fit_parts.py's profiles of `fit` instead
of the rows.

    .venv/bin/python bench/gpu_throughput.py [--quick] [--steps 150] [--no-compile] [--part rows|profile|writes]

``--device cpu`` runs the same rows on the CPU (a check of the script, not a GPU figure).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

import torch

import benchlib as B
from gpu_loops import card, multi30k_args, no_gpu, padded_lengths, plain_loop, reference_batches, sync

GOALS = {"fit/plain fp32": 0.9, "fit/plain bf16": 0.9, "bf16/fp32 fit": 1.3, "compiled/eager plain fp32": 1.5,
         "fit compiled/plain eager fp32": 1.5, "fit graph_step padded/plain eager fp32": 1.5,
         "fit graph_step padded bf16/plain eager fp32": 1.5, "bf16/fp32 fit graph_step": 1.3,
         "fit/plain graph_step padded fp32": 0.9}


def captured_loop(template, batches: list[dict], precision: str, warmup: int) -> float:
    """Steps/s of the plain loop with each batch shape's whole step (forward, loss, backward,
    clipping, Adam) captured once in a CUDA graph and then replayed (torch.cuda.graph): the eager
    kernels without their ~950 launches from Python, nothing compiled. A graph per shape, so for
    padded batches (few shapes); a new shape's capture (2 warm-up steps on a side stream, then the
    capture) counts in the timed span when it falls there. The learning rate is a device tensor
    the schedule fills (Adam capturable)."""
    import copy

    from lit_attention.lightning.optim import inverse_sqrt_warmup
    from lit_attention.models.sdpa_backends import attention_backends
    net = copy.deepcopy(template).to("cuda").train()
    lr = torch.tensor(1e-3, device="cuda")
    opt = torch.optim.Adam(net.parameters(), lr=lr, betas=(0.9, 0.98), fused=True, capturable=True)
    factor = inverse_sqrt_warmup(400)
    bf16 = precision == "bf16-mixed"
    graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, dict]] = {}

    def step(batch: dict) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            loss = B.seq2seq_loss(net, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()

    start = None
    with attention_backends("cuda", precision):
        for i, batch in enumerate(batches):
            if i == warmup:
                sync("cuda")
                start = time.perf_counter()
            lr.fill_(1e-3 * factor(i))
            key = tuple((k, tuple(v.shape)) for k, v in sorted(batch.items()))
            if key not in graphs:
                static = {k: v.to("cuda") for k, v in batch.items()}
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(2):
                        opt.zero_grad(set_to_none=True)
                        step(static)
                torch.cuda.current_stream().wait_stream(side)
                opt.zero_grad(set_to_none=True)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    step(static)
                graphs[key] = (graph, static)
            graph, static = graphs[key]
            for k, v in batch.items():
                static[k].copy_(v, non_blocking=True)
            graph.replay()
    sync("cuda")
    return (len(batches) - warmup) / (time.perf_counter() - start)


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="steps per row")
    p.add_argument("--warmup", type=int, default=20, help="untimed first steps per row")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="skip the compiled rows")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--rows", default="", help="run only the rows whose name this regular expression finds")
    p.add_argument("--time-limit", type=float, default=300.0,
                   help="seconds after which the rows not yet started are skipped (the table and ratios "
                        "still print)")
    p.add_argument("--part", choices=("rows", "profile", "writes"), default="rows",
                   help="the rows (default), or a part of gpu_fit_parts.py: fit's step profile, its checkpoint writer")
    p.add_argument("--out", type=Path, default=None, help="folder for the whole Python profiles (--part profile)")
    args = p.parse_args()
    if no_gpu(args, "gpu_throughput"):
        return
    if args.quick:
        args.steps, args.warmup = 12, 4
    args.threads = args.threads or min(os.cpu_count() or 1, 8)
    B.setup(args)
    if args.part != "rows":
        import gpu_fit_parts
        found = getattr(gpu_fit_parts, args.part)(args)
        name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (not a GPU figure)"
        B.summary(f"gpu_throughput: {name}: {found}")
        return
    import fit_overhead as F
    from step_clock import StepClock
    StepClock.wall, StepClock.wall_sync_at = True, args.warmup   # the span the plain loop times too
    from lit_attention.lightning.translation import TranslationModule

    data, dm, batches = reference_batches(args)
    data_desc = "Multi30k de->en (8k joint unigram SentencePiece)" if data["task"] == "files" else "synthetic toy-mt"
    tokens = sum(B.target_tokens(b) for b in batches[args.warmup:]) / (args.steps - args.warmup)
    _, padded_dm, padded = reference_batches(args, pad_to_lengths=padded_lengths(dm))
    padded_tokens = sum(B.target_tokens(b) for b in padded[args.warmup:]) / (args.steps - args.warmup)
    size = B.TINY_TRANSFORMER if args.quick else B.TRANSFORMER_SIZE
    model = F.model_args(size, lr=1e-3, warmup=400)
    torch.manual_seed(args.seed)
    template = TranslationModule(**model, src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size)
    template.configure_model()
    print(f"{card(args.device)}\ndata: {data_desc}, 4,096-token batches, {tokens:,.0f} target tokens a step; "
          f"model: transformer {size}; {args.steps} steps a row ({args.warmup} untimed)", flush=True)

    rates: dict[str, float] = {}       # target tokens/s
    steps_per_s: dict[str, float] = {}
    failed: list[str] = []
    began = time.perf_counter()

    def row(name: str, run, step_tokens: float = tokens) -> None:
        """Time one row, unless the time limit has passed (rows run in the order of their value)."""
        if not re.search(args.rows, name):
            return
        if time.perf_counter() - began > args.time_limit:
            print(f"{name}: skipped (--time-limit {args.time_limit:.0f} s passed)", flush=True)
            return
        t0 = time.perf_counter()
        try:
            steps = run()
        except Exception as exc:   # one failing row (a compiler error) must not lose the others
            print(f"{name}: FAILED: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
            failed.append(name)
            return
        rates[name], steps_per_s[name] = steps * step_tokens, steps
        print(f"{name}: {steps:.1f} steps/s ({time.perf_counter() - t0:.0f} s with set-up and compiling)",
              flush=True)

    def fit(precision: str, compiled: bool, graph_step: bool = False, **data_options):
        # graph_step captures a shape at its second step: timed after a first epoch (~124 steps of
        # Multi30k), when every shape has its graph, as in a run's later epochs; the same number
        # of timed steps and epoch ends as the other rows
        steps, warmup = (2 * args.steps, args.steps + args.warmup) if graph_step else (args.steps, args.warmup)

        def run():
            graphed = {"graph_step": True} if graph_step else {}
            with tempfile.TemporaryDirectory() as tmp:
                return F.fit_steps_per_second({**data, **data_options},
                                              {**model, "compile_step": compiled, **graphed},
                                              steps, warmup, args.seed, Path(tmp),
                                              accelerator=accelerator, precision=precision)
        return run

    accelerator = "gpu" if args.device == "cuda" else "cpu"
    precisions = ("32-true", "bf16-mixed")
    for precision in precisions:
        row(f"plain {precision}", lambda: plain_loop(template.net, batches, precision, False, args.warmup, args.device))
        row(f"fit {precision}", fit(precision, False))
        if precision == "32-true":   # fit's loader workers (data.num_workers null: 2 on a GPU) vs none
            row("fit 32-true, no loader workers", fit(precision, False, num_workers=0))
    if args.compile:
        for precision in precisions:
            row(f"plain {precision} compiled",
                lambda: plain_loop(template.net, batches, precision, True, args.warmup, args.device))
            row(f"fit {precision} compiled", fit(precision, True))
    for precision in precisions:
        row(f"plain {precision}, padded",
            lambda: plain_loop(template.net, padded, precision, False, args.warmup, args.device), padded_tokens)
        if args.device == "cuda" and precision == "bf16-mixed":   # cuDNN plans a shape once: 11 plans
            row("plain bf16-mixed, padded, cuDNN attention",
                lambda: plain_loop(template.net, padded, precision, False, args.warmup, args.device,
                                   cudnn_attention=True), padded_tokens)
        if args.compile:
            row(f"plain {precision} compiled, padded",
                lambda: plain_loop(template.net, padded, precision, True, args.warmup, args.device), padded_tokens)
            if args.device == "cuda":
                row(f"plain {precision} compiled with CUDA graphs, padded",
                    lambda: plain_loop(template.net, padded, precision, True, args.warmup, args.device, True),
                    padded_tokens)

    if args.device == "cuda":   # last: a capture that fails can leave the device unusable for later rows
        for precision in precisions:
            row(f"plain {precision}, padded, whole step in a CUDA graph",
                lambda: captured_loop(template.net, padded, precision, args.warmup), padded_tokens)
        # the plain loop with graph_step's capture (forward and backward), over the padded batches
        # twice and timed in the second pass as the fit rows below: beside the whole step's capture
        # above and fit's below, it tells what graph_step leaves to `fit` and what to its scope
        row("plain 32-true, padded, graph_step's forward and backward, after one epoch",
            lambda: plain_loop(template.net, padded * 2, "32-true", False, len(padded) + args.warmup, "cuda",
                               graphed_loss=True), padded_tokens)
        pad = {"pad_to_lengths": padded_dm.pad_to_lengths}
        for precision in precisions:   # fit's own: forward and backward replayed (model.graph_step)
            row(f"fit {precision}, padded, graph_step, after one epoch",
                fit(precision, False, graph_step=True, **pad), padded_tokens)

    base = rates.get("plain 32-true")
    B.table(["row", "target tok/s", "ms/step", "vs plain fp32"],
            [[name, rate, 1000 / steps_per_s[name], rate / base if base else float("nan")]
             for name, rate in rates.items()])
    pairs = {"fit/plain fp32": ("fit 32-true", "plain 32-true"),
             "fit/plain bf16": ("fit bf16-mixed", "plain bf16-mixed"),
             "bf16/fp32 fit": ("fit bf16-mixed", "fit 32-true"),
             "fit loader workers/none fp32": ("fit 32-true", "fit 32-true, no loader workers"),
             "compiled/eager plain fp32": ("plain 32-true compiled", "plain 32-true"),
             "fit compiled/plain eager fp32": ("fit 32-true compiled", "plain 32-true"),
             "fit compiled bf16/plain eager fp32": ("fit bf16-mixed compiled", "plain 32-true"),
             "bf16/fp32 fit compiled": ("fit bf16-mixed compiled", "fit 32-true compiled"),
             "fit/plain compiled fp32": ("fit 32-true compiled", "plain 32-true compiled"),
             "padded/unpadded plain fp32": ("plain 32-true, padded", "plain 32-true"),
             "bf16 padded/plain fp32": ("plain bf16-mixed, padded", "plain 32-true"),
             "bf16 padded cuDNN attention/plain fp32": ("plain bf16-mixed, padded, cuDNN attention", "plain 32-true"),
             "CUDA graph of the eager step padded/plain eager fp32":
                 ("plain 32-true, padded, whole step in a CUDA graph", "plain 32-true"),
             "CUDA graph of the eager step padded bf16/plain eager fp32":
                 ("plain bf16-mixed, padded, whole step in a CUDA graph", "plain 32-true"),
             "fit graph_step padded/plain eager fp32": ("fit 32-true, padded, graph_step, after one epoch",
                                                         "plain 32-true"),
             "plain graph_step padded/plain eager fp32":
                 ("plain 32-true, padded, graph_step's forward and backward, after one epoch", "plain 32-true"),
             "fit/plain graph_step padded fp32":
                 ("fit 32-true, padded, graph_step, after one epoch",
                  "plain 32-true, padded, graph_step's forward and backward, after one epoch"),
             "fit graph_step padded bf16/plain eager fp32": ("fit bf16-mixed, padded, graph_step, after one epoch",
                                                              "plain 32-true"),
             "bf16/fp32 fit graph_step": ("fit bf16-mixed, padded, graph_step, after one epoch",
                                          "fit 32-true, padded, graph_step, after one epoch"),
             "compiled padded/plain eager fp32": ("plain 32-true compiled, padded", "plain 32-true"),
             "CUDA graphs padded/plain eager fp32": ("plain 32-true compiled with CUDA graphs, padded", "plain 32-true"),
             "CUDA graphs padded bf16/plain eager fp32":
                 ("plain bf16-mixed compiled with CUDA graphs, padded", "plain 32-true")}
    ratios = {name: rates[a] / rates[b] for name, (a, b) in pairs.items() if a in rates and b in rates}
    for name, value in ratios.items():
        goal = GOALS.get(name)
        print(f"{name}: {value:.3f}" + (f" (goal >= {goal}: {'met' if value >= goal else 'NOT met'})" if goal else ""))
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (not a GPU figure)"
    B.summary(f"gpu_throughput: {name}: " + "; ".join(f"{k} {v:.3f}" for k, v in ratios.items())
              + (f"; FAILED rows: {', '.join(failed)}" if failed else ""))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
