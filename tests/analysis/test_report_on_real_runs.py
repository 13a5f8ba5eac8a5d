"""The report on run stores written by REAL short training runs (`lit-attention fit` on the copy
task): the table's means, stds and 95% CIs equal values computed here independently from the
summary.json files, failed runs are excluded, significance and figures work on real hypotheses."""

from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
import uuid

import pytest

from conftest import CONFIGS, cli_in_process
from lit_attention.analysis import report

pytestmark = pytest.mark.slow

T_975 = {1: 12.7062, 2: 4.3027}  # two-sided 95% t critical values from printed tables
RUNS = [("sinusoidal", 1), ("sinusoidal", 2), ("learned", 1)]
TINY = ["--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.num_sanity_val_steps", "0",
        "--trainer.log_every_n_steps", "1", "--data.init_args.n_train", "200",
        "--data.init_args.n_val", "30", "--data.init_args.n_test", "30",
        "--model.init_args.d_model", "32", "--model.init_args.ffn", "64"]


@pytest.fixture(scope="session")
def real_study(tmp_path_factory):
    """3 real training runs (sinusoidal positions x 2 seeds, learned x 1), one after the other in
    this process (a process each costs ~4.5 CPU s of imports, and the analysis is the subject),
    plus a copy of one real run marked failed the way the run store marks a crash."""
    root = tmp_path_factory.mktemp("real_runs")
    for positional, seed in RUNS:
        fit = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", root, "--run.group", "g",
                             "--run.id", f"{positional}-s{seed}", "--seed_everything", seed,
                             "--model.init_args.positional", positional, *TINY)
        assert fit.returncode == 0, fit.stderr[-3000:]
    failed = root / "g" / "sinusoidal-s9"
    shutil.copytree(root / "g" / "sinusoidal-s1", failed)
    summary = json.loads((failed / "summary.json").read_text())
    summary.update(run_id="sinusoidal-s9", seed=9, status="failed", error="RuntimeError: boom",
                   val_loss=0.001, uuid=uuid.uuid4().hex)   # another run, not a copy of the same one
    (failed / "summary.json").write_text(json.dumps(summary))
    return root / "g"


def _summaries(study):
    return [json.loads(p.read_text()) for p in sorted(study.glob("*/summary.json"))]


def test_real_runs_table_equals_independent_statistics(real_study, tmp_path, capsys):
    out = tmp_path / "report"
    assert report.main([str(real_study), "--out", str(out), "--metric", "val_loss",
                        "--rows", "model.positional", "--digits", "3"]) == 0
    printed = capsys.readouterr().out
    with open(out / "table.csv") as f:
        table = {row["model.positional"]: row for row in csv.DictReader(f)}
    assert set(table) == {"learned", "sinusoidal"}
    summaries = _summaries(real_study)
    for positional in ("learned", "sinusoidal"):
        finished = [s for s in summaries if s["model"]["positional"] == positional and s["status"] == "finished"]
        values = [s["val_loss"] for s in finished]
        row = table[positional]
        assert int(row["n"]) == len(values) == sum(p == positional for p, _ in RUNS)
        assert float(row["mean"]) == pytest.approx(statistics.mean(values), rel=1e-9)
        if len(values) == 1:  # one seed: no std, no interval, shown as a bare mean
            assert row["std"] == row["ci_lo"] == ""
            assert f"| {values[0]:.3f}" in (out / "table.md").read_text()
            assert f"{values[0]:.3f} (1)" in printed
        else:
            assert values[0] != values[1]   # two seeds, really different
            mean, sd = statistics.mean(values), statistics.stdev(values)   # stdev: ddof=1
            half = T_975[len(values) - 1] * sd / math.sqrt(len(values))
            assert float(row["std"]) == pytest.approx(sd, rel=1e-9)
            assert float(row["ci_lo"]) == pytest.approx(mean - half, rel=1e-4)
            assert float(row["ci_hi"]) == pytest.approx(mean + half, rel=1e-4)
            assert f"{mean:.3f} ± {sd:.3f}" in printed
        assert float(row["params"]) == statistics.mean(s["params"] for s in finished)
        assert float(row["machine_gflops"]) == pytest.approx(
            statistics.mean(statistics.median(s["machine_gflops_probes"]) for s in finished), rel=0.01)
        assert set(row["run_ids"].split(";")) == {s["run_id"] for s in finished}
        # the median global grad norm comes from each run's metrics.csv
        medians = []
        for s in finished:
            with open(real_study / s["run_id"] / "metrics.csv") as f:
                norms = [float(r["grad_norm/total"]) for r in csv.DictReader(f) if r.get("grad_norm/total")]
            medians.append(statistics.median(norms))
        assert float(row["grad_norm_median"]) == pytest.approx(statistics.mean(medians))
    # the real config.yaml dumps differ only in bookkeeping (run id, seed) within a configuration
    assert "differ in" not in capsys.readouterr().err
    # the failed copy (val_loss 0.001, best by far) is counted and never averaged in
    assert int(table["sinusoidal"]["n_failed"]) == 1
    assert "sinusoidal-s9:failed" in table["sinusoidal"]["excluded_ids"]
    with open(out / "excluded.csv") as f:
        assert [r["run_id"] for r in csv.DictReader(f)] == ["sinusoidal-s9"]
    assert "1 failed, 0 pruned" in (out / "table.tex").read_text()
    sig = [s["sacrebleu_signature"] for s in summaries][0]
    assert sig.replace("|", r"\textbar{}\allowbreak{}") in (out / "table.tex").read_text()


def test_real_runs_significance_and_figures(real_study, tmp_path, capsys):
    out = tmp_path / "report"
    assert report.main([str(real_study), "--out", str(out), "--rows", "model.positional",
                        "--baseline", "positional=sinusoidal", "--samples", "100"]) == 0
    with open(out / "significance.csv") as f:
        (learned,) = list(csv.DictReader(f))
    # one learned seed: the seed-aware test cannot run, and the table says so instead of a mark
    assert learned["model.positional"] == "learned" and int(learned["n_tested"]) == 1
    assert learned["note"] == "n=1" and learned["p"] == "" and learned["significant"] != "True"
    assert "p (Holm)" in capsys.readouterr().out
    # the sentence-level bootstrap of one run against one run does test the real hypotheses
    pair = tmp_path / "pair"
    for run_id in ("sinusoidal-s1", "learned-s1"):
        shutil.copytree(real_study / run_id, pair / run_id)
    sentence = tmp_path / "sentence"
    assert report.main([str(pair), "--out", str(sentence), "--rows", "model.positional",
                        "--baseline", "positional=sinusoidal", "--samples", "100",
                        "--test", "bootstrap"]) == 0
    with open(sentence / "significance.csv") as f:
        (learned,) = list(csv.DictReader(f))
    assert 0 < float(learned["p"]) <= 1 and 0 < float(learned["p_holm"]) <= 1
    for name in ("ablation_bars.png", "learning_curves_ppl.png", "learning_curves_ppl.pdf"):
        data = (out / name).read_bytes()
        assert len(data) > 2000 and data[:4] in (b"\x89PNG", b"%PDF")
