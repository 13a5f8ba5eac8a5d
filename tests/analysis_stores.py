"""FIXTURE run stores for the analysis tests: small hand-built runs/<group>/<run_id>/ directories
in the run-store format (docs/ARCHITECTURE.md). Real training runs are in
test_analysis_real_runs.py; these cover what short real runs do not produce (failed/pruned runs,
gradient-flow tables, length buckets, attention maps, many configurations)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
WORDS = "the a cat dog sat on mat ran fast slow big small red blue house tree".split()


def references(n: int = 120, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) for _ in range(n)]


def corrupt(refs: list[str], fraction: float, seed: int) -> list[str]:
    """Each sentence, with probability `fraction`, keeps only its first half."""
    rng = random.Random(seed)
    return [" ".join(r.split()[: len(r.split()) // 2]) if rng.random() < fraction else r for r in refs]


def write_run(root: Path, group: str, run_id: str, *, seed: int, model: dict, status: str = "finished",
              val_bleu: float | None = None, params: int = 1000, hyps: list[str] | None = None,
              refs: list[str] | None = None, gradflow_decay: float | None = None,
              buckets: list[dict] | None = None, attention: bool = False, curve: list[float] | None = None,
              task: str = "copy", clip: float = 1.0) -> Path:
    run_dir = root / group / run_id
    (run_dir / "hyps").mkdir(parents=True, exist_ok=True)
    summary = dict(run_id=run_id, group=group, run_dir=str(run_dir), status=status,
                   error="FloatingPointError: nan" if status == "failed" else None, task=task,
                   model=model, seed=seed, params=params, train_seconds=10.0 + seed,
                   tokens_per_second=5000.0, steps=100, epochs=1, val_loss=1.0, val_ppl=2.7,
                   val_bleu=val_bleu, val_chrf=None, sacrebleu_signature=SIGNATURE)
    if buckets is not None:
        summary["val_bleu_by_length"] = buckets      # the key the translation module writes
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "config.yaml").write_text(
        f"seed_everything: {seed}\ntrainer:\n  gradient_clip_val: {clip}\n"
        "model:\n  class_path: x.Y\n  init_args:\n"
        + "".join(f"    {k}: {v}\n" for k, v in model.items()))
    curve = curve or [8.0, 5.0, 3.0]
    lines = ["step,epoch,train_loss,val_ppl,val_bleu,grad_norm/total"]
    for i, ppl in enumerate(curve):
        lines.append(f"{(i + 1) * 10},{i},{ppl / 2},{ppl},{(val_bleu or 0) * (i + 1) / len(curve)},"
                     f"{0.5 + i * 0.5}")
    (run_dir / "metrics.csv").write_text("\n".join(lines) + "\n")
    if hyps is not None:
        (run_dir / "hyps" / "test.txt").write_text("\n".join(hyps) + "\n")
        (run_dir / "hyps" / "test.ref.txt").write_text("\n".join(refs) + "\n")
    if gradflow_decay is not None:
        # 4 sentences of 25 tokens, forward and backward; ‖∂L/∂h_t‖ = scale * decay ** distance at
        # the last step (step 50: another decay, which the analysis must not use)
        rows = ["step,direction,sentence,position,distance,norm"]
        for step, decay in ((50, gradflow_decay ** 0.5), (100, gradflow_decay)):
            for direction in ("forward", "backward"):
                for sentence in (3, 8, 12, 40):
                    for position in range(25):
                        distance = 24 - position if direction == "forward" else position
                        norm = (1 + sentence / 10) * decay ** distance
                        rows.append(f"{step},{direction},{sentence},{position},{distance},{norm}")
        (run_dir / "gradflow.csv").write_text("\n".join(rows) + "\n")
    if attention:
        (run_dir / "attention").mkdir(exist_ok=True)
        for k in range(2):
            fig, ax = plt.subplots(figsize=(2, 2))
            ax.imshow(np.random.default_rng(seed + k).random((5, 6)))
            fig.savefig(run_dir / "attention" / f"example{k}.png")
            plt.close(fig)
    return run_dir
