"""One draw of resampled test sets, applied to every run by matrix products, gives exactly the
corpus statistics and scores of scoring each resample one by one."""

from __future__ import annotations

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF

from lit_attention.analysis import resampling
from lit_attention.tracking import sentence_stats as ss


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
        assert (resampling.draw("bootstrap", 37, 101, 12345, rows=rows).weights == counts).all()
    swaps = np.random.default_rng(12345).integers(2, size=(101, 37), dtype=bool)   # its AR draw
    assert (resampling.draw("permutation", 37, 101, 12345).weights == swaps).all()
    one = resampling.draw("bootstrap", 37, 101, 12345)
    assert one.weights.sum(axis=1).tolist() == [37] * 101
    assert (one.n_resamples, one.n_sentences, one.seed) == (101, 37, 12345)
    assert not (resampling.draw("bootstrap", 37, 101, 1).weights == one.weights).all()
    with pytest.raises(ValueError, match="unknown resampling"):
        resampling.draw("jackknife", 3, 3, 0)


def test_resampled_scores_equal_scoring_each_resample():
    stats = random_stats(runs=5, n=60)
    draw = resampling.draw("bootstrap", 60, 200, seed=3)
    scores = resampling.resampled_scores("bleu", draw, stats)
    assert scores.shape == (200, 5)
    idx = np.random.default_rng(3).choice(60, size=(200, 60), replace=True)
    for b in (0, 17, 199):
        for r in range(5):
            sums = stats[r][idx[b]].sum(axis=0)
            assert scores[b, r] == pytest.approx(ss.bleu_score(sums), rel=1e-12)
    # chunking over runs changes nothing
    small = resampling.CHUNK_BYTES
    try:
        resampling.CHUNK_BYTES = 1
        assert (resampling.resampled_scores("bleu", draw, stats) == scores).all()
    finally:
        resampling.CHUNK_BYTES = small


def test_sums_fall_back_to_float64_when_float32_would_round():
    stats = np.full((1, 4, 1), 2 ** 23 + 1, dtype=np.int64)    # sums past 2**24
    weights = np.array([[1, 1, 1, 1], [4, 0, 0, 0]], dtype=np.float32)
    sums = resampling.resampled_sums(weights, stats)
    assert sums[:, 0, 0].tolist() == [4 * (2 ** 23 + 1)] * 2
    small = np.ones((1, 4, 1), dtype=np.int64)
    assert resampling._float_weights(weights, small).dtype == np.float32
    assert resampling._float_weights(weights, stats).dtype == np.float64


def test_swapped_scores_equal_swapping_sentences_by_hand():
    a, b = random_stats(3, 40, seed=1), random_stats(3, 40, seed=2)
    b[:, :, 1] = a[:, :, 1]                                     # same references
    draw = resampling.draw("permutation", 40, 50, seed=5)
    out_a, out_b = resampling.swapped_scores("bleu", draw, a, b)
    for t in (0, 49):
        swap = draw.weights[t]
        for r in range(3):
            pseudo_a = np.where(swap[:, None], b[r], a[r]).sum(axis=0)
            pseudo_b = np.where(swap[:, None], a[r], b[r]).sum(axis=0)
            assert out_a[t, r] == pytest.approx(ss.bleu_score(pseudo_a), rel=1e-12)
            assert out_b[t, r] == pytest.approx(ss.bleu_score(pseudo_b), rel=1e-12)
    with pytest.raises(ValueError, match="permutation draw"):
        resampling.swapped_scores("bleu", resampling.draw("bootstrap", 40, 5, 0), a, b)
    with pytest.raises(ValueError, match="do not fit"):
        resampling.resampled_scores("bleu", resampling.draw("bootstrap", 41, 5, 0), a)


def test_chrf_resamples_match_sacrebleu_corpus_scores():
    refs = ["a cat sat on the mat", "the dog ran", "über alles", "x", "ein Haus"]
    hyps = ["a cat sat", "the dog ran fast", "über", "", "ein Haus"]
    bleu, chrf = ss.corpus_stats(hyps, refs)
    draw = resampling.draw("bootstrap", 5, 30, seed=0)
    idx = np.random.default_rng(0).choice(5, size=(30, 5), replace=True)
    scores = resampling.resampled_scores("chrf", draw, chrf[None])
    bleus = resampling.resampled_scores("bleu", draw, bleu[None])
    for b in range(30):
        picked_h, picked_r = [hyps[i] for i in idx[b]], [refs[i] for i in idx[b]]
        assert scores[b, 0] == CHRF().corpus_score(picked_h, [picked_r]).score
        assert bleus[b, 0] == pytest.approx(BLEU().corpus_score(picked_h, [picked_r]).score, rel=1e-12)
