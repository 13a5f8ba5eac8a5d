import pytest
import sacrebleu

from lit_attention.diagnostics import bleu_by_length, bucket_bounds

REFS = ["the cat sat on the mat", "a dog runs in the park", "two men are talking",
        "a woman is reading a book in the garden", "children play football on the beach",
        "the old man walks slowly down the long street", "a red car parked outside", "birds fly"]
HYPS = ["the cat sat on a mat", "a dog runs in a park", "two men talk",
        "a woman reads a book in the garden", "kids play soccer on the beach",
        "the old man walks down the street", "a red car parked outside", "birds are flying"]
LENGTHS = [5, 10, 11, 20, 21, 30, 31, 0]


def test_buckets_cover_every_length():
    assert bucket_bounds((10, 20, 30)) == [(1, 10), (11, 20), (21, 30), (31, None)]
    with pytest.raises(ValueError):
        bucket_bounds((20, 10))


def test_each_bucket_is_sacrebleu_on_that_bucket_alone():
    rows = bleu_by_length(LENGTHS, HYPS, REFS)
    assert [r["bucket"] for r in rows] == ["1-10", "11-20", "21-30", "31+"]
    assert [r["n"] for r in rows] == [3, 2, 2, 1]                 # length 0 joins the first bucket
    assert sum(r["n"] for r in rows) == len(HYPS)
    members = [[0, 1, 7], [2, 3], [4, 5], [6]]
    for row, idx in zip(rows, members):
        h, r = [HYPS[i] for i in idx], [[REFS[i] for i in idx]]
        assert row["bleu"] == pytest.approx(sacrebleu.corpus_bleu(h, r).score)
        assert row["chrf"] == pytest.approx(sacrebleu.corpus_chrf(h, r).score)
    assert rows[3]["bleu"] == pytest.approx(100.0)


def test_empty_buckets_and_custom_bounds():
    rows = bleu_by_length([3, 4], HYPS[:2], REFS[:2], buckets=(2, 5, 8))
    assert [(r["lo"], r["hi"], r["n"]) for r in rows] == [(1, 2, 0), (3, 5, 2), (6, 8, 0),
                                                          (9, None, 0)]
    assert rows[0]["bleu"] is None and rows[0]["chrf"] is None and rows[3]["bleu"] is None
    with pytest.raises(ValueError):
        bleu_by_length([1], HYPS[:2], REFS[:2])
