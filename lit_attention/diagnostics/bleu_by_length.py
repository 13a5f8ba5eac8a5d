"""Corpus BLEU and chrF (sacreBLEU) per source-length bucket."""

from __future__ import annotations

from typing import Sequence

import sacrebleu


def bucket_bounds(buckets: Sequence[int]) -> list[tuple[int, int | None]]:
    """(10, 20, 30) -> [(1, 10), (11, 20), (21, 30), (31, None)]; None means no upper bound."""
    if list(buckets) != sorted(set(buckets)) or (buckets and buckets[0] < 1):
        raise ValueError(f"bucket upper bounds must be positive and increasing, got {buckets}")
    bounds, lo = [], 1
    for hi in buckets:
        bounds.append((lo, hi))
        lo = hi + 1
    bounds.append((lo, None))
    return bounds


def bleu_by_length(sources_tokens_len: Sequence[int], hyps: Sequence[str], refs: Sequence[str],
                   buckets: Sequence[int] = (10, 20, 30)) -> list[dict]:
    """One row per bucket: {bucket, lo, hi, n, bleu, chrf}.

    Sentences are bucketed by source length (in whatever unit the caller counts: tokens,
    subwords...); a length below the first bucket's lower bound (0) goes to the first bucket, so
    the counts always add up to the set size. BLEU and chrF are sacreBLEU corpus scores on the
    bucket alone; an empty bucket has n=0 and bleu=chrf=None.
    """
    if not len(sources_tokens_len) == len(hyps) == len(refs):
        raise ValueError("sources_tokens_len, hyps and refs must have the same length")
    rows = []
    bounds = bucket_bounds(buckets)
    for i, (lo, hi) in enumerate(bounds):
        floor = -1 if i == 0 else lo            # the first bucket also takes empty sources
        members = [j for j, n in enumerate(sources_tokens_len)
                   if n >= floor and (hi is None or n <= hi)]
        h = [hyps[j] for j in members]
        r = [refs[j] for j in members]
        rows.append({
            "bucket": f"{lo}-{hi}" if hi is not None else f"{lo}+",
            "lo": lo, "hi": hi, "n": len(members),
            "bleu": sacrebleu.corpus_bleu(h, [r]).score if members else None,
            "chrf": sacrebleu.corpus_chrf(h, [r]).score if members else None,
        })
    return rows
