"""The tests against a baseline: the seeds x sentences test equals a direct implementation
on sacreBLEU's corpus BLEU, finds planted effects in the right direction and never a seed-level
effect that the seeds do not show; the sentence-level tests give sacreBLEU PairedTest's p-values
(same draw: the same numbers; another draw: within Monte Carlo error) for single runs.

A language model's perplexity is tested over contiguous blocks of its test tokens: the report
uses them when every run recorded its token losses and says why when it cannot."""

from __future__ import annotations

import gzip
import json
import math
import random

import numpy as np
import pandas as pd
import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from analysis_stores import corrupt, paired_bootstrap, references, write_run
from lit_attention.analysis import captions, load, report, significance, statistics, tables
from student_t_closed_form import t_coverage
from lit_attention.analysis.load import AnalysisError
from lit_attention.tracking import sentence_stats as ss
from lit_attention.tracking.schema import token_nll_file


B = 1000


def drop_words(refs: list[str], p: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(w for w in r.split() if rng.random() >= p) for r in refs]


@pytest.fixture(scope="module")
def systems(shared_data):
    """Multi30k val references (first 400), a baseline and four systems from clearly better to
    as good, so that p-values span the floor and the middle."""
    with gzip.open(shared_data / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as f:
        refs = f.read().splitlines()[:400]
    base = drop_words(refs, 0.30, seed=1)
    others = [drop_words(refs, p, seed=10 + i) for i, p in enumerate((0.18, 0.26, 0.28, 0.30))]
    extractor = ss.Extractor()
    stats = {h_id: extractor.corpus(h, refs) for h_id, h in enumerate([base, *others])}
    return refs, base, others, stats


def sacrebleu_p(refs, base, others, metric, test_type) -> list[float]:
    scorer = {"bleu": BLEU, "chrf": CHRF}[metric]()
    named = [("base", base)] + [(f"s{i}", h) for i, h in enumerate(others)]
    _, scores = PairedTest(named, {metric: scorer}, references=[refs], test_type=test_type,
                           n_samples=B)()
    name = next(k for k in scores if k != "System")
    return [result.p_value for result in scores[name][1:]]


def our_p(corpus_stats: dict, metric: str, test: str, seed: int) -> np.ndarray:
    base_stats = corpus_stats[0][metric]
    stats = np.stack([corpus_stats[i][metric] for i in range(1, len(corpus_stats))])
    draw = statistics.draw(test, stats.shape[1], B, seed)
    return significance.pvalues(metric, draw, np.broadcast_to(base_stats, stats.shape), stats)


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
@pytest.mark.parametrize("test,test_type", [("bootstrap", "bs"), ("permutation", "ar")])
def test_pvalues_agree_with_sacrebleu_paired_test(systems, metric, test, test_type, monkeypatch):
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)          # sacreBLEU's seed is then 12345
    refs, base, others, stats = systems
    expected = sacrebleu_p(refs, base, others, metric, test_type)
    assert min(expected) < 0.01 and max(expected) > 0.1            # the range the test covers
    # the same draw (seed 12345): the same p-values, up to a resample that sacreBLEU's float32
    # arithmetic puts on the other side of a tie
    same = our_p(stats, metric, test, seed=significance.SEED)
    assert np.abs(same - expected).max() <= 2 / (B + 1)
    # an independent draw: within Monte Carlo error (4.5 standard deviations of a difference
    # of two estimates of the same p)
    other = our_p(stats, metric, test, seed=2024)
    for ours, theirs in zip(other, expected):
        sd = math.sqrt(2 * theirs * (1 - theirs) / B)
        assert abs(ours - theirs) <= 4.5 * sd + 2 / (B + 1), (ours, theirs)


def test_default_resamples_let_holm_go_below_one_percent():
    for m in (1, 3, 99, 100, 249, 499):
        n = significance.default_samples(m)
        assert n >= significance.N_SAMPLES and significance.holm_floor(m, n) < 0.01
    assert significance.default_samples(significance.hypotheses("seeds", 3)) == 10_000
    assert significance.hypotheses("seeds", 3) == 6 and significance.hypotheses("bootstrap", 3) == 3
    assert significance.holm_floor(6, 10_000) < 0.001          # the demo table: p < 0.001 resolvable
    assert significance.default_samples(249) == 25_000
    assert significance.default_samples(5000) == significance.MAX_DEFAULT_SAMPLES
    assert significance.holm_floor(5000, significance.resolving_samples(5000)) < 0.01
    text = captions.test_method(12_000, 7, "permutation", comparisons=2)
    assert "approximate randomization" in text and "12,000 resamples" in text and "seed 7" in text
    text = captions.test_method(10_000, 12345, "seeds", comparisons=3, split="val")
    for words in ("seeds × sentences", "10,000 bootstrap draws", "validation sentences", "one-sided",
                  "Holm-corrected over both directions of 3 comparisons (6 hypotheses)"):
        assert words in text
    text = captions.test_method(10_000, 12345, "seeds", comparisons=2, values="test_ppl")
    assert "the variance from the seeds only: the spread of the test_ppl values" in text
    assert "sentences" not in text and "draws" not in text


def test_p_values_print_as_bounds_at_the_resampling_floor_never_zero():
    assert tables.p_text(6 / 10_001, 1 / 10_001, 10_000) == "<0.001"
    assert tables.p_text(6 / 1_001, 1 / 1_001, 1_000) == "<0.006"
    assert tables.p_text(0.0004, 0.0001, 40_000) == "<0.001"       # not at the floor, but below 0.001
    assert tables.p_text(0.0123, 0.004, 10_000) == "0.012"
    assert tables.p_text(1.0, 0.6, 10_000) == "1.000"
    assert tables.p_text(math.nan, math.nan, 10_000) == "–"


def rnn(attention: str) -> dict:
    return dict(family="rnn", cell="gru", attention=attention, d_model=32)


def bleu_of(hyps, refs) -> float:
    return BLEU().corpus_score(hyps, [refs]).score


def store(root, refs, plan: dict, status: dict = ()) -> object:
    """Runs of one study: plan maps attention -> [(damage fraction, corruption seed) per seed];
    val_bleu is the BLEU of the stored test hypotheses, so table means and tested Δ agree."""
    status = dict(status)
    for attention, seeds in plan.items():
        for seed, (fraction, offset) in enumerate(seeds, start=1):
            hyps = corrupt(refs, fraction, seed=seed + offset)
            write_run(root, "study", f"{attention}-{seed}", seed=seed, model=rnn(attention),
                      val_bleu=bleu_of(hyps, refs), hyps=hyps, refs=refs,
                      status=status.get(f"{attention}-{seed}", "finished"))
    return root / "study"


def naive_seed_test(base, systems, refs, n_samples, seed):
    """The test written out: sacreBLEU's corpus BLEU of every run on every resampled test set
    (the sentences of the family's draw, listed one by one); the sentence part of Var(Δ) from the
    covariances of distinct runs over the resamples, the seed part from the runs' BLEU on the
    whole test set (Welch), Satterthwaite's df with N - 1 for the sentences, Student's t."""
    weights = statistics.draw("bootstrap", len(refs), n_samples, seed).weights.astype(int)
    picks = [np.repeat(np.arange(len(refs)), w) for w in weights]

    def scores(runs):
        return np.array([[bleu_of([h[i] for i in idx], [refs[i] for i in idx]) for h in runs]
                         for idx in picks])

    def mean_cov(a, b, distinct):
        pairs = [(i, j) for i in range(a.shape[1]) for j in range(b.shape[1]) if not distinct or i != j]
        return np.mean([np.cov(a[:, i], b[:, j])[0, 1] for i, j in pairs])

    base_scores = scores(base)
    base_full = np.array([bleu_of(h, refs) for h in base])
    found = []
    for runs in systems:
        sys_scores, full = scores(runs), np.array([bleu_of(h, refs) for h in runs])
        sentence = max(0.0, mean_cov(sys_scores, sys_scores, True) + mean_cov(base_scores, base_scores, True)
                       - 2 * mean_cov(sys_scores, base_scores, False))
        va, vb = full.var(ddof=1) / len(full), base_full.var(ddof=1) / len(base_full)
        var = va + vb + sentence
        df = var ** 2 / (va ** 2 / (len(full) - 1) + vb ** 2 / (len(base_full) - 1)
                         + sentence ** 2 / (len(refs) - 1))
        delta = full.mean() - base_full.mean()
        half = statistics.t_quantile(0.975, df) * math.sqrt(var)
        t = delta / math.sqrt(var)
        found.append((delta, delta - half, delta + half, float(statistics.t_sf(t, df)),
                      float(statistics.t_sf(-t, df))))
    return found


@pytest.mark.slow   # over 2 CPU seconds (2.2-4.3 s alone on 2 cores)
def test_seed_test_equals_the_test_written_out_on_sacrebleu(tmp_path):
    refs = references(60, seed=5)
    plan = {"none": [(0.5, 0), (0.5, 0), (0.5, 0)], "bahdanau": [(0.3, 10), (0.35, 10)],
            "luong": [(0.5, 20), (0.6, 20), (0.45, 20)]}
    study = store(tmp_path, refs, plan)
    sig = significance.compare_to_baseline(load.load_runs(study), ["model.attention"],
                                           {"model.attention": "none"}, n_samples=150, seed=3)
    hyps = {a: [corrupt(refs, f, seed=s + o) for s, (f, o) in enumerate(seeds, start=1)]
            for a, seeds in plan.items()}
    expected = naive_seed_test(hyps["none"], [hyps["bahdanau"], hyps["luong"]], refs, 150, 3)
    ups, downs = [e[3] for e in expected], [e[4] for e in expected]
    adjusted = statistics.holm(ups + downs)
    for row, (observed, lo, hi, up, down), k in zip(sig.itertuples(), expected, range(2)):
        assert row.delta == pytest.approx(observed, abs=1e-9)
        assert (row.delta_lo, row.delta_hi) == pytest.approx((lo, hi), abs=1e-7)
        assert row.p == pytest.approx(up if observed > 0 else down, rel=1e-7)
        assert row.p_holm == pytest.approx(adjusted[k] if observed > 0 else adjusted[k + 2], rel=1e-7)
    assert sig["n_tested"].tolist() == [2, 3] and sig["n_baseline"].tolist() == [3, 3]
    assert sig.attrs["n_samples"] == 150 and sig.attrs["comparisons"] == 2


@pytest.mark.slow   # 1.5 CPU-s
def test_planted_effects_get_their_direction_and_one_seed_gets_no_mark(tmp_path, capsys):
    """Better over seeds: ▲; worse over seeds: ▼ (the old two-sided † marked both alike); as good:
    no mark; one seed: 'n=1' and no mark; failed, pruned, untested runs counted."""
    refs = references(300, seed=5)
    plan = {"none": [(0.5, 0)] * 4, "bahdanau": [(0.2, 10)] * 4, "luong": [(0.8, 20)] * 4,
            "dot": [(0.5, 30)] * 3, "general": [(0.1, 40)], "concat": [(0.2, 50)] * 3}
    study = store(tmp_path, refs, plan, status={"concat-3": "failed", "concat-2": "pruned"})
    write_run(tmp_path, "study", "dot-4", seed=4, model=rnn("dot"), val_bleu=20.0)   # no hypotheses
    write_run(tmp_path, "study", "dot-5", seed=5, model=rnn("dot"))                  # no val_bleu
    out = tmp_path / "out"
    assert report.main([str(study), "--out", str(out), "--no-figures"]) == 0
    md = (out / "table.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in md.splitlines()
            if line.startswith("|") and not line.startswith("|:")}
    assert "▲" in rows["bahdanau"] and "▼" not in rows["bahdanau"]
    assert "▼" in rows["luong"] and "▲" not in rows["luong"]
    assert "▲" not in rows["dot"] + rows["general"] + rows["concat"] and "▼" not in rows["dot"]
    assert "| n=1 " in rows["general"] and "| n=1 " in rows["concat"]     # concat: 1 usable seed
    sig = pd.read_csv(out / "significance.csv").set_index("model.attention")
    assert sig.loc["bahdanau", "p_holm"] < 0.01 and sig.loc["luong", "p_holm"] < 0.01
    assert "0.000" not in md
    assert sig.loc["bahdanau", "direction"] == "better" and sig.loc["luong", "direction"] == "worse"
    assert sig.loc["bahdanau", "delta_lo"] > 0 > sig.loc["luong", "delta_hi"]
    assert sig.loc["dot", "delta_lo"] < 0 < sig.loc["dot", "delta_hi"]
    assert not sig.loc["dot", "significant"] and sig.loc["dot", "n_untested"] == 1
    assert sig.loc["general", "note"] == "n=1" and math.isnan(sig.loc["general", "p"])
    caption = md.split("\n\n")[1]
    for words in ("▲/▼: better/worse than the baseline (model.attention=none) on the test hypotheses",
                  "seeds × sentences", "10,000 bootstrap draws", "Holm-corrected over both directions of "
                  "3 comparisons (6 hypotheses)", "n=1: one seed", "1 failed, 1 pruned",
                  "1 finished without val_bleu", "Runs averaged but not tested (without stored test "
                  "hypotheses): 1 of 4 of dot", "(1 seed without a partner)"):
        assert words in caption, words
    assert "significance against the configuration without attention" in capsys.readouterr().err


def test_seeds_that_disagree_are_no_evidence_however_sure_each_seed_is(tmp_path):
    """One seed far better than the baseline, the other far worse: every per-seed sentence test
    is significant (the old largest-p-over-seeds rule marked it), the seed test is not."""
    refs = references(150, seed=5)
    plan = {"none": [(0.5, 0), (0.5, 0)], "bahdanau": [(0.1, 10), (0.9, 10)]}
    study = store(tmp_path, refs, plan)
    runs = load.load_runs(study)
    for seed in (1, 2):
        base = corrupt(refs, 0.5, seed=seed)
        system = (study / f"bahdanau-{seed}" / "hyps" / "test.txt").read_text().splitlines()
        assert paired_bootstrap(base, system, refs, n_samples=1000)["p"] < 0.01
    sig = significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"})
    row = sig.iloc[0]
    assert not row["significant"] and row["p_holm"] > 0.2 and row["delta_lo"] < 0 < row["delta_hi"]


def test_a_summary_metric_is_tested_over_seeds_by_welchs_t_in_its_own_direction(tmp_path):
    """Without sentence statistics (perplexity) the test is Welch's t-test over seeds: equal
    spreads of 3 seeds give exactly 4 degrees of freedom, so p is the t table's value."""
    for attention, ppls in {"none": [9.0, 9.4, 9.2], "bahdanau": [5.0, 5.4, 5.2],
                            "luong": [8.7, 9.1, 8.9]}.items():
        for seed, ppl in enumerate(ppls, start=1):
            run = write_run(tmp_path, "lm", f"{attention}-{seed}", seed=seed, model=rnn(attention),
                            val_bleu=1.0)
            summary = json.loads((run / "summary.json").read_text())
            (run / "summary.json").write_text(json.dumps({**summary, "val_ppl": ppl}))
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "lm"), "--out", str(out), "--metric", "val_ppl",
                        "--no-figures"]) == 0
    sig = pd.read_csv(out / "significance.csv").set_index("model.attention")
    assert sig.loc["bahdanau", "direction"] == "better" and sig.loc["bahdanau", "significant"]
    assert sig.loc["bahdanau", "delta"] == pytest.approx(-4.0)
    t = 0.3 / math.sqrt(2 * 0.04 / 3)                        # 1.837 on 4 degrees of freedom
    welch = (1 - t_coverage(t, 4)) / 2              # one-sided: 0.070
    assert sig.loc["luong", "direction"] == "better"
    assert sig.loc["luong", "p"] == pytest.approx(welch, rel=1e-6)
    assert sig.loc["luong", "df"] == pytest.approx(4.0)
    md = (out / "table.md").read_text()
    assert "▲" in md and "test over seeds: " in md and "the spread of the val_ppl values" in md
    assert "sentences" not in md.split("▲/▼")[1]


def test_sentence_level_tests_compare_single_runs_only(tmp_path, capsys):
    refs = references(150, seed=5)
    one_each = store(tmp_path / "single", refs, {"none": [(0.5, 0)], "bahdanau": [(0.1, 10)]})
    out = tmp_path / "out"
    assert report.main([str(one_each), "--out", str(out), "--test", "permutation", "--samples", "300",
                        "--resample-seed", "4", "--no-figures"]) == 0
    md = (out / "table.md").read_text()
    assert "approximate randomization" in md and "300 resamples, seed 4" in md
    assert "▲" not in md.split("\n\n")[0] and "No marks: one run per configuration" in md
    sig = pd.read_csv(out / "significance.csv")
    assert sig.loc[0, "significant"] and sig.loc[0, "p"] < 0.01
    # the default seed test cannot test one seed: n=1, no mark
    assert report.main([str(one_each), "--out", str(out), "--no-figures"]) == 0
    assert "| n=1 " in (out / "table.md").read_text()
    three = store(tmp_path / "three", refs, {"none": [(0.5, 0)] * 3, "bahdanau": [(0.1, 10)] * 3})
    capsys.readouterr()
    assert report.main([str(three), "--out", str(out), "--test", "bootstrap", "--no-figures"]) == 2
    assert "--test bootstrap compares one run with one run" in capsys.readouterr().err
    assert report.main([str(three), "--out", str(out), "--baseline", "off", "--samples", "300",
                        "--no-figures"]) == 2
    assert "--samples given but no significance test runs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        report.main([str(three), "--out", str(out), "--samples", "0"])
    assert exc.value.code == 2


def test_a_split_whose_hypotheses_no_run_stores_is_refused_not_left_untested(tmp_path, capsys):
    """--split tset once wrote the table with every run "not tested (without stored tset hypotheses)",
    exit 0; --split with no test at all (--baseline off) was ignored."""
    three = store(tmp_path, references(150, seed=5), {"none": [(0.5, 0)] * 3, "bahdanau": [(0.1, 10)] * 3})
    out = tmp_path / "out"
    assert report.main([str(three), "--out", str(out), "--split", "tset", "--no-figures"]) == 2
    assert "--split tset: no run stores hyps/tset.txt; the splits whose hypotheses are stored: test" in \
        capsys.readouterr().err
    assert report.main([str(three), "--out", str(out), "--split", "test", "--baseline", "off", "--no-figures"]) == 2
    assert "--split given but no significance test runs" in capsys.readouterr().err
    assert not out.exists()
    assert report.main([str(three), "--out", str(out), "--split", "test", "--no-figures"]) == 0


def test_references_must_match_and_identical_systems_do_not_differ(tmp_path):
    refs = references(150, seed=5)
    study = store(tmp_path, refs, {"none": [(0.5, 0)] * 2, "bahdanau": [(0.5, 0)] * 2,
                                   "luong": [(0.2, 10)] * 2})
    runs = load.load_runs(study)
    # a run whose references live only in the baseline's store uses those
    (study / "luong-1" / "hyps" / "test.ref.txt").unlink()
    sig = significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                           n_samples=200).set_index("model.attention")
    assert sig.loc["luong", "n_tested"] == 2 and sig.loc["luong", "delta"] > 5
    # the baseline's own hypotheses, seed for seed: no difference, no direction, no mark
    assert sig.loc["bahdanau", "delta"] == 0 and sig.loc["bahdanau", "direction"] == ""
    assert not sig.loc["bahdanau", "significant"]
    # other references than the baseline's: refused, naming the run
    (study / "luong-2" / "hyps" / "test.ref.txt").write_text("\n".join(refs[::-1]) + "\n")
    with pytest.raises(AnalysisError, match="luong-2 was scored against other references"):
        significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                         n_samples=200)
    # fewer sentences: refused
    (study / "luong-2" / "hyps" / "test.ref.txt").write_text("\n".join(refs[:-1]) + "\n")
    (study / "luong-2" / "hyps" / "test.txt").write_text("\n".join(refs[:-1]) + "\n")
    with pytest.raises(AnalysisError, match="other references|equal lengths"):
        significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                         n_samples=200)


def test_seed_numbers_are_not_paired_and_unmatched_ones_are_counted(tmp_path):
    refs = references(150, seed=5)
    study = store(tmp_path, refs, {"none": [(0.5, 0)] * 2, "bahdanau": [(0.2, 10)] * 3})
    out = tmp_path / "out"
    assert report.main([str(study), "--out", str(out), "--no-figures"]) == 0
    sig = pd.read_csv(out / "significance.csv")
    assert sig.loc[0, "n_tested"] == 3 and sig.loc[0, "n_unmatched"] == 1
    assert "1 seed without a partner" in (out / "table.md").read_text()


def test_pooled_seeds_equivalence_and_the_detectable_difference(tmp_path):
    """--pool-seeds pools over the arms tested and says so; two arms of two seeds are refused
    (2 df: calibration_sim.py shows too many false positives); --equivalence marks a row whose
    whole interval lies within the margin ≈ and not one that differs; every tested row prints
    the difference it could detect."""
    refs = references(200, seed=5)
    plan = {"none": [(0.5, 0)] * 3, "bahdanau": [(0.5, 0)] * 3, "luong": [(0.9, 20)] * 3}
    study = store(tmp_path, refs, plan)
    out = tmp_path / "out"
    assert report.main([str(study), "--out", str(out), "--no-figures", "--pool-seeds",
                        "--equivalence", "3"]) == 0
    sig = pd.read_csv(out / "significance.csv").set_index("model.attention")
    md = (out / "table.md").read_text()
    assert "pooled over the 3 arms tested" in md and "6 df" in md
    assert sig.loc["bahdanau", "delta"] == 0 and sig.loc["bahdanau", "equivalent"]
    assert not sig.loc["luong", "equivalent"] and sig.loc["luong", "significant"]
    assert (sig["mde"] > 0).all() and (sig["df"] > 0).all()
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert "≈ " in rows["bahdanau"] and "≈ " not in rows["luong"]
    assert "| MDE " in md and "≈ ±3 (TOST, Holm): two one-sided tests that |Δ| is below the margin" in md
    assert "MDE: the difference the test finds with 80 % power" in md
    two = store(tmp_path / "two", refs, {"none": [(0.5, 0)] * 2, "luong": [(0.9, 20)] * 2})
    with pytest.raises(AnalysisError, match="at least 3 degrees of freedom"):
        significance.compare_to_baseline(load.load_runs(two), ["model.attention"],
                                         {"model.attention": "none"}, pool_seeds=True)
    assert report.main([str(study), "--out", str(out), "--baseline", "off", "--equivalence", "1"]) == 2


def test_a_caption_describes_only_the_columns_its_table_shows(tmp_path):
    """table.tex describes only the CI, p and Δ columns it keeps."""
    refs = references(100, seed=5)
    study = store(tmp_path, refs, {"none": [(0.5, 0)] * 2, "bahdanau": [(0.2, 10)] * 2})
    described = ("95% CI: Student-t", "p (Holm): test over seeds", "Δ [95% CI]: difference",
                 "MDE: the difference", "n=1: one seed")
    assert report.main([str(study), "--out", str(tmp_path / "all"), "--no-figures"]) == 0
    full = (tmp_path / "all" / "table.md").read_text()
    assert all(words in full for words in described)
    assert report.main([str(study), "--out", str(tmp_path / "few"), "--no-figures", "--columns",
                        "mean", "n"]) == 0
    for name in ("table.md", "table.tex"):
        caption = (tmp_path / "few" / name).read_text()
        assert not [words for words in described if words in caption], name
    caption = (tmp_path / "few" / "table.md").read_text()
    assert "▲/▼: better/worse than the baseline" in caption and "; test: test over seeds" in caption


TOKENS = 3000


def smooth(rng, n: int, q: int = 50) -> np.ndarray:
    draws = rng.normal(0, 1, n + q)
    return np.convolve(draws, np.ones(q) / np.sqrt(q), "valid")[:n]


def lm_store(root, arms: dict[str, float], seeds: int = 3, seed_sd: float = 0.002, text=None):
    """Runs of `arms` (family -> mean token NLL) on one text of TOKENS tokens whose difficulty
    drifts (a moving average over 50 tokens) and suits each arm differently; each run's
    hyps/test.nll.npy and its summary's test_loss / test_ppl."""
    rng = np.random.default_rng(7)
    common = smooth(rng, TOKENS)
    dirs = {}
    for family, level in arms.items():
        own = 0.3 * smooth(rng, TOKENS) if text is None else text[family]
        for s in range(seeds):
            nll = np.clip(level + 0.3 * common + own + rng.normal(0, 0.2, TOKENS) + rng.normal(0, seed_sd),
                          0.01, None).astype(np.float32)
            run_dir = write_run(root, "lm", f"{family}-s{s}", seed=s, model=dict(family=family), task="files")
            np.save(run_dir / token_nll_file("test"), nll)
            summary = json.loads((run_dir / "summary.json").read_text())
            loss = float(nll.mean(dtype=np.float64))
            summary.update(test_loss=loss, test_ppl=math.exp(loss), val_bleu=None)
            (run_dir / "summary.json").write_text(json.dumps(summary))
            dirs.setdefault(family, []).append(run_dir)
    return root / "lm", dirs


def compared(store, column="test_ppl"):
    runs = load.load_runs(store)
    return significance.compare_to_baseline(runs, ["model.family"], {"model.family": "ngram"},
                                            column=column, higher_is_better=False, n_samples=4000)


def test_the_test_adds_the_texts_variance_from_blocks_of_tokens(tmp_path):
    store, _ = lm_store(tmp_path, {"ngram": 1.8, "rnn": 1.75})
    result = compared(store)
    attrs = result.attrs
    assert attrs["blocks"] == dict(blocks=statistics.BLOCKS, tokens=TOKENS, split="test")
    row = result.iloc[0]
    runs = load.load_runs(store)
    ppl = {f: runs.loc[runs["model.family"] == f, "test_ppl"].to_numpy() for f in ("rnn", "ngram")}
    seeds_only = statistics.seed_test(ppl["rnn"], ppl["ngram"])
    assert row["se"] > 3 * float(seeds_only.se), "the text's variance dominates 3 seeds this close"
    assert row["df"] < 2 * statistics.BLOCKS
    text = captions.test_method_of(result)
    assert f"{TOKENS:,} tokens cut into {statistics.BLOCKS} contiguous blocks of ≈100" in text


def test_without_every_runs_token_losses_it_says_what_it_leaves_out(tmp_path):
    store, dirs = lm_store(tmp_path, {"ngram": 1.8, "rnn": 1.75})
    full = compared(store).iloc[0]
    (dirs["rnn"][1] / token_nll_file("test")).unlink()
    result = compared(store)
    assert result.attrs["blocks"] is None
    assert result.attrs["no_blocks"] == "1 of the 6 runs recorded no per-token losses of the test tokens"
    assert result.iloc[0]["se"] < full["se"]
    assert "the evaluated text's own variance is left out: 1 of the 6 runs" in captions.test_method_of(result)


def test_token_losses_that_do_not_give_the_summarys_value_are_not_used(tmp_path):
    store, dirs = lm_store(tmp_path, {"ngram": 1.8, "rnn": 1.75})
    summary = dirs["ngram"][0] / "summary.json"
    fields = json.loads(summary.read_text())
    summary.write_text(json.dumps({**fields, "test_ppl": fields["test_ppl"] * 1.01}))
    result = compared(store)
    assert result.attrs["no_blocks"] == "1 runs' per-token losses do not give their test_ppl"


def test_the_report_caption_names_the_blocks(tmp_path):
    store, _ = lm_store(tmp_path, {"ngram": 1.8, "rnn": 1.6, "transformer": 1.79})
    assert report.main([str(store), "--out", str(tmp_path / "out"), "--no-figures", "--metric",
                        "test_ppl", "--baseline", "family=ngram"]) == 0
    table = (tmp_path / "out" / "table.md").read_text()
    assert "contiguous blocks" in table and "▲" in table
