"""Data pipeline: text files, synthetic tasks, tokenizers, batching, the translation DataModule."""

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
from lit_attention.data.text import DataError, read_lines, read_parallel, resolve
from lit_attention.data.tokenizers import (CharTokenizer, SentencePieceTokenizer, WordTokenizer,
                                           build_tokenizers)
from lit_attention.data.translation import TranslationDataModule
from lit_attention.data.vocab import BOS, EOS, PAD, UNK

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MULTI30K = SHARED_DATA / "multi30k"


def write(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode()
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        Path(path).write_bytes(data)
    return str(path)


# ---- text ---------------------------------------------------------------------------------

def test_plain_and_gz_read_the_same(tmp_path):
    lines = ["ein Hund läuft .", "", "zwei Katzen"]
    assert read_lines(write(tmp_path / "a.de", lines)) == lines
    assert read_lines(write(tmp_path / "b.de.gz", lines, gz=True)) == lines


def test_resolve_finds_plain_or_gz(tmp_path):
    write(tmp_path / "train.de.gz", ["x"], gz=True)
    write(tmp_path / "train.en", ["y"])
    assert resolve(str(tmp_path), "train", "de") == str(tmp_path / "train.de.gz")
    assert resolve(str(tmp_path), "train", "en") == str(tmp_path / "train.en")
    with pytest.raises(DataError, match=r"val\.fr.*val\.fr\.gz"):
        resolve(str(tmp_path), "val", "fr")


def test_missing_file_is_named_with_gz_hint(tmp_path):
    write(tmp_path / "train.de.gz", ["x"], gz=True)
    with pytest.raises(DataError, match=r"missing data file: .*train\.de \(but .*train\.de\.gz"):
        read_lines(str(tmp_path / "train.de"))
    with pytest.raises(DataError, match=r"missing data file: .*nothing\.en$"):
        read_lines(str(tmp_path / "nothing.en"))


def test_non_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.en"
    path.write_bytes(b"fine\nalso fine\nbad \xff byte\n")
    with pytest.raises(DataError, match=r"bad\.en, line 3: not valid UTF-8"):
        read_lines(str(path))
    gz = tmp_path / "bad.en.gz"
    with gzip.open(gz, "wb") as f:
        f.write(b"\xe9t\xe9\n")
    with pytest.raises(DataError, match=r"bad\.en\.gz, line 1"):
        read_lines(str(gz))


def test_corrupt_gzip_is_a_data_error(tmp_path):
    path = tmp_path / "x.en.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=r"x\.en\.gz: corrupt gzip"):
        read_lines(str(path))


def test_mismatched_line_counts_name_both_files_and_counts(tmp_path):
    src = write(tmp_path / "train.de", ["a", "b", "c"])
    tgt = write(tmp_path / "train.en", ["a", "b"])
    with pytest.raises(DataError) as err:
        read_parallel(src, tgt)
    message = str(err.value)
    assert f"{src} has 3 lines" in message and f"{tgt} has 2 lines" in message


def test_empty_lines_dropped_and_counted(tmp_path):
    src = write(tmp_path / "s", ["a", "", "c", "d", "  "])
    tgt = write(tmp_path / "t", ["A", "B", "", "D", "E"])
    assert read_parallel(src, tgt) == (["a", "d"], ["A", "D"], 3)


def test_empty_split_fails_naming_files(tmp_path):
    src = write(tmp_path / "val.de", [])
    tgt = write(tmp_path / "val.en", [])
    with pytest.raises(DataError, match=r"empty split.*val\.de.*val\.en"):
        read_parallel(src, tgt)
    src = write(tmp_path / "v.de", ["", "x"])
    tgt = write(tmp_path / "v.en", ["y", ""])
    with pytest.raises(DataError, match="empty split"):
        read_parallel(src, tgt)


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


# ---- DataModule ---------------------------------------------------------------------------

def small_dm(tmp_path, **kwargs):
    settings = dict(n_train=400, n_val=50, n_test=50, cache_dir=str(tmp_path), max_tokens=300)
    return TranslationDataModule(**{**settings, **kwargs})


def test_datamodule_vocab_available_after_construction(tmp_path):
    dm = small_dm(tmp_path)
    assert dm.src_vocab_size == dm.tgt_vocab_size == dm.src_tokenizer.vocab_size > 40
    assert dm.src_tokenizer is dm.tgt_tokenizer
    separate = small_dm(tmp_path, joint_vocab=False)
    assert separate.src_vocab_size < dm.src_vocab_size


@pytest.mark.parametrize("option, value, valid", [
    ("task", "wmt", "copy, reverse, sort, toy-mt, files"),
    ("tokenizer", "bytes", "word, char, sentencepiece"),
    ("spm_model", "wordpiece", "unigram, bpe"),
])
def test_datamodule_invalid_choices(tmp_path, option, value, valid):
    with pytest.raises(ValueError, match=f"valid choices: {valid}"):
        small_dm(tmp_path, **{option: value})


def test_datamodule_files_need_data_dir(tmp_path):
    with pytest.raises(ValueError, match="data_dir"):
        small_dm(tmp_path, task="files")


def test_datamodule_batches_decode_to_references(tmp_path):
    dm = small_dm(tmp_path, task="reverse", tokenizer="char")
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    refs, srcs = dm.references("val"), dm.sources("val")
    for row, i in enumerate(batch["idx"].tolist()):
        assert dm.tgt_tokenizer.decode(batch["tgt_out"][row]) == refs[i]
        assert dm.src_tokenizer.decode(batch["src"][row]) == srcs[i]
        assert refs[i] == " ".join(srcs[i].split()[::-1])
    assert dm.stats["val"] == {"pairs": 50, "empty_dropped": 0, "too_long_dropped": 0}
    val_idx = sorted(i for b in dm.val_dataloader() for i in b["idx"].tolist())
    assert val_idx == list(range(50))


def test_datamodule_synthetic_splits_are_seeded(tmp_path):
    a, b = small_dm(tmp_path), small_dm(tmp_path)
    other = small_dm(tmp_path, data_seed=99)
    assert a.sources("train") == b.sources("train") and a.references("val") == b.references("val")
    assert a.sources("train") != other.sources("train")
    assert a.sources("val") != a.sources("test") != a.sources("train")[:50]
    assert not a.src_tokenizer.cache_hit
    assert b.src_tokenizer.cache_hit                       # same training text: cached vocab


def test_datamodule_max_len_filter_counts(tmp_path, caplog):
    dm = small_dm(tmp_path, max_len=8)
    too_long = sum(len(t.split()) > 8 for t in dm.references("train"))
    assert too_long > 20
    with caplog.at_level("INFO", logger="lit_attention.data.translation"):
        dm.setup("fit")
    assert dm.stats["train"] == {"pairs": 400 - too_long, "empty_dropped": 0,
                                 "too_long_dropped": too_long}
    assert dm.stats["val"]["too_long_dropped"] == 0          # only training pairs are filtered
    assert f"{too_long} longer than max_len=8" in caplog.text
    train_idx = sorted(i for b in dm.train_dataloader() for i in b["idx"].tolist())
    assert len(train_idx) == 400 - too_long
    assert all(len(dm.references("train")[i].split()) <= 8 for i in train_idx)


def test_datamodule_files_task(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write(data / "train.de.gz", ["ein hund", "", "eine katze", "der mann"], gz=True)
    write(data / "train.en.gz", ["a dog", "x", "a cat", "the man"], gz=True)
    write(data / "val.de", ["ein mann"])
    write(data / "val.en", ["a man"])
    write(data / "test.de", ["eine katze", "ein hund"])
    write(data / "test.en", ["a cat"])
    dm = TranslationDataModule(task="files", data_dir=str(data), src_lang="de", tgt_lang="en",
                               cache_dir=str(tmp_path / "cache"))
    dm.setup("fit")
    assert dm.stats["train"] == {"pairs": 3, "empty_dropped": 1, "too_long_dropped": 0}
    assert dm.references("val") == ["a man"]
    batch = next(iter(dm.val_dataloader()))
    assert dm.tgt_tokenizer.decode(batch["tgt_out"][0]) == "a man"
    with pytest.raises(DataError, match=r"test\.de has 2 lines.*test\.en has 1 lines"):
        dm.setup("test")


def test_datamodule_rank_from_trainer(tmp_path):
    import lightning.pytorch as L
    dm = small_dm(tmp_path)
    dm.trainer = L.Trainer(accelerator="cpu", devices=1, logger=False)
    assert dm.batch_sampler("train", train=True).num_replicas == 1
    counts = []
    for rank in range(2):
        dm.trainer = type("TwoRanks", (), {"world_size": 2, "global_rank": rank,
                                         "current_epoch": 0})()
        loader = dm.train_dataloader()
        assert loader.batch_sampler.rank == rank
        counts.append(len(loader))
    assert counts[0] == counts[1]


@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k not found at {MULTI30K}")
def test_multi30k_smoke(tmp_path):
    dm = TranslationDataModule(task="files", data_dir=str(MULTI30K), src_lang="de",
                               tgt_lang="en", test_split="test_2016_flickr",
                               tokenizer="sentencepiece", vocab_size=1000, limit_train=3000,
                               cache_dir=str(tmp_path), max_tokens=2000)
    assert 900 <= dm.src_vocab_size <= 1100
    dm.setup("fit")
    dm.setup("test")
    assert dm.stats["train"]["pairs"] + dm.stats["train"]["too_long_dropped"] == 3000
    assert dm.stats["val"]["pairs"] == 1014 and dm.stats["test"]["pairs"] == 1000
    batch = next(iter(dm.train_dataloader()))
    assert batch["src"].numel() <= 2000 and batch["tgt_in"].numel() <= 2000
    i = batch["idx"][0].item()
    assert dm.tgt_tokenizer.decode(batch["tgt_out"][0]) == dm.references("train")[i]
    assert dm.references("test_2016_flickr")[0].startswith("A man in an orange hat")


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
