"""Tokenizers: the Tokenizer protocol, round trips, the shared cache (concurrent builds too)."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_lines
from lit_attention.data.lm import LMDataModule
from lit_attention.data.synthetic import generate
from lit_attention.data.tokenizers import (CharTokenizer, SentencePieceTokenizer, Tokenizer,
                                           WordTokenizer, build_tokenizers)
from lit_attention.data.translation import TranslationDataModule
from lit_attention.data.vocab import BOS, EOS, PAD, UNK


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
    corpus = write_lines(tmp_path / "corpus.txt", generate("toy-mt", 2000, seed=5)[1])
    cache = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT, corpus, str(cache)],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(hit for hit, _ in outputs) == ["False", "True"]    # one trained, one waited
    assert outputs[0][1] == outputs[1][1]
    assert [p for p in os.listdir(cache) if p != ".lock"] == \
        [os.path.basename(outputs[0][1])]


@pytest.mark.parametrize("kind", ["word", "char", "sentencepiece"])
def test_every_tokenizer_follows_the_protocol(tmp_path, kind):
    lines = generate("toy-mt", 300, seed=1)[1]
    src, tgt = build_tokenizers(kind, lines, lines, vocab_size=60, cache_dir=str(tmp_path))
    assert isinstance(src, Tokenizer) and isinstance(tgt, Tokenizer)
    ids = src.encode(lines[0])
    assert src.decode(ids + [EOS, 5]) == src.decode(ids) and len(src.pieces(ids)) == len(ids)


def test_bad_tokenizer_choice():
    with pytest.raises(ValueError, match="valid choices: word, char, sentencepiece"):
        TranslationDataModule(tokenizer="bytes")
    with pytest.raises(ValueError, match="valid choices: unigram, bpe"):
        LMDataModule(task="copy", spm_model="char")


@pytest.mark.parametrize("damage", ["not JSON", "a token twice", "edited", "cut short", "another key"])
def test_a_cached_vocabulary_that_is_not_what_it_was_built_as_is_trained_again(tmp_path, caplog, damage):
    """A cached vocabulary listing a token twice was used (two ids for one word); one that was no
    JSON was a traceback. Each cache file carries what it was built from and the digest of what it
    holds: a file that does not match, or does not load, is trained again with a warning."""
    lines = ["a b c", "b c d"]
    first, _ = build_tokenizers("word", lines, lines, cache_dir=str(tmp_path))
    path = Path(first.path)
    header, _, body = path.read_bytes().partition(b"\n")
    if damage == "not JSON":
        path.write_bytes(header + b"\n{not json")
    elif damage == "a token twice":   # with its digest made to match: the content check alone refuses it
        body = body.replace(b'"d"', b'"b"')
        path.write_bytes(b" ".join(header.split()[:2] + [hashlib.sha256(body).hexdigest().encode()]) + b"\n" + body)
    elif damage == "edited":
        path.write_bytes(header + b"\n" + body.replace(b'"d"', b'"e"'))
    elif damage == "cut short":
        path.write_bytes(path.read_bytes()[:40])
    else:
        path.write_bytes(b" ".join([header.split()[0], b"0" * 64, header.split()[2]]) + b"\n" + body)
    with caplog.at_level("WARNING", logger="lit_attention.data.tokenizers"):
        again, _ = build_tokenizers("word", lines, lines, cache_dir=str(tmp_path))
    assert not again.cache_hit and again.itos == first.itos
    assert [r.getMessage() for r in caplog.records if "cached tokenizer not used" in r.getMessage()], caplog.text
    third, _ = build_tokenizers("word", lines, lines, cache_dir=str(tmp_path))   # the rebuilt one is trusted
    assert third.cache_hit and third.itos == first.itos


def test_a_vocabulary_with_a_token_twice_is_refused():
    from lit_attention.data.tokenizers import WordTokenizer
    from lit_attention.data.vocab import SPECIALS
    with pytest.raises(ValueError, match="vocabulary lists 'b' twice"):
        WordTokenizer([*SPECIALS, "a", "b", "b"])
