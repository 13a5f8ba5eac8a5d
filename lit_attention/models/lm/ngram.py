"""Count-based n-gram language model: a proper distribution over the whole vocabulary.

Two smoothings:
- ``add``: add-delta on the highest order only, P(w|h) = (c(h,w) + d) / (c(h) + d V).
- ``interp``: interpolated absolute discounting, bottoming out at an add-delta unigram:
  P_k(w|h) = max(c(h,w) - D, 0) / c(h) + D N1+(h) / c(h) * P_{k-1}(w|h'),
  with P_{k-1} used alone when the context h was never seen.
Both sum to one over the vocabulary for every context, so perplexity is meaningful.

The stream's first token is predicted from a context of BOS tokens. ``forward`` follows the
language-model protocol: the returned "logits" are log-probabilities, and the state carries the
last ``order - 1`` tokens so a stream cut into batches is scored exactly as if it were whole.
"""

from __future__ import annotations

import torch
from torch import nn

from lit_attention.data.vocab import BOS
from lit_attention.registry import NGRAM_SMOOTHING, check, implementation


def check_smoothing(delta: float | None, discount: float | None) -> None:
    """ValueError at a smoothing constant the counts cannot use (None: not given)."""
    if delta is not None and not delta > 0:
        raise ValueError(f"model.delta must be positive (unseen tokens need mass), got {delta}")
    if discount is not None and not 0.0 <= discount < 1.0:
        raise ValueError(f"model.discount must be in [0, 1), got {discount}")


class NGramLM(nn.Module):
    def __init__(self, vocab_size: int, order: int, delta: float, discount: float, smoothing: str):
        super().__init__()
        if order < 1:
            raise ValueError(f"order must be >= 1, got {order}")
        check("smoothing", smoothing, NGRAM_SMOOTHING)
        check_smoothing(delta, discount)
        self.vocab_size, self.order, self.delta = vocab_size, order, delta
        self.discount, self.smoothing = discount, smoothing
        self._reset()

    def _reset(self) -> None:
        # tables[k] for context length k = 0 .. order-1: context tuple -> row id; counts[k] per row
        # the sparse counts of the next token.
        self.tables: list[dict[tuple, int]] = [{} for _ in range(self.order)]
        self.counts = [torch.zeros(0, self.vocab_size).to_sparse() for _ in range(self.order)]

    def _set(self, k: int, contexts: list, index: torch.Tensor, values: torch.Tensor) -> None:
        """The counts of context length k: ``values`` at [row, next token] ``index`` [2, N]."""
        self.tables[k] = {tuple(c): i for i, c in enumerate(contexts)}
        self.counts[k] = torch.sparse_coo_tensor(index, values, (len(contexts), self.vocab_size),
                                                 check_invariants=True).coalesce()

    # ---------------------------------------------------------------- fitting
    @torch.no_grad()
    def fit(self, stream) -> "NGramLM":
        """Count every n-gram of a 1-D token stream (list or tensor), replacing earlier counts."""
        stream = torch.as_tensor(stream, dtype=torch.long).flatten().cpu()
        if stream.numel() == 0:
            raise ValueError("cannot fit an n-gram model on an empty stream")
        n = self.order - 1
        tokens = torch.cat([torch.full((n,), BOS, dtype=torch.long), stream])
        grams = tokens.unfold(0, n + 1, 1)                     # [N, order]: context, next token
        self._reset()
        positions = torch.arange(len(grams))
        rows = torch.zeros(len(grams), dtype=torch.long)      # id of the empty context
        for k in range(self.order):
            if k > 0:
                # Context of length k = one more token before the context of length k - 1: number
                # pairs (token, shorter id) and renumber them (1-D unique is fast, rows are not).
                key = grams[:, n - k] * (int(rows.max()) + 1) + rows
                _, rows = torch.unique(key, return_inverse=True)
            n_contexts = int(rows.max()) + 1
            first = torch.full((n_contexts,), len(grams)).scatter_reduce(0, rows, positions, "amin")
            self._set(k, grams[first, n - k:n].tolist(), torch.stack([rows, grams[:, n]]),
                      torch.ones(len(grams)))
        return self

    @property
    def fitted(self) -> bool:
        return len(self.tables[0]) > 0

    # ---------------------------------------------------------------- scoring
    def _rows(self, k: int, contexts: list[tuple]) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense counts [P, V] for each context of length k, and a mask of the ones ever seen."""
        ids = [self.tables[k].get(c, -1) for c in contexts]
        seen = torch.tensor([i >= 0 for i in ids], dtype=torch.bool)
        # torch 2.13's sparse index_select on more than one thread fails under inference mode (as
        # Lightning evaluates: "Inplace update to inference tensor outside InferenceMode"); the
        # counts take no gradient either way.
        with torch.inference_mode(False):
            index = torch.tensor([max(i, 0) for i in ids], dtype=torch.long)
            dense = self.counts[k].index_select(0, index).to_dense()
        return dense * seen[:, None], seen

    def distributions(self, contexts: list[tuple]) -> torch.Tensor:
        """Probabilities [P, V] of the next token after each context of ``order - 1`` tokens."""
        if not self.fitted:
            raise RuntimeError("NGramLM.fit must be called before scoring")
        return implementation(NGRAM_SMOOTHING, self.smoothing)(self, contexts)

    def add_delta(self, contexts: list[tuple]) -> torch.Tensor:
        """``add``: P(w|h) = (c(h,w) + d) / (c(h) + d V) on the highest order only."""
        counts, _ = self._rows(self.order - 1, contexts)
        return (counts + self.delta) / (counts.sum(1, keepdim=True) + self.delta * self.vocab_size)

    def interpolated(self, contexts: list[tuple]) -> torch.Tensor:
        """``interp``: absolute discounting interpolated down to the add-delta unigram."""
        V, d = self.vocab_size, self.delta
        for k in range(self.order):
            counts, seen = self._rows(k, [c[len(c) - k:] for c in contexts])
            total = counts.sum(1, keepdim=True)
            if k == 0:
                probs = (counts + d) / (total + d * V)
                continue
            safe = total.clamp(min=1.0)
            distinct = (counts > 0).sum(1, keepdim=True)
            backoff = torch.where(seen[:, None], self.discount * distinct / safe, 1.0)
            probs = (counts - self.discount).clamp(min=0.0) / safe + backoff * probs
        return probs

    def forward(self, tokens: torch.Tensor, state: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities [B, T, V] of the token after each input position; state [B, order-1]."""
        B, T = tokens.shape
        n = self.order - 1
        if state is None:
            state = torch.full((B, n), BOS, dtype=torch.long, device=tokens.device)
        joined = torch.cat([state, tokens], dim=1)
        contexts = [tuple(row[t + 1:t + 1 + n]) for row in joined.tolist() for t in range(T)]
        logp = self.distributions(contexts).log().view(B, T, self.vocab_size)
        return logp.to(tokens.device), joined[:, T:]

    # Counts travel with the state_dict (checkpoints) as plain tensors.
    def get_extra_state(self) -> dict:
        state = {}
        for k in range(self.order):
            keys = sorted(self.tables[k], key=self.tables[k].get)
            state[f"contexts_{k}"] = torch.tensor(keys, dtype=torch.long).reshape(len(keys), k)
            state[f"index_{k}"] = self.counts[k].indices()
            state[f"values_{k}"] = self.counts[k].values()
        return state

    def set_extra_state(self, state: dict) -> None:
        self._reset()
        for k in range(self.order):
            self._set(k, state[f"contexts_{k}"].tolist(), state[f"index_{k}"], state[f"values_{k}"])

