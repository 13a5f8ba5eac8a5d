"""What attention and position information buy on `reverse` (lengths up to 30).

Trains five configurations from the CLI and prints their validation BLEU side by side:
elman-tanh without attention, lstm without attention, lstm with additive attention, and the
Transformer with rotary, sinusoidal and no positional encoding.

    python bench/reverse_ablation.py [--epochs 8] [--root runs] [--quick]
"""

import argparse
import subprocess
import sys
from pathlib import Path

from lit_attention.tracking.schema import read_summary

CONFIGS = {
    "elman-tanh, no attention": ["--model.family", "rnn", "--model.cell", "elman-tanh", "--model.attention", "none"],
    "lstm, no attention": ["--model.family", "rnn", "--model.cell", "lstm", "--model.attention", "none"],
    "lstm, additive attention": ["--model.family", "rnn", "--model.cell", "lstm", "--model.attention", "bahdanau",
                                 "--model.scoring", "additive"],
    "transformer, rotary": ["--model.family", "transformer", "--model.positional", "rotary"],
    "transformer, sinusoidal": ["--model.family", "transformer", "--model.positional", "sinusoidal"],
    "transformer, none": ["--model.family", "transformer", "--model.positional", "none"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--n-train", type=int, default=4000)
    parser.add_argument("--root", default="runs")
    parser.add_argument("--quick", action="store_true", help="tiny data, one epoch (a smoke test)")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parents[1]
    n_train, epochs = ("300", "1") if args.quick else (str(args.n_train), str(args.epochs))
    rows = []
    for i, (name, extra) in enumerate(CONFIGS.items()):
        cmd = [sys.executable, "-m", "lit_attention.cli", "fit", "--config", str(repo / "configs" / "copy.yaml"),
               "--run.root", args.root, "--run.group", "reverse-ablation", "--run.id", f"c{i}",
               "--data.task", "reverse", "--data.max_len_words", "30", "--data.n_train", n_train,
               "--data.max_tokens", "2048", "--model.d_model", "64", "--model.ffn", "128",
               "--trainer.max_epochs", epochs, "--trainer.enable_progress_bar", "false",
               "--diagnostics.heatmaps", "0", *extra]
        done = subprocess.run(cmd, capture_output=True, text=True)
        summary = read_summary(Path(args.root) / "reverse-ablation" / f"c{i}", missing_ok=True)
        rows.append((name, summary.get("val_bleu"), summary.get("params"), summary.get("train_seconds"), done.returncode))
        print(f"{name:28s} val BLEU {summary.get('val_bleu') or 0:6.2f}  params {summary.get('params')}"
              f"  train {summary.get('train_seconds') or 0:6.1f}s  exit {done.returncode}", flush=True)
    best = max(rows, key=lambda r: r[1] or 0)
    print(f"SUMMARY reverse_ablation: best {best[0]} (val BLEU {best[1]:.2f}); "
          f"attention gain over no attention (lstm) {(rows[2][1] or 0) - (rows[1][1] or 0):+.2f} BLEU")
    return 0 if all(r[4] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
