"""`fit`'s checkpoints on a GPU: written in line vs by the writer thread (lightning/checksum.py).

`fit` (the reference Transformer on Multi30k 4,096-token batches, 150 steps, fp32; lit_attention.cli.main
in this process, every callback it adds) three times in one process: checkpoints written by the
writer thread (the default on a GPU), then in line (``ChecksummedCheckpointIO(background=False)``,
the way before issue 38's change), then by the writer thread again (the order's effect). For each:
steps/s from step 20 (validation taken out, as bench/gpu_throughput.py counts), the mean and median
time inside the training step, the mean time between steps, the median time a checkpoint save held
the training thread, and the five longest steps with their index from step 20 (an epoch's end is
the longest; the steps after it run beside the writer).
Without a CUDA GPU it says so and exits 0; ``--device cpu --quick`` runs the same rows on the CPU
with tiny sizes (a check of the script).

    source .gpu/env.sh; python3 bench/gpu_checkpoint_writes.py [--steps 150]
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import torch

import benchlib as B

IO = "lit_attention.lightning.checksum.ChecksummedCheckpointIO"


def main() -> None:
    import gpu_throughput as G
    args = G.fit_script_args(B.parser(__doc__.splitlines()[0]), "gpu_checkpoint_writes")
    if args is None:
        return
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
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (not a GPU figure)"
    B.summary(f"gpu_checkpoint_writes: {name}: writer thread/in line steps/s "
              f"{rates['writer thread'] / rates['in line']:.3f}, "
              f"again {rates['writer thread again'] / rates['in line']:.3f}")


if __name__ == "__main__":
    main()
