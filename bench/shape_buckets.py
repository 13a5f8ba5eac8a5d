"""Shape buckets: how many training batch shapes `data.pad_to_lengths` leaves, at what padding cost.

A compiled step builds a graph per batch shape (CUDA graphs and ``dynamic=False`` need static
shapes), the training budget's FLOP counter counts each new shape once, and a GPU attention
backend may plan per shape. Token batches have a new shape nearly every step; padding each
batch's source and target to a listed length bounds the shapes, and costs padding (more steps
per epoch for the same sentences). For each candidate list, over ``--epochs`` epochs of the
training data (Multi30k de->en with the reference data settings, 4,096-token batches; synthetic
toy-mt with --quick or without ../shared/data): steps per epoch, distinct (src, tgt) shapes, and
the padding share (PAD positions / all positions of src and tgt_in). Data only: no model runs.

    .venv/bin/python bench/shape_buckets.py [--quick] [--epochs 3] [--max-tokens 4096]
"""

from __future__ import annotations

import math

import benchlib as B
from lit_attention.data.translation import TranslationDataModule
from lit_attention.data.vocab import PAD

PROPOSED = "multiples of 8"


def candidates(max_len: int) -> dict[str, list[int] | None]:
    """Lists to measure, each ending at the first of its steps that holds max_len tokens and EOS."""
    def every(step: int) -> list[int]:
        return list(range(step, math.ceil((max_len + 1) / step) * step + 1, step))
    geometric = [n for n in (8, 12, 16, 24, 32, 48, 64, 96) if n <= max_len] + [max_len + 1]
    return {"unpadded": None, "multiples of 4": every(4), "multiples of 8": every(8),
            "multiples of 16": every(16), "x1.5 steps (8, 12, 16, 24, ...)": geometric}


def data_module(real: bool, max_tokens: int, pad_to_lengths: list[int] | None, pairs: int) -> TranslationDataModule:
    cache = str(B.REPO / ".cache" / "lit_attention")
    if real:   # the reference data settings (configs/reference/multi30k-transformer.yaml)
        return TranslationDataModule(task="files", data_dir=str(B.MULTI30K), src_lang="de", tgt_lang="en",
                                     train_split="train", tokenizer="sentencepiece", spm_model="unigram",
                                     vocab_size=8000, joint_vocab=True, max_tokens=max_tokens, max_len=128,
                                     cache_dir=cache, pad_to_lengths=pad_to_lengths)
    return TranslationDataModule(task="toy-mt", n_train=pairs, n_val=10, n_test=10, tokenizer="word",
                                 max_tokens=max_tokens, cache_dir=cache, pad_to_lengths=pad_to_lengths)


def measure(dm: TranslationDataModule, epochs: int) -> dict:
    """Steps per epoch, distinct shapes (first epoch, all epochs), padding share, over ``epochs``."""
    loader = dm.train_dataloader()
    shapes, first, steps, pads, positions = set(), None, 0, 0, 0
    for epoch in range(epochs):
        loader.batch_sampler.set_epoch(epoch)
        for batch in loader:
            shapes.add(tuple(batch["src"].shape) + tuple(batch["tgt_in"].shape))
            steps += 1
            pads += int((batch["src"] == PAD).sum() + (batch["tgt_in"] == PAD).sum())
            positions += batch["src"].numel() + batch["tgt_in"].numel()
        first = first or len(shapes)
    return {"steps": steps / epochs, "first": first, "shapes": len(shapes), "padding": pads / positions}


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=4096)
    args = p.parse_args()
    pairs = 2000
    if args.quick:
        args.epochs, args.max_tokens, pairs = 2, 512, 500
    B.setup(args)
    real = not args.quick and B.have_multi30k()
    if not args.quick and not real:
        print(f"note: Multi30k not found at {B.MULTI30K}; measuring synthetic toy-mt instead")
    desc = "Multi30k de->en train (8k joint unigram SentencePiece)" if real else f"synthetic toy-mt ({pairs:,} pairs)"
    print(f"{B.machine()}\ndata: {desc}, {args.max_tokens}-token batches, {args.epochs} epochs (data only)\n")
    rows, results = [], {}
    for name, lengths in candidates(128).items():
        dm = data_module(real, args.max_tokens, lengths, pairs)
        r = results[name] = measure(dm, args.epochs)
        listed = "-" if lengths is None else f"{len(lengths)}: {lengths[0]}..{lengths[-1]}"
        rows.append([name, listed, r["steps"], r["steps"] / results["unpadded"]["steps"], r["first"],
                     r["shapes"], f"{100 * r['padding']:.1f}%"])
    B.table(["pad_to_lengths", "lengths", "steps/epoch", "vs unpadded", "shapes epoch 1",
             f"shapes {args.epochs} epochs", "padding"], rows)
    base, best = results["unpadded"], results[PROPOSED]
    B.summary(f"shape_buckets: unpadded {base['shapes']} shapes over {args.epochs} epochs, {base['steps']:.1f} "
              f"steps/epoch, {100 * base['padding']:.1f}% padding; {PROPOSED}: {best['shapes']} shapes, "
              f"{best['steps']:.1f} steps/epoch = {best['steps'] / base['steps']:.3f}x, "
              f"{100 * best['padding']:.1f}% padding")


if __name__ == "__main__":
    main()
