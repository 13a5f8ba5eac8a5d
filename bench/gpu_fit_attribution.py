"""Where `fit`'s step time goes on a GPU: `fit` as it runs, then with one more part switched off
per row, against a plain loop over the same batches, in one call.

Rows (the reference Transformer on Multi30k 4,096-token batches, fp32, 150 steps, 20 untimed,
wall time with the device synchronized at both ends): the plain loop of bench/gpu_throughput.py;
`fit` as it runs (lit_attention.cli.main in this process); without the budget's FLOP counting of
new batch shapes (its counter told every shape is known: a measurement only, the run's FLOPs are
then wrong); and also without per-module gradient norms and gradient flow
(``--diagnostics.module_norm_every 0 --diagnostics.gradflow_every 0``). (The progress bar, switched
off in a row of its own on 2026-11-27, made no difference: that row is gone.) Without a CUDA GPU it says so and exits 0.

    source .gpu/env.sh; python3 bench/gpu_fit_attribution.py [--steps 150]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

import benchlib as B

DIAGNOSTICS_OFF = ("--diagnostics.module_norm_every", "0", "--diagnostics.gradflow_every", "0")


def count_no_flops() -> None:
    """Make the budget's counter treat every batch shape as counted already (0 FLOPs)."""
    import lit_attention.models.flops as flops

    def start(self, key):
        self._key, self._counting, self._recurrent, self._seen = key, True, 0, 0
        self.cached.setdefault(key, 0)
    flops.TrainingFlopCounter.start = start


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(f"no CUDA GPU on this machine (torch {torch.__version__}): nothing measured")
        B.summary("gpu_fit_attribution: not measured: no CUDA GPU on this machine")
        return
    args.threads = args.threads or 8
    B.setup(args)
    import fit_overhead as F
    import gpu_throughput as G
    from step_clock import StepClock
    from lit_attention.data.translation import TranslationDataModule
    from lit_attention.lightning.translation import TranslationModule

    StepClock.wall, StepClock.wall_sync_at = True, args.warmup
    data, model = G.multi30k_args(), F.model_args(B.TRANSFORMER_SIZE, lr=1e-3, warmup=400)
    dm = TranslationDataModule(**data)
    dm.setup("fit")
    batches = [{k: v.pin_memory() for k, v in b.items()} for b in B.train_batches(dm, args.steps)]
    tokens = sum(B.target_tokens(b) for b in batches[args.warmup:]) / (args.steps - args.warmup)
    torch.manual_seed(args.seed)
    template = TranslationModule(**model, src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size)
    template.configure_model()
    print(G.card("cuda"), flush=True)
    rates = {"plain loop": G.plain_loop(template.net, batches, "32-true", False, args.warmup, "cuda")}
    rows = [("fit", (), False), ("without FLOP counting", (), True),
            ("and without module norms, gradient flow", DIAGNOSTICS_OFF, True)]
    for name, extra, no_flops in rows:
        if no_flops:
            count_no_flops()
        with tempfile.TemporaryDirectory() as tmp:
            rates[name] = F.fit_clock(data, model, args.steps, args.seed, Path(tmp), "gpu", "32-true",
                                      extra).rate(args.warmup)
        print(f"{name}: {rates[name]:.1f} steps/s", flush=True)
    base = rates["plain loop"]
    B.table(["row", "target tok/s", "ms/step", "vs plain"],
            [[name, rate * tokens, 1000 / rate, rate / base] for name, rate in rates.items()])
    B.summary(f"gpu_fit_attribution: {torch.cuda.get_device_name(0)}: "
              + "; ".join(f"{name} {rate / base:.3f}" for name, rate in rates.items() if name != "plain loop"))


if __name__ == "__main__":
    main()
