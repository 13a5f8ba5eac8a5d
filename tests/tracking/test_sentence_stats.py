"""Sentence statistics reproduce sacreBLEU's corpus BLEU and chrF exactly, and their cache in
the run store is never read stale."""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF

from lit_attention.tracking import sentence_stats as ss

EDGE = [  # (hypothesis, reference)
    ("", "A man sleeps."),                       # empty hypothesis
    ("A man sleeps.", ""),                       # empty reference
    ("", ""),
    ("a", "a"), ("a", "b"), ("I", "I am"),       # very short lines
    ("   ", "x"), ("Dogs  run .  ", " Dogs run."),   # whitespace only, extra spaces
    ("Zwei Männer überqueren die Straße.", "Zwei Männer überqueren eine Straße."),
    ("猫が座っている", "猫が寝ている"), ("naïve café 👍🏽", "naive café 👍"),   # CJK, emoji
    ("e\u0301t\u00e9", "\u00e9t\u00e9"),           # combining accent vs precomposed
    ("Tom &amp; Jerry &lt;3", "Tom & Jerry <3"),   # entities the 13a tokenizer unescapes
    ("(hi) -- ok?!", "(hi)--ok ?!"), ("1,000.5 km", "1,000.5km"),
]


def sacre(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    return BLEU().corpus_score(hyps, [refs]).score, CHRF().corpus_score(hyps, [refs]).score


def ours(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    bleu, chrf = ss.corpus_stats(hyps, refs)
    return ss.corpus_score("bleu", bleu), ss.corpus_score("chrf", chrf)


def damaged(refs: list[str], seed: int, drop: float, shuffle: float, swap: float) -> list[str]:
    """Synthetic hypotheses: words dropped, shuffled, swapped for other words of the corpus;
    a few lines emptied or cut to one character."""
    rng = random.Random(seed)
    vocab = " ".join(refs[:200]).split()
    out = []
    for ref in refs:
        words = [rng.choice(vocab) if rng.random() < swap else w
                 for w in ref.split() if rng.random() >= drop]
        if rng.random() < shuffle:
            rng.shuffle(words)
        line = " ".join(words)
        roll = rng.random()
        out.append("" if roll < 0.01 else line[:1] if roll < 0.02 else line)
    return out


@pytest.fixture(scope="module", params=["val.en.gz", "test_2016_flickr.en.gz"])
def multi30k_refs(request, shared_data):
    with gzip.open(shared_data / "multi30k" / request.param, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.mark.parametrize("drop,shuffle,swap", [(0.0, 0.0, 0.0), (0.1, 0.2, 0.05), (0.3, 0.5, 0.2),
                                               (0.7, 0.9, 0.5)])
def test_summed_statistics_reproduce_sacrebleu_corpus_scores_on_multi30k(multi30k_refs, drop,
                                                                         shuffle, swap):
    hyps = damaged(multi30k_refs, seed=int(100 * drop), drop=drop, shuffle=shuffle, swap=swap)
    bleu, chrf = ss.corpus_stats(hyps, multi30k_refs)
    expected_bleu, expected_chrf = sacre(hyps, multi30k_refs)
    assert ss.corpus_score("bleu", bleu) == expected_bleu        # exact, not approx
    assert ss.corpus_score("chrf", chrf) == expected_chrf
    # the vectorized scores (used for resamples) agree to floating-point precision
    assert ss.bleu_scores(bleu.sum(0)) == pytest.approx(expected_bleu, rel=1e-12)
    assert ss.chrf_scores(chrf.sum(0)) == expected_chrf


def test_per_sentence_bleu_counts_are_sacrebleus(multi30k_refs):
    refs = multi30k_refs[:300]
    hyps = damaged(refs, seed=7, drop=0.2, shuffle=0.3, swap=0.1)
    bleu, _ = ss.corpus_stats(hyps, refs)
    metric = BLEU()
    for row, hyp, ref in zip(bleu, hyps, refs):
        score = metric.corpus_score([hyp], [[ref]])
        assert row.tolist() == [score.sys_len, score.ref_len, *score.counts, *score.totals]


@pytest.mark.parametrize("hyp,ref", EDGE)
def test_edge_cases_one_sentence(hyp, ref):
    assert ours([hyp], [ref]) == sacre([hyp], [ref])


def test_edge_cases_as_one_corpus():
    hyps, refs = [h for h, _ in EDGE], [r for _, r in EDGE]
    assert ours(hyps, refs) == sacre(hyps, refs)
    assert ours(hyps[::-1], refs[::-1]) == sacre(hyps[::-1], refs[::-1])
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        ss.corpus_stats(["a", "b"], ["a"])


def test_vectorized_bleu_equals_compute_bleu_on_random_and_degenerate_sums():
    rng = np.random.default_rng(0)
    total = rng.integers(0, 60, size=(3000, 4))
    total[:, 1:] = np.minimum(total[:, 1:], total[:, :1])     # higher orders never exceed unigrams
    total[rng.random(3000) < 0.1, 3] = 0                       # a zero total stops compute_bleu
    correct = (total * rng.random((3000, 4)) * (rng.random((3000, 4)) > 0.2)).astype(int)
    correct[:50] = 0                                           # nothing matched: BLEU 0
    sys_len = total[:, 0]
    ref_len = np.maximum(0, sys_len + rng.integers(-10, 10, size=3000))
    sums = np.column_stack([sys_len, ref_len, correct, total])
    expected = [BLEU.compute_bleu(list(map(int, c)), list(map(int, t)), int(s), int(r),
                                  smooth_method="exp").score
                for s, r, c, t in zip(sys_len, ref_len, correct, total)]
    assert ss.bleu_scores(sums) == pytest.approx(expected, rel=1e-12, abs=1e-300)
    assert [ss.bleu_score(s) for s in sums] == expected
    assert ss.bleu_scores(sums.reshape(30, 100, 10)).shape == (30, 100)


def write_store(tmp_path, hyps, refs):
    run = tmp_path / "run"
    (run / "hyps").mkdir(parents=True, exist_ok=True)
    (run / "hyps" / "test.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    if refs is not None:
        (run / "hyps" / "test.ref.txt").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    return run


def test_cache_is_written_read_and_never_stale(tmp_path):
    refs = ["a cat sat on the mat", "the dog ran", "über alles"]
    run = write_store(tmp_path, ["a cat sat", "the dog ran fast", "über"], refs)
    first = ss.load_or_compute(run, "test", metrics=["bleu"])       # a metric when asked for
    path = ss.cache_path(run, "test", "bleu")
    assert path.is_file() and not ss.cache_path(run, "test", "chrf").exists() and first.chrf is None
    assert ss.corpus_score("bleu", first.bleu) == sacre(["a cat sat", "the dog ran fast", "über"], refs)[0]
    assert ss.load_or_compute(run, "test").chrf is not None
    assert ss.cache_path(run, "test", "chrf").is_file()

    # a cache whose key matches is what is read: plant different numbers under the same key
    with np.load(path) as npz:
        key = str(npz["key"])
    np.savez(path, key=np.array(key), stats=first.bleu + 1)
    assert (ss.load_or_compute(run, "test").bleu == first.bleu + 1).all()

    # a changed hypothesis file is recomputed, and the cache rewritten under the new key
    write_store(tmp_path, ["a cat sat on the mat", "the dog ran", "über alles"], refs)
    again = ss.load_or_compute(run, "test")
    assert ss.corpus_score("bleu", again.bleu) == pytest.approx(100.0)
    assert again.hyps_hash != first.hyps_hash
    with np.load(path) as npz:
        assert str(npz["key"]) != key and (npz["stats"] == again.bleu).all()

    # changed references: recomputed too
    write_store(tmp_path, ["a cat sat on the mat", "the dog ran", "über alles"], refs[:2] + ["x"])
    changed = ss.load_or_compute(run, "test")
    assert changed.refs_hash != again.refs_hash and (changed.chrf != again.chrf).any()

    # a cache file that is not ours is ignored
    path.write_bytes(b"not an npz")
    assert (ss.load_or_compute(run, "test").bleu == changed.bleu).all()


def test_references_from_elsewhere_and_read_only_stores(tmp_path):
    run = write_store(tmp_path, ["a b c", "d"], None)
    with pytest.raises(FileNotFoundError, match="no references"):
        ss.load_or_compute(run, "test")
    stats = ss.load_or_compute(run, "test", refs=b"a b c\nd e\n")
    assert len(stats) == 2 and stats.chrf[1].tolist()[:3] == [1, 2, 1]
    # a store the cache cannot be written into (here: a directory in the way) is only read
    path = ss.cache_path(run, "test", "bleu")
    path.unlink()
    path.mkdir()
    assert (ss.load_or_compute(run, "test", refs=b"a b c\nd e\n").bleu == stats.bleu).all()
    assert path.is_dir()


def test_fill_caches_computes_missing_statistics_in_worker_processes(tmp_path):
    refs = ["a cat sat on the mat", "the dog ran", "über alles"]
    jobs = []
    for i in range(3):
        run = write_store(tmp_path / f"r{i}", [f"a cat {i}", "the dog", "über"], refs)
        jobs.append((str(run), "test", str(run / "hyps" / "test.ref.txt"), ("bleu",)))
    assert ss.fill_caches(jobs, workers=2, min_jobs=1) == 3
    for run, *_ in jobs:
        assert ss.cache_path(run, "test", "bleu").is_file()
        assert not ss.cache_path(run, "test", "chrf").exists()
    assert ss.fill_caches(jobs, workers=2, min_jobs=1) == 0       # all cached now
    assert ss.probably_cached(*jobs[0]) and not ss.probably_cached(*jobs[0][:3], ("chrf",))
