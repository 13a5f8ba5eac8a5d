"""fit overhead: training steps/s of `lit-attention fit` (every callback it adds) vs a plain loop.

`fit` runs in this process through ``lit_attention.cli.main`` exactly as the command line runs it:
the run store and its logger, the training budget's token and FLOP counting, the diagnostics at
their default intervals (gradient norms, per-module norms every 50 steps, gradient flow every 100),
checkpoints, the progress bar (drawn into a buffer). After each of its steps a plain loop takes one
step on the same batch (step_clock.PairedPlainStep): a copy of the model with the same fused Adam,
schedule, fused loss and clipping, timed apart. The two alternate step by step so that both see
the same machine: run one after the other, the plain loop's own rate moves between rounds of one
invocation by more than the overhead measured. Validation (at the end of the epoch) is not
timed. Time is this process's CPU time (one torch thread): the machine is shared, and wall time
counted the work of other processes.

A second figure leaves out the steps whose batch shape is new: the budget counts the FLOPs of
each new shape once (models/flops.py), which over a whole run is paid by few of its steps
(a Multi30k run has about a hundred shapes in a thousand steps).

The model is small enough for the step's fixed costs to show on a CPU (what a launch-bound GPU
step also exposes); goal: fit/plain >= 0.9 (the median of the rounds).

A bare Lightning Trainer runs the same pairs once more: a LightningModule whose training step is the
plain loop's loss, with Lightning's own clipping and schedule, and no logger, checkpoint, progress
bar or callback of ours (BareModule). Of the milliseconds `fit` adds to a step, this is the part
that Lightning's loop costs by itself, which nothing in lit_attention can remove.

    .venv/bin/python bench/fit_overhead.py [--quick] [--steps 150] [--rounds 3]
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import statistics
import tempfile
from pathlib import Path

import lightning.pytorch as L
import torch

import benchlib as B
from step_clock import PairedPlainStep, StepClock

GOAL = 0.9
# Small enough for a step's fixed costs to show on a 2-core CPU.
SMALL_TRANSFORMER = dict(d_model=64, heads=4, enc_layers=2, dec_layers=2, ffn=128, dropout=0.1,
                         norm="pre", tie_embeddings=True)


def data_args(quick: bool, max_tokens: int) -> dict:
    """TranslationDataModule arguments (synthetic toy-mt: no files, the same batches every time)."""
    return dict(task="toy-mt", n_train=1000 if quick else 10000, n_val=50, n_test=50, max_len_words=20,
                tokenizer="word", max_tokens=max_tokens, cache_dir=str(B.REPO / ".cache" / "lit_attention"))


def model_args(size: dict, lr: float, warmup: int) -> dict:
    return dict(family="transformer", **size, lr=lr, warmup=warmup, label_smoothing=0.1, val_bleu=False)


def _arg(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def fit_clock(data: dict, model: dict, steps: int, seed: int, root: Path, accelerator: str = "cpu",
              precision: str = "32-true", extra: tuple[str, ...] = (), paired: bool = False,
              callbacks: tuple[dict, ...] = ()) -> StepClock:
    """The step clock of `lit-attention fit` run in this process; ``paired``: with a plain step
    after each of its steps (``PairedPlainStep.last`` holds them); ``callbacks``: more callbacks (class_path and init_args)."""
    from lit_attention.cli import main

    callbacks = [{"class_path": "step_clock.StepClock"}, *callbacks]
    if paired:
        callbacks.append({"class_path": "step_clock.PairedPlainStep",
                          "init_args": {"lr": model["lr"], "warmup": model["warmup"]}})
    argv = ["fit", "--seed_everything", str(seed), "--run.root", str(root),
            "--trainer.accelerator", accelerator, "--trainer.devices", "1", "--trainer.precision", precision,
            "--trainer.max_steps", str(steps),
            "--trainer.callbacks", json.dumps(callbacks),
            "--model", "lit_attention.lightning.translation.TranslationModule",
            *[f"--model.{k}={_arg(v)}" for k, v in model.items()],
            "--data", "lit_attention.data.translation.TranslationDataModule",
            *[f"--data.{k}={_arg(v)}" for k, v in data.items()], *extra]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(argv)
    if status != 0:
        raise SystemExit(f"fit exited with {status}:\n{err.getvalue()[-3000:]}")
    for line in err.getvalue().splitlines():   # what the run says of its own measurements
        if line.startswith("note:"):
            print(f"fit {precision}: {line}", flush=True)
    steps_clock = StepClock.last
    if len(steps_clock.times) != steps:
        raise SystemExit(f"fit trained {len(steps_clock.times)} steps, not {steps}")
    return steps_clock


def fit_steps_per_second(data: dict, model: dict, steps: int, warmup: int, seed: int, root: Path,
                         accelerator: str = "cpu", precision: str = "32-true") -> float:
    """Steps/s of `lit-attention fit` (run in this process), validation taken out."""
    return fit_clock(data, model, steps, seed, root, accelerator, precision).rate(warmup)


class BareModule(L.LightningModule):
    """The plain loop's step under Lightning's automatic optimization: its loss (benchlib), fused
    Adam and per-step schedule; Lightning clips (``gradient_clip_val``)."""

    def __init__(self, net: torch.nn.Module, lr: float, warmup: int):
        super().__init__()
        self.net, self.lr, self.warmup = copy.deepcopy(net), lr, warmup

    def training_step(self, batch, batch_idx):
        return B.seq2seq_loss(self.net, batch)

    def configure_optimizers(self):
        opt, sched = B.adam_with_warmup(self.net.parameters(), self.lr, self.warmup)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def bare_lightning(data: dict, model: dict, steps: int, seed: int) -> PairedPlainStep:
    """BareModule trained for ``steps`` by a Trainer with nothing else, over the training batches
    `fit` gets (the data module's loader), each step paired with a plain step (step_clock)."""
    from lit_attention.data.translation import TranslationDataModule
    from lit_attention.lightning.translation import TranslationModule

    L.seed_everything(seed, verbose=False)
    dm = TranslationDataModule(**data)
    dm.setup("fit")
    template = TranslationModule(**model, src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size)
    template.configure_model()
    pair = PairedPlainStep(model["lr"], model["warmup"])
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, gradient_clip_val=1.0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[pair])
    trainer.fit(BareModule(template.net, model["lr"], model["warmup"]), train_dataloaders=dm.train_dataloader())
    return pair


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="steps per run (a gradient-flow step among them)")
    p.add_argument("--warmup", type=int, default=10, help="untimed first steps per run")
    p.add_argument("--rounds", type=int, default=3, help="fit runs (the median ratio is kept)")
    p.add_argument("--max-tokens", type=int, default=512)
    args = p.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds, args.max_tokens = 30, 2, 1, 256
    args.threads = args.threads or 1      # overhead-bound: one thread, less at the mercy of a busy machine
    os.environ["OMP_NUM_THREADS"] = str(args.threads)   # what `fit` sets its threads from (threads.py)
    B.setup(args)
    size = B.TINY_TRANSFORMER if args.quick else SMALL_TRANSFORMER
    data, model = data_args(args.quick, args.max_tokens), model_args(size, lr=1e-3, warmup=400)
    print(f"{B.machine()}\ndata: synthetic toy-mt, batches of <= {args.max_tokens} tokens; "
          f"model: transformer {size}; {args.steps} steps ({args.warmup} untimed) per run, fp32")

    results = {"fit/plain": [], "fit/plain, known shapes": []}
    extra = {"fit": [], "bare Lightning": []}   # ms a step over the plain step (known shapes, median)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            fit_clock(data, model, args.steps, args.seed, Path(tmp) / f"round{r}", paired=True)
            pair = PairedPlainStep.last
            results["fit/plain"].append(pair.ratio(args.warmup))
            results["fit/plain, known shapes"].append(pair.ratio(args.warmup, seen_shapes_only=True))
            extra["fit"].append(pair.median_extra_ms(args.warmup))
            timed = len(pair.fit_spans) - args.warmup
            fit_ms, plain_ms = (1000 * sum(spans[args.warmup:]) / timed for spans in (pair.fit_spans, pair.plain_spans))
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                extra["bare Lightning"].append(bare_lightning(data, model, args.steps, args.seed)
                                               .median_extra_ms(args.warmup))
            print(f"round {r + 1}/{args.rounds}: fit {fit_ms:.1f}, plain {plain_ms:.1f} CPU ms/step; "
                  + ", ".join(f"{name} {v[-1]:.3f}" for name, v in results.items())
                  + f"; {len(set(pair.keys))} batch shapes in {args.steps} steps; over the plain step (median, "
                  f"known shapes): fit +{extra['fit'][-1]:.2f} ms, a bare Lightning Trainer "
                  f"+{extra['bare Lightning'][-1]:.2f} ms", flush=True)


    fit_extra, bare_extra = (statistics.median(v) for v in extra.values())
    print(f"CPU ms a step over the plain step (a step of a known shape, median of the rounds): fit +{fit_extra:.2f}, "
          f"of which a bare Lightning Trainer (no logger, checkpoint, callback or hook of ours) +{bare_extra:.2f}")
    middle = {name: statistics.median(v) for name, v in results.items()}
    B.table(["ratio", "median", "rounds"], [[name, middle[name], " ".join(f"{x:.3f}" for x in v)]
                                           for name, v in results.items()])
    ratio, known = middle["fit/plain"], middle["fit/plain, known shapes"]
    B.summary(f"fit_overhead: fit/plain steps/s = {ratio:.3f} (steps of a known batch shape: {known:.3f}); "
              f"goal >= {GOAL}: {'met' if ratio >= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
