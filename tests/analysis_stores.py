"""FIXTURE run stores for the analysis tests: small hand-built runs/<group>/<run_id>/ directories
in the run-store format (docs/ARCHITECTURE.md). Real training runs are in
analysis/test_report_on_real_runs.py; these cover what short real runs do not produce (failed/pruned runs,
gradient-flow tables, length buckets, attention maps, many configurations)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
WORDS = "the a cat dog sat on mat ran fast slow big small red blue house tree".split()


def references(n: int = 120, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) for _ in range(n)]


def corrupt(refs: list[str], fraction: float, seed: int) -> list[str]:
    """Each sentence, with probability `fraction`, keeps only its first half."""
    rng = random.Random(seed)
    return [" ".join(r.split()[: len(r.split()) // 2]) if rng.random() < fraction else r for r in refs]


def paired_bootstrap(baseline: list[str], system: list[str], refs: list[str], metric: str = "bleu",
                     n_samples: int | None = None, test: str = "bootstrap") -> dict:
    """Baseline score, system score and the p-value of their difference from hypotheses, by the
    report's sentence-level test (significance.pvalues on one shared draw)."""
    from lit_attention.analysis import significance
    from lit_attention.analysis import statistics as st
    from lit_attention.tracking import sentence_stats as ss

    extractor = ss.Extractor()
    base_stats = extractor.corpus(baseline, refs, [metric])[metric]
    sys_stats = extractor.corpus(system, refs, [metric])[metric]
    scores = dict(baseline=ss.corpus_score(metric, base_stats), system=ss.corpus_score(metric, sys_stats))
    if list(system) == list(baseline):
        return dict(scores, p=1.0)   # as the report's test skips identical systems
    draw = st.draw(test, len(refs), n_samples or significance.N_SAMPLES, significance.SEED)
    return dict(scores, p=float(significance.pvalues(metric, draw, base_stats[None], sys_stats[None])[0]))


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
        import torch

        from lit_attention.diagnostics import save_heatmap

        generator = torch.Generator().manual_seed(seed)
        for k in range(2):
            weights = torch.softmax(torch.randn(5, 6, generator=generator), dim=-1)
            save_heatmap(weights, WORDS[:6], WORDS[6:11], run_dir / "attention" / f"example{k}.png")
    return run_dir


# The configurations of sweeps/demo.yaml (the model fields a real run records) and plausible
# validation BLEU per seed.
DEMO = {
    "gru-none": (dict(family="rnn", d_model=64, enc_layers=1, dec_layers=1, dropout=0.1,
                      label_smoothing=0.0, cell="gru", attention="none", emb_size=64,
                      bidirectional=True, teacher_forcing=1.0, tie_embeddings=False, context="init"),
                 [14.2, 16.9, 15.1], 118_000),
    "gru-dot": (dict(family="rnn", d_model=64, enc_layers=1, dec_layers=1, dropout=0.1,
                     label_smoothing=0.0, cell="gru", attention="bahdanau", emb_size=64,
                     bidirectional=True, teacher_forcing=1.0, tie_embeddings=False, scoring="dot",
                     enc_output="project", input_feeding=False),
                [41.3, 44.8, 43.0], 142_000),
    "gru-additive": (dict(family="rnn", d_model=64, enc_layers=1, dec_layers=1, dropout=0.1,
                          label_smoothing=0.0, cell="gru", attention="bahdanau", emb_size=64,
                          bidirectional=True, teacher_forcing=1.0, tie_embeddings=False,
                          scoring="additive", enc_output="project", input_feeding=False),
                     [46.1, 47.9, 45.2], 150_000),
    "transformer": (dict(family="transformer", d_model=64, enc_layers=2, dec_layers=2, dropout=0.1,
                         label_smoothing=0.1, positional="sinusoidal", scoring="scaled_dot",
                         heads=4, ffn=128, norm="pre", tie_embeddings=True),
                    [52.4, 50.8, 53.3], 205_000),
}
SRC_WORDS = "der die das hund katze sitzt auf matte läuft schnell".split()


def demo_study(root: Path, seeds: int = 2, epochs: int = 6) -> Path:
    """A realistic run store of sweeps/demo.yaml: every file a real run writes (summary with costs
    and machine speed, metrics.csv with train rows and per-epoch validation rows, hypotheses,
    gradient flow, length buckets, attention maps with tokens). Token-based batching gives each
    seed a slightly different number of steps per epoch, as real runs have."""
    import torch

    from lit_attention.diagnostics import save_heatmap
    refs = references(200, seed=7)
    for name, (model, bleus, params) in DEMO.items():
        for seed in range(1, seeds + 1):
            bleu = bleus[seed - 1]
            hyps = refs if model.get("attention") != "none" else corrupt(refs, 0.7, seed)
            steps_per_epoch = 47 + seed % 2
            curve = [60.0 / (e + 1) ** (0.5 + bleu / 100) + 1.5 for e in range(epochs)]
            run_dir = write_run(root, "demo", f"{name}-s{seed}", seed=seed, model=model,
                                val_bleu=bleu, params=params, hyps=hyps, refs=refs, task="toy-mt",
                                gradflow_decay=0.6 if model.get("attention") == "none" else 0.9,
                                buckets=[dict(bucket="1-8", lo=1, hi=8, n=70, bleu=bleu + 4),
                                         dict(bucket="9-14", lo=9, hi=14, n=80, bleu=bleu),
                                         dict(bucket="15+", lo=15, hi=None, n=50, bleu=bleu - 6)])
            summary = json.loads((run_dir / "summary.json").read_text())
            summary.update(steps=steps_per_epoch * epochs, epochs=epochs, train_seconds=95.0 + 7 * seed,
                           train_tokens=steps_per_epoch * epochs * 900, machine_gflops=150.0 + seed,
                           tokens_per_second=steps_per_epoch * epochs * 900 / (95.0 + 7 * seed),
                           val_ppl=curve[-1], val_loss=math.log(curve[-1]))
            (run_dir / "summary.json").write_text(json.dumps(summary))
            lines = ["step,epoch,time,train_loss,lr,grad_norm/total,val_loss,val_ppl,val_bleu,val_chrf"]
            for e in range(epochs):
                for s in range(e * steps_per_epoch + 10, (e + 1) * steps_per_epoch, 10):
                    lines.append(f"{s},{e},{s * (1.9 + 0.1 * seed):.2f},{math.log(curve[e]) + 0.2},"
                                 f"0.003,{0.8 + 0.1 * seed},,,,")
                step = (e + 1) * steps_per_epoch
                lines.append(f"{step},{e},{step * (1.9 + 0.1 * seed):.2f},,,,{math.log(curve[e])},"
                             f"{curve[e]},{bleu * (e + 1) / epochs},{bleu + 20}")
            (run_dir / "metrics.csv").write_text("\n".join(lines) + "\n")
            if model.get("attention") != "none" and seed == 1:
                rng = random.Random(seed)
                for k, n_src in enumerate((7, 11)):
                    src = [rng.choice(SRC_WORDS) for _ in range(n_src)] + ["</s>"]
                    tgt = refs[k].split()[: n_src + 1] + ["</s>"]
                    weights = torch.softmax(torch.randn(len(tgt), len(src)) * 3, dim=-1)
                    save_heatmap(weights, src, tgt, run_dir / "attention" / f"val-{k}.png",
                                 title="cross (mean over heads)")
    return root / "demo"


def lstm(attention: str) -> dict:
    """The model fields of an LSTM encoder-decoder with ``attention``."""
    return dict(family="rnn", cell="lstm", attention=attention, d_model=32)


def write_study(root: Path, bleu: dict[str, list[float]], group: str = "study") -> Path:
    """root/group: one configuration per attention of ``bleu``, a run per score (seeds 1, 2, ...)."""
    for attention, scores in bleu.items():
        for seed, score in enumerate(scores, start=1):
            write_run(root, group, f"{attention}-s{seed}", seed=seed, model=lstm(attention), val_bleu=score)
    return root / group
