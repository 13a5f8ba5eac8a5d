"""Shared pieces of the bench scripts: arguments, data, timing, FLOP counting, tables.

Every script measures its baseline in the same invocation and prints ratios: the machine is
shared and noisy, so absolute numbers only say roughly where we are.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
MULTI30K = SHARED_DATA / "multi30k"
CACHE = REPO / ".cache" / "bench"

# The Multi30k reference Transformer's size (configs/reference/multi30k-transformer.yaml); every
# benchmark trains it with dropout 0.1.
TRANSFORMER_SIZE = dict(d_model=256, heads=8, enc_layers=3, dec_layers=3, ffn=512, dropout=0.1,
                        norm="pre", tie_embeddings=True)
TINY_TRANSFORMER = dict(d_model=32, heads=4, enc_layers=1, dec_layers=1, ffn=64, dropout=0.1,
                        norm="pre", tie_embeddings=True)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="tiny sizes and a few steps (smoke test)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default 2; 1 with --quick)")
    p.add_argument("--seed", type=int, default=1)
    return p


def setup(args) -> None:
    if args.threads is None:
        args.threads = 1 if args.quick else 2
    torch.set_num_threads(args.threads)
    import lightning.pytorch  # noqa: F401  (it sets its loggers' levels on import: override after)
    for name in ("lightning.pytorch", "lightning.fabric"):   # "GPU available: False" and tips
        logging.getLogger(name).setLevel(logging.WARNING)
    torch.manual_seed(args.seed)


# ---- data -------------------------------------------------------------------------------------

def have_multi30k() -> bool:
    return (MULTI30K / "train.de.gz").exists()


def translation_data(quick: bool, max_tokens: int = 4096, require_real: bool = False):
    """A prepared TranslationDataModule: Multi30k de->en (joint 8k unigram SentencePiece, the
    reference data settings) or, with ``quick`` or without ../shared/data, synthetic toy-mt.

    Returns (datamodule, description). With ``require_real`` and no Multi30k: exits with a message.
    """
    from lit_attention.data.translation import TranslationDataModule

    if not quick and have_multi30k():
        dm = TranslationDataModule(task="files", data_dir=str(MULTI30K), src_lang="de", tgt_lang="en",
                                   train_split="train", val_split="val", test_split="test_2016_flickr",
                                   tokenizer="sentencepiece", spm_model="unigram", vocab_size=8000,
                                   joint_vocab=True, max_tokens=max_tokens, max_len=128,
                                   cache_dir=str(REPO / ".cache" / "lit_attention"))
        desc = "Multi30k de->en (8k joint unigram SentencePiece)"
    else:
        if not quick:
            msg = f"Multi30k not found at {MULTI30K}"
            if require_real:
                sys.exit(f"skipped: {msg} (run with --quick for synthetic toy-mt data)")
            print(f"note: {msg}; using synthetic toy-mt batches instead")
        dm = TranslationDataModule(task="toy-mt", n_train=400, n_val=50, n_test=50, max_len_words=20,
                                   tokenizer="word", max_tokens=max_tokens,
                                   cache_dir=str(REPO / ".cache" / "lit_attention"))
        desc = "synthetic toy-mt (word tokens)"
    dm.setup("fit")
    return dm, desc


def train_batches(dm, n: int) -> list[dict]:
    """The first ``n`` training batches (epoch 0 order), cycling if the epoch is shorter."""
    batches = []
    while len(batches) < n:
        for batch in dm.train_dataloader():
            batches.append(batch)
            if len(batches) == n:
                break
    return batches


def target_tokens(batch: dict) -> int:
    from lit_attention.data.vocab import PAD
    return int((batch["tgt_out"] != PAD).sum())


# ---- training step ----------------------------------------------------------------------------

def seq2seq_loss(net, batch, label_smoothing: float = 0.1, fused: bool = True) -> torch.Tensor:
    """The training loss TranslationModule.training_step computes (output projection fused with
    the loss); ``fused=False``: the logits first, then the loss (the unfused step, as a baseline)."""
    from lit_attention.data.vocab import PAD
    from lit_attention.models.loss import decoder_loss, smoothed_cross_entropy
    out = net(batch["src"], batch["tgt_in"])
    if fused:
        return decoder_loss(out, batch["tgt_out"], label_smoothing, ignore_index=PAD)
    return smoothed_cross_entropy(out.logits.reshape(-1, out.logits.size(-1)), batch["tgt_out"].reshape(-1),
                                  ignore_index=PAD, label_smoothing=label_smoothing)


def adam_with_warmup(params, lr: float = 1e-3, warmup: int = 1000, fused: bool = True):
    """The optimiser and schedule TranslationModule.configure_optimizers builds (its Adam is fused
    on a CPU, in fp32 and bf16-mixed)."""
    from lit_attention.lightning.optim import inverse_sqrt_warmup
    opt = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), fused=fused)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, inverse_sqrt_warmup(warmup))


def train_step(net, opt, sched, batch, autocast: bool = False, clip: float = 1.0,
               fused_loss: bool = True) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = seq2seq_loss(net, batch, fused=fused_loss)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)


def add_bf16_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--bf16", dest="bf16", action="store_true", default=None,
                   help="run the bf16 rows (default: only on a CPU with native bf16)")
    g.add_argument("--no-bf16", dest="bf16", action="store_false", help="skip the bf16 rows")


def want_bf16(args) -> bool:
    """Whether to run the bf16 rows: as asked, else only where the CPU has bf16 hardware. Emulated
    bf16 matmuls ran at ~1/70 of fp32 on an AVX2 CPU here, which turned a default run into hours."""
    if args.bf16 is None:
        args.bf16 = bf16_native()
        if not args.bf16:
            print("note: bf16 rows skipped: this CPU has no native bf16 (AVX512-BF16/AMX) and emulates "
                  "it far slower than fp32 (--bf16 runs them anyway)")
    return args.bf16


def bf16_native() -> bool:
    from lit_attention.tracking.machine_speed import cpu_has_native_bf16
    return cpu_has_native_bf16()


# ---- timing and FLOPs -------------------------------------------------------------------------

def timed(fn, repeats: int) -> list[float]:
    """Wall seconds of each of ``repeats`` calls of fn()."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median(xs) -> float:
    return statistics.median(xs)


def matmul_gflops(n: int = 1024, seconds: float = 1.0) -> float:
    """fp32 GEMM GFLOP/s at the current thread count (best of several n x n products)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best, deadline = math.inf, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def count_flops(fn, module) -> int:
    """Matrix-product FLOPs of fn() (a forward and backward of ``module``), counted as training
    budgets count them (lit_attention/models/flops.py): FlopCounterMode alone misses the fused
    CPU attention kernel and oneDNN's LSTM; elementwise work is not counted, as usual for MFU."""
    from lit_attention.models.flops import TrainingFlopCounter
    counter = TrainingFlopCounter(module)
    counter.start(None)
    try:
        fn()
        return counter.stop()
    finally:
        counter.remove()


# ---- output -----------------------------------------------------------------------------------

def table(headers: list[str], rows: list[list]) -> None:
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for r in cells:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def fmt(x) -> str:
    if isinstance(x, float):
        if x != x:
            return "n/a"
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}" if abs(x) >= 0.01 else f"{x:.2e}"
    return str(x)


CPU_FLAGS_OF_INTEREST = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def machine() -> str:
    from lit_attention.tracking.machine_speed import cpu_flags
    flags = cpu_flags()
    return (f"torch {torch.__version__}, {torch.get_num_threads()} threads, {cpu_model()} "
            f"({' '.join(f for f in CPU_FLAGS_OF_INTEREST if f in flags) or 'flags unknown'}), "
            f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "unknown CPU"


def summary(text: str) -> None:
    """The one-line result every script ends with (tests/bench/test_bench.py looks for 'SUMMARY')."""
    print(f"SUMMARY {text}", flush=True)
