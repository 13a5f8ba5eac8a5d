"""Synthetic tasks: deterministic per seed, exact for the symbol tasks, toy-mt's grammar."""

import pytest

from lit_attention.data import synthetic
from lit_attention.data.synthetic import Clause, NounPhrase, english, generate, source


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
    verbs = {synthetic.LEXICON[v] for v in {**synthetic.TRANSITIVE, **synthetic.INTRANSITIVE}}
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
