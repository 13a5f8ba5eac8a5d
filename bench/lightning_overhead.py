"""Lightning overhead: training steps/s of TranslationModule under a Trainer vs a plain PyTorch loop.

Both train the same nn.Module (``module.net``, from the same initial weights) on the same batches
with the same Adam, inverse-sqrt warm-up schedule, label-smoothed loss and gradient clipping.
Rows: the plain loop (baseline); the Trainer with no logger and no progress bar; the Trainer as
`lit-attention fit` runs it (run-store logger every 10 steps, progress bar). Goal: >= 0.95.

    .venv/bin/python bench/lightning_overhead.py [--quick] [--steps 20] [--rounds 3]
"""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
import time
from pathlib import Path

import lightning.pytorch as L
import torch
from torch.utils.data import DataLoader

import benchlib as B
from lit_attention.lightning.translation import TranslationModule
from lit_attention.tracking.run_store import RunDir, RunStoreLogger


class StepClock(L.Callback):
    """Wall time at the end of every training batch."""

    def __init__(self):
        self.times: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.times.append(time.perf_counter())


def steps_per_second(times: list[float], warmup: int) -> float:
    """Steps after the first ``warmup`` ones, over the time they took."""
    return (len(times) - warmup) / (times[-1] - times[warmup - 1])


def plain_loop(net, batches, lr, warmup_steps, warmup) -> float:
    net.train()
    opt, sched = B.adam_with_warmup(net.parameters(), lr, warmup_steps)
    times = []
    for batch in batches:
        B.train_step(net, opt, sched, batch)
        times.append(time.perf_counter())
    return steps_per_second(times, warmup)


def lightning_loop(module, batches, warmup, as_cli: bool, workdir: Path) -> float:
    clock = StepClock()
    logger = RunStoreLogger(RunDir(workdir / f"run-{time.monotonic_ns()}")) if as_cli else False
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=len(batches), logger=logger,
                        callbacks=[clock], gradient_clip_val=1.0, log_every_n_steps=10,
                        enable_checkpointing=False, enable_progress_bar=as_cli,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                        default_root_dir=str(workdir))
    loader = DataLoader(batches, batch_size=None, shuffle=False)
    # the progress bar is drawn (as a terminal would show it) into a buffer
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(module, train_dataloaders=loader)
    return steps_per_second(clock.times, warmup)


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed first steps per run")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (best is kept)")
    p.add_argument("--max-tokens", type=int, default=4096)
    args = p.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds, args.max_tokens = 3, 1, 1, 128
    B.setup(args)
    dm, data_desc = B.translation_data(args.quick, args.max_tokens)
    batches = B.train_batches(dm, args.warmup + args.steps)
    size = B.TINY_TRANSFORMER if args.quick else B.TRANSFORMER_SIZE
    lr, warmup_steps = 1e-3, 1000
    template = TranslationModule(family="transformer", **size, lr=lr, warmup=warmup_steps,
                                 label_smoothing=0.1, val_bleu=False,
                                 src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size)
    template.configure_model()
    print(f"{B.machine()}\ndata: {data_desc}; {len(batches)} batches of <= {args.max_tokens} tokens; "
          f"model: transformer {size}")

    results = {"plain": [], "lightning": [], "lightning-cli": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            torch.manual_seed(args.seed)
            results["plain"].append(plain_loop(copy.deepcopy(template.net), batches, lr,
                                               warmup_steps, args.warmup))
            for name in ("lightning", "lightning-cli"):
                torch.manual_seed(args.seed)
                module = copy.deepcopy(template)
                results[name].append(lightning_loop(module, batches, args.warmup,
                                                    as_cli=name == "lightning-cli", workdir=Path(tmp)))

    base = max(results["plain"])
    rows = [[name, max(v), 1.0 / max(v) * 1000, max(v) / base] for name, v in results.items()]
    B.table(["loop", "steps/s", "ms/step", "vs plain"], rows)
    bare, cli = max(results["lightning"]) / base, max(results["lightning-cli"]) / base
    B.summary(f"lightning_overhead: Lightning/plain steps/s = {bare:.3f} (as the CLI runs it: "
              f"{cli:.3f}); goal >= 0.95: {'met' if min(bare, cli) >= 0.95 else 'NOT met'}")


if __name__ == "__main__":
    main()
