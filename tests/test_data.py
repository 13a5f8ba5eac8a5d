"""Data pipeline: synthetic tasks, tokenizers, batching (text files: tests/data/test_text.py; the
translation DataModule: tests/data/test_translation.py)."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_attention.data import synthetic
from lit_attention.data.batching import (ResumableDataLoader, TokenBatchSampler, collate,
                                         padded_length)
from lit_attention.data.synthetic import Clause, NounPhrase, english, generate, source
from lit_attention.data.tokenizers import (CharTokenizer, SentencePieceTokenizer, WordTokenizer,
                                           build_tokenizers)
from lit_attention.data.vocab import BOS, EOS, PAD, UNK

def write(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode()
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        Path(path).write_bytes(data)
    return str(path)


# ---- synthetic ----------------------------------------------------------------------------

@pytest.mark.parametrize("task", synthetic.SYNTHETIC_TASKS)
def test_synthetic_deterministic_per_seed(task):
    assert generate(task, 50, seed=7) == generate(task, 50, seed=7)
    assert generate(task, 50, seed=7) != generate(task, 50, seed=8)


def test_symbol_tasks_exact():
    vocab = set(synthetic.symbols(12))
    for task, rule in [("copy", lambda w: w), ("reverse", lambda w: w[::-1]),
                       ("sort", sorted)]:
        src, tgt = generate(task, 200, seed=3, min_len=2, max_len=9, n_symbols=12)
        lengths = set()
        for s, t in zip(src, tgt):
            words = s.split()
            assert t.split() == rule(words)
            assert set(words) <= vocab
            lengths.add(len(words))
        assert lengths == set(range(2, 10))
    assert synthetic.symbols(12)[9:12] == ["a9", "b0", "b1"]
    assert sorted(["b1", "a3", "b0"]) == ["a3", "b0", "b1"]     # string order is symbol order


def test_toy_mt_constructed_example_reorders():
    sentence = Clause(
        NounPhrase("the", "dog", ("big",)), "sees",
        NounPhrase("a", "cat", (), Clause(None, "chases",
                                          NounPhrase("the", "bird", ("small", "red")))))
    assert " ".join(english(sentence)) == "the big dog sees a cat that chases the small red bird"
    # adjectives after nouns, verbs clause-final (also inside the relative clause)
    assert " ".join(source(sentence)) == "lo bako zor na miru ke lo tesi pim lek runa mika"
    intransitive = Clause(NounPhrase("a", "horse", ("quick", "green")), "sleeps")
    assert " ".join(source(intransitive)) == "na vemu rav wel dumi"
    assert " ".join(english(intransitive)) == "a quick green horse sleeps"


def test_toy_mt_corpus_properties():
    src, tgt = generate("toy-mt", 5000, seed=11, min_len=3, max_len=40)
    to_target = {s: t for t, s in synthetic.LEXICON.items()}
    verbs = {synthetic.LEXICON[v] for v in synthetic.TRANSITIVE + synthetic.INTRANSITIVE}
    lengths, reordered, max_that = [], 0, 0
    for s, t in zip(src, tgt):
        s_words, t_words = s.split(), t.split()
        glossed = [to_target[w] for w in s_words]
        assert sorted(glossed) == sorted(t_words)          # word-for-word lexicon
        assert s_words[-1] in verbs                          # verb-final source
        assert t_words[0] in synthetic.DETERMINERS
        reordered += glossed != t_words
        lengths.append(len(t_words))
        max_that = max(max_that, t_words.count("that"))
    assert min(lengths) == 3 and max(lengths) >= 35 and max(lengths) <= 40
    assert reordered / len(src) > 0.9
    assert max_that >= 3                                     # nested relative clauses occur
    assert len(set(tgt)) > 0.8 * len(tgt)


def test_synthetic_rejects_bad_task():
    with pytest.raises(ValueError, match="valid choices: copy, reverse, sort, toy-mt"):
        generate("files", 3, 0)
    with pytest.raises(ValueError, match="max_len >= 3"):
        generate("toy-mt", 3, 0, min_len=1, max_len=2)
    with pytest.raises(ValueError, match="min_len <= max_len"):
        generate("copy", 3, 0, min_len=5, max_len=4)


def test_split_seeds_differ():
    assert synthetic.split_seed(1, "train") != synthetic.split_seed(1, "val")
    assert synthetic.split_seed(1, "train") == synthetic.split_seed(1, "train")


# ---- tokenizers ---------------------------------------------------------------------------

def test_word_vocab_order_and_round_trip():
    tok = WordTokenizer.train(["b a c", "a b", "a d"])
    assert tok.itos == ["<pad>", "<unk>", "<s>", "</s>", "a", "b", "c", "d"]
    ids = tok.encode("a  d b zzz")
    assert ids == [4, 7, 5, UNK]
    assert tok.decode([BOS, 4, 7, EOS, 5, PAD]) == "a d"
    assert tok.pieces([BOS, 4, UNK]) == ["<s>", "a", "<unk>"]
    assert WordTokenizer.train(["a b c d e"], max_size=6).vocab_size == 6


def test_char_round_trip():
    tok = CharTokenizer.train(["ab c", "Müll"])
    assert tok.decode(tok.encode("ab Müll") + [EOS, 5]) == "ab Müll"
    assert tok.encode("x") == [UNK]


def test_tokenizer_cache_reused_and_retrained_on_change(tmp_path):
    src, tgt = generate("toy-mt", 300, seed=1)
    first, _ = build_tokenizers("sentencepiece", src, tgt, vocab_size=60, cache_dir=str(tmp_path))
    again, again_tgt = build_tokenizers("sentencepiece", src, tgt, vocab_size=60,
                                        cache_dir=str(tmp_path))
    assert isinstance(first, SentencePieceTokenizer)
    assert (first.cache_hit, again.cache_hit) == (False, True)
    assert again is again_tgt                                    # joint vocabulary
    assert again.encode(tgt[0]) == first.encode(tgt[0]) and first.decode(first.encode(tgt[0])) \
        == tgt[0]
    bpe, _ = build_tokenizers("sentencepiece", src, tgt, vocab_size=60, model_type="bpe",
                              cache_dir=str(tmp_path))
    bigger, _ = build_tokenizers("sentencepiece", src, tgt, vocab_size=80,
                                 cache_dir=str(tmp_path))
    other_text, _ = build_tokenizers("sentencepiece", src[:-1], tgt, vocab_size=60,
                                     cache_dir=str(tmp_path))
    assert not (bpe.cache_hit or bigger.cache_hit or other_text.cache_hit)
    assert len({first.path, bpe.path, bigger.path, other_text.path}) == 4
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_separate_vocabularies_and_word_cache(tmp_path):
    src, tgt = generate("toy-mt", 200, seed=2)
    s, t = build_tokenizers("word", src, tgt, joint=False, cache_dir=str(tmp_path))
    assert "lo" in s.stoi and "lo" not in t.stoi and "the" in t.stoi and "the" not in s.stoi
    s2, t2 = build_tokenizers("word", src, tgt, joint=False, cache_dir=str(tmp_path))
    assert s2.cache_hit and t2.cache_hit and s2.itos == s.itos and t2.itos == t.itos
    assert s.path.endswith(".json")


BUILD_SCRIPT = """
import sys
from lit_attention.data.tokenizers import build_tokenizers
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
tok, _ = build_tokenizers("sentencepiece", lines, lines, vocab_size=50, cache_dir=sys.argv[2])
print(tok.cache_hit, tok.path)
"""


def test_concurrent_builds_share_one_model(tmp_path):
    corpus = write(tmp_path / "corpus.txt", generate("toy-mt", 2000, seed=5)[1])
    cache = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT, corpus, str(cache)],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(hit for hit, _ in outputs) == ["False", "True"]    # one trained, one waited
    assert outputs[0][1] == outputs[1][1]
    assert [p for p in os.listdir(cache) if p != ".lock"] == \
        [os.path.basename(outputs[0][1])]


def test_bad_tokenizer_choice():
    with pytest.raises(ValueError, match="valid choices: word, char, sentencepiece"):
        build_tokenizers("bytes", ["a"], ["b"])


# ---- batching -----------------------------------------------------------------------------

def lengths_for(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 40, (n,), generator=g).tolist()


def test_batches_respect_max_tokens_and_cover_each_example_once():
    lengths = lengths_for(1000)
    sampler = TokenBatchSampler(lengths, max_tokens=200, seed=1, bucket_size_multiplier=5)
    orders = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        for batch in batches:
            assert max(lengths[i] for i in batch) * len(batch) <= 200
        flat = [i for batch in batches for i in batch]
        assert sorted(flat) == list(range(1000))
        orders.append(flat)
    assert orders[0] != orders[1]
    sampler.set_epoch(0)
    assert [i for b in sampler for i in b] == orders[0]       # same (seed, epoch), same order


def test_bucketing_reduces_padding():
    lengths = lengths_for(2000)
    def padding(multiplier):
        batches = list(TokenBatchSampler(lengths, 400, bucket_size_multiplier=multiplier))
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b)
                   for b in batches)
    assert padding(100) < 0.5 * padding(1)


def test_oversized_example_gets_its_own_batch():
    batches = list(TokenBatchSampler([5, 50, 5], max_tokens=20, shuffle=False))
    assert [1] in batches and sorted(i for b in batches for i in b) == [0, 1, 2]


def test_validation_order_is_fixed_and_unpadded():
    lengths = lengths_for(101)
    a = TokenBatchSampler(lengths, 100, shuffle=False, pad_to_equal=False)
    b = TokenBatchSampler(lengths, 100, shuffle=False, pad_to_equal=False)
    b.set_epoch(3)
    assert list(a) == list(b)
    assert sorted(i for batch in a for i in batch) == list(range(101))


@pytest.mark.parametrize("replicas", [2, 3])
def test_rank_shards(replicas):
    lengths = lengths_for(500)
    n_global = len(TokenBatchSampler(lengths, 150, seed=4))
    assert n_global % replicas                             # padding is really exercised
    # unpadded: disjoint shards covering every example
    shards = [list(TokenBatchSampler(lengths, 150, seed=4, num_replicas=replicas, rank=r,
                                     pad_to_equal=False)) for r in range(replicas)]
    flat = [i for shard in shards for b in shard for i in b]
    assert sorted(flat) == list(range(500))
    # padded: equal counts; the only repeats are the padding batches
    shards = [list(TokenBatchSampler(lengths, 150, seed=4, num_replicas=replicas, rank=r))
              for r in range(replicas)]
    assert len({len(s) for s in shards}) == 1
    batches = [tuple(b) for shard in shards for b in shard]
    assert len(batches) - len(set(batches)) == replicas - n_global % replicas
    assert sorted({i for b in batches for i in b}) == list(range(500))


def test_sampler_resumes_mid_epoch():
    lengths = lengths_for(300)
    sampler = TokenBatchSampler(lengths, 120, seed=9)
    sampler.set_epoch(2)
    full = list(sampler)
    it = iter(sampler)
    consumed = [next(it) for _ in range(4)]
    state = sampler.state_dict()
    assert state == {"epoch": 2, "batches_done": 4}
    resumed = TokenBatchSampler(lengths, 120, seed=9)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)                    # Lightning calls this again at the resumed epoch
    assert consumed + list(resumed) == full
    assert len(list(resumed)) == len(full)  # the skip applies once
    resumed.set_epoch(3)
    assert len(list(resumed)) == len(resumed)


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_state_counts_returned_batches(workers):
    lengths = lengths_for(300)
    examples = [{"idx": i, "src": [5] * (n - 1), "tgt": [6]} for i, n in enumerate(lengths)]

    def loader():
        sampler = TokenBatchSampler(lengths, 120, seed=9)
        sampler.set_epoch(1)
        return ResumableDataLoader(examples, batch_sampler=sampler, collate_fn=collate,
                                   num_workers=workers)

    full = [b["idx"].tolist() for b in loader()]
    first = loader()
    it = iter(first)
    consumed = [next(it)["idx"].tolist() for _ in range(3)]
    assert first.state_dict() == {"epoch": 1, "batches_done": 3}   # workers ran further ahead
    del it
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    assert consumed + [b["idx"].tolist() for b in resumed] == full
    assert resumed.state_dict() == {"epoch": 1, "batches_done": len(full)}


def test_lightning_sets_the_epoch_through_the_batch_sampler():
    from lightning.fabric.utilities.data import _set_sampler_epoch
    sampler = TokenBatchSampler(lengths_for(50), 100)
    loader = torch.utils.data.DataLoader(list(range(50)), batch_sampler=sampler)
    _set_sampler_epoch(loader, 5)
    assert sampler.epoch == 5


def test_collate_shapes_and_specials():
    batch = collate([{"idx": 7, "src": [10, 11, 12], "tgt": [20]},
                     {"idx": 3, "src": [13], "tgt": [21, 22, 23, 24]}])
    assert batch["src"].tolist() == [[10, 11, 12, EOS], [13, EOS, PAD, PAD]]
    assert batch["tgt_in"].tolist() == [[BOS, 20, PAD, PAD, PAD], [BOS, 21, 22, 23, 24]]
    assert batch["tgt_out"].tolist() == [[20, EOS, PAD, PAD, PAD], [21, 22, 23, 24, EOS]]
    assert batch["idx"].tolist() == [7, 3]
    assert all(batch[k].dtype == torch.long for k in ("src", "tgt_in", "tgt_out", "idx"))
    assert batch["keep"].tolist() == [True, True]
    assert padded_length([1, 2, 3], [1]) == 4


def test_evaluation_padding_for_ranks_is_marked_and_never_counted():
    from lit_attention.data.batching import MarkedExamples, TokenBatchSampler, collate
    examples = [{"src": [10], "tgt": [20], "idx": i} for i in range(3)]
    seen = []
    for rank in (0, 1):
        sampler = TokenBatchSampler([3, 3, 3], max_tokens=100, shuffle=False, num_replicas=2,
                                    rank=rank, mark_padding=True)
        batches = [collate([MarkedExamples(examples)[i] for i in b]) for b in sampler]
        assert len(batches) == 1, "every rank gets a batch, even with one batch in all"
        seen += [i for b in batches for i, k in zip(b["idx"].tolist(), b["keep"].tolist()) if k]
    assert sorted(seen) == [0, 1, 2]
