"""`lit-attention report` at sweep scale: seconds and peak memory over 100, 1,000 and 10,000 runs.

Writes synthetic run stores (configurations x 4 seeds; per run a summary.json and a LightningCLI-
sized config.yaml, metrics.csv, gradflow.csv, placeholder checkpoints and attention maps, and
1,000 test hypotheses with references: Multi30k test2016 when ../shared/data is there) and
measures, each in a fresh process:

    load        load.load_runs alone (summary.json + config.yaml of every run): first (parsing
                every config.yaml) and again (reading the parses cached beside them)
    tables      report --no-figures --baseline off
    sig cold    report --no-figures with its default test of every configuration vs the
                baseline (seeds x sentences: the seeds' variance plus the bootstrap covariance of
                the sentences, Student's t; analysis/statistics.py), sentence statistics computed (on all CPUs) and
                cached in the stores
    sig warm    the same again, statistics read from the caches (the report a researcher re-runs)
    figures     sig warm with the figures the report draws by default (the baseline and the
                configurations of largest |Δ|), and its ratio to sig warm

beside what a user would otherwise run: sacreBLEU's PairedTest (paired bootstrap) of every
(system, baseline) pair of runs with the same seed, with the same number of resamples, measured on
a few pairs in the same run and extrapolated to all of them. (It is the baseline for the time, not
the same statistic: it tests one seed's pair of runs, the report all seeds at once.)

A run's hypotheses are assembled sentence by sentence from a pool of damaged variants of each
reference (--variants per sentence), so runs share sentences as runs of one sweep do; the cold
column therefore profits from remembered pairs, and the script also prints the statistics cost
per distinct sentence to extrapolate a sweep whose outputs never repeat.

    python bench/report_scale.py                     # 100, 1,000, 10,000 runs (long: see --sizes)
    python bench/report_scale.py --sizes 100 1000
    python bench/report_scale.py --quick             # tiny sizes: the script still works
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MULTI30K_TEST = REPO.parent / "shared" / "data" / "multi30k" / "test_2016_flickr.en.gz"
SEEDS = (1, 2, 3, 4)
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
TRAINER_KEYS = ("accelerator strategy devices num_nodes precision logger callbacks fast_dev_run "
                "max_epochs min_epochs max_steps min_steps max_time limit_train_batches "
                "limit_val_batches limit_test_batches limit_predict_batches overfit_batches "
                "val_check_interval check_val_every_n_epoch num_sanity_val_steps log_every_n_steps "
                "enable_checkpointing enable_progress_bar enable_model_summary "
                "accumulate_grad_batches gradient_clip_val gradient_clip_algorithm deterministic "
                "benchmark inference_mode use_distributed_sampler profiler detect_anomaly barebones "
                "plugins sync_batchnorm reload_dataloaders_every_n_epochs default_root_dir").split()
DATA_KEYS = ("task data_dir src_lang tgt_lang train_split val_split test_split n_train n_val n_test "
             "min_len max_len_words n_symbols data_seed tokenizer spm_model vocab_size joint_vocab "
             "cache_dir max_tokens max_len num_workers limit_train").split()


# ---- synthetic run stores ----------------------------------------------------------------------

def references(n: int) -> list[str]:
    if MULTI30K_TEST.is_file():
        with gzip.open(MULTI30K_TEST, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
        return (lines * (n // len(lines) + 1))[:n]
    sys.path.insert(0, str(REPO / "tests"))
    from analysis_stores import references as toy_references
    return toy_references(n, seed=0)


def variants(refs: list[str], k: int, seed: int = 0) -> list[list[str]]:
    """k damaged versions of every reference (words dropped and swapped), best first."""
    rng = random.Random(seed)
    vocab = " ".join(refs[:300]).split()
    pool = []
    for ref in refs:
        words = ref.split()
        pool.append([" ".join(rng.choice(vocab) if rng.random() < 0.3 * i / k else w
                              for w in words if rng.random() >= 0.4 * i / k) for i in range(k)])
    return pool


def model_of(config: int) -> dict:
    """A sweep over attention, heads, depth and positional encoding; config 0 has no attention."""
    return dict(family="transformer", attention="none" if config == 0 else "mha",
                heads=2 ** (config % 4), layers=1 + config // 4 % 6,
                positional=("sinusoidal", "learned", "rotary", "alibi", "relative")[config // 24 % 5],
                d_model=128 + 64 * (config // 120))


def config_yaml(seed: int, model: dict, clip: float = 1.0) -> str:
    """A config.yaml the size and shape of LightningCLI's dump."""
    import yaml
    trainer = dict.fromkeys(TRAINER_KEYS)
    trainer.update(max_epochs=8, num_nodes=1, gradient_clip_val=clip, log_every_n_steps=10)
    init = dict(model, cell="lstm", scoring=None, context="init", emb_size=None, enc_layers=2,
                dec_layers=2, ffn=256, dropout=0.1, norm="pre", tie_embeddings=True,
                bidirectional=True, input_feeding=False, enc_output="concat", rank=32,
                teacher_forcing=1.0, match_params=None, label_smoothing=0.1, lr=0.002,
                warmup=200, betas=[0.9, 0.98], weight_decay=0.0, max_len_a=1.5, max_len_b=10,
                val_bleu=True, beam_size=5, length_penalty=1.0, length_buckets=[10, 20, 30])
    data = dict.fromkeys(DATA_KEYS)
    data.update(task="multi30k", tokenizer="spm", vocab_size=8000, max_tokens=4096, max_len=128)
    config = {"seed_everything": seed, "trainer": trainer,
              "model": {"class_path": "lit_attention.lightning.translation.TranslationModule",
                        "init_args": init},
              "data": {"class_path": "lit_attention.data.translation.TranslationDataModule",
                       "init_args": data},
              "run": dict(root="runs", group="scale", id=None, name=None, tags="", job_type="train")}
    return "# lightning.pytorch==2.6.6\n" + yaml.safe_dump(config, sort_keys=False)


def write_run(run_dir: Path, seed: int, model: dict, bleu: float, hyps: list[str], refs: str) -> None:
    from lit_attention.tracking.schema import write_summary
    (run_dir / "hyps").mkdir(parents=True)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "attention").mkdir()
    summary = dict(run_id=run_dir.name, group=run_dir.parent.name, run_dir=str(run_dir),
                   status="finished", error=None, task="multi30k", model=model, seed=seed,
                   params=1_000_000 + 1000 * model["layers"], train_seconds=600.0 + seed,
                   train_tokens=2_000_000, tokens_per_second=3300.0, machine_gflops=90.0,
                   machine_gflops_probes=[90.0] * 9, steps=1500, epochs=8, val_loss=2.1,
                   val_ppl=8.2, val_bleu=bleu, val_chrf=bleu + 20, test_loss=2.2, test_ppl=9.0,
                   test_bleu=bleu - 1, test_chrf=bleu + 19, sacrebleu_signature=SIGNATURE,
                   grad_norm_median=0.8, clip_fraction=0.1, git_commit="0" * 40,
                   versions={"torch": "2.13.0", "lightning": "2.6.6", "sacrebleu": "2.6.0"},
                   test_bleu_by_length=[dict(bucket=b, lo=10 * i, hi=10 * i + 9, n=250, unit="words",
                                             bleu=bleu, chrf=bleu + 20)
                                        for i, b in enumerate(("1-9", "10-19", "20-29", "30+"))],
                   attention_entropy={"cross.0": 1.2}, started_at="2026-01-01T00:00:00+00:00",
                   finished_at="2026-01-01T00:10:00+00:00", wandb_run_id=None)
    write_summary(run_dir, summary)
    (run_dir / "config.yaml").write_text(config_yaml(seed, model))
    rows = ["step,epoch,time,train_loss,lr,grad_norm/total,val_loss,val_ppl,val_bleu"]
    rows += [f"{s},{s // 200},{s * 0.4:.1f},{3 - s / 1000:.3f},0.002,0.8,"
             + (f"{2.5 - s / 2000:.3f},{8 - s / 500:.2f},{bleu * s / 1500:.2f}" if s % 200 == 0 else ",,")
             for s in range(10, 1510, 10)]
    (run_dir / "metrics.csv").write_text("\n".join(rows) + "\n")
    flow = ["step,direction,sentence,position,distance,norm"]
    flow += [f"{s},{d},{i},{p},{30 - p},{(0.9 + 0.01 * i) ** (30 - p):.5f}" for s in (500, 1000, 1500)
             for d in ("forward", "backward") for i in range(4) for p in range(31)]
    (run_dir / "gradflow.csv").write_text("\n".join(flow) + "\n")
    for name in ("checkpoints/best.ckpt", "checkpoints/last.ckpt"):
        (run_dir / name).write_bytes(b"\0" * 64)       # placeholders: the report never reads them
    words = hyps[0].split()[:12] or ["."]
    weights = [[1.0 / len(words)] * len(words) for _ in words]
    (run_dir / "attention" / "val-0.json").write_text(json.dumps(dict(source=words, target=words, weights=weights)))
    (run_dir / "hyps" / "test.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (run_dir / "hyps" / "test.ref.txt").write_text(refs, encoding="utf-8")


def write_stores(root: Path, n_runs: int, pool: list[list[str]], refs: list[str]) -> Path:
    """n_runs // 4 configurations x 4 seeds under root/scale."""
    study = root / "scale"
    refs_text = "".join(r + "\n" for r in refs)
    k = len(pool[0])
    for config in range(max(1, n_runs // len(SEEDS))):
        model = model_of(config)
        quality = 0.0 if config == 0 else random.Random(config).random()   # 0: the baseline's level
        for seed in SEEDS:
            rng = random.Random(config * 100 + seed)
            # better configurations pick better variants; the baseline mostly mid-pool ones
            centre = (k - 1) * (0.6 - 0.4 * quality)
            picks = [min(k - 1, max(0, round(rng.gauss(centre, 1.5)))) for _ in refs]
            hyps = [variants_[i] for variants_, i in zip(pool, picks)]
            write_run(study / f"c{config:05d}-s{seed}", seed, model, 20 + 10 * quality + seed / 10,
                      hyps, refs_text)
    return study


# ---- measurements, each in a fresh process ---------------------------------------------------

def measure(kind: str, study: str, samples: int, pairs: int) -> dict:
    """Run one measurement in this process; seconds (load: after its imports; report: with its
    imports, as a user waits for it) and peak resident memory (MB)."""
    start = time.perf_counter()
    if kind == "paired":
        per_pair, timed = paired_test_seconds(Path(study), samples, pairs)
        return dict(seconds=per_pair, timed=timed, peak_mb=peak_mb())
    if kind == "load":
        from lit_attention.analysis import load
        start = time.perf_counter()
        load.load_runs(study)
    else:
        from lit_attention.analysis import report
        args = [study, "--out", str(Path(study).parent / f"report-{kind}")] + ["--no-figures"] * (kind != "figures")
        args += ["--baseline", "off"] if kind == "tables" else [
            "--baseline", "attention=none", "--samples", str(samples)]
        with open(os.devnull, "w") as null:
            saved, sys.stdout = sys.stdout, null
            try:
                code = report.main(args)
            finally:
                sys.stdout = saved
        if code != 0:
            raise SystemExit(f"report {' '.join(args)} exited {code}")
    seconds = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024   # stats workers
    return dict(seconds=seconds, peak_mb=peak_mb(), worker_peak_mb=children)


def peak_mb() -> float:
    """This process's peak resident memory. VmHWM, not ru_maxrss: Linux carries ru_maxrss over
    from the parent through fork and exec, so a child of a large parent would report the parent's."""
    try:
        status = Path("/proc/self/status").read_text()
        return int(next(l.split()[1] for l in status.splitlines() if l.startswith("VmHWM"))) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def in_fresh_process(kind: str, study: Path, samples: int, pairs: int = 0) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", kind, str(study), str(samples),
                          str(pairs)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"measurement {kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def paired_test_seconds(study: Path, samples: int, n_pairs: int) -> tuple[float, int]:
    """sacreBLEU PairedTest (bs, the same resamples) on the first `n_pairs` (system, baseline)
    pairs of the study: seconds per pair, and how many pairs were timed."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest
    runs = sorted(p for p in study.iterdir() if p.is_dir() and not p.name.startswith("c00000-"))
    refs = (study / "c00000-s1" / "hyps" / "test.ref.txt").read_text(encoding="utf-8").splitlines()
    timed = runs[:n_pairs]
    start = time.perf_counter()
    for run in timed:
        seed = run.name.rsplit("-s", 1)[1]
        base = (study / f"c00000-s{seed}" / "hyps" / "test.txt").read_text(encoding="utf-8").splitlines()
        hyps = (run / "hyps" / "test.txt").read_text(encoding="utf-8").splitlines()
        PairedTest([("baseline", base), ("system", hyps)], {"bleu": BLEU()}, references=[refs],
                   test_type="bs", n_samples=samples)()
    return (time.perf_counter() - start) / len(timed), len(timed)


def extraction_us_per_sentence(refs: list[str], metric: str) -> float:
    """Sentence statistics of distinct hypotheses (references already seen): us per sentence."""
    from lit_attention.tracking import sentence_stats
    extractor = sentence_stats.Extractor()
    extractor.corpus(refs, refs, [metric])
    hyps = [v[-1] for v in variants(refs, 2, seed=99)]
    start = time.perf_counter()
    extractor.corpus(hyps, refs, [metric])
    return (time.perf_counter() - start) / len(refs) * 1e6


def cpu_line() -> str:
    model, flags = platform.processor() or "?", set()
    try:
        info = Path("/proc/cpuinfo").read_text()
        model = next(l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name"))
        flags = set(next(l.split(":", 1)[1] for l in info.splitlines() if l.startswith("flags")).split())
    except (OSError, StopIteration):
        pass
    simd = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags)
    return (f"CPU: {model}; {len(os.sched_getaffinity(0))} usable cores; flags: {simd or 'none of interest'}; "
            f"load average {os.getloadavg()[0]:.1f}")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        print(json.dumps(measure(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000], help="runs per store")
    p.add_argument("--sentences", type=int, default=1000, help="test sentences per run")
    p.add_argument("--samples", type=int, default=10_000, help="bootstrap resamples")
    p.add_argument("--variants", type=int, default=8, help="damaged variants per sentence")
    p.add_argument("--paired-test-pairs", type=int, default=3,
                   help="pairs sacreBLEU's PairedTest is timed on (then extrapolated)")
    p.add_argument("--root", default=None, help="where to write the stores (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the stores")
    p.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    args = p.parse_args()
    if args.quick:
        args.sizes, args.sentences, args.samples, args.paired_test_pairs = [12], 60, 200, 1
    print(cpu_line())
    refs = references(args.sentences)
    pool = variants(refs, args.variants)
    source = "Multi30k test2016" if MULTI30K_TEST.is_file() else "synthetic (no ../shared/data)"
    print(f"{args.sentences} test sentences per run ({source}), {args.variants} variants each; "
          f"{args.samples} resamples; statistics of distinct sentences: BLEU "
          f"{extraction_us_per_sentence(refs, 'bleu'):.0f} us/sentence, chrF "
          f"{extraction_us_per_sentence(refs, 'chrf'):.0f} us/sentence (a BLEU table needs BLEU's)")
    root = Path(args.root or tempfile.mkdtemp(prefix="report_scale_"))
    header = ("| runs | write s | load s first / again | tables s (MB) | sig cold s (MB) | sig warm s (MB) "
              "| figures s (MB) | figures / warm | PairedTest s (est.) | warm speed-up |")
    lines = [header, "|---" * (header.count("|") - 1) + "|"]
    results = []
    try:
        for size in args.sizes:
            start = time.perf_counter()
            study = write_stores(root / f"runs{size}", size, pool, refs)
            written = time.perf_counter() - start
            load = in_fresh_process("load", study, args.samples)
            reload = in_fresh_process("load", study, args.samples)
            tables = in_fresh_process("tables", study, args.samples)
            cold = in_fresh_process("cold", study, args.samples)
            warm = in_fresh_process("warm", study, args.samples)
            figures = in_fresh_process("figures", study, args.samples)
            paired_run = in_fresh_process("paired", study, args.samples, args.paired_test_pairs)
            per_pair, timed = paired_run["seconds"], paired_run["timed"]
            n_pairs = (max(1, size // len(SEEDS)) - 1) * len(SEEDS)
            paired = per_pair * n_pairs
            results.append((size, warm["seconds"], paired, figures["seconds"]))
            lines.append(
                f"| {size} | {written:.1f} | {load['seconds']:.2f} / {reload['seconds']:.2f} | {tables['seconds']:.1f} "
                f"({tables['peak_mb']:.0f}) | {cold['seconds']:.1f} ({cold['peak_mb']:.0f}; workers "
                f"{cold['worker_peak_mb']:.0f}) | {warm['seconds']:.1f} ({warm['peak_mb']:.0f}) | "
                f"{figures['seconds']:.1f} ({figures['peak_mb']:.0f}) | {figures['seconds'] / warm['seconds']:.2f} | "
                f"{paired:.0f} ({per_pair:.2f} s/pair x {n_pairs} pairs, {timed} timed) "
                f"| {paired / warm['seconds']:.0f}x |")
            print(lines[-1], flush=True)
    finally:
        print("\n".join(lines))
        if not args.keep:
            for size in args.sizes:
                shutil.rmtree(root / f"runs{size}", ignore_errors=True)
            if args.root is None:
                shutil.rmtree(root, ignore_errors=True)
    print("load: summary.json + config.yaml of every run; tables: report --no-figures --baseline off; "
          "sig: + the seed-aware test (seed variance + sentence bootstrap covariance, Student's t) vs attention=none, "
          "Holm; cold: computing and caching "
          "sentence statistics, warm: reading them; figures: sig warm with the default figures; MB: peak "
          "resident memory of the report process "
          "(cold: and of its statistics workers). PairedTest: sacreBLEU's own test on the same "
          "pairs of runs (one seed each), timed on the first pairs and multiplied by the number of pairs.")
    size, warm, paired, figures = results[-1]
    print(f"SUMMARY report_scale: {size} runs, significance at {args.samples} resamples: "
          f"{warm:.1f} s warm vs sacreBLEU PairedTest {paired:.0f} s (est.), {paired / warm:.0f}x; "
          f"with figures {figures:.1f} s, {figures / warm:.2f}x the report without")
    return 0


if __name__ == "__main__":
    sys.exit(main())
