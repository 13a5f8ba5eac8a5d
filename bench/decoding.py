"""Decoding speed: greedy and beam-5 sentences/s on Multi30k test2016, and the key/value cache's gain.

The model is a checkpoint (``--ckpt runs/<group>/<id>/checkpoints/best.ckpt`` of a
TranslationModule) or, without one, the reference Transformer trained here for ``--train-steps``
updates (an undertrained model writes longer, repetitive output, so prefer a real checkpoint).
Baseline of the last table: greedy decoding without the cache, recomputing the whole prefix at
every step (what a decoder without incremental state does), on the first ``--uncached`` sentences.
Joey NMT's beam-5 time on the 1,000 test sentences (~89 s on this kind of machine, issue 7) is the
external anchor: goal >= 5x, i.e. >= 56 sentences/s.

    .venv/bin/python bench/decoding.py [--quick] [--ckpt PATH] [--train-steps 150]
"""

from __future__ import annotations

import time

import torch

import benchlib as B
from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.decoding import beam_search, greedy_decode, max_output_lengths
from lit_attention.models import build_seq2seq

JOEY_BEAM5_SENTENCES_PER_S = 1000 / 89   # issue 7's measurement on this kind of machine


@torch.no_grad()
def greedy_uncached(net, src, max_len_a=1.5, max_len_b=10):
    """Greedy decoding that re-runs the decoder over the whole prefix at every step."""
    budget = max_output_lengths(src, max_len_a, max_len_b)
    memory = net.encode(src)
    prefix = torch.full((src.size(0), 1), BOS, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    out = []
    for t in range(int(budget.max())):
        token = net.decode(memory, prefix).logits[:, -1].argmax(-1).masked_fill(finished, PAD)
        out.append(token)
        finished |= (token == EOS) | (budget <= t + 1)
        if bool(finished.all()):
            break
        prefix = torch.cat([prefix, token[:, None]], dim=1)
    return torch.stack(out, dim=1)


def load_checkpoint(path: str):
    """(net, datamodule) from a TranslationModule checkpoint."""
    from lit_attention.data.translation import TranslationDataModule
    from lit_attention.lightning.translation import TranslationModule
    ckpt = torch.load(path, map_location="cpu", weights_only=False)

    def init_args(hparams: dict) -> dict:           # LightningCLI also records "_class_path"
        return {k: v for k, v in hparams.items() if not k.startswith("_")}

    module = TranslationModule(**init_args(ckpt["hyper_parameters"]))
    module.configure_model()
    module.load_state_dict(ckpt["state_dict"])
    dm = TranslationDataModule(**init_args(ckpt["datamodule_hyper_parameters"]))
    dm.setup("test")
    return module.net, dm


def train_model(args):
    """The reference (or, with --quick, tiny) Transformer after args.train_steps plain updates."""
    dm, desc = B.translation_data(args.quick, 256 if args.quick else 4096, require_real=True)
    size = B.TINY_TRANSFORMER if args.quick else B.TRANSFORMER_SIZE
    torch.manual_seed(args.seed)
    net = build_seq2seq("transformer", dm.src_vocab_size, dm.tgt_vocab_size, positional="sinusoidal",
                        **size)
    net.train()
    opt, sched = B.adam_with_warmup(net.parameters(), lr=3e-3 if args.quick else 1e-3,
                                    warmup=min(1000, max(args.train_steps // 2, 1)))
    start = time.perf_counter()
    for batch in B.train_batches(dm, args.train_steps):
        B.train_step(net, opt, sched, batch)
    print(f"trained {desc} transformer {size} for {args.train_steps} steps "
          f"({time.perf_counter() - start:.0f} s)")
    dm.setup("test")
    return net, dm


def decode_all(batches, fn) -> tuple[float, float]:
    """(sentences/s, mean output length in tokens) of fn(src) over batches."""
    sentences, lengths, start = 0, 0, time.perf_counter()
    for src in batches:
        ids = fn(src)
        sentences += src.size(0)
        lengths += int((ids != PAD).sum())
    return sentences / (time.perf_counter() - start), lengths / max(sentences, 1)


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--ckpt", help="TranslationModule checkpoint (default: train a model here)")
    p.add_argument("--train-steps", type=int, default=150)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--uncached", type=int, default=200, help="sentences for the cache comparison")
    p.add_argument("--sentences", type=int, default=None, help="only the first N test sentences")
    args = p.parse_args()
    if args.quick:
        args.train_steps, args.uncached, args.sentences = 30, 40, 40
    B.setup(args)
    net, dm = load_checkpoint(args.ckpt) if args.ckpt else train_model(args)
    net.eval()
    batches = [b["src"] for b in dm.test_dataloader()]
    if args.sentences:
        batches = first_sentences(batches, args.sentences)
    n = sum(b.size(0) for b in batches)
    print(f"{B.machine()}\ntest split {dm.split_names['test']!r}: {n} sentences in {len(batches)} "
          f"token batches of <= {dm.max_tokens} tokens")

    greedy, greedy_len = decode_all(batches, lambda s: greedy_decode(net, s))
    beam, beam_len = decode_all(batches, lambda s: beam_search(net, s, beam_size=args.beam))
    B.table(["decoder", "sentences/s", "mean output tokens", "seconds for the split"],
            [["greedy", greedy, greedy_len, n / greedy],
             [f"beam {args.beam}", beam, beam_len, n / beam]])
    print()

    subset = first_sentences(batches, args.uncached)
    cached, _ = decode_all(subset, lambda s: greedy_decode(net, s))
    uncached, _ = decode_all(subset, lambda s: greedy_uncached(net, s))
    same = all(torch.equal(greedy_decode(net, s), greedy_uncached(net, s)) for s in subset[:2])
    B.table(["greedy on the first sentences", "sentences/s", "vs uncached"],
            [["uncached (full recomputation)", uncached, 1.0], ["key/value cache", cached, cached / uncached]])
    print(f"cached and uncached outputs identical on the first batches: {'yes' if same else 'NO'}")
    vs_joey = beam / JOEY_BEAM5_SENTENCES_PER_S
    B.summary(f"decoding: greedy {greedy:.1f} and beam-{args.beam} {beam:.1f} sentences/s "
              f"(beam vs Joey NMT's recorded 11.2/s: {vs_joey:.1f}x, goal >= 5); "
              f"cached/uncached greedy = {cached / uncached:.2f}x")


def first_sentences(batches, n: int):
    """The leading batches holding (about) the first n sentences."""
    out, count = [], 0
    for b in batches:
        if count >= n:
            break
        out.append(b[: n - count])
        count += out[-1].size(0)
    return out


if __name__ == "__main__":
    main()
