"""The statistics on arrays: Student's t for fractional degrees of freedom agrees with printed t
tables and with the closed forms of integer df (tests/student_t_closed_form.py) and the F tail; one draw of
resampled test sets, applied to every run by matrix products, gives exactly the corpus statistics
and scores of scoring each resample one by one; token blocks are cut and rescored as defined;
the seed test counts the shared sentences once, is Welch's t without them, and its TOST agrees
with the 90 % interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF

from calibration_sim import bootstrap_covariance
from lit_attention.analysis import significance, statistics
from student_t_closed_form import t_coverage
from lit_attention.tracking import sentence_stats as ss


def test_quantiles_are_the_t_table():
    table = {1: 12.706, 2: 4.303, 4: 2.776, 10: 2.228, 30: 2.042, np.inf: 1.960}
    found = statistics.t_quantile(0.975, list(table))
    assert found == pytest.approx(list(table.values()), abs=1e-3)
    assert statistics.t_quantile(0.8, 1) == pytest.approx(1.376, abs=1e-3)
    assert statistics.t_quantile(0.025, 4) == pytest.approx(-2.776, abs=1e-3)


def test_tails_agree_with_the_integer_closed_form_and_the_f_tail():
    rng = np.random.default_rng(0)
    t = rng.uniform(-8, 8, 200)
    df = rng.integers(1, 60, 200)
    closed = [(1 - t_coverage(abs(x), int(d))) / 2 for x, d in zip(t, df)]
    closed = np.where(t > 0, closed, 1 - np.array(closed))
    assert statistics.t_sf(t, df) == pytest.approx(closed, abs=1e-12)
    nu = rng.uniform(0.8, 40, 50)          # fractional: P(|T| > t) = P(F(1, ν) > t²)
    x = rng.uniform(0.1, 6, 50)
    tails = [statistics.f_sf(s * s, 1, v) for v, s in zip(nu, x)]
    assert 2 * statistics.t_sf(x, nu) == pytest.approx(tails, rel=1e-9)


def test_edges():
    assert statistics.t_sf([0.0, np.inf, -np.inf], 3).tolist() == [0.5, 0.0, 1.0]
    assert statistics.t_sf(1.959964, np.inf) == pytest.approx(0.025, abs=1e-7)
    assert statistics.t_sf(1.959964, np.inf) == pytest.approx(0.025, abs=1e-7)


def test_tails_of_one_and_two_df_match_their_closed_forms_to_1e_12_relative():
    """On a grid from the centre to far in both tails: P(T > t) = atan2(1, t)/π for ν = 1 and
    1/(s(s + t)) with s = √(2 + t²) for ν = 2 (t > 0; written without cancellation)."""
    t = np.geomspace(1e-3, 1e3, 241)
    s = np.sqrt(2 + t * t)
    for df, upper in ((1, np.arctan2(1, t) / np.pi), (2, 1 / (s * (s + t)))):
        assert statistics.t_sf(t, df) == pytest.approx(upper, rel=1e-12)
        assert statistics.t_sf(-t, df) == pytest.approx(1 - upper, rel=1e-12)
        grid = np.stack([t, -t])        # any shape, one df per element
        assert statistics.t_sf(grid, np.full(grid.shape, df)) == pytest.approx(np.stack([upper, 1 - upper]), rel=1e-12)


def test_quantiles_of_one_and_two_df_match_their_closed_forms_to_1e_12():
    """tan(π(p - 1/2)) for ν = 1 (as ±1/tan(π min(p, 1 - p)): exact to rounding far in the tails)
    and (2p - 1)/√(2p(1 - p)) for ν = 2, within 1e-12 (relative above 1)."""
    p = np.array([1e-6, 0.01, 0.025, 0.2, 0.5, 0.6, 0.8, 0.9, 0.975, 0.995, 0.9999])
    with np.errstate(divide="ignore"):
        cauchy = np.where(p == 0.5, 0.0, np.sign(p - 0.5) / np.tan(np.pi * np.minimum(p, 1 - p)))
    for df, exact in ((1, cauchy), (2, (2 * p - 1) / np.sqrt(2 * p * (1 - p)))):
        found = statistics.t_quantile(p, df)
        assert np.all(np.abs(found - exact) <= 1e-12 * np.maximum(1, np.abs(exact)))


def random_stats(runs: int, n: int, seed: int = 0) -> np.ndarray:
    """BLEU-shaped sentence statistics [runs, n, 10] that obey BLEU's constraints."""
    rng = np.random.default_rng(seed)
    hyp_len = rng.integers(0, 25, size=(runs, n))
    total = np.stack([np.maximum(hyp_len - k, 0) for k in range(4)], axis=-1)
    correct = (total * rng.random((runs, n, 4)) ** 2).astype(int)
    ref_len = np.broadcast_to(rng.integers(1, 25, size=n), (runs, n))
    return np.concatenate([hyp_len[..., None], ref_len[..., None], correct, total], axis=-1)


def test_draws_are_sacrebleus_and_do_not_depend_on_chunking():
    rng = np.random.default_rng(12345)
    idx = rng.choice(37, size=(101, 37), replace=True)      # sacreBLEU PairedTest's bootstrap draw
    counts = np.stack([np.bincount(row, minlength=37) for row in idx])
    for rows in (1, 9, 1000):
        assert (statistics.draw("bootstrap", 37, 101, 12345, rows=rows).weights == counts).all()
    swaps = np.random.default_rng(12345).integers(2, size=(101, 37), dtype=bool)   # its AR draw
    assert (statistics.draw("permutation", 37, 101, 12345).weights == swaps).all()
    one = statistics.draw("bootstrap", 37, 101, 12345)
    assert one.weights.sum(axis=1).tolist() == [37] * 101
    assert (one.n_resamples, one.n_sentences, one.seed) == (101, 37, 12345)
    assert not (statistics.draw("bootstrap", 37, 101, 1).weights == one.weights).all()
    with pytest.raises(ValueError, match="unknown resampling"):
        statistics.draw("jackknife", 3, 3, 0)


def test_resampled_scores_equal_scoring_each_resample():
    stats = random_stats(runs=5, n=60)
    draw = statistics.draw("bootstrap", 60, 200, seed=3)
    scores = statistics.resampled_scores("bleu", draw, stats)
    assert scores.shape == (200, 5)
    idx = np.random.default_rng(3).choice(60, size=(200, 60), replace=True)
    for b in (0, 17, 199):
        for r in range(5):
            sums = stats[r][idx[b]].sum(axis=0)
            assert scores[b, r] == pytest.approx(ss.bleu_score(sums), rel=1e-12)
    # chunking over runs changes nothing
    small = statistics.CHUNK_BYTES
    try:
        statistics.CHUNK_BYTES = 1
        assert (statistics.resampled_scores("bleu", draw, stats) == scores).all()
    finally:
        statistics.CHUNK_BYTES = small


def test_sums_fall_back_to_float64_when_float32_would_round():
    stats = np.full((1, 4, 1), 2 ** 23 + 1, dtype=np.int64)    # sums past 2**24
    weights = np.array([[1, 1, 1, 1], [4, 0, 0, 0]], dtype=np.float32)
    sums = statistics._product(statistics._float_weights(weights, stats), stats).astype(np.float64)
    assert sums[:, 0, 0].tolist() == [4 * (2 ** 23 + 1)] * 2
    small = np.ones((1, 4, 1), dtype=np.int64)
    assert statistics._float_weights(weights, small).dtype == np.float32
    assert statistics._float_weights(weights, stats).dtype == np.float64


def test_swapped_scores_equal_swapping_sentences_by_hand():
    a, b = random_stats(3, 40, seed=1), random_stats(3, 40, seed=2)
    b[:, :, 1] = a[:, :, 1]                                     # same references
    draw = statistics.draw("permutation", 40, 50, seed=5)
    out_a, out_b = statistics.swapped_scores("bleu", draw, a, b)
    for t in (0, 49):
        swap = draw.weights[t]
        for r in range(3):
            pseudo_a = np.where(swap[:, None], b[r], a[r]).sum(axis=0)
            pseudo_b = np.where(swap[:, None], a[r], b[r]).sum(axis=0)
            assert out_a[t, r] == pytest.approx(ss.bleu_score(pseudo_a), rel=1e-12)
            assert out_b[t, r] == pytest.approx(ss.bleu_score(pseudo_b), rel=1e-12)
    with pytest.raises(ValueError, match="permutation draw"):
        statistics.swapped_scores("bleu", statistics.draw("bootstrap", 40, 5, 0), a, b)
    with pytest.raises(ValueError, match="do not fit"):
        statistics.resampled_scores("bleu", statistics.draw("bootstrap", 41, 5, 0), a)


def test_chrf_resamples_match_sacrebleu_corpus_scores():
    refs = ["a cat sat on the mat", "the dog ran", "über alles", "x", "ein Haus"]
    hyps = ["a cat sat", "the dog ran fast", "über", "", "ein Haus"]
    bleu, chrf = ss.corpus_stats(hyps, refs)
    draw = statistics.draw("bootstrap", 5, 30, seed=0)
    idx = np.random.default_rng(0).choice(5, size=(30, 5), replace=True)
    scores = statistics.resampled_scores("chrf", draw, chrf[None])
    bleus = statistics.resampled_scores("bleu", draw, bleu[None])
    for b in range(30):
        picked_h, picked_r = [hyps[i] for i in idx[b]], [refs[i] for i in idx[b]]
        assert scores[b, 0] == CHRF().corpus_score(picked_h, [picked_r]).score
        assert bleus[b, 0] == pytest.approx(BLEU().corpus_score(picked_h, [picked_r]).score, rel=1e-12)


def test_blocks_are_contiguous_and_rescored_as_defined():
    nll = np.arange(1, 11, dtype=np.float32)
    assert statistics.cut_blocks(nll, 3).tolist() == [[10, 4], [18, 3], [27, 3]]
    assert statistics.cut_blocks(nll[:1], 2).tolist() == [[1, 1], [0, 0]]    # one token: an empty block
    assert statistics.block_count(100_000) == statistics.BLOCKS
    assert statistics.block_count(100) == 5 and statistics.block_count(10) == 2   # ≥ 20 tokens, ≥ 2 blocks
    assert significance._token_level("test_ppl") == ("test", "ppl")
    assert significance._token_level("val_loss") == ("val", "loss") and significance._token_level("val_bleu") is None
    # a resample's perplexity is exp(Σ NLL / Σ tokens) over the drawn blocks, counted as drawn
    rng = np.random.default_rng(0)
    stats = np.stack([statistics.cut_blocks(rng.random(95), 4) for _ in range(3)])     # [R, K, 2]
    draw = statistics.draw("bootstrap", 4, 50, seed=1)
    got = statistics.resampled_blocks("ppl", draw.weights, stats)
    for b in (0, 17, 49):
        picked = np.repeat(np.arange(4), draw.weights[b].astype(int))
        for r in range(3):
            assert got[b, r] == pytest.approx(math.exp(stats[r, picked, 0].sum() / stats[r, picked, 1].sum()))
    assert statistics.unbiased(2.9, 30) == pytest.approx(3.0)


def test_the_sentence_part_counts_the_shared_sentences_once():
    """sentence_variance from the exact bootstrap covariance equals Var(ē_A - ē_B)'s plug-in
    estimate, and a covariance estimated from bootstrap resamples gives the same value."""
    rng = np.random.default_rng(3)
    common = rng.normal(0, 3, 200)
    arm = rng.normal(0, 1, (2, 200))
    runs = np.concatenate([common + arm[0] + rng.normal(0, 0.5, (3, 200)),
                           common + arm[1] + rng.normal(0, 0.5, (2, 200))])
    exact = statistics.sentence_variance(bootstrap_covariance(runs), 3)
    d = arm[0] - arm[1]
    assert exact == pytest.approx(d.var() / 200, rel=0.1)    # the arms' sentence effects only
    weights = np.random.default_rng(4).multinomial(200, np.full(200, 1 / 200), size=20_000) / 200
    estimated = statistics.sentence_variance(statistics.resampled_covariance(weights @ runs.T), 3)
    assert estimated == pytest.approx(exact, rel=0.05)
    own = bootstrap_covariance(runs)[0, 0]          # one run's bootstrap variance also
    assert own > 4 * exact                                    # holds the sentences every arm shares


def test_resampled_covariances_of_many_experiments_at_once_are_each_experiments():
    scores = np.random.default_rng(6).normal(size=(300, 4, 5)) * [1, 2, 3, 4, 5]     # [B, E, R]
    together = statistics.resampled_covariance(scores)
    assert together.shape == (4, 5, 5)
    for e in range(4):
        assert together[e] == pytest.approx(np.cov(scores[:, e], rowvar=False), rel=1e-12)
        assert statistics.resampled_covariance(scores[:, e]) == pytest.approx(together[e], rel=1e-12)


def test_without_sentence_variance_it_is_welchs_t_test():
    """Equal spreads of 3 seeds: 4 degrees of freedom, and p the t table's."""
    result = statistics.seed_test(np.array([8.7, 9.1, 8.9]), np.array([9.0, 9.4, 9.2]))
    assert float(result.df) == pytest.approx(4.0)
    assert float(result.p_down()) == pytest.approx(0.0701, abs=2e-4)    # t = 1.837 on 4 df
    low, high = result.interval()
    assert float(high - low) / 2 == pytest.approx(2.776 * np.sqrt(2 * 0.04 / 3), rel=1e-3)


def test_equivalence_needs_the_whole_interval_inside_the_margin():
    """TOST at α: equivalent exactly when the 90 % interval lies within ±margin."""
    result = statistics.seed_test(np.array([10.1, 10.3, 10.2, 10.4]), np.array([10.0, 10.2, 10.1, 10.3]))
    low, high = result.interval(0.90)
    inside = max(abs(float(low)), abs(float(high)))
    assert float(result.equivalence_p(inside * 1.01)) < 0.05 < float(result.equivalence_p(inside * 0.99))
