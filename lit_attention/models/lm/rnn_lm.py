"""Recurrent language model: Elman (tanh/relu), GRU or LSTM, optionally with tied embeddings.

Meant for truncated BPTT over a contiguous stream: the returned state is fed back with the next
batch (the caller detaches it). States keep the batch on dim 0, as everywhere in the package:
``[B, layers, H]``, or a pair of those for the LSTM.
"""

from __future__ import annotations

import torch
from torch import nn

from lit_attention.models.rnn import from_rnn, make_rnn, to_rnn


class RNNLM(nn.Module):
    def __init__(self, vocab_size: int, cell: str, emb_size: int, d_model: int, layers: int,
                 dropout: float, tie_embeddings: bool):
        super().__init__()
        self.vocab_size, self.cell = vocab_size, cell
        self.embed = nn.Embedding(vocab_size, emb_size)
        self.rnn = make_rnn(cell, emb_size, d_model, layers, dropout)
        self.drop = nn.Dropout(dropout)
        # Tying needs the output layer's input to have the embedding size.
        self.project = (nn.Linear(d_model, emb_size)
                        if tie_embeddings and d_model != emb_size else nn.Identity())
        self.out = nn.Linear(emb_size if tie_embeddings else d_model, vocab_size)
        if tie_embeddings:
            self.out.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor, state=None):
        """Logits [B, T, V] and the final state (batch first)."""
        x = self.drop(self.embed(tokens))
        h, state = self.rnn(x, to_rnn(state))
        return self.out(self.project(self.drop(h))), from_rnn(state)

