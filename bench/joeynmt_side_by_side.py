"""Side by side with Joey NMT 2.3: training target tokens/s of the same Transformer on the same data.

Joey NMT is installed by this script into its own virtualenv (.cache/bench/joeynmt-venv; it pins
protobuf < 3.21, so it cannot share ours). Both toolkits get the same SentencePiece pieces (our joint
8k unigram model of Multi30k de->en; Joey reads the pieces, space-separated, at word level), the same Transformer
(3+3 layers, d_model 256, 8 heads, FFN 512, pre-norm, tied embeddings, dropout 0.1), Adam with
inverse-sqrt warm-up, label smoothing 0.1, clipping at 1.0 and 4,096-token batches (padded size;
Joey fills batches in random order, we bucket by length). Both train ``--steps`` updates; the
first logging interval (Joey) or ``--warmup`` steps (ours) are not timed. Our fp32 and bf16-mixed
runs alternate ``--rounds`` times (fp32 first, then bf16 first, ...): our figures are medians over
rounds and bf16/fp32 the median of the per-round ratios, so a slow spell of a shared machine hits
both precisions alike.
Goal: ours >= 2.5x Joey NMT in fp32, >= 4x with bf16-mixed.

    .venv/bin/python bench/joeynmt_side_by_side.py [--steps 60] [--rounds 2] [--quick] [--no-joey]

``--quick`` skips Joey NMT (no install, no run) and only runs our side for a few steps;
``--no-joey`` runs only our side, at the reference size on Multi30k (our bf16/fp32).
"""

from __future__ import annotations

import gzip
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib as B

JOEY_VERSION = "2.3.0"
VENV = B.CACHE / "joeynmt-venv"
WORK = B.CACHE / "joeynmt"
# From ../shared/STACK-NOTES.md: pin torch in the same command; importlib-metadata is missing from its deps.
INSTALL = ["torch==2.13.0", f"joeynmt=={JOEY_VERSION}", "importlib-metadata"]
SPLITS = {"train": "train", "dev": "val", "test": "test_2016_flickr"}


def joey_python() -> Path:
    """The virtualenv's python with Joey NMT importable; installs it on first use."""
    python = VENV / "bin" / "python"
    check = [str(python), "-c", "import joeynmt; print(joeynmt.__version__)"]
    if python.exists() and subprocess.run(check, capture_output=True, text=True).stdout.strip() == JOEY_VERSION:
        return python
    print(f"installing Joey NMT {JOEY_VERSION} into {VENV} (about a minute) ...", flush=True)
    subprocess.run([_base_python(), "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *INSTALL], check=True)
    subprocess.run(check, check=True, capture_output=True)
    return python


def _base_python() -> str:
    """The interpreter our venv was made from (a venv made from a venv would share nothing anyway)."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    return str(base if base.exists() else sys.executable)


def write_joey_data(tokenizer) -> Path:
    """The Multi30k splits as our SentencePiece pieces joined by spaces, and the pieces as a vocab.

    Joey NMT reads them at word level, so it trains on exactly our token sequences. (Its own
    SentencePiece path calls SetVocabulary, which the sentencepiece 0.2.3 it installs here lacks.)
    """
    data = WORK / "data"
    data.mkdir(parents=True, exist_ok=True)
    for split in SPLITS.values():
        for lang in ("de", "en"):
            with gzip.open(B.MULTI30K / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = [" ".join(tokenizer.pieces(tokenizer.encode(line.strip()))) for line in f]
            (data / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    n_specials = 4   # our <pad> <unk> <s> </s>; Joey puts its own specials in front
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(n_specials, tokenizer.vocab_size)]
    (data / "vocab.txt").write_text("\n".join(pieces) + "\n", encoding="utf-8")
    return data


def joey_config(data: Path, model_dir: Path, steps: int, log_every: int, fp16: bool = False,
                beam: int = 5) -> str:
    side = lambda lang: f"""
    lang: {lang}
    level: word
    lowercase: false
    normalize: false
    max_length: 128
    voc_file: {data}/vocab.txt
    tokenizer_cfg:
      pretokenizer: none"""
    layers = """
    type: transformer
    num_layers: 3
    num_heads: 8
    embeddings:
      embedding_dim: 256
      scale: true
      dropout: 0.0
    hidden_size: 256
    ff_size: 512
    dropout: 0.1
    layer_norm: pre"""
    return f"""name: bench
joeynmt_version: {JOEY_VERSION}
model_dir: {model_dir}
use_cuda: false
fp16: {str(fp16).lower()}
random_seed: 1
data:
  train: {data}/{SPLITS['train']}
  dev: {data}/{SPLITS['dev']}
  test: {data}/{SPLITS['test']}
  dataset_type: plain
  src:{side('de')}
  trg:{side('en')}
training:
  optimizer: adam
  adam_betas: [0.9, 0.98]
  learning_rate: 0.001
  learning_rate_min: 1.0e-08
  scheduling: warmupinversesquareroot
  learning_rate_warmup: 1000
  label_smoothing: 0.1
  loss: crossentropy
  normalization: tokens
  clip_grad_norm: 1.0
  batch_size: 4096
  batch_type: token
  epochs: 100
  updates: {steps}
  validation_freq: {log_every * 100000}   # never within the run; Joey wants a multiple of logging_freq
  logging_freq: {log_every}
  eval_metrics: [bleu]
  early_stopping_metric: ppl
  shuffle: true
  overwrite: true
  keep_best_ckpts: 1
  num_workers: 0
testing:
  beam_size: {beam}
  beam_alpha: 1.0
  batch_size: 4096
  batch_type: token
  eval_metrics: [bleu]
model:
  initializer: xavier_uniform
  bias_initializer: zeros
  embed_initializer: xavier_uniform
  tied_embeddings: true
  tied_softmax: true
  encoder:{layers}
  decoder:{layers}
"""


LOG_LINE = re.compile(r"Step:\s+(\d+),.*Tokens per Sec:\s+([\d.]+)")


def run_joey(python: Path, steps: int, log_every: int, threads: int) -> dict:
    model_dir = WORK / "model"
    config = WORK / "config.yaml"
    config.write_text(joey_config(WORK / "data", model_dir, steps, log_every))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    proc = subprocess.run([str(python), "-m", "joeynmt", "train", str(config), "--skip-test"],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    (WORK / "train-output.log").write_text(log)
    if proc.returncode != 0:
        raise SystemExit(f"Joey NMT training failed (exit {proc.returncode}); see {WORK / 'train-output.log'}:\n"
                         + log[-2000:])
    rates = [float(m.group(2)) for m in LOG_LINE.finditer(log)]
    if len(rates) < 2:
        raise SystemExit(f"no 'Tokens per Sec' lines in Joey NMT's log ({WORK / 'train-output.log'})")
    params = re.search(r"Total params:\s*([\d,]+)", log)
    return {"tokens_per_s": statistics.mean(rates[1:]), "wall": wall,
            "params": int(params.group(1).replace(",", "")) if params else None}


def run_ours(dm, batches, warmup: int, precision: str):
    """(target tokens/s, module) of TranslationModule under a Lightning Trainer on ``batches``."""
    import lightning.pytorch as L
    from torch.utils.data import DataLoader

    from step_clock import StepClock
    from lit_attention.lightning.translation import TranslationModule

    module = TranslationModule(family="transformer", positional="sinusoidal", **B.TRANSFORMER_SIZE,
                               lr=1e-3, warmup=1000, label_smoothing=0.1, val_bleu=False,
                               src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size)
    clock = StepClock()
    clock.wall = True   # wall time, as Joey NMT's own figure
    with tempfile.TemporaryDirectory() as tmp:
        trainer = L.Trainer(accelerator="cpu", devices=1, precision=precision, max_steps=len(batches),
                            logger=False, callbacks=[clock], gradient_clip_val=1.0,
                            enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                            default_root_dir=tmp)
        trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None))
    tokens = sum(B.target_tokens(b) for b in batches[warmup:])
    return tokens / (clock.times[-1] - clock.times[warmup - 1]), module


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="training updates for each toolkit")
    p.add_argument("--warmup", type=int, default=5, help="our untimed first steps")
    p.add_argument("--rounds", type=int, default=2, help="alternations of our fp32 and bf16 runs")
    p.add_argument("--no-joey", dest="joey", action="store_false", help="run only our side")
    B.add_bf16_flags(p)
    args = p.parse_args()
    if args.quick:
        args.steps, args.warmup = 4, 2
    B.setup(args)
    B.want_bf16(args)
    if args.quick:
        print(f"--quick: Joey NMT is not installed or run (the side by side needs minutes); "
              f"running only our side on tiny synthetic batches")
        dm, desc = B.translation_data(quick=True, max_tokens=256)
    else:
        dm, desc = B.translation_data(quick=False, max_tokens=4096, require_real=True)
    print(f"{B.machine()}\ndata: {desc}")
    batches = B.train_batches(dm, args.steps)
    size = B.TINY_TRANSFORMER if args.quick else B.TRANSFORMER_SIZE
    if args.quick:
        B.TRANSFORMER_SIZE = size   # run_ours builds the reference size; tiny under --quick

    rows, joey = [], None
    if args.joey and not args.quick:
        python = joey_python()
        write_joey_data(dm.src_tokenizer)
        joey = run_joey(python, args.steps, log_every=max(1, args.steps // 6), threads=args.threads)
        rows.append([f"Joey NMT {JOEY_VERSION} fp32", joey["tokens_per_s"], 1.0])
        print(f"Joey NMT: {joey['tokens_per_s']:,.0f} target tokens/s ({joey['wall']:.0f} s wall)", flush=True)
    precisions = ["32-true", "bf16-mixed"] if args.bf16 else ["32-true"]
    rates = {p: [] for p in precisions}
    for r in range(args.rounds):
        for precision in precisions if r % 2 == 0 else precisions[::-1]:
            rate, module = run_ours(dm, batches, args.warmup, precision)
            rates[precision].append(rate)
            print(f"round {r + 1}/{args.rounds}: lit-attention {precision} {rate:,.0f} target tokens/s",
                  flush=True)
    ours = statistics.median(rates["32-true"])
    base = joey["tokens_per_s"] if joey else ours
    rows.append(["lit-attention fp32", ours, ours / base])
    bf16 = None
    if args.bf16:
        bf16 = statistics.median(rates["bf16-mixed"])
        ratio = statistics.median(b / f for f, b in zip(rates["32-true"], rates["bf16-mixed"]))
        rows.append(["lit-attention bf16-mixed", bf16, bf16 / base])
    from lit_attention.models import count_parameters
    print(f"model: {size}; our parameters {count_parameters(module.net):,}"
          + (f", Joey NMT's {joey['params']:,}" if joey and joey["params"] else ""))
    B.table(["toolkit", "target tokens/s", "vs Joey NMT" if joey else "vs ours fp32"], rows)
    if args.bf16 and not B.bf16_native():
        print("note: this CPU has no native bf16 (AVX512-BF16/AMX): bf16-mixed is emulated here")
    own = f"bf16-mixed/fp32 = {ratio:.2f}x (goal >= 1.8)" if bf16 else "bf16-mixed not run"
    if joey:
        text = f"ours/Joey NMT fp32 = {ours / base:.2f}x (goal >= 2.5)"
        text += f", bf16-mixed = {bf16 / base:.2f}x (goal >= 4)" if bf16 else ""
        B.summary(f"joeynmt_side_by_side: {text}; {own}; Joey NMT {base:,.0f} target tokens/s, "
                  f"{args.steps} steps each")
    else:
        why = "--quick" if args.quick else "--no-joey"
        B.summary(f"joeynmt_side_by_side: Joey NMT skipped ({why}); ours fp32 {ours:,.0f} "
                  f"target tokens/s; {own}")


if __name__ == "__main__":
    main()
