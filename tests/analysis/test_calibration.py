"""The seed x sentence test is calibrated: simulated experiments with known seed and sentence
variance and no effect are rejected at α = 0.05 between 3 % and 7 % of the time, for 2-10 seeds
and seed/sentence variance ratios 0.1-10, and a planted effect is found (calibration.py).

4,000 experiments per cell: a true rate of 5 % lands in [3 %, 7 %] with a margin of 5.8
standard errors. The test before this one (resampled sentences, then Welch's t over each
resample's seeds) rejected 0.0-2.0 % with 2 seeds here: every cell of 2 seeds fails it."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO
from lit_attention.analysis import calibration, calibration_results, seeds_x_sentences

CELLS = [(n, ratio) for n in calibration.SEEDS for ratio in calibration.RATIOS]


def committed(name: str) -> dict[tuple[int, float], calibration.Rates]:
    """The rates of every cell of a committed calibration table (results/calibration/NAME.csv,
    from which docs/ANALYSIS.md's table is formatted): simulating its 80,000 experiments is
    analysis/calibrate.py --check's; tests/analysis/test_calibration_results.py simulates its
    smallest cell again."""
    rows = calibration_results.read(REPO / "results" / "calibration" / f"{name}.csv")
    return {(r["seeds"], r["ratio"]): calibration_results.rates_of(r) for r in rows}


@pytest.fixture(scope="module")
def welch():
    cells = committed("seeds")
    assert set(cells) == set(CELLS)
    return cells


def test_false_positive_rate_is_five_percent_for_any_seeds_and_variance_ratio(welch):
    outside = {cell: r.false_positive for cell, r in welch.items() if not 0.03 <= r.false_positive <= 0.07}
    assert not outside, outside
    assert abs(np.mean([r.false_positive for r in welch.values()]) - 0.05) < 0.005


def test_a_planted_effect_is_found_and_more_seeds_find_it_more_often(welch):
    """An effect of 3 true standard deviations of Δ: a z-test finds it 85 % of the time; with
    much sentence noise (large df) so does this test, and with 2 seeds and much seed noise the
    t on 1-2 df pays for what 2 seeds cannot say."""
    for n in calibration.SEEDS:
        assert welch[n, 0.1].power > 0.8
    for ratio in calibration.RATIOS:
        powers = [welch[n, ratio].power for n in calibration.SEEDS]
        assert powers == sorted(powers) or max(powers) - min(powers) < 0.03, (ratio, powers)
    assert 0.3 < welch[2, 10.0].power < 0.6 and welch[10, 10.0].power > 0.8


def test_the_minimum_detectable_effect_is_where_power_is_80_percent():
    """Plant the effect the test reports as detectable (its median MDE): found ~80 % of the time."""
    for n, ratio in [(3, 1.0), (10, 3.0)]:
        result, true_sd = calibration.simulate(n, ratio)
        planted = seeds_x_sentences.Result(result.delta + np.median(result.detectable()), result.se,
                                   result.df, result.seed_part, result.sentence_part)
        assert 0.7 < calibration.rejected(planted).mean() < 0.9


def test_pooling_the_seed_variance_over_six_arms_is_calibrated_too():
    cells = committed("seeds-pooled6")
    assert set(cells) == set(CELLS)
    outside = {cell: r.false_positive for cell, r in cells.items() if not 0.03 <= r.false_positive <= 0.07}
    assert not outside, outside


def test_pooling_two_arms_of_two_seeds_is_not_and_why_it_is_refused():
    """2 degrees of freedom mixed with sentence variance: Satterthwaite rejects too often."""
    assert calibration.rates(2, 10.0, pooled_arms=2).false_positive > 0.07


def test_the_sentence_part_counts_the_shared_sentences_once():
    """sentence_variance from the exact bootstrap covariance equals Var(ē_A - ē_B)'s plug-in
    estimate, and a covariance estimated from bootstrap resamples gives the same value."""
    rng = np.random.default_rng(3)
    common = rng.normal(0, 3, 200)
    arm = rng.normal(0, 1, (2, 200))
    runs = np.concatenate([common + arm[0] + rng.normal(0, 0.5, (3, 200)),
                           common + arm[1] + rng.normal(0, 0.5, (2, 200))])
    exact = seeds_x_sentences.sentence_variance(seeds_x_sentences.bootstrap_covariance(runs), 3)
    d = arm[0] - arm[1]
    assert exact == pytest.approx(d.var() / 200, rel=0.1)    # the arms' sentence effects only
    weights = np.random.default_rng(4).multinomial(200, np.full(200, 1 / 200), size=20_000) / 200
    estimated = seeds_x_sentences.sentence_variance(seeds_x_sentences.resampled_covariance(weights @ runs.T), 3)
    assert estimated == pytest.approx(exact, rel=0.05)
    own = seeds_x_sentences.bootstrap_covariance(runs)[0, 0]          # one run's bootstrap variance also
    assert own > 4 * exact                                    # holds the sentences every arm shares


def test_resampled_covariances_of_many_experiments_at_once_are_each_experiments():
    scores = np.random.default_rng(6).normal(size=(300, 4, 5)) * [1, 2, 3, 4, 5]     # [B, E, R]
    together = seeds_x_sentences.resampled_covariance(scores)
    assert together.shape == (4, 5, 5)
    for e in range(4):
        assert together[e] == pytest.approx(np.cov(scores[:, e], rowvar=False), rel=1e-12)
        assert seeds_x_sentences.resampled_covariance(scores[:, e]) == pytest.approx(together[e], rel=1e-12)


def test_without_sentence_variance_it_is_welchs_t_test():
    """Equal spreads of 3 seeds: 4 degrees of freedom, and p the t table's."""
    result = seeds_x_sentences.compare(np.array([8.7, 9.1, 8.9]), np.array([9.0, 9.4, 9.2]))
    assert float(result.df) == pytest.approx(4.0)
    assert float(result.p_down()) == pytest.approx(0.0701, abs=2e-4)    # t = 1.837 on 4 df
    low, high = result.interval()
    assert float(high - low) / 2 == pytest.approx(2.776 * np.sqrt(2 * 0.04 / 3), rel=1e-3)


def test_equivalence_needs_the_whole_interval_inside_the_margin():
    """TOST at α: equivalent exactly when the 90 % interval lies within ±margin."""
    result = seeds_x_sentences.compare(np.array([10.1, 10.3, 10.2, 10.4]), np.array([10.0, 10.2, 10.1, 10.3]))
    low, high = result.interval(0.90)
    inside = max(abs(float(low)), abs(float(high)))
    assert float(result.equivalence_p(inside * 1.01)) < 0.05 < float(result.equivalence_p(inside * 0.99))


@pytest.mark.slow   # thousands of simulated experiments
def test_corpus_bleu_through_the_bootstrap_is_calibrated_too():
    """What the report runs: corpus BLEU (not a mean of sentence scores) of runs assembled from
    five hypotheses per sentence (0-60 % of its words dropped), the variant chosen by a latent
    quality c_i + d_ai + g_ari + u_ar as in calibration.py; the sentence part from a bootstrap draw
    of resampling.py. No effect: 3-7 % false positives for 2 and 5 seeds, seed noise from well
    below to far above the sentence part."""
    from analysis_stores import references

    from lit_attention.analysis import resampling
    from lit_attention.tracking import sentence_stats as ss
    n_sentences, experiments = 200, 3000
    refs = references(n_sentences, seed=9)
    rng = np.random.default_rng(5)

    def drop(sentence, p):
        kept = [w for w in sentence.split() if rng.random() >= p]
        return " ".join(kept or sentence.split()[:1])
    extractor = ss.Extractor()
    variants = np.stack([extractor.corpus([drop(r, p) for r in refs], refs, ["bleu"])["bleu"]
                         for p in (0.0, 0.15, 0.3, 0.45, 0.6)], axis=1)          # [N, 5, K]
    draw = resampling.draw("bootstrap", n_sentences, 500, 11)
    for n in (2, 5):
        for seed_sd in (0.01, 0.1, 0.5):
            shape = (experiments, 2, n, n_sentences)
            quality = (2 + rng.normal(0, 1, (experiments, 1, 1, n_sentences))
                       + rng.normal(0, 0.5, (experiments, 2, 1, n_sentences))
                       + rng.normal(0, 0.5, shape) + rng.normal(0, seed_sd, (experiments, 2, n, 1)))
            chosen = np.clip(np.rint(quality), 0, 4).astype(int)
            stats = variants[np.arange(n_sentences), chosen].reshape(experiments * 2 * n, n_sentences, -1)
            full = ss.SCORES["bleu"](stats.sum(axis=1)).reshape(experiments, 2 * n)
            resampled = resampling.resampled_scores("bleu", draw, stats).reshape(-1, experiments, 2 * n)
            part = seeds_x_sentences.sentence_variance(seeds_x_sentences.resampled_covariance(resampled), n)
            result = seeds_x_sentences.compare(full[:, :n], full[:, n:], part, n_sentences)
            rate = calibration.rejected(result).mean()
            assert 0.03 <= rate <= 0.07, (n, seed_sd, rate, full[:, :n].var(axis=1, ddof=1).mean(), part.mean())
