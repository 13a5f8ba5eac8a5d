"""The vectorized paired tests give sacreBLEU PairedTest's p-values (same draw: the same numbers;
another draw: within Monte Carlo error), on one shared draw for a whole family of comparisons."""

from __future__ import annotations

import gzip
import math
import random

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from analysis_stores import corrupt, references, write_run
from lit_attention.analysis import load, report, resampling, significance
from lit_attention.analysis import sentence_stats as ss
from lit_attention.analysis.load import AnalysisError

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
    draw = resampling.draw(test, stats.shape[1], B, seed)
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
    assert significance.default_samples(3) == 10_000
    assert significance.default_samples(249) == 25_000
    assert significance.default_samples(5000) == significance.MAX_DEFAULT_SAMPLES
    assert significance.holm_floor(5000, significance.resolving_samples(5000)) < 0.01
    text = significance.method(12_000, 7, "permutation")
    assert "approximate randomization" in text and "12000 resamples" in text and "seed 7" in text


def rnn(attention: str) -> dict:
    return dict(family="rnn", cell="gru", attention=attention, d_model=32)


@pytest.fixture
def family(tmp_path):
    """A baseline and three systems, 3 seeds each; seed 3 of 'luong' has no baseline partner."""
    refs = references(150, seed=5)
    damage = {"none": (0.7, 0), "bahdanau": (0.2, 0), "luong": (0.7, 100), "dot": (0.0, 0)}
    for attention, (fraction, offset) in damage.items():
        for seed in (1, 2, 3):
            if attention == "none" and seed == 3:
                continue
            hyps = corrupt(refs, fraction, seed=seed + offset)    # luong: as bad, other sentences
            write_run(tmp_path, "study", f"{attention}-{seed}", seed=seed, model=rnn(attention),
                      val_bleu=20.0, hyps=hyps, refs=refs)
    return tmp_path / "study", refs


def test_family_pvalues_equal_one_pair_at_a_time(family, capsys):
    study, refs = family
    runs = load.load_runs(study)
    sig = significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                           n_samples=500, seed=11)
    assert sig.attrs == dict(n_samples=500, seed=11, test="bootstrap")
    assert sig["seeds_compared"].tolist() == [2, 2, 2]          # seed 3 has no baseline partner
    for row in sig.itertuples():
        per_seed = dict(item.split(":") for item in row.per_seed.split(";"))
        deltas = []
        for seed, p in per_seed.items():
            base = (study / f"none-{seed}" / "hyps" / "test.txt").read_text().splitlines()
            system = (study / f"{row[1]}-{seed}" / "hyps" / "test.txt").read_text().splitlines()
            alone = significance.paired_bootstrap(base, system, refs, n_samples=500, seed=11)
            assert float(p) == pytest.approx(alone["p"], abs=5e-5)     # per_seed shows 4 decimals
            deltas.append(alone["system"] - alone["baseline"])
        assert row.p_max == max(float(p) for p in per_seed.values()) or math.isclose(
            row.p_max, max(float(p) for p in per_seed.values()), abs_tol=5e-5)
        assert row.delta == pytest.approx(sum(deltas) / len(deltas), rel=1e-12)
    by_name = sig.set_index("model.attention")
    assert by_name.loc["dot", "significant"] and by_name.loc["bahdanau", "significant"]
    assert not by_name.loc["luong", "significant"]
    # the statistics were cached beside the hypotheses, and a second run reads them
    assert (study / "none-1" / "hyps" / "test.bleu.stats.npz").is_file()
    again = significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                             n_samples=500, seed=11)
    assert again["per_seed"].tolist() == sig["per_seed"].tolist()
    # the default number of resamples follows the number of comparisons
    auto = significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                            test="permutation")
    assert auto.attrs["n_samples"] == significance.default_samples(3)
    assert "warning" not in capsys.readouterr().err
    significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                     n_samples=100)
    assert "3 comparisons and 100 resamples no Holm-adjusted p-value can be below 0.0297; " \
           "--samples 1000 resolves p < 0.01" in capsys.readouterr().err


def test_identical_systems_get_p_one_and_references_must_match(family):
    study, refs = family
    runs = load.load_runs(study)
    # a system whose references live only in its baseline's store uses those
    (study / "luong-1" / "hyps" / "test.ref.txt").unlink()
    sig = significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                           n_samples=200)
    assert sig.set_index("model.attention").loc["luong", "seeds_compared"] == 2
    # the same hypotheses as the baseline: p = 1 without resampling
    same = (study / "none-1" / "hyps" / "test.txt").read_bytes()
    (study / "bahdanau-1" / "hyps" / "test.txt").write_bytes(same)
    sig = significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                           n_samples=200)
    assert sig.set_index("model.attention").loc["bahdanau", "per_seed"].startswith("1:1.0000")
    # other references than the baseline's: refused, naming the run
    (study / "dot-2" / "hyps" / "test.ref.txt").write_text("\n".join(refs[::-1]) + "\n")
    with pytest.raises(AnalysisError, match="dot-2 and its baseline .* different references"):
        significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                         n_samples=200)
    # fewer sentences than the baseline: refused
    (study / "dot-2" / "hyps" / "test.ref.txt").write_text("\n".join(refs[:-1]) + "\n")
    (study / "dot-2" / "hyps" / "test.txt").write_text("\n".join(refs[:-1]) + "\n")
    (study / "none-2" / "hyps" / "test.ref.txt").unlink()
    with pytest.raises(AnalysisError, match="equal lengths"):
        significance.compare_to_baseline(runs, ["model.attention"], {"model.attention": "none"},
                                         n_samples=200)


def test_report_options_for_the_test(family, tmp_path, capsys):
    study, _ = family
    out = tmp_path / "out"
    assert report.main([str(study), "--out", str(out), "--baseline", "attention=none", "--test",
                        "permutation", "--samples", "300", "--resample-seed", "4",
                        "--no-figures"]) == 0
    caption = (out / "table.md").read_text()
    assert "approximate randomization" in caption and "300 resamples, seed 4" in caption
    assert report.main([str(study), "--out", str(out), "--baseline", "off", "--samples", "300",
                        "--no-figures"]) == 2
    assert "--samples given but no significance test runs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        report.main([str(study), "--out", str(out), "--samples", "0"])
    assert exc.value.code == 2
