"""A language model's test text as contiguous blocks of tokens: what the seed test resamples for
a perplexity (or loss) the way it resamples sentences for BLEU.

The tokens of a test text are not independent draws: a scene, a speaker or a topic makes
neighbouring tokens hard or easy together, so a bootstrap over single tokens (or over lines)
sees a fraction of how much another text of the same kind would move a perplexity, and a test
built on it rejects far too often (block_calibration.py shows by how much). The text is cut into
a fixed number of contiguous blocks of (nearly) equal length, and a bootstrap draws whole
blocks with replacement: the non-overlapping block bootstrap (Carlstein 1986, *Ann. Stat.*
14:1171). With a fixed number of blocks each block grows with the text, so every correlation
shorter than a block stays inside one; 30 blocks follows the batch-means advice of 10-30 batches
(Schmeiser 1982, *Oper. Res.* 30:556), and the seed test counts the blocks' N - 1 degrees of
freedom.

    stats [R, K, 2]  per run and block: (summed NLL, tokens)
    loss = Σ NLL / Σ tokens over the drawn blocks, perplexity = exp(loss)

The per-token NLL is what training wrote to the run store (schema.token_nll_file), in stream
order; the table's value (summary `<split>_ppl` / `<split>_loss`) is its mean (exp of it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lit_attention import metric_facts
from lit_attention.tracking.schema import token_nll_file

BLOCKS = 30
MIN_BLOCK_TOKENS = 20     # a shorter text gets fewer blocks, each at least this long
KINDS = metric_facts.TOKEN_LEVEL
AGREE = 1e-4              # relative: a token file whose mean is not the summary's value is stale


def parse(column: str) -> tuple[str, str] | None:
    """(split, kind) of a summary column `<split>_ppl` / `<split>_loss`, else None."""
    split, kind = metric_facts.parse(column)
    return (split, kind) if split and kind in KINDS else None


def load(run_dir: str | Path, split: str) -> np.ndarray | None:
    """[T] float32 per-token NLL of the run's `split`, or None when it was not recorded."""
    path = Path(run_dir) / token_nll_file(split)
    if not path.is_file():
        return None
    return np.load(path, allow_pickle=False)


def count(n_tokens: int, blocks: int = BLOCKS) -> int:
    """The number of blocks a text of `n_tokens` is cut into: `blocks`, fewer for a short text."""
    return max(2, min(blocks, n_tokens // MIN_BLOCK_TOKENS))


def cut(nll: np.ndarray, n_blocks: int) -> np.ndarray:
    """[T] per-token NLL -> [n_blocks, 2] (summed NLL, tokens) of contiguous blocks whose
    lengths differ by at most one token."""
    nll = np.asarray(nll, dtype=np.float64)
    size, longer = divmod(len(nll), n_blocks)       # the first `longer` blocks hold a token more
    lengths = np.full(n_blocks, size) + (np.arange(n_blocks) < longer)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    sums, filled = np.zeros(n_blocks), lengths > 0       # a text shorter than n_blocks leaves some empty
    if filled.any():
        sums[filled] = np.add.reduceat(nll, starts[filled])
    return np.column_stack([sums, lengths.astype(np.float64)])


def score(kind: str, sums: np.ndarray) -> np.ndarray:
    """sums [..., 2] (summed NLL, tokens) -> the loss or perplexity [...]."""
    loss = sums[..., 0] / sums[..., 1]
    return np.exp(loss) if kind == "ppl" else loss


def unbiased(variance, n_blocks: int):
    """A bootstrap variance over `n_blocks` blocks scaled by K / (K - 1): the bootstrap divides
    the blocks' spread by K, an unbiased estimate by K - 1 (3 % more with 30 blocks; with the
    hundreds of sentences of a BLEU test set it does not matter)."""
    return variance * n_blocks / (n_blocks - 1)


def resampled(kind: str, weights: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """Every run's score on every block resample: weights [B, K] (how often block k is drawn,
    resampling.draw over K blocks) @ stats [R, K, 2] -> [B, R]."""
    sums = np.matmul(weights.astype(np.float64), stats).transpose(1, 0, 2)   # [R, B, 2] -> [B, R, 2]
    return score(kind, sums)
