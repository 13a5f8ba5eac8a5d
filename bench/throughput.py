"""Training throughput (target tokens/s) of every encoder-decoder family on Multi30k de->en batches.

Rows: the reference Transformer (fp32, and bf16 autocast on a CPU with native bf16 or with
--bf16) and the recurrent family for every cell x attention wiring (none / Bahdanau-additive /
Luong-general), at the reference RNN size (embedding and hidden 256, one bidirectional encoder
layer, one decoder layer). Each row runs the same batches through forward, label-smoothed loss,
backward, clipping and fused Adam, as `fit` does. The loss fuses the output projection with the
label-smoothed cross-entropy (models/loss.linear_cross_entropy); the row "transformer, logits
then loss" is the fp32 Transformer with the [N, V] logits formed first (the unfused baseline).

The two Transformer rows are measured in turn, step by step (fp32, bf16, fp32, ... with the order
swapped every round), for --rounds rounds over the same batches, and an fp32 GEMM is probed
between rounds: on a shared machine a slow spell then hits both alike. Their tokens/s are medians
over rounds; bf16/fp32 is the median of the per-round ratios.
MFU is model FLOP/s (matrix-product FLOPs of the timed batches, counted as training budgets
count them: lit_attention/models/flops.py) over the fastest fp32 GEMM probe of the same run at
the same thread count. --profile adds where each Transformer step's time goes (self CPU time by
kind of op, torch.profiler).

    .venv/bin/python bench/throughput.py [--quick] [--steps 8] [--rounds 3] [--profile] [--no-rnn]

Without ../shared/data the script stops with a message; --quick uses synthetic toy-mt batches.
"""

from __future__ import annotations

import statistics
import time

import torch

import benchlib as B
from lit_attention import registry
from lit_attention.models import build_seq2seq, count_parameters

RNN_SIZE = dict(emb_size=256, d_model=256, enc_layers=1, dec_layers=1, dropout=0.2,
                bidirectional=True, tie_embeddings=True)
TINY_RNN = dict(RNN_SIZE, emb_size=32, d_model=32)
SCORING = {"none": "additive", "bahdanau": "additive", "luong": "general"}
# self CPU time of these ops, by kind (everything else is "elementwise and other")
KINDS = {
    "matrix products": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                        "aten::_scaled_dot_product_flash_attention_for_cpu",
                        "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    "copies and dtype casts": ("aten::copy_",),
    "dropout masks": ("aten::bernoulli_", "aten::random_", "aten::ge"),
    "attention softmax": ("aten::_softmax", "aten::_softmax_backward_data"),
    "layer norm": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
}
LOSS = "loss (cross-entropy)"   # every op under the loss's forward or backward


def recurrent_rows(quick: bool):
    """(name, options) of every recurrent row."""
    rnn = TINY_RNN if quick else RNN_SIZE
    for cell in registry.CELLS:
        for attention in registry.ATTENTION:
            name = f"rnn {cell} {attention}" + (f"/{SCORING[attention]}" if attention != "none" else "")
            yield name, dict(rnn, cell=cell, attention=attention, scoring=SCORING[attention],
                             input_feeding=attention == "luong")


class Arm:
    """A model, its optimiser and schedule, trained with or without bf16 autocast."""

    def __init__(self, dm, family: str, options: dict, bf16: bool, seed: int, fused_loss: bool = True):
        torch.manual_seed(seed)
        self.net = build_seq2seq(family, dm.src_vocab_size, dm.tgt_vocab_size, **options)
        self.net.train()
        self.bf16, self.fused_loss = bf16, fused_loss
        self.opt, self.sched = B.adam_with_warmup(self.net.parameters())

    def step(self, batch) -> float:
        start = time.perf_counter()
        B.train_step(self.net, self.opt, self.sched, batch, autocast=self.bf16, fused_loss=self.fused_loss)
        return time.perf_counter() - start

    def flops(self, batches) -> int:
        """Matrix-product FLOPs of forward + backward over batches (counted apart: the counter
        slows the step it watches)."""
        total = 0
        for b in batches:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                total += B.count_flops(lambda: B.seq2seq_loss(self.net, b, fused=self.fused_loss).backward(),
                                       self.net)
            self.net.zero_grad(set_to_none=True)
        return total


def measure(arm: Arm, batches, warmup: int) -> tuple[float, float]:
    """(target tokens/s, FLOP/s) over batches[warmup:]."""
    for batch in batches[:warmup]:
        arm.step(batch)
    timed = batches[warmup:]
    seconds = sum(arm.step(b) for b in timed)
    return sum(B.target_tokens(b) for b in timed) / seconds, arm.flops(timed) / seconds


def measure_in_turn(arms: dict[str, Arm], batches, warmup: int, rounds: int, gemm_n: int,
                    gemm_seconds: float):
    """Seconds per round of each arm over batches[warmup:], stepping the arms in turn; and the
    fp32 GEMM probes taken between rounds (GFLOP/s)."""
    for batch in batches[:warmup]:
        for arm in arms.values():
            arm.step(batch)
    names = list(arms)
    seconds = {name: [] for name in names}
    gemm = [B.matmul_gflops(gemm_n, gemm_seconds)]
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        total = dict.fromkeys(names, 0.0)
        for batch in batches[warmup:]:
            for name in order:
                total[name] += arms[name].step(batch)
        for name in names:
            seconds[name].append(total[name])
        gemm.append(B.matmul_gflops(gemm_n, gemm_seconds))
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {total[n]:.2f} s" for n in names)
              + f"; fp32 GEMM {gemm[-1]:.0f} GFLOP/s", flush=True)
    return seconds, gemm


def breakdown(arm: Arm, batches) -> dict[str, float]:
    """Seconds per kind of op over batches: forward + loss + backward by the profiler's self CPU
    time, and the optimiser (clipping, Adam, schedule), timed apart."""
    from torch.profiler import ProfilerActivity, profile

    times = dict.fromkeys([*KINDS, LOSS, "elementwise and other", "optimizer (clip + Adam)"], 0.0)
    kind_of = {op: kind for kind, ops in KINDS.items() for op in ops}
    for batch in batches:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=arm.bf16):
                loss = B.seq2seq_loss(arm.net, batch, fused=arm.fused_loss)
            loss.backward()
        for event in prof.events():
            times[LOSS if in_loss(event) else kind_of.get(event.name, "elementwise and other")] += \
                event.self_cpu_time_total / 1e6
        start = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(arm.net.parameters(), 1.0)
        arm.opt.step()
        arm.sched.step()
        arm.opt.zero_grad(set_to_none=True)
        times["optimizer (clip + Adam)"] += time.perf_counter() - start
    return times


def in_loss(event) -> bool:
    """Whether a profiler event ran inside the loss (its autograd Function, forward or backward)."""
    while event is not None:
        if "CrossEntropy" in event.name or "log_softmax" in event.name or "nll_loss" in event.name:
            return True
        event = event.cpu_parent
    return False


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="timed steps per row (and per round)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="rounds of the Transformer rows")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--profile", action="store_true", help="where the Transformer's step time goes")
    p.add_argument("--no-rnn", dest="rnn", action="store_false", help="skip the recurrent rows")
    B.add_bf16_flags(p)
    args = p.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds, args.max_tokens = 1, 1, 2, 128
    B.setup(args)
    bf16 = B.want_bf16(args)
    dm, desc = B.translation_data(args.quick, args.max_tokens, require_real=True)
    batches = B.train_batches(dm, args.warmup + args.steps)
    timed = batches[args.warmup:]
    tokens = sum(B.target_tokens(b) for b in timed)
    print(f"{B.machine()}\ndata: {desc}; {args.steps} timed batches of <= {args.max_tokens} tokens")

    size = dict(B.TINY_TRANSFORMER if args.quick else B.TRANSFORMER_SIZE, positional="sinusoidal")
    arms = {"transformer": Arm(dm, "transformer", size, False, args.seed),
            "transformer, logits then loss": Arm(dm, "transformer", size, False, args.seed, fused_loss=False)}
    if bf16:
        arms["transformer bf16"] = Arm(dm, "transformer", size, True, args.seed)
    gemm_n, gemm_s = (512, 0.2) if args.quick else (1024, 1.0)
    seconds, gemm = measure_in_turn(arms, batches, args.warmup, args.rounds, gemm_n, gemm_s)
    peak = max(gemm) * 1e9
    flops = arms["transformer"].flops(timed)   # the same products in either precision
    rows, rates = [], {}
    for name, arm in arms.items():
        s = statistics.median(seconds[name])
        rates[name] = tokens / s
        rows.append([name, count_parameters(arm.net), tokens / s, flops / s / 1e9, 100 * flops / s / peak])
    if args.rnn:
        for name, options in recurrent_rows(args.quick):
            arm = Arm(dm, "rnn", options, False, args.seed)
            tokens_s, flops_s = measure(arm, batches, args.warmup)
            rates[name] = tokens_s
            rows.append([name, count_parameters(arm.net), tokens_s, flops_s / 1e9, 100 * flops_s / peak])
    base = rates["transformer"]
    rows = [r + [rates[r[0]] / base] for r in rows]
    B.table(["model", "params", "tgt tokens/s", "GFLOP/s", "MFU %", "vs transformer"], rows)
    print(f"fp32 GEMM {gemm_n}^2: {', '.join(f'{g:.0f}' for g in gemm)} GFLOP/s (MFU against the fastest)")

    mfu = rows[0][4]
    text = f"throughput: transformer {base:,.0f} target tokens/s at {mfu:.1f}% MFU of a " \
           f"{peak / 1e9:.0f} GFLOP/s fp32 GEMM (goal >= 60%)"
    unfused = statistics.median(l / f for f, l in zip(seconds["transformer"], seconds["transformer, logits then loss"]))
    text += f"; fused projection + loss {unfused:.2f}x the logits-then-loss step"
    if bf16:
        ratios = [f / b for f, b in zip(seconds["transformer"], seconds["transformer bf16"])]
        ratio = statistics.median(ratios)
        print(f"bf16/fp32 per round: {', '.join(f'{r:.2f}' for r in ratios)}")
        if not B.bf16_native():
            print("note: this CPU has no native bf16 (AVX512-BF16/AMX): bf16 autocast is emulated here")
        text += f"; bf16 autocast {ratio:.2f}x fp32 (goal >= 1.8)"
    if args.rnn:
        fastest = max((n for n in rates if n.startswith("rnn")), key=rates.get)
        text += f"; fastest recurrent row ({fastest}) {rates[fastest] / base:.2f}x the transformer"
    if args.profile:
        profiled = batches[args.warmup:args.warmup + 2]
        shares = {name: breakdown(arm, profiled) for name, arm in arms.items()}
        kinds = list(next(iter(shares.values())))
        print(f"\nwhere a step's time goes (ms per step over {len(profiled)} steps; % of the step):")
        B.table(["kind of op", *arms], [[k, *(f"{1e3 * t[k] / len(profiled):.0f} "
                                             f"({100 * t[k] / sum(t.values()):.0f}%)"
                                             for t in shares.values())] for k in kinds])
    B.summary(text)


if __name__ == "__main__":
    main()
