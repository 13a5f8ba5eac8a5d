"""LMDataModule: token streams, classic batchify layout, splits, DDP partition."""

import gzip
import math

import pytest
import torch

from lit_attention.data.lm import LMDataModule, batchify, sliding_windows
from lit_attention.data.text import DataError
from lit_attention.data.vocab import EOS, PAD


@pytest.fixture
def text_file(tmp_path):
    lines = [f"line {i} says {'ab' * (i % 5)}" for i in range(100)]
    path = tmp_path / "corpus.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path, lines


def test_batches_are_consecutive_windows_of_parallel_streams():
    stream = torch.arange(103)
    data = batchify(stream, 4)                       # 4 streams of 25 tokens, 3 dropped
    assert data.shape == (4, 25) and torch.equal(data[1], torch.arange(25, 50))
    from lit_attention.data.lm import StreamBatches
    batches = list(StreamBatches(data, bptt=7))
    assert len(batches) == len(StreamBatches(data, bptt=7)) == 4     # 24 targets: 7+7+7+3
    for b in batches:
        assert torch.equal(b["targets"], b["tokens"] + 1)            # next token of the stream
    for prev, nxt in zip(batches, batches[1:]):
        assert torch.equal(prev["targets"][:, -1], nxt["tokens"][:, 0])  # state can carry over
    rebuilt = torch.cat([b["tokens"] for b in batches] + [batches[-1]["targets"][:, -1:]], 1)
    assert torch.equal(rebuilt, data)


def test_file_is_split_contiguously_and_lines_end_with_eos(text_file, tmp_path):
    path, lines = text_file
    dm = LMDataModule(path=str(path), tokenizer="char", batch_size=2, bptt=5,
                      val_fraction=0.1, test_fraction=0.2, cache_dir=str(tmp_path / "cache"))
    split = dm.split_lines()
    assert split["train"] == lines[:70] and split["val"] == lines[70:80] and split["test"] == lines[80:]
    dm.setup("fit")
    val = dm.streams["val"].tolist()
    assert val.count(EOS) == 10 and val[-1] == EOS
    first = val[:val.index(EOS)]
    assert dm.tokenizer.decode(first) == lines[70]
    assert dm.vocab_size_actual == dm.tokenizer.vocab_size
    assert dm.n_tokens("test") == len(dm.streams["test"])


def test_ddp_ranks_read_disjoint_streams(text_file, tmp_path):
    path, _ = text_file
    dm = LMDataModule(path=str(path), tokenizer="char", batch_size=3, bptt=8,
                      cache_dir=str(tmp_path / "cache"))
    one = dm.batches("train", rank=0, world=1)
    both = batchify(dm.streams["train"], 6)
    ranks = [dm.batches("train", rank=r, world=2) for r in (0, 1)]
    assert torch.equal(torch.cat([r.data for r in ranks]), both)
    assert len(ranks[0]) == len(ranks[1])          # same number of batches: collectives line up
    assert one.data.shape[0] == 3


def test_synthetic_corpus_is_deterministic(tmp_path):
    make = lambda: LMDataModule(task="toy-mt", tokenizer="word", n_sentences=200, seed=3,
                                batch_size=4, bptt=8, cache_dir=str(tmp_path / "cache"))
    a, b = make(), make()
    a.setup("fit")
    b.setup("fit")
    for split in ("train", "val", "test"):
        assert torch.equal(a.streams[split], b.streams[split])
    assert not torch.equal(a.streams["val"][:50], a.streams["train"][:50])
    batch = next(iter(a.train_dataloader()))
    assert batch["tokens"].shape == (4, 8) and batch["targets"].shape == (4, 8)


def test_bad_configuration_fails_with_the_valid_choices(tmp_path):
    with pytest.raises(ValueError, match="char, sentencepiece"):
        LMDataModule(path="x", tokenizer="bytes")
    with pytest.raises(ValueError, match="unknown data.task 'wiki'; valid choices: copy, reverse, sort, toy-mt, files"):
        LMDataModule(task="wiki")
    with pytest.raises(ValueError, match="data.path"):
        LMDataModule(task="files")
    with pytest.raises(DataError, match="missing data file"):
        LMDataModule(path=str(tmp_path / "nope.txt")).setup("fit")
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("a b\nc d\n")
    with pytest.raises(DataError, match="too few"):
        LMDataModule(path=str(tiny), cache_dir=str(tmp_path / "c")).setup("fit")


@pytest.mark.parametrize("options,message", [
    ({"batch_size": 0}, r"data.batch_size and data.eval_batch_size must be >= 1 .*got 0 and None"),
    # 0 is a value, not "not given" (which means the training batch size)
    ({"eval_batch_size": 0}, r"data.batch_size and data.eval_batch_size must be >= 1 .*got 32 and 0"),
    ({"num_workers": -1}, r"data.num_workers must be >= 0, got -1"),
])
def test_a_size_that_would_not_act_as_given_is_refused_when_the_module_is_built(options, message):
    """Before: a ZeroDivisionError or DataLoader's ValueError once the run had started (exit 1)."""
    with pytest.raises(ValueError, match=message):
        LMDataModule(task="toy-mt", **options)


def test_tiny_shakespeare_char_streams(shared_data, tmp_path):
    dm = LMDataModule(path=str(shared_data / "tinyshakespeare" / "input.txt"), tokenizer="char",
                      batch_size=16, bptt=32,
                      cache_dir=str(tmp_path / "cache"))
    assert 60 <= dm.vocab_size_actual <= 70       # 65 characters + specials (newline is EOS)
    sizes = {k: dm.n_tokens(k) for k in ("train", "val", "test")}
    assert sizes["train"] > 15 * sizes["val"] and sizes["val"] > 40_000
    assert dm.tokenizer.decode(dm.streams["train"][:20].tolist()) == "First Citizen:"


# ---- bad text: refused or counted (docs/ERRORS.md) ----------------------------------------

def lm(tmp_path, path, **kwargs):
    return LMDataModule(path=str(path), tokenizer="char", batch_size=2, bptt=4,
                        cache_dir=str(tmp_path / "cache"), **kwargs)


def test_an_empty_or_textless_training_file_is_refused_naming_it(tmp_path):
    other = tmp_path / "other.txt"
    other.write_text("some text\n")
    splits = dict(val_path=str(other), test_path=str(other))
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match=r"empty\.txt is an empty file"):
        lm(tmp_path, empty, **splits).setup("fit")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n")
    with pytest.raises(DataError, match=r"no usable train text in .*blank\.txt: 3 lines, 0 not valid "
                                        r"UTF-8, no other line holds text"):
        lm(tmp_path, blank, **splits).setup("fit")


def test_a_binary_file_is_refused_naming_it(tmp_path):
    nul = tmp_path / "weights.bin"
    nul.write_bytes(b"\x00" * 5000)
    with pytest.raises(DataError, match=r"weights\.bin, line 1: NUL byte: a binary file, not text"):
        lm(tmp_path, nul).setup("fit")


def test_invalid_utf8_training_lines_are_dropped_and_counted_evaluation_lines_refused(tmp_path, caplog):
    lines = [f"line {i}".encode() for i in range(20)]
    lines[3] = b"caf\xe9"                                   # Latin-1, in the training part
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    dm = lm(tmp_path, path, val_fraction=0.1, test_fraction=0.1)
    with caplog.at_level("INFO", logger="lightning.pytorch.utilities.rank_zero"):
        dm.setup("fit")
    assert dm.dropped == {"train": {"invalid_utf8": 1}, "val": {"invalid_utf8": 0},
                          "test": {"invalid_utf8": 0}}
    assert dm.streams["train"].tolist().count(EOS) == 15           # 16 training lines, 1 dropped
    assert f"train split ({path}): 15 lines, " in caplog.text
    assert "dropped 1 lines that are not valid UTF-8" in caplog.text
    lines[3], lines[17] = b"line 3", b"caf\xe9"              # now in the validation part
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError, match=r"corpus\.txt, line 18: not valid UTF-8 \(in the val split"):
        lm(tmp_path, path, val_fraction=0.1, test_fraction=0.1).setup("fit")


@pytest.mark.parametrize("n,window,stride", [(103, 8, 4), (103, 8, 8), (103, 8, 1), (20, 8, 5),
                                             (9, 8, 4), (5, 8, 3), (2, 4, 2)])
def test_sliding_windows_score_every_target_once_from_at_most_window_tokens(n, window, stride):
    stream = torch.arange(10, 10 + n)                # token value - 10 = its position
    tokens, targets = sliding_windows(stream, window, stride)
    assert tokens.shape == targets.shape == (1 + max(0, math.ceil((n - 1 - window) / stride)), window)
    scored = []
    for k in range(tokens.shape[0]):
        start = k * stride
        inputs = stream[start:start + window]
        assert torch.equal(tokens[k, :len(inputs)], inputs) and (tokens[k, len(inputs):] == PAD).all()
        for t in torch.nonzero(targets[k] != PAD).flatten().tolist():
            j = start + 1 + t                        # predicted from stream[start:j], t + 1 tokens
            assert targets[k, t] == stream[j]
            assert t + 1 <= window and (k == 0 or t + 1 >= window - stride + 1)
            scored.append(j)
    assert scored == list(range(1, n))               # every token but the first, once, in order


@pytest.mark.parametrize("world,batch_size", [(1, 1), (1, 5), (2, 3), (3, 2)])
def test_evaluation_windows_split_over_ranks_and_batches_score_the_stream_once(text_file, tmp_path,
                                                                               world, batch_size):
    path, _ = text_file
    dm = LMDataModule(path=str(path), tokenizer="char", batch_size=7, eval_batch_size=batch_size,
                      bptt=16, eval_stride=6, cache_dir=str(tmp_path / "cache"))
    ranks = [list(dm.batches("val", rank=r, world=world)) for r in range(world)]
    assert len({len(batches) for batches in ranks}) == 1   # same batch count: collectives line up
    assert all(b["tokens"].shape == b["targets"].shape == (batch_size, 16) for r in ranks for b in r)
    scored = torch.cat([b["targets"][b["targets"] != PAD] for r in ranks for b in r])
    assert torch.equal(scored, dm.streams["val"][1:])
    # each row's window index, across ranks: 0, 1, 2, ... (padding windows after the last)
    windows = torch.cat([b["window_index"] for r in ranks for b in r])
    assert torch.equal(windows, torch.arange(len(windows)))


def test_evaluation_protocol_defaults_to_the_training_context_with_half_stride(tmp_path):
    dm = LMDataModule(task="toy-mt", bptt=32, cache_dir=str(tmp_path / "cache"))
    assert (dm.eval_window, dm.eval_stride) == (32, 16)
    assert dm.eval_protocol == "sliding window 32, stride 16"
    dm = LMDataModule(task="toy-mt", bptt=32, eval_window=48, eval_stride=48)
    assert dm.eval_protocol == "sliding window 48, stride 48"
    with pytest.raises(ValueError, match="data.eval_stride"):
        LMDataModule(task="toy-mt", bptt=8, eval_stride=9)
    with pytest.raises(ValueError, match="eval_window"):
        LMDataModule(task="toy-mt", eval_window=0)


@pytest.mark.parametrize("split", ["train", "val"])
def test_loader_workers_yield_every_batch_once_in_order(text_file, tmp_path, split):
    # Each worker process iterates its own copy of an iterable dataset: unsharded, two workers
    # trained on every batch twice and scored every evaluation window twice.
    path, _ = text_file
    batches = {}
    for workers in (0, 2):
        dm = LMDataModule(path=str(path), tokenizer="char", batch_size=3, eval_batch_size=2, bptt=16,
                          cache_dir=str(tmp_path / "cache"), num_workers=workers)
        dm.setup("fit")
        loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
        batches[workers] = [b["tokens"] for b in loader]
    assert len(batches[0]) > 4
    assert len(batches[2]) == len(batches[0])
    assert all(torch.equal(a, b) for a, b in zip(batches[0], batches[2]))
