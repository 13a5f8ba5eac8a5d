"""Decoding speed: greedy, beam-5 and `translate` sentences/s on Multi30k test2016, against Joey NMT's translate.

The model is a checkpoint (``--ckpt runs/<group>/<id>/checkpoints/best.ckpt`` of a
TranslationModule) or, without one, the reference Transformer trained here for ``--train-steps``
updates (an undertrained model writes longer, repetitive output, so prefer a real checkpoint).
Baseline of the last table: greedy decoding without the cache, recomputing the whole prefix at
every step (what a decoder without incremental state does), on the first ``--uncached`` sentences.
`translate` row: `lit-attention translate`'s Translator (lit_attention/lightning/translate.py:
tokenize, batch by tokens, beam search, detokenize) on the test sources as text, in fp32 on the
CPU, timed around the call (the command's own "s of decoding").
External baseline, same run: Joey NMT 2.3 (installed into its own virtualenv, see
joeynmt_side_by_side.py) translates the same source lines (as our SentencePiece pieces, which it
reads at word level) with ``joeynmt translate``'s code and the *same weights*: the reference
Transformer's tensors are renamed to Joey's parameter names and loaded there (strictly), so both
toolkits search the same model and their outputs can be compared line by line (BLEU of each, share
of identical hypotheses). Joey's time is its own "Generation took" figure. Goal: >= 5x Joey NMT
with beam 5. ``--no-joey`` skips it (and ``--quick`` always does); when Joey NMT cannot be
installed, the script says so and prints our figures alone.

    .venv/bin/python bench/decoding.py [--quick] [--ckpt PATH] [--train-steps 150] [--sentences N] [--no-joey]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import torch

import benchlib as B
from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.decoding import beam_search, greedy_decode, max_output_lengths
from lit_attention.lightning.translation import TranslationModule
from lit_attention.models import build_seq2seq
from lit_attention.lightning.translate import Translator

# Our parameter names -> Joey NMT 2.3's (Transformer, pre-norm, tied embeddings), applied in order.
JOEY_NAMES = [
    (r"^src_embed\.token\.", "src_embed.lut."), (r"^tgt_embed\.token\.", "trg_embed.lut."),
    (r"^generator\.", "decoder.output_layer."),
    (r"^(encoder|decoder)\.norm\.", r"\1.layer_norm."),
    (r"^encoder\.(layers\.\d+)\.self_norm\.", r"encoder.\1.layer_norm."),
    (r"^encoder\.(layers\.\d+)\.self_attn\.", r"encoder.\1.src_src_att."),
    (r"^decoder\.(layers\.\d+)\.self_norm\.", r"decoder.\1.x_layer_norm."),
    (r"^decoder\.(layers\.\d+)\.self_attn\.", r"decoder.\1.trg_trg_att."),
    (r"^decoder\.(layers\.\d+)\.cross_norm\.", r"decoder.\1.dec_layer_norm."),
    (r"^decoder\.(layers\.\d+)\.cross_attn\.", r"decoder.\1.src_trg_att."),
    (r"\.ffn_norm\.", ".feed_forward.layer_norm."), (r"\.ffn\.(\d)\.", r".feed_forward.pwff_layer.\1."),
    (r"\.query\.", ".q_layer."), (r"\.key\.", ".k_layer."), (r"\.value\.", ".v_layer."),
    (r"\.out\.", ".output_layer."),
]
# What Joey's Transformer can hold: the reference size with sinusoids, scaled dot, pre-norm, tied
# (dropout does not act when decoding).
JOEY_COMPATIBLE = {**{k: v for k, v in B.TRANSFORMER_SIZE.items() if k != "dropout"},
                   "family": "transformer", "positional": "sinusoidal", "scoring": "scaled_dot"}


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
    """(module, datamodule, model hyperparameters) from a TranslationModule checkpoint."""
    from lit_attention.data.translation import TranslationDataModule
    ckpt = torch.load(path, map_location="cpu", weights_only=True)   # a crafted file may not run code

    def init_args(hparams: dict) -> dict:           # LightningCLI also records "_class_path"
        return {k: v for k, v in hparams.items() if not k.startswith("_")}

    hparams = init_args(ckpt["hyper_parameters"])
    module = TranslationModule(**hparams)
    module.configure_model()
    module.load_state_dict(ckpt["state_dict"])
    dm = TranslationDataModule(**init_args(ckpt["datamodule_hyper_parameters"]))
    dm.setup("test")
    return module, dm, hparams


def train_model(args):
    """(module, datamodule, model settings): the reference (or, with --quick, tiny) Transformer after
    args.train_steps plain updates."""
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
    hparams = dict(size, family="transformer", positional="sinusoidal", scoring="scaled_dot")
    module = TranslationModule(**hparams, src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size)
    module.net = net
    return module, dm, hparams


def decode_all(batches, fn) -> tuple[float, float, list[torch.Tensor]]:
    """(sentences/s, mean output length in tokens, outputs per batch) of fn(src) over batches."""
    sentences, lengths, outputs, start = 0, 0, [], time.perf_counter()
    for src in batches:
        outputs.append(fn(src))
        sentences += src.size(0)
        lengths += int((outputs[-1] != PAD).sum())
    return sentences / (time.perf_counter() - start), lengths / max(sentences, 1), outputs


def joey_state(net) -> dict[str, torch.Tensor]:
    """Our Transformer's tensors under Joey NMT 2.3's parameter names."""
    state = {}
    for name, tensor in net.state_dict().items():
        for pattern, joey in JOEY_NAMES:
            name = re.sub(pattern, joey, name)
        state[name] = tensor
    return state


def joey_translate(net, dm, sources: list[str], beam: int, threads: int) -> dict:
    """Joey NMT's translate of ``sources`` with our weights: seconds, hypotheses in order."""
    from joeynmt_side_by_side import WORK, joey_config, joey_python, write_joey_data

    python = joey_python()
    tokenizer = dm.tgt_tokenizer
    data = write_joey_data(tokenizer)
    out_dir = WORK / "decode"
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = out_dir / "weights.pt"
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    torch.save({"state": joey_state(net), "pieces": pieces}, weights)
    config = out_dir / "config.yaml"
    config.write_text(joey_config(data, out_dir / "model", steps=1, log_every=1, beam=beam))
    (out_dir / "model").mkdir(exist_ok=True)
    source = out_dir / "source.txt"    # our pieces, space-separated: what Joey reads at word level
    source.write_text("".join(" ".join(tokenizer.pieces(tokenizer.encode(line))) + "\n" for line in sources),
                      encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    proc = subprocess.run([str(python), str(Path(__file__).with_name("joeynmt_decode_driver.py")),
                           str(config), str(weights), str(out_dir / "hyps.txt"), str(source)],
                          capture_output=True, text=True, env=env)
    (out_dir / "decode-output.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"Joey NMT decoding failed (exit {proc.returncode}); see "
                         f"{out_dir / 'decode-output.log'}:\n" + (proc.stdout + proc.stderr)[-2000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = Path(result["hypotheses"]).read_text(encoding="utf-8").splitlines()
    result["hyps"] = [tokenizer.sp.decode_pieces(line.split()) for line in lines]
    return result


def joey_or_why(net, dm, sources, beam, threads) -> tuple[dict | None, str | None]:
    """(Joey NMT's translate result, None), or (None, why it could not run): an install that fails
    here (no package index, no wheel for this Python) is said, and our figures stand alone."""
    try:
        return joey_translate(net, dm, sources, beam, threads), None
    except subprocess.CalledProcessError as exc:
        return None, f"it could not be installed into its own virtualenv: {' '.join(map(str, exc.cmd[-3:]))} " \
                     f"exited {exc.returncode}"


def joey_mismatch(hparams: dict) -> str | None:
    """Why Joey NMT cannot hold this model, or None."""
    wrong = {k: hparams.get(k) for k, v in JOEY_COMPATIBLE.items() if hparams.get(k) != v}
    return f"not the reference Transformer ({wrong})" if wrong else None


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--ckpt", help="TranslationModule checkpoint (default: train a model here)")
    p.add_argument("--train-steps", type=int, default=150)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--uncached", type=int, default=200, help="sentences for the cache comparison")
    p.add_argument("--sentences", type=int, default=None, help="only the first N test sentences")
    p.add_argument("--no-joey", action="store_true", help="skip Joey NMT's translate")
    args = p.parse_args()
    if args.quick:
        args.train_steps, args.uncached, args.sentences = 30, 40, 40
    B.setup(args)
    module, dm, hparams = load_checkpoint(args.ckpt) if args.ckpt else train_model(args)
    net = module.net
    net.eval()
    loaded = list(dm.test_dataloader())
    batches = [b["src"] for b in loaded]
    if args.sentences:
        batches = first_sentences(batches, args.sentences)
    n = sum(b.size(0) for b in batches)
    print(f"{B.machine()}\ntest split {dm.split_names['test']!r}: {n} sentences in {len(batches)} "
          f"token batches of <= {dm.max_tokens} tokens")

    greedy, greedy_len, _ = decode_all(batches, lambda s: greedy_decode(net, s))
    beam, beam_len, _ = decode_all(batches, lambda s: beam_search(net, s, beam_size=args.beam))
    sources = dm.sources("test")[:n]
    translator = Translator(module, dm.src_tokenizer, dm.tgt_tokenizer, dm.max_tokens, "32-true", "cpu")
    start = time.perf_counter()
    ours = translator(sources, args.beam)
    translate = n / (time.perf_counter() - start)
    rows = [["lit-attention greedy", greedy, greedy_len, n / greedy],
            [f"lit-attention beam {args.beam}", beam, beam_len, n / beam],
            [f"lit-attention translate beam {args.beam}", translate, float("nan"), n / translate]]
    skip_joey = ("--quick" if args.quick else "--no-joey" if args.no_joey else joey_mismatch(hparams))
    joey = None
    if skip_joey is None:
        joey, skip_joey = joey_or_why(net, dm, sources, args.beam, args.threads)
    if joey:
        joey_rate = n / joey["seconds"]
        rows.append([f"Joey NMT 2.3 translate beam {args.beam}, same weights", joey_rate, float("nan"),
                     joey["seconds"]])
    B.table(["decoder", "sentences/s", "mean output tokens", "seconds for the sentences"], rows)
    if joey:
        from lit_attention.metrics import bleu_chrf
        refs = dm.references("test")[:n]
        same = sum(a == b for a, b in zip(ours, joey["hyps"])) / n
        print(f"beam {args.beam}, test BLEU: translate {bleu_chrf(ours, refs)['bleu']:.1f}, "
              f"Joey NMT {bleu_chrf(joey['hyps'], refs)['bleu']:.1f}; identical hypotheses: {same:.0%}")
        print(f"translate/Joey NMT translate, sentences/s: {translate / joey_rate:.2f}x (goal >= 5)")
    else:
        print(f"Joey NMT not run: {skip_joey}; translate alone: {translate:.1f} sentences/s")
    print()

    subset = first_sentences(batches, args.uncached)
    cached, _, _ = decode_all(subset, lambda s: greedy_decode(net, s))
    uncached, _, _ = decode_all(subset, lambda s: greedy_uncached(net, s))
    same = all(torch.equal(greedy_decode(net, s), greedy_uncached(net, s)) for s in subset[:2])
    B.table(["greedy on the first sentences", "sentences/s", "vs uncached"],
            [["uncached (full recomputation)", uncached, 1.0], ["key/value cache", cached, cached / uncached]])
    print(f"cached and uncached outputs identical on the first batches: {'yes' if same else 'NO'}")
    versus = (f"translate {translate:.1f}/s vs Joey NMT translate's {joey_rate:.1f}/s with the same weights: "
              f"{translate / joey_rate:.1f}x, goal >= 5" if joey
              else f"translate {translate:.1f}/s; Joey NMT not run: {skip_joey}")
    B.summary(f"decoding: greedy {greedy:.1f} and beam-{args.beam} {beam:.1f} sentences/s "
              f"({versus}); cached/uncached greedy = {cached / uncached:.2f}x")


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
