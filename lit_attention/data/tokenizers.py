"""Word, character and SentencePiece tokenizers sharing one protocol, cached on disk by content.

Every tokenizer maps PAD=0, UNK=1, BOS=2, EOS=3 (``vocab.py``). ``build_tokenizers`` trains on the
training split once and reuses the saved model whenever the training text and settings are the
same (``tok.cache_hit`` tells which happened). Cache files are written atomically under a file lock
because several DDP ranks build their tokenizers at the same moment.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import itertools
import json
import logging
import os
import re
from collections import Counter
from typing import Iterable, Protocol, Sequence, runtime_checkable

import sentencepiece as spm

from lit_attention.config_check import Inert
from lit_attention.data.text import DataError
from lit_attention.data.vocab import BOS, EOS, PAD, SPECIALS, UNK
from lit_attention.files import atomic_write, shown
from lit_attention.registry import TOKENIZERS, check, implementation

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = os.path.join(".cache", "lit_attention", "tokenizers")
CACHE_FORMAT = 2     # bump when the saved files or the training recipe change
CACHE_HEADER = "lit-attention-tokenizer"   # a cache file's first line: this, the key it was built from, sha256


@runtime_checkable
class Tokenizer(Protocol):
    """What the data modules, decoding and attention maps use of a tokenizer (docs/ARCHITECTURE.md)."""

    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def pieces(self, ids: Sequence[int]) -> list[str]: ...


def _content_ids(ids: Sequence[int]) -> list[int]:
    """Ids up to the first EOS, without PAD and BOS."""
    content = itertools.takewhile(lambda i: i != EOS, map(int, ids))
    return [i for i in content if i not in (PAD, BOS)]


class _VocabTokenizer:
    """A token list plus a rule to split text into tokens and join tokens back (``split`` and
    ``join``, each subclass's)."""

    kind = ""
    file_suffix = "json"
    cache_hit = False
    # What a trained vocabulary depends on besides its text (the cache key's settings), each
    # with the keyword of ``train`` that takes it.
    settings = {"vocab_size": "max_size"}

    def __init__(self, itos: Sequence[str]):
        if tuple(itos[:len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"vocabulary must start with the specials {SPECIALS}")
        self.itos = list(itos)
        self.stoi = {token: i for i, token in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos) or not all(isinstance(t, str) for t in self.itos):
            twice = next((t for t, n in Counter(map(repr, self.itos)).items() if n > 1), None)
            raise ValueError(f"vocabulary lists {shown(twice)} twice" if twice is not None
                             else "vocabulary holds a token that is no string")

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    @classmethod
    def train(cls, lines: Iterable[str], max_size: int | None = None):
        """Vocabulary by descending frequency, ties alphabetical, specials first."""
        counts = Counter(token for line in lines for token in cls.split(line))
        for special in SPECIALS:
            counts.pop(special, None)
        tokens = sorted(counts, key=lambda token: (-counts[token], token))
        if max_size is not None:
            tokens = tokens[:max(0, max_size - len(SPECIALS))]
        return cls(list(SPECIALS) + tokens)

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(token, UNK) for token in self.split(text)]

    def decode(self, ids: Sequence[int]) -> str:
        return self.join([self.itos[i] for i in _content_ids(ids)])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.itos[int(i)] for i in ids]

    def to_bytes(self) -> bytes:
        return json.dumps({"kind": self.kind, "itos": self.itos}, ensure_ascii=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes):
        saved = json.loads(data)
        if saved.get("kind") != cls.kind:
            raise ValueError(f"saved vocabulary is {saved.get('kind')!r}, expected {cls.kind!r}")
        return cls(saved["itos"])


class WordTokenizer(_VocabTokenizer):
    """Whitespace-separated words; decoding joins with single spaces."""

    kind = "word"
    split = staticmethod(str.split)
    join = staticmethod(" ".join)


class CharTokenizer(_VocabTokenizer):
    """One token per Unicode character, spaces included."""

    kind = "char"
    split = staticmethod(list)
    join = staticmethod("".join)


class SentencePieceTokenizer:
    """A SentencePiece model (unigram or BPE) held in memory as its serialized proto."""

    kind = "sentencepiece"
    file_suffix = "model"
    cache_hit = False
    settings = {"vocab_size": "vocab_size", "model_type": "model_type"}   # as _VocabTokenizer's

    def __init__(self, model_proto: bytes):
        self.model_proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        specials = tuple(self.sp.id_to_piece(i) for i in range(len(SPECIALS)))
        if specials != SPECIALS:
            raise ValueError(f"SentencePiece model has specials {specials}, expected {SPECIALS}")

    @classmethod
    def train(cls, lines: Iterable[str], vocab_size: int = 8000, model_type: str = "unigram"):
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
                model_type=model_type, character_coverage=1.0, hard_vocab_limit=False,
                pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
                pad_piece=SPECIALS[PAD], unk_piece=SPECIALS[UNK], bos_piece=SPECIALS[BOS],
                eos_piece=SPECIALS[EOS],
                num_threads=1,     # reproducible models; the corpora here train in seconds
                minloglevel=2)
        except RuntimeError as exc:   # too small a vocabulary for the text's characters
            m = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", str(exc))
            if m is None:
                raise
            raise DataError(f"data.vocab_size {vocab_size} is too small for SentencePiece: the training "
                            f"text needs {m.group(2)} pieces for its characters and special tokens; "
                            f"give at least {m.group(2)}") from None
        return cls(model.getvalue())

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text, out_type=int)

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode(_content_ids(ids))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def to_bytes(self) -> bytes:
        return self.model_proto

    @classmethod
    def from_bytes(cls, data: bytes):
        return cls(data)


def cache_key(kind: str, settings: dict, *texts: Sequence[str]) -> str:
    """sha256 over the tokenizer kind, its settings and every training line."""
    h = hashlib.sha256(json.dumps({"format": CACHE_FORMAT, "kind": kind, **settings},
                                  sort_keys=True).encode())
    for text in texts:
        h.update(b"\x00text\x00")
        for line in text:
            h.update(line.encode("utf-8", "surrogatepass") + b"\n")
    return h.hexdigest()


def _load_or_train(kind, texts, vocab_size, model_type, cache_dir) -> Tokenizer:
    cls = implementation(TOKENIZERS, kind)
    given = {"vocab_size": vocab_size, "model_type": model_type}
    settings = {name: given[name] for name in cls.settings}
    key = cache_key(kind, settings, *texts)
    path = os.path.join(cache_dir, f"{kind}-{key[:20]}.{cls.file_suffix}")
    tok = _cached(cls, path, key, say=False)
    if tok is None:
        os.makedirs(cache_dir, exist_ok=True)
        with open(os.path.join(cache_dir, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)   # held until the file is closed
            tok = _cached(cls, path, key)    # another rank may have trained it while we waited
            if tok is None:
                tok = cls.train([line for text in texts for line in text],
                                **{cls.settings[name]: value for name, value in settings.items()})
                data = tok.to_bytes()
                atomic_write(path, f"{CACHE_HEADER} {key} {hashlib.sha256(data).hexdigest()}\n".encode() + data)
                log.info("trained %s tokenizer (vocab %d), saved to %s", kind, tok.vocab_size,
                         path)
                tok.cache_hit, tok.path = False, path
                return tok
    log.info("loaded cached %s tokenizer (vocab %d) from %s", kind, tok.vocab_size, path)
    tok.cache_hit, tok.path = True, path
    return tok


def _cached(cls, path: str, key: str, say: bool = True):
    """The tokenizer cached at ``path``, or None: none is there, or the file is not what its first
    line says it was built from (``key``) and holds (its sha256), or does not load (a vocabulary
    that is not JSON or lists a token twice): then it is trained again (``say``: with a warning)."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            header, _, data = f.read().partition(b"\n")
        if header.split() != [CACHE_HEADER.encode(), key.encode(), hashlib.sha256(data).hexdigest().encode()]:
            raise ValueError("its digest does not match what it holds or what it was built from")
        return cls.from_bytes(data)
    except Exception as exc:   # any cache that does not load is built again, never trusted
        if say:
            log.warning("%s: cached tokenizer not used (%s): training it again", path, shown(exc))
        return None


def check_vocab_size(vocab_size: int) -> None:
    """ValueError at a data.vocab_size that leaves no room beyond the special tokens (every word
    would be <unk>)."""
    if vocab_size <= len(SPECIALS):
        raise ValueError(f"data.vocab_size must be more than the {len(SPECIALS)} special tokens "
                         f"({', '.join(SPECIALS)}), got {vocab_size}")


def inert_tokenizer_settings(kind: str) -> dict[str, Inert]:
    """The data.<key> tokenizer options that tokenizer ``kind`` does not read (registry.TOKENIZERS)."""
    read = set(TOKENIZERS[kind].options)
    return {f"data.{key}": Inert(f"tokenizer {kind!r} does not read it (only "
                                 f"{', '.join(k for k, row in TOKENIZERS.items() if key in row.options)} does)")
            for row in TOKENIZERS.values() for key in row.options if key not in read}


def build_tokenizers(kind: str, src_train: Sequence[str], tgt_train: Sequence[str],
                     vocab_size: int = 8000, model_type: str = "unigram", joint: bool = True,
                     cache_dir: str | None = None) -> tuple[Tokenizer, Tokenizer]:
    """``(src_tok, tgt_tok)`` trained on the training split, or loaded from ``cache_dir``.

    ``joint=True`` trains one model on source and target text and returns it twice.
    ``vocab_size`` caps word and char vocabularies (specials included) and is SentencePiece's
    (soft) target size. ``kind`` and ``model_type`` are registry choices (the data modules check
    them: registry.check_config).
    """
    cache_dir = cache_dir or DEFAULT_CACHE_DIR
    if joint:
        tok = _load_or_train(kind, (src_train, tgt_train), vocab_size, model_type, cache_dir)
        return tok, tok
    return (_load_or_train(kind, (src_train,), vocab_size, model_type, cache_dir),
            _load_or_train(kind, (tgt_train,), vocab_size, model_type, cache_dir))


def tokenizer_digest(tokenizers: dict[str, Tokenizer]) -> dict | None:
    """What a run records of the tokenizers it trained with (summary.json's ``tokenizer_digest``):
    for each side ("src", "tgt") its cache file, as an absolute path, and the sha256 of its bytes.
    None if one was never written to a file (built in memory)."""
    record = {}
    for side, tok in tokenizers.items():
        path = getattr(tok, "path", None)
        if path is None:
            return None
        with open(path, "rb") as f:
            record[side] = {"path": os.path.abspath(path), "sha256": hashlib.sha256(f.read()).hexdigest()}
    return record


def recorded_tokenizers(kind: str, record: dict) -> dict[str, Tokenizer]:
    """The tokenizers a run recorded (``tokenizer_digest``), read from their files: DataError naming
    the file when it is missing or its bytes differ from the recorded digest."""
    cls = implementation(TOKENIZERS, check("tokenizer", kind, TOKENIZERS))
    loaded = {}
    for side, entry in record.items():
        path = entry["path"]
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise DataError(f"the run's {side} tokenizer {path} cannot be read ({exc.strerror})") from None
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise DataError(f"the run's {side} tokenizer {path} differs from the one it trained with (sha256 "
                            f"{entry['sha256'][:12]}...): it was rebuilt or changed since")
        loaded[side] = cls.from_bytes(data.partition(b"\n")[2])   # after the cache's header line
    return loaded
