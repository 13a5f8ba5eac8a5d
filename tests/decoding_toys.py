"""Hand-made Seq2SeqModels with known next-token tables, shared by the decoding tests."""

from __future__ import annotations

import itertools
import math

import torch

from lit_attention.data.vocab import EOS, PAD
from lit_attention.models.base import Seq2SeqModel

A, B_, C = 4, 5, 6          # ordinary tokens of the toy vocabulary
V = 7


class TableModel(Seq2SeqModel):
    """Next-token probabilities read from `table[(first source token, prefix)]`.

    A prefix missing from the table gets `default` ({EOS: 1.0} unless given). Tokens not listed
    have probability 0 (log-prob -inf). `calls` counts step() calls, `rows` their batch sizes.
    """

    def __init__(self, table: dict, default: dict | None = None):
        super().__init__()
        self.table = table
        self.default = default or {EOS: 1.0}
        self.calls = 0
        self.rows = []          # batch size of every step() call

    def encode(self, src):
        return {"states": torch.zeros(src.size(0), src.size(1), 1), "src_pad": src == PAD,
                "first": src[:, 0]}

    def init_state(self, memory):
        return {"prefix": memory["first"].new_zeros(memory["first"].size(0), 0)}

    def distribution(self, first: int, prefix: tuple) -> dict:
        return self.table.get((first, prefix), self.default)

    def step(self, memory, state, last_tokens):
        self.calls += 1
        self.rows.append(last_tokens.size(0))
        prefix = torch.cat([state["prefix"], last_tokens[:, None]], dim=1)   # starts with BOS
        logits = torch.full((prefix.size(0), V), -math.inf)
        for row, (first, p) in enumerate(zip(memory["first"].tolist(), prefix.tolist())):
            for token, prob in self.distribution(first, tuple(p[1:])).items():
                logits[row, token] = math.log(prob)
        return logits, {"prefix": prefix}

    def decode(self, memory, tgt_in, need_weights=False, teacher_forcing=1.0):
        raise NotImplementedError


def exhaustive_best(model: TableModel, first: int, max_len: int, alpha: float):
    """Best sequence (with its EOS) by brute force over every path, GNMT-normalised score."""
    best, best_score = None, -math.inf
    for n in range(1, max_len + 1):
        for body in itertools.product(range(V), repeat=n - 1):
            seq = body + (EOS,)
            if EOS in body:
                continue
            logp = 0.0
            for t, token in enumerate(seq):
                p = model.distribution(first, seq[:t]).get(token, 0.0)
                if p == 0.0:
                    logp = -math.inf
                    break
                logp += math.log(p)
            score = logp / ((5 + n) / 6) ** alpha
            if score > best_score:
                best, best_score = list(seq), score
    return best, best_score
