"""Training throughput (target tokens/s) of every encoder-decoder family on Multi30k de->en batches.

Rows: the reference Transformer (fp32, and bf16 autocast on a CPU with native bf16 or with
--bf16) and the recurrent family for every cell x attention wiring (none / Bahdanau-additive /
Luong-general), at the reference RNN size (embedding and hidden 256, one bidirectional encoder
layer, one decoder layer). Each row runs the same batches through forward, label-smoothed loss,
backward, clipping and Adam.
MFU is model FLOP/s (matrix-product FLOPs of the timed batches, counted as training budgets
count them: lit_attention/models/flops.py) over an fp32 GEMM measured in the same run at the
same thread count.

    .venv/bin/python bench/throughput.py [--quick] [--steps 8]

Without ../shared/data the script stops with a message; --quick uses synthetic toy-mt batches.
"""

from __future__ import annotations

import torch

import benchlib as B
from lit_attention import registry
from lit_attention.models import build_seq2seq, count_parameters

RNN_SIZE = dict(emb_size=256, d_model=256, enc_layers=1, dec_layers=1, dropout=0.2,
                bidirectional=True, tie_embeddings=True)
TINY_RNN = dict(RNN_SIZE, emb_size=32, d_model=32)
SCORING = {"none": "additive", "bahdanau": "additive", "luong": "general"}


def families(quick: bool):
    """(name, family, options, bf16) of every row."""
    size = B.TINY_TRANSFORMER if quick else B.TRANSFORMER_SIZE
    yield "transformer", "transformer", dict(size, positional="sinusoidal"), False
    yield "transformer bf16", "transformer", dict(size, positional="sinusoidal"), True
    rnn = TINY_RNN if quick else RNN_SIZE
    for cell in registry.CELLS:
        for attention in registry.ATTENTION:
            name = f"rnn {cell} {attention}" + (f"/{SCORING[attention]}" if attention != "none" else "")
            yield name, "rnn", dict(rnn, cell=cell, attention=attention, scoring=SCORING[attention],
                                    input_feeding=attention == "luong"), False


def measure(net, batches, warmup: int, bf16: bool) -> tuple[float, float]:
    """(target tokens/s, FLOP/s) over batches[warmup:]."""
    net.train()
    opt, sched = B.adam_with_warmup(net.parameters())
    for batch in batches[:warmup]:
        B.train_step(net, opt, sched, batch, autocast=bf16)
    timed = batches[warmup:]
    seconds = sum(sum(B.timed(lambda: B.train_step(net, opt, sched, b, autocast=bf16), 1))
                  for b in timed)
    flops = 0
    for b in timed:   # counted apart: the counter slows the step it watches
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            flops += B.count_flops(lambda: B.seq2seq_loss(net, b).backward(), net)
        net.zero_grad(set_to_none=True)
    tokens = sum(B.target_tokens(b) for b in timed)
    return tokens / seconds, flops / seconds


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="timed steps per row")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=4096)
    B.add_bf16_flags(p)
    args = p.parse_args()
    if args.quick:
        args.steps, args.warmup, args.max_tokens = 1, 1, 128
    B.setup(args)
    bf16_rows = B.want_bf16(args)
    dm, desc = B.translation_data(args.quick, args.max_tokens, require_real=True)
    batches = B.train_batches(dm, args.warmup + args.steps)
    gemm = B.matmul_gflops(512 if args.quick else 1024, 0.3 if args.quick else 2.0) * 1e9
    print(f"{B.machine()}\ndata: {desc}; {args.steps} timed batches of <= {args.max_tokens} tokens\n"
          f"fp32 GEMM: {gemm / 1e9:.1f} GFLOP/s")

    rows, rates = [], {}
    for name, family, options, bf16 in families(args.quick):
        if bf16 and not bf16_rows:
            continue
        torch.manual_seed(args.seed)
        net = build_seq2seq(family, dm.src_vocab_size, dm.tgt_vocab_size, **options)
        tokens_s, flops_s = measure(net, batches, args.warmup, bf16)
        rates[name] = tokens_s
        rows.append([name, count_parameters(net), tokens_s, flops_s / 1e9, 100 * flops_s / gemm])
    base = rates["transformer"]
    rows = [r + [rates[r[0]] / base] for r in rows]
    B.table(["model", "params", "tgt tokens/s", "GFLOP/s", "MFU %", "vs transformer"], rows)
    if bf16_rows and not B.bf16_native():
        print("note: this CPU has no native bf16 (AVX512-BF16/AMX): bf16 autocast is emulated here")
    mfu = rows[0][4]
    fastest_rnn = max((n for n in rates if n.startswith("rnn")), key=rates.get)
    B.summary(f"throughput: transformer {base:,.0f} target tokens/s at {mfu:.1f}% MFU of a "
              f"{gemm / 1e9:.0f} GFLOP/s fp32 GEMM; fastest recurrent row ({fastest_rnn}) "
              f"{rates[fastest_rnn] / base:.2f}x the transformer")


if __name__ == "__main__":
    main()
