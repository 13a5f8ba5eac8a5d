"""Synthetic translation tasks generated from a seed: copy, reverse, sort and toy-mt.

Every task returns whitespace-joined ``(src_lines, tgt_lines)`` whose correct output is known
exactly. ``toy-mt`` is a small synchronous grammar: an English-like target and an invented
source language that differs from it in word order only (one source word per target word):
adjectives follow their noun, verbs come last in every clause (SOV vs SVO), and subject
relative clauses nest up to a depth limit.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass

from lit_attention.registry import SYNTHETIC_TASKS, TASKS, check, implementation

# Target word -> source word, by word class.
DETERMINERS = {"the": "lo", "a": "na"}
NOUNS = {"dog": "bako", "cat": "miru", "bird": "tesi", "man": "kolu", "woman": "seni", "child": "pado",
         "horse": "vemu", "fish": "giro", "farmer": "fuma", "teacher": "lanu"}
ADJECTIVES = {"big": "zor", "small": "pim", "red": "lek", "tall": "dal", "happy": "sif", "quick": "rav",
              "young": "tum", "green": "wel"}
TRANSITIVE = {"sees": "mika", "likes": "tola", "chases": "runa", "finds": "belo", "follows": "hosa",
              "helps": "nepi"}
INTRANSITIVE = {"sleeps": "dumi", "runs": "kapo", "sings": "lisa", "waits": "gera"}
LEXICON = {**DETERMINERS, "that": "ke", **NOUNS, **ADJECTIVES, **TRANSITIVE, **INTRANSITIVE}

MAX_DEPTH = 3         # relative clauses nested inside one noun phrase
P_RELATIVE = 0.55     # chance a noun phrase gets a relative clause (below MAX_DEPTH)
P_TRANSITIVE = 0.7


@dataclass
class NounPhrase:
    det: str
    noun: str
    adjectives: tuple[str, ...] = ()
    relative: Clause | None = None      # "that <verb> [object]": the subject is the gap


@dataclass
class Clause:
    subject: NounPhrase | None          # None inside a relative clause
    verb: str
    object: NounPhrase | None = None    # None for intransitive verbs


def english(node: NounPhrase | Clause) -> list[str]:
    """Target words: determiner adjectives noun, subject verb object."""
    if isinstance(node, NounPhrase):
        words = [node.det, *node.adjectives, node.noun]
        return words + (["that"] + english(node.relative) if node.relative else [])
    words = english(node.subject) if node.subject else []
    return words + [node.verb] + (english(node.object) if node.object else [])


def source(node: NounPhrase | Clause) -> list[str]:
    """Source words: determiner noun adjectives, subject object verb."""
    if isinstance(node, NounPhrase):
        words = [LEXICON[node.det], LEXICON[node.noun], *(LEXICON[a] for a in node.adjectives)]
        return words + (["ke"] + source(node.relative) if node.relative else [])
    words = source(node.subject) if node.subject else []
    return words + (source(node.object) if node.object else []) + [LEXICON[node.verb]]


def _noun_phrase(rng: random.Random, depth: int) -> NounPhrase:
    n_adjectives = rng.choices((0, 1, 2), weights=(0.5, 0.3, 0.2))[0]
    nests = depth < MAX_DEPTH and rng.random() < P_RELATIVE
    relative = _clause(rng, depth + 1, subject=None) if nests else None
    return NounPhrase(rng.choice(list(DETERMINERS)), rng.choice(list(NOUNS)),
                      tuple(rng.sample(list(ADJECTIVES), n_adjectives)), relative)


def _clause(rng: random.Random, depth: int, subject: NounPhrase | None) -> Clause:
    if rng.random() < P_TRANSITIVE:
        return Clause(subject, rng.choice(list(TRANSITIVE)), _noun_phrase(rng, depth))
    return Clause(subject, rng.choice(list(INTRANSITIVE)))


def symbols(n_symbols: int) -> list[str]:
    """Symbol words a0..a9, b0..b9, ...: string order equals symbol order."""
    if not 1 <= n_symbols <= 260:
        raise ValueError(f"n_symbols must be in 1..260, got {n_symbols}")
    return [f"{chr(ord('a') + i // 10)}{i % 10}" for i in range(n_symbols)]


def _symbol_pairs(rule, n, rng, min_len, max_len, n_symbols):
    """Random symbol sequences as sources, ``rule(words)`` of each as its target."""
    vocab = symbols(n_symbols)
    sentences = [[rng.choice(vocab) for _ in range(rng.randint(min_len, max_len))]
                 for _ in range(n)]
    return [" ".join(words) for words in sentences], [" ".join(rule(words)) for words in sentences]


copy_pairs = functools.partial(_symbol_pairs, lambda words: words)
reverse_pairs = functools.partial(_symbol_pairs, lambda words: words[::-1])
sort_pairs = functools.partial(_symbol_pairs, sorted)


def toy_mt_pairs(n, rng, min_len, max_len, n_symbols=None):
    """toy-mt sentences between min_len and max_len words (the grammar's own words: no symbols)."""
    if not (min_len <= 30 and max_len >= 3):
        raise ValueError(f"toy-mt sentences have 3 to about 40 words: need min_len <= 30 and "
                         f"max_len >= 3, got min_len={min_len}, max_len={max_len}")
    src, tgt = [], []
    while len(src) < n:
        sentence = _clause(rng, 0, subject=_noun_phrase(rng, 0))
        words = english(sentence)
        if min_len <= len(words) <= max_len:    # rejection keeps the length window exact
            src.append(" ".join(source(sentence)))
            tgt.append(" ".join(words))
    return src, tgt


def generate(task: str, n: int, seed: int, min_len: int = 3, max_len: int = 40,
             n_symbols: int = 20) -> tuple[list[str], list[str]]:
    """``n`` (source, target) sentence pairs of ``task``; the same seed gives the same data."""
    check("synthetic task", task, SYNTHETIC_TASKS)
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    return implementation(TASKS, task)(n, random.Random(seed), min_len, max_len, n_symbols)


def split_seed(seed: int, split: str) -> int:
    """A seed for one split derived from the data seed, so splits never share examples' rng."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{split}".encode()).digest()[:8], "little")
