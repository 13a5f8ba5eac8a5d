"""Corpus BLEU and chrF (sacreBLEU) per source-length bucket, lengths in whitespace words."""

from __future__ import annotations

from typing import Sequence

import sacrebleu

UNIT = "words"


def source_words(sources: Sequence[str]) -> list[int]:
    """Whitespace words of each raw source sentence: the length unit of every bucket."""
    return [len(s.split()) for s in sources]


def bucket_bounds(buckets: Sequence[int]) -> list[tuple[int, int | None]]:
    """(10, 20, 30) -> [(1, 10), (11, 20), (21, 30), (31, None)]; None means no upper bound."""
    if list(buckets) != sorted(set(buckets)) or (buckets and buckets[0] < 1):
        raise ValueError(f"bucket upper bounds must be positive and increasing, got {buckets}")
    return list(zip([1, *(hi + 1 for hi in buckets)], [*buckets, None]))


def merge_small(bounds: list[tuple[int, int | None]], counts: Sequence[int],
                min_sentences: int) -> list[tuple[int, int | None]]:
    """Merge neighbouring buckets until each holds at least ``min_sentences`` sentences.

    From the shortest bucket on, buckets join the next one until the group reaches the minimum;
    a group still below it at the end (the longest sources) joins the group before it. So
    counts (27, 400, 300, 27) with minimum 50 become (427, 327): 1-10 joins 11-20, 31+ joins
    21-30. When the whole set is smaller than the minimum there is one bucket. 0 merges nothing.
    """
    merged, start, total = [], None, 0      # start, total: the group still open
    for (lo, hi), n in zip(bounds, counts):
        start, total = lo if start is None else start, total + n
        if total >= min_sentences:
            merged.append((start, hi))
            start, total = None, 0
    if start is not None:   # the longest sources, still too few: joined to the group before
        merged[-1:] = [(merged[-1][0] if merged else start, bounds[-1][1])]
    return merged


def _members(lengths: Sequence[int], bounds: list[tuple[int, int | None]]) -> list[list[int]]:
    # A length below the first bucket's lower bound (an empty source) goes to the first bucket,
    # so the counts always add up to the set size.
    return [[j for j, n in enumerate(lengths) if (i == 0 or n >= lo) and (hi is None or n <= hi)]
            for i, (lo, hi) in enumerate(bounds)]


def bleu_by_length(source_lengths: Sequence[int], hyps: Sequence[str], refs: Sequence[str],
                   buckets: Sequence[int] = (10, 20, 30), min_sentences: int = 50) -> list[dict]:
    """One row per bucket: {bucket, lo, hi, n, unit, bleu, chrf}.

    ``source_lengths`` are the sentences' source lengths in UNIT (``source_words`` of the
    raw sources). ``buckets`` are the upper bounds of the initial buckets; buckets with fewer
    than ``min_sentences`` sentences are merged into a neighbour (``merge_small``), so no
    score rests on a handful of sentences. BLEU and chrF are sacreBLEU corpus scores on the
    bucket alone; ``n`` is its number of sentences. With ``min_sentences=0`` buckets are kept
    as given and an empty one has n=0 and bleu=chrf=None.
    """
    if not len(source_lengths) == len(hyps) == len(refs):
        raise ValueError("source_lengths, hyps and refs must have the same length")
    bounds = bucket_bounds(buckets)
    counts = [len(m) for m in _members(source_lengths, bounds)]
    bounds = merge_small(bounds, counts, min_sentences)
    rows = []
    for (lo, hi), members in zip(bounds, _members(source_lengths, bounds)):
        h = [hyps[j] for j in members]
        r = [refs[j] for j in members]
        rows.append({
            "bucket": f"{lo}-{hi}" if hi is not None else f"{lo}+",
            "lo": lo, "hi": hi, "n": len(members), "unit": UNIT,
            "bleu": sacrebleu.corpus_bleu(h, [r]).score if members else None,
            "chrf": sacrebleu.corpus_chrf(h, [r]).score if members else None,
        })
    return rows
