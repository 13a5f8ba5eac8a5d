"""Attention path: forward+backward of TransformerSeq2Seq vs torch.nn.Transformer, and fused vs explicit.

Part 1: our Transformer against a ``torch.nn.Transformer`` of the same size (embeddings scaled by
sqrt(d) + sinusoids, pre-norm, tied output projection, same dropout, the same padding and causal
masks) on the same batch, training mode, loss + backward. Goal: ours >= 1.0x nn.Transformer.

Part 2: for each positional encoding, our model on its fused path
(``scaled_dot_product_attention``) vs its explicit path (softmax of the score matrix, which
``need_weights=True`` forces), without dropout: with attention dropout in training the CPU always
takes the explicit path (its fused kernels have no dropout). Shaw relative positions have no fused path.

    .venv/bin/python bench/attention_path.py [--quick] [--repeats 10]
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import benchlib as B
from lit_attention import registry
from lit_attention.data.vocab import PAD
from lit_attention.models import build_seq2seq
from lit_attention.models.positional import SinusoidalPositions


class TorchTransformer(nn.Module):
    """The baseline: torch.nn.Transformer with the embeddings and output layer ours has."""

    def __init__(self, vocab: int, d_model: int, heads: int, enc_layers: int, dec_layers: int,
                 ffn: int, dropout: float, **_):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)
        self.positions = SinusoidalPositions(512, d_model)
        self.scale, self.dropout = math.sqrt(d_model), nn.Dropout(dropout)
        with warnings.catch_warnings():   # "enable_nested_tensor is True, but ... norm_first"
            warnings.simplefilter("ignore")
            self.transformer = nn.Transformer(d_model, heads, enc_layers, dec_layers, ffn, dropout,
                                              batch_first=True, norm_first=True)
        self.generator = nn.Linear(d_model, vocab, bias=False)
        self.generator.weight = self.embed.weight

    def embed_tokens(self, x):
        return self.dropout(self.embed(x) * self.scale + self.positions(torch.arange(x.shape[1])))

    def forward(self, src, tgt_in):
        src_pad, tgt_pad = src == PAD, tgt_in == PAD
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        out = self.transformer(self.embed_tokens(src), self.embed_tokens(tgt_in), tgt_mask=causal,
                               src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                               memory_key_padding_mask=src_pad, tgt_is_causal=True)
        return self.generator(out)


def loss_of(logits, batch):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch["tgt_out"].reshape(-1),
                           ignore_index=PAD, label_smoothing=0.1)


def fwd_bwd_time(net, forward, batch, repeats: int) -> float:
    """Median seconds of one forward + backward (gradients zeroed outside the timing)."""
    net.train()

    def once():
        loss_of(forward(), batch).backward()

    once()  # warm-up: allocator, kernels
    times = []
    for _ in range(repeats):
        net.zero_grad(set_to_none=True)
        times += B.timed(once, 1)
    return B.median(times)


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=4096)
    args = p.parse_args()
    if args.quick:
        args.repeats, args.max_tokens = 2, 256
    B.setup(args)
    dm, data_desc = B.translation_data(args.quick, args.max_tokens)
    batch = B.train_batches(dm, 1)[0]
    size = B.TINY_TRANSFORMER if args.quick else B.TRANSFORMER_SIZE
    vocab = dm.tgt_vocab_size
    if dm.src_vocab_size != vocab:
        raise SystemExit("the comparison needs one joint vocabulary")
    print(f"{B.machine()}\ndata: {data_desc}; batch {tuple(batch['src'].shape)} src, "
          f"{tuple(batch['tgt_in'].shape)} tgt; model: {size}")

    # Part 1: ours vs torch.nn.Transformer (rounds alternate so that load changes hit both).
    torch.manual_seed(args.seed)
    ours = build_seq2seq("transformer", vocab, vocab, positional="sinusoidal", **size)
    torch.manual_seed(args.seed)
    theirs = TorchTransformer(vocab, **size)
    t_ours, t_theirs = [], []
    for _ in range(2):
        t_theirs.append(fwd_bwd_time(theirs, lambda: theirs(batch["src"], batch["tgt_in"]), batch,
                                     args.repeats))
        t_ours.append(fwd_bwd_time(ours, lambda: ours(batch["src"], batch["tgt_in"]).logits, batch,
                                   args.repeats))
    base = min(t_theirs)
    vs_torch = base / min(t_ours)
    B.table(["model (fwd+bwd)", "ms", "speed vs nn.Transformer"],
            [["torch.nn.Transformer", base * 1000, 1.0], ["TransformerSeq2Seq", min(t_ours) * 1000, vs_torch]])
    print()

    # Part 2: fused vs explicit per positional encoding.
    rows, ratios = [], []
    for positional in registry.POSITIONAL:
        torch.manual_seed(args.seed)
        net = build_seq2seq("transformer", vocab, vocab, positional=positional, **dict(size, dropout=0.0))
        explicit = fwd_bwd_time(net, lambda: net(batch["src"], batch["tgt_in"], need_weights=True).logits,
                                batch, args.repeats)
        if positional in registry.FUSED_POSITIONAL:
            fused = fwd_bwd_time(net, lambda: net(batch["src"], batch["tgt_in"]).logits, batch,
                                 args.repeats)
            ratios.append(explicit / fused)
            rows.append([positional, fused * 1000, explicit * 1000, explicit / fused])
        else:
            rows.append([positional, float("nan"), explicit * 1000, float("nan")])
    B.table(["positional", "fused ms", "explicit ms", "fused speed-up"], rows)
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    B.summary(f"attention_path: TransformerSeq2Seq/nn.Transformer speed = {vs_torch:.2f}x "
              f"(goal >= 1.0: {'met' if vs_torch >= 1.0 else 'NOT met'}); fused/explicit speed-up "
              f"geometric mean {geo:.2f}x over {len(ratios)} positional encodings")


if __name__ == "__main__":
    main()
