"""Reading text files (lit_attention/data/text.py): plain or gzipped, errors naming file and line,
what a training split drops and counts, what an evaluation split keeps, binary files refused."""

import gzip
from pathlib import Path

import pytest

from conftest import write_lines
from lit_attention.data.text import DataError, read_lines, read_parallel, resolve


# ---- text ---------------------------------------------------------------------------------

def test_plain_and_gz_read_the_same(tmp_path):
    lines = ["ein Hund läuft .", "", "zwei Katzen"]
    assert read_lines(write_lines(tmp_path / "a.de", lines)) == lines
    assert read_lines(write_lines(tmp_path / "b.de.gz", lines, gz=True)) == lines


def test_resolve_finds_plain_or_gz(tmp_path):
    write_lines(tmp_path / "train.de.gz", ["x"], gz=True)
    write_lines(tmp_path / "train.en", ["y"])
    assert resolve(str(tmp_path), "train", "de") == str(tmp_path / "train.de.gz")
    assert resolve(str(tmp_path), "train", "en") == str(tmp_path / "train.en")
    with pytest.raises(DataError, match=r"val\.fr.*val\.fr\.gz"):
        resolve(str(tmp_path), "val", "fr")


def test_missing_file_is_named_with_gz_hint(tmp_path):
    write_lines(tmp_path / "train.de.gz", ["x"], gz=True)
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
    src = write_lines(tmp_path / "train.de", ["a", "b", "c"])
    tgt = write_lines(tmp_path / "train.en", ["a", "b"])
    with pytest.raises(DataError) as err:
        read_parallel(src, tgt)
    message = str(err.value)
    assert f"{src} has 3 lines" in message and f"{tgt} has 2 lines" in message


def test_training_pairs_with_an_empty_side_or_invalid_utf8_are_dropped_and_counted(tmp_path):
    src = write_lines(tmp_path / "s", ["a", "", "c", "d", "  ", "f"])
    tgt = write_lines(tmp_path / "t", ["A", "B", "", "D", "E", "F"])
    Path(src).write_bytes(Path(src).read_bytes().replace(b"f\n", b"\xe9t\xe9\n"))
    assert read_parallel(src, tgt) == (["a", "d"], ["A", "D"],
                                       {"empty": 3, "too_long": 0, "invalid_utf8": 1})


def test_evaluation_splits_keep_every_line_so_index_i_is_line_i(tmp_path):
    src = write_lines(tmp_path / "val.de", ["a", "", "c", "d"])
    tgt = write_lines(tmp_path / "val.en", ["A", "B", "", "D"])
    assert read_parallel(src, tgt, train=False) == (["a", "", "c", "d"], ["A", "B", "", "D"],
                                                    {"empty": 0, "too_long": 0, "invalid_utf8": 0})


def test_invalid_utf8_in_an_evaluation_split_is_refused_naming_file_and_line(tmp_path):
    src = write_lines(tmp_path / "val.de", ["a", "b"])
    tgt = tmp_path / "val.en"
    tgt.write_bytes(b"A\n\xe9t\xe9\n")
    with pytest.raises(DataError, match=r"val\.en, line 2: not valid UTF-8"):
        read_parallel(src, str(tgt), train=False)


def test_empty_split_fails_naming_files(tmp_path):
    src = write_lines(tmp_path / "val.de", [])
    tgt = write_lines(tmp_path / "val.en", [])
    with pytest.raises(DataError, match=r"empty split.*val\.de.*val\.en"):
        read_parallel(src, tgt, train=False)
    src = write_lines(tmp_path / "v.de", ["", "x"])
    tgt = write_lines(tmp_path / "v.en", ["y", ""])
    with pytest.raises(DataError, match="empty split"):
        read_parallel(src, tgt, train=False)
    with pytest.raises(DataError, match=r"no usable training pair in .*v\.de and .*v\.en: 2 lines, "
                                        r"2 pairs with an empty side, 0 not valid UTF-8"):
        read_parallel(src, tgt)


def test_a_binary_file_is_refused_naming_it(tmp_path):
    nul = tmp_path / "train.de"
    nul.write_bytes(b"\x00" * 4096)
    for mark_invalid in (False, True):
        with pytest.raises(DataError, match=r"train\.de, line 1: NUL byte: a binary file, not text"):
            read_lines(str(nul), mark_invalid=mark_invalid)
    utf16 = tmp_path / "utf16.en"
    utf16.write_bytes("a dog\n".encode("utf-16"))
    with pytest.raises(DataError, match="binary file, not text .or UTF-16"):
        read_lines(str(utf16))
    gz = tmp_path / "train.en.gz"
    write_lines(gz, ["x"], gz=True)
    gz.rename(tmp_path / "train.en")
    with pytest.raises(DataError, match=r"train\.en is gzip-compressed: name it .*train\.en\.gz"):
        read_lines(str(tmp_path / "train.en"))


def test_mark_returns_none_for_each_invalid_line(tmp_path):
    path = tmp_path / "x.en"
    path.write_bytes(b"ok\n\xff\nfine\n")
    assert read_lines(str(path), mark_invalid=True) == ["ok", None, "fine"]


def test_a_byte_order_mark_is_removed_and_said_once_per_file(tmp_path, caplog):
    """A BOM is not left in the first token: perfect hypotheses score 100 BLEU."""
    bom = "\ufeff"
    path = write_lines(tmp_path / "train.en", [bom + "Two dogs", "a cat", bom + "the man"])
    gz = write_lines(tmp_path / "val.en.gz", [bom + "Two dogs"], gz=True)
    with caplog.at_level("WARNING", logger="lit_attention.data.text"):
        assert read_lines(path) == ["Two dogs", "a cat", "the man"]
        assert read_lines(gz) == ["Two dogs"]
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"{path}: removed the UTF-8 byte-order mark (U+FEFF) at the start of 2 lines, the "
                    f"first line 1: a mark of the file's encoding, not text",
                    f"{gz}: removed the UTF-8 byte-order mark (U+FEFF) at the start of line 1: a mark "
                    f"of the file's encoding, not text"]
    inside = write_lines(tmp_path / "test.en", ["a\ufeffb"])   # not at a line's start: text, kept
    assert read_lines(inside) == ["a\ufeffb"]


def test_a_byte_order_mark_reaches_neither_the_vocabulary_nor_the_references(tmp_path):
    from lit_attention.data.translation import TranslationDataModule
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val", "test"):
        write_lines(data / f"{split}.de", ["\ufeffZwei Hunde", "eine Katze"])
        write_lines(data / f"{split}.en", ["\ufeffTwo dogs", "a cat"])
    dm = TranslationDataModule(task="files", data_dir=str(data), src_lang="de", tgt_lang="en",
                               tokenizer="word", cache_dir=str(tmp_path / "cache"))
    dm.setup("fit")
    assert dm.references("val") == ["Two dogs", "a cat"]
    assert dm.tgt_tokenizer.decode(dm.tgt_tokenizer.encode("Two dogs")) == "Two dogs"
    assert not any("\ufeff" in s for s in dm.sources("train") + dm.references("train"))


# ---- line ends: one convention for every reader ------------------------------------------------

def test_lf_crlf_and_a_lone_cr_end_lines_alike(tmp_path):
    """A file with old-Mac line ends (lone CR) was one line: its pairs could not align with a
    target file written on Unix. LF, CR LF and CR now each end a line, and are counted."""
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_bytes(b"a\rb\r\nc\n")
    tgt.write_bytes(b"A\nB\nC")
    counts = {}
    assert read_parallel(str(src), str(tgt), counts=counts)[:2] == (["a", "b", "c"], ["A", "B", "C"])
    assert counts[str(src)] == dict(lines=3, crlf=1, cr=1, bom=0, invalid_utf8=0, breaks=0)
    assert counts[str(tgt)] == dict(lines=3, crlf=0, cr=0, bom=0, invalid_utf8=0, breaks=0)


def test_a_lone_cr_that_makes_the_line_counts_differ_is_named(tmp_path):
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_bytes(b"a\rb\nc\n")
    tgt.write_bytes(b"A B\nC\n")
    with pytest.raises(DataError, match=rf"{src} has 3 lines, .* has 2 lines \(a lone CR ends a line: "
                                        rf"{src} has 1 ending in a lone CR\)"):
        read_parallel(str(src), str(tgt))


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"])
def test_other_line_breaks_are_spaces_inside_a_line(tmp_path, sep):
    """str.splitlines() ends a line at these too: in a data file they are a space inside one
    sentence, as in a hyps file (tracking.schema.as_line), so no reader counts two sentences."""
    path = tmp_path / "x.en"
    path.write_bytes(f"one{sep}sentence\nnext\n".encode())
    counts = {}
    assert read_lines(str(path), counts=counts) == ["one sentence", "next"]
    assert counts[str(path)]["breaks"] == 1 and counts[str(path)]["lines"] == 2


def test_fuzz_the_counts_agree_with_the_lines_read(tmp_path):
    """Random bytes of text, line ends, BOMs, line breaks and invalid UTF-8: the lines read and
    the counts agree with the bytes, or the file is refused as binary (a NUL byte)."""
    import random
    rng = random.Random(52)
    pieces = [b"a", b"xy z", b"\n", b"\r", b"\r\n", b"\xef\xbb\xbf", "\u2028".encode(), b"\xff", b"\xc3",
              "é".encode(), b"\x00", b" "]
    path = tmp_path / "x.txt"
    for _ in range(300):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        path.write_bytes(data)
        counts = {}
        try:
            lines = read_lines(str(path), mark_invalid=True, counts=counts)
        except DataError as e:
            assert b"\x00" in data and "NUL byte" in str(e) and "\n" not in str(e)
            continue
        c = counts[str(path)]
        ends = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
        assert c["lines"] == len(lines) == ends + (not data.endswith((b"\n", b"\r"))) - (data == b"")
        assert c["crlf"] == data.count(b"\r\n") and c["cr"] == data.count(b"\r") - c["crlf"]
        assert c["invalid_utf8"] == lines.count(None)
        text = [line for line in lines if line is not None]
        assert not any(ch in line for line in text for ch in "\r\n\u2028") and not any(
            line.startswith("\ufeff") for line in text)


@pytest.mark.slow
def test_what_reading_each_data_file_found_is_in_the_summary(tmp_path):
    import json

    from conftest import cli_in_process, files_config
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val", "test"):
        (data / f"{split}.src").write_bytes(b"\xef\xbb\xbfein Hund\r\nzwei\r\xe2\x80\xa8Katzen\r\n" * 4)
        (data / f"{split}.tgt").write_bytes(b"a dog\ntwo\ncats\n" * 4)
    out = cli_in_process("fit", "--config", files_config(tmp_path), "--data.task", "files", "--data.data_dir", data,
                         "--data.tokenizer", "word", "--trainer.max_steps", "1", "--trainer.limit_val_batches", "1",
                         "--diagnostics.heatmaps", "0", "--diagnostics.gradflow_every", "0",
                         "--run.root", tmp_path / "runs", "--run.id", "r", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "default" / "r" / "summary.json").read_text())
    assert summary["data_text"][str(data / "train.src")] == dict(lines=12, crlf=8, cr=4, bom=4, invalid_utf8=0, breaks=4)
    assert summary["data_text"][str(data / "val.tgt")] == dict(lines=12, crlf=0, cr=0, bom=0, invalid_utf8=0, breaks=0)
