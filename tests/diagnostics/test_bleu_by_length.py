import warnings

import pytest
import sacrebleu
import torch
from lightning.pytorch import Trainer

from lit_attention.data.translation import TranslationDataModule
from lit_attention.diagnostics.bleu_by_length import (bleu_by_length, bucket_bounds, merge_small,
                                                      source_words)
from lit_attention.lightning.translation import TranslationModule

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


def test_source_length_is_whitespace_words_of_the_raw_sentence():
    assert source_words(["Ein Mann   fährt Fahrrad.", "", "  zwei\tHunde "]) == [4, 0, 2]


def test_each_bucket_is_sacrebleu_on_that_bucket_alone():
    rows = bleu_by_length(LENGTHS, HYPS, REFS, min_sentences=0)
    assert [r["bucket"] for r in rows] == ["1-10", "11-20", "21-30", "31+"]
    assert [r["n"] for r in rows] == [3, 2, 2, 1]                 # length 0 joins the first bucket
    assert all(r["unit"] == "words" for r in rows)
    members = [[0, 1, 7], [2, 3], [4, 5], [6]]
    for row, idx in zip(rows, members):
        h, r = [HYPS[i] for i in idx], [[REFS[i] for i in idx]]
        assert row["bleu"] == pytest.approx(sacrebleu.corpus_bleu(h, r).score)
        assert row["chrf"] == pytest.approx(sacrebleu.corpus_chrf(h, r).score)
    assert rows[3]["bleu"] == pytest.approx(100.0)


def test_without_merging_empty_buckets_are_kept_without_scores():
    rows = bleu_by_length([3, 4], HYPS[:2], REFS[:2], buckets=(2, 5, 8), min_sentences=0)
    assert [(r["lo"], r["hi"], r["n"]) for r in rows] == [(1, 2, 0), (3, 5, 2), (6, 8, 0),
                                                          (9, None, 0)]
    assert rows[0]["bleu"] is None and rows[0]["chrf"] is None and rows[3]["bleu"] is None
    with pytest.raises(ValueError):
        bleu_by_length([1], HYPS[:2], REFS[:2])


BOUNDS = bucket_bounds((10, 20, 30))


@pytest.mark.parametrize("counts,expected", [
    # a small first bucket joins the next one; a small last bucket joins the one before it
    ((27, 400, 300, 27), [(1, 20), (21, None)]),
    ((400, 300, 60, 50), BOUNDS),                                 # nothing small: unchanged
    ((400, 30, 30, 300), [(1, 10), (11, 30), (31, None)]),        # two small ones together reach 50
    ((400, 300, 26, 0), [(1, 10), (11, None)]),                   # Multi30k test2016 in words
    ((10, 10, 10, 10), [(1, None)]),                              # all small: one bucket
    ((0, 0, 0, 0), [(1, None)]),
    ((60, 0, 0, 0), [(1, None)]),
])
def test_merge_rule(counts, expected):
    merged = merge_small(BOUNDS, counts, 50)
    assert merged == expected
    assert merge_small(BOUNDS, counts, 0) == BOUNDS


def test_merged_buckets_hold_the_minimum_and_are_scored_as_one():
    refs = REFS * 10
    hyps = HYPS * 10
    lengths = [1] * 30 + [15] * 45 + [25] * 4 + [40] * 1     # 30, 45, 4, 1 sentences
    rows = bleu_by_length(lengths, hyps, refs, min_sentences=30)
    assert [(r["bucket"], r["n"]) for r in rows] == [("1-10", 30), ("11+", 50)]
    h, r = hyps[30:], [refs[30:]]
    assert rows[1]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(h, r).score)
    assert rows[1]["chrf"] == pytest.approx(sacrebleu.corpus_chrf(h, r).score)
    assert sum(row["n"] for row in rows) == len(refs)


def test_negative_minimum_is_refused():
    with pytest.raises(ValueError, match="min_bucket_sentences"):
        TranslationModule(min_bucket_sentences=-1)


def _parallel_files(root):
    """40 sentences of 3 long words (30+ characters), 40 of 8 one-letter words (15 characters),
    10 of 12 one-letter words: in words they fall into three buckets, in characters into one."""
    long_words = "elephantine marmalade xylophones".split()
    lines = ([" ".join(long_words[(i + k) % 3] for k in range(3)) for i in range(40)]
             + [" ".join("abcdefgh"[(i + k) % 8] for k in range(8)) for i in range(40)]
             + [" ".join("abcdefghijkl"[(i + k) % 12] for k in range(12)) for i in range(10)])
    root.mkdir()
    for split in ("train", "val", "test"):
        for lang in ("src", "tgt"):
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    return lines


def test_a_trained_model_records_buckets_of_source_words(tmp_path):
    lines = _parallel_files(tmp_path / "data")
    torch.manual_seed(0)
    dm = TranslationDataModule(task="files", data_dir=str(tmp_path / "data"), tokenizer="char",
                               max_tokens=512, cache_dir=str(tmp_path / "cache"))
    module = TranslationModule(family="transformer", d_model=16, heads=2, enc_layers=1,
                               dec_layers=1, ffn=32, dropout=0.0, val_bleu=False, beam_size=1,
                               max_len_b=5, length_buckets=(5, 10), min_bucket_sentences=20)
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, max_steps=2,
                      limit_val_batches=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        trainer.fit(module, dm)
        trainer.test(module, dm, verbose=False)
    pieces = [len(dm.src_tokenizer.encode(s)) for s in lines]
    assert min(pieces) > 10, "in pieces (characters) every sentence would be in the 11+ bucket"
    rows = module.eval_extras["test"]["test_bleu_by_length"]
    # words: 40 in 1-5, 40 in 6-10, 10 in 11+ -> the 10 (< 20) join the bucket before them
    assert [(r["bucket"], r["n"], r["unit"]) for r in rows] == [("1-5", 40, "words"),
                                                                ("6+", 50, "words")]
    hyps, refs = module.hyps["test"], module.refs["test"]
    assert rows[1]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps[40:], [refs[40:]]).score)
