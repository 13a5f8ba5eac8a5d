"""The translation DataModule (lit_attention/data/translation.py): splits, vocabularies, batches,
dropped-pair counts, evaluation splits aligned with their files line by line."""

import functools
import json
from pathlib import Path

import pytest

from conftest import CONFIGS, SHARED_DATA, cli_in_process, files_config, run_cli, write_lines
from lit_attention.data.text import DataError
from lit_attention.data.translation import TranslationDataModule

MULTI30K = SHARED_DATA / "multi30k"
RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"   # where the per-split line goes


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


def test_datamodule_refuses_negative_loader_workers(tmp_path):
    with pytest.raises(ValueError, match="data.num_workers must be >= 0"):
        small_dm(tmp_path, num_workers=-1)


def test_datamodule_batches_decode_to_references(tmp_path):
    dm = small_dm(tmp_path, task="reverse", tokenizer="char")
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    refs, srcs = dm.references("val"), dm.sources("val")
    for row, i in enumerate(batch["idx"].tolist()):
        assert dm.tgt_tokenizer.decode(batch["tgt_out"][row]) == refs[i]
        assert dm.src_tokenizer.decode(batch["src"][row]) == srcs[i]
        assert refs[i] == " ".join(srcs[i].split()[::-1])
    assert dm.stats["val"] == {"lines": 50, "pairs": 50}
    assert dm.dropped["val"] == {"empty": 0, "too_long": 0, "invalid_utf8": 0}
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
    with caplog.at_level("INFO", logger=RANK_ZERO_LOGGER):
        dm.setup("fit")
    assert dm.stats["train"] == {"lines": 400, "pairs": 400 - too_long}
    assert dm.dropped["train"] == {"empty": 0, "too_long": too_long, "invalid_utf8": 0}
    assert dm.dropped["val"]["too_long"] == 0          # only training pairs are filtered
    assert f"{too_long} longer than max_len=8" in caplog.text
    train_idx = sorted(i for b in dm.train_dataloader() for i in b["idx"].tolist())
    assert len(train_idx) == 400 - too_long
    assert all(len(dm.references("train")[i].split()) <= 8 for i in train_idx)


def test_datamodule_files_task(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_lines(data / "train.de.gz", ["ein hund", "", "eine katze", "der mann"], gz=True)
    write_lines(data / "train.en.gz", ["a dog", "x", "a cat", "the man"], gz=True)
    write_lines(data / "val.de", ["ein mann"])
    write_lines(data / "val.en", ["a man"])
    write_lines(data / "test.de", ["eine katze", "ein hund"])
    write_lines(data / "test.en", ["a cat"])
    dm = TranslationDataModule(task="files", data_dir=str(data), src_lang="de", tgt_lang="en",
                               cache_dir=str(tmp_path / "cache"))
    dm.setup("fit")
    assert dm.stats["train"] == {"lines": 4, "pairs": 3}
    assert dm.dropped["train"] == {"empty": 1, "too_long": 0, "invalid_utf8": 0}
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
    assert dm.stats["train"]["pairs"] + dm.dropped["train"]["too_long"] == 3000
    assert dm.stats["val"]["pairs"] == 1014 and dm.stats["test"]["pairs"] == 1000
    batch = next(iter(dm.train_dataloader()))
    assert batch["src"].numel() <= 2000 and batch["tgt_in"].numel() <= 2000
    i = batch["idx"][0].item()
    assert dm.tgt_tokenizer.decode(batch["tgt_out"][0]) == dm.references("train")[i]
    assert dm.references("test_2016_flickr")[0].startswith("A man in an orange hat")


# ---- bad data: counted, refused, aligned (docs/ERRORS.md) ---------------------------------

def files_dm(data, tmp_path, **kwargs):
    return TranslationDataModule(task="files", data_dir=str(data), src_lang="de", tgt_lang="en",
                                 tokenizer="word", cache_dir=str(tmp_path / "cache"), **kwargs)


def parallel(data, split, pairs):
    data.mkdir(exist_ok=True)
    write_lines(data / f"{split}.de", [s for s, _ in pairs])
    write_lines(data / f"{split}.en", [t for _, t in pairs])


def test_no_usable_training_pair_is_an_error_naming_split_counts_and_limit(tmp_path):
    dm = small_dm(tmp_path, task="copy", max_len=2)            # copy sentences have 3+ words
    with pytest.raises(DataError, match=r"no usable training pair: train split 'train' \(task copy\): "
                                        r"0 of 400 pairs used; dropped 0 with an empty side, 400 "
                                        r"longer than max_len=2 tokens, 0 not valid UTF-8"):
        dm.setup("fit")


def test_dropped_pairs_counted_per_reason_and_logged_per_split(tmp_path, caplog):
    data = tmp_path / "data"
    parallel(data, "train", [("ein hund", "a dog"), ("", "x"), ("eine katze", "a cat"),
                             ("ein sehr sehr sehr langer satz", "a very long sentence"), ("BAD", "y")])
    (data / "train.de").write_bytes((data / "train.de").read_bytes().replace(b"BAD", b"\xff"))
    parallel(data, "val", [("ein hund", "a dog"), ("", "")])
    dm = files_dm(data, tmp_path, max_len=4)
    with caplog.at_level("INFO", logger=RANK_ZERO_LOGGER):
        dm.setup("fit")
    assert dm.dropped == {"train": {"empty": 1, "too_long": 1, "invalid_utf8": 1},
                          "val": {"empty": 0, "too_long": 0, "invalid_utf8": 0}}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"train split 'train' ({data}/train.{{de,en}}): 2 of 5 pairs used; dropped 1 with an empty "
        "side, 1 longer than max_len=4 tokens, 1 not valid UTF-8",
        f"val split 'val' ({data}/val.{{de,en}}): 2 pairs, all kept (evaluation drops nothing; "
        "1 with an empty side)"]


def test_evaluation_split_keeps_empty_lines_so_hypotheses_align_with_the_file(tmp_path):
    data = tmp_path / "data"
    parallel(data, "train", [("ein hund", "a dog"), ("eine katze", "a cat")])
    val = [("ein hund", "a dog"), ("", "a cat"), ("eine katze", ""), ("ein hund", "dog a")]
    parallel(data, "val", val)
    dm = files_dm(data, tmp_path)
    dm.setup("fit")
    assert dm.references("val") == [t for _, t in val] and dm.sources("val") == [s for s, _ in val]
    seen = {}
    for batch in dm.val_dataloader():
        for row, i in enumerate(batch["idx"].tolist()):
            seen[i] = dm.tgt_tokenizer.decode(batch["tgt_out"][row])
    assert seen == {i: t for i, (_, t) in enumerate(val)}      # index i is line i + 1 of val.en


def test_a_binary_or_undecodable_file_is_refused_naming_it(tmp_path):
    data = tmp_path / "data"
    parallel(data, "train", [("ein hund", "a dog")])
    parallel(data, "val", [("ein hund", "a dog")])
    (data / "val.en").write_bytes(b"a \xe9\n")
    with pytest.raises(DataError, match=r"val\.en, line 1: not valid UTF-8"):
        files_dm(data, tmp_path).setup("fit")
    (data / "train.de").write_bytes(b"\x00" * 1000)
    with pytest.raises(DataError, match=r"train\.de, line 1: NUL byte: a binary file"):
        files_dm(data, tmp_path).src_vocab_size


# ---- the same through `lit-attention fit` / `test` (exit status and run store) -------------

TINY = ["--data.task", "files", "--data.src_lang", "de", "--data.tgt_lang", "en",
        "--data.tokenizer", "word", "--model.d_model", "16", "--model.ffn", "32",
        "--model.heads", "2", "--model.enc_layers", "1", "--model.dec_layers", "1",
        "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false",
        "--diagnostics.heatmaps", "0"]
TRAIN = [("ein hund läuft", "a dog runs"), ("eine katze schläft", "a cat sleeps"),
         ("der mann sieht den hund", "the man sees the dog")] * 4


def fit(data, root, *extra, run=functools.partial(run_cli, timeout=300)):
    """`lit-attention fit` on the files in ``data`` (``run=cli_in_process`` for runs that stop at the data)."""
    return run("fit", "--config", files_config(Path(data).parent), "--data.data_dir", data,
               "--run.root", root, "--run.id", "r", *TINY, *extra)


def test_fit_with_every_training_pair_over_max_len_fails_instead_of_training_0_steps(tmp_path):
    data = tmp_path / "data"
    for split in ("train", "val", "test"):
        parallel(data, split, TRAIN)
    result = fit(data, tmp_path / "runs", "--data.max_len", "2", run=cli_in_process)
    assert result.returncode == 2, result.stderr[-2000:]
    assert (f"error: no usable training pair: train split 'train' ({data}/train.{{de,en}}): 0 of 12 "
            "pairs used; dropped 0 with an empty side, 12 longer than max_len=2 tokens") in result.stderr
    assert not (tmp_path / "runs").exists()   # a usage error (exit 2) writes nothing


@pytest.mark.parametrize("command,option,split", [("validate", "n_val", "val"), ("test", "n_test", "test")])
def test_an_evaluation_split_without_pairs_is_an_error_not_an_empty_success(command, option, split, tmp_path):
    """`test` of a checkpoint with --data.n_test 0 used to exit 0 having scored nothing."""
    result = cli_in_process(command, "--config", CONFIGS / "copy.yaml", f"--data.{option}", "0",
                            "--run.root", tmp_path, "--run.untrained", "true")
    assert result.returncode == 2, result.stderr[-2000:]
    assert (f"error: nothing to evaluate: {split} split '{split}' (task copy): 0 pairs, all kept "
            "(evaluation drops nothing; 0 with an empty side)") in result.stderr


def test_fit_on_a_binary_file_fails_naming_it(tmp_path):
    data = tmp_path / "data"
    for split in ("train", "val", "test"):
        parallel(data, split, TRAIN)
    (data / "train.de").write_bytes(b"\x00" * 4096)
    result = fit(data, tmp_path / "runs", run=cli_in_process)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: {data / 'train.de'}, line 1: NUL byte: a binary file, not text" in result.stderr
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


@pytest.mark.slow
def test_fit_and_test_record_dropped_pairs_and_keep_hypotheses_aligned_with_the_files(tmp_path):
    data = tmp_path / "data"
    parallel(data, "train", TRAIN + [("", "x"), ("ein hund", ""), ("ein " * 20, "a dog")])
    evaluation = [("ein hund läuft", "a dog runs"), ("", "a cat"), ("eine katze", ""),
                  ("der mann", "the man")]
    parallel(data, "val", evaluation)
    parallel(data, "test", evaluation[::-1])
    root = tmp_path / "runs"
    result = fit(data, root, "--data.max_len", "10", run=cli_in_process)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dropped 2 with an empty side, 1 longer than max_len=10 tokens" in result.stderr
    assert "val split 'val'" in result.stderr and "4 pairs, all kept" in result.stderr
    run = root / "default" / "r"
    tested = cli_in_process("test", "--config", files_config(tmp_path), "--data.data_dir", data,
                            "--run.root", root, *TINY, "--ckpt_path", run / "checkpoints" / "last.ckpt")
    assert tested.returncode == 0, tested.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    none = {"empty": 0, "too_long": 0, "invalid_utf8": 0}
    assert summary["data_dropped"] == {"train": {"empty": 2, "too_long": 1, "invalid_utf8": 0},
                                       "val": none, "test": none}
    for split, pairs in (("val", evaluation), ("test", evaluation[::-1])):
        refs = (run / "hyps" / f"{split}.ref.txt").read_text().split("\n")[:-1]
        hyps = (run / "hyps" / f"{split}.txt").read_text().split("\n")[:-1]
        assert refs == [t for _, t in pairs] and len(hyps) == len(pairs)


def test_an_evaluation_line_longer_than_the_models_positions_is_one_line_naming_file_and_line(tmp_path):
    """A line longer than the model's positions is refused naming the line, not a traceback."""
    data = tmp_path / "data"
    words = ["ein", "Hund", "zwei", "Katzen"]
    for split in ("train", "val", "test"):
        for lang in ("de", "en"):
            lines = [" ".join(words[(i + j) % 4] for j in range(5)) for i in range(20)]
            if (split, lang) == ("val", "de"):
                lines[6] = " ".join(["Hund"] * 600)
            data.mkdir(exist_ok=True)
            write_lines(data / f"{split}.{lang}", lines)
    result = fit(data, tmp_path / "runs", run=cli_in_process)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [f"lit-attention fit: error: {data / 'val.de'}, line 7: 601 tokens (with EOS), more than "
                      f"the 512 positions of the transformer's sinusoidal position table: shorten or split "
                      f"that line"], result.stderr[-2000:]
    assert not (tmp_path / "runs").exists()   # refused: no run directory left behind
