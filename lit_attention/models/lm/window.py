"""Fixed-window neural language model (Bengio et al., 2003).

The next token is predicted from the concatenated embeddings (emb_size each) of the previous
``window`` tokens, through one tanh hidden layer of width d_model and a softmax. The context before
the stream's first token is BOS; the state carries the last ``window`` tokens so a stream cut into
batches is scored as a whole.
"""

from __future__ import annotations

import torch
from torch import nn

from lit_attention.data.vocab import BOS


class WindowLM(nn.Module):
    def __init__(self, vocab_size: int, window: int, emb_size: int, d_model: int, dropout: float):
        super().__init__()
        self.vocab_size, self.window = vocab_size, window
        self.embed = nn.Embedding(vocab_size, emb_size)
        self.hidden = nn.Linear(window * emb_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, state: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [B, T, V] for the token after each position; state = last ``window`` tokens."""
        B, T = tokens.shape
        if state is None:
            state = torch.full((B, self.window), BOS, dtype=torch.long, device=tokens.device)
        joined = torch.cat([state, tokens], dim=1)                    # [B, window + T]
        # Window t covers joined[t+1 .. t+window], i.e. the inputs up to and including position t.
        contexts = joined.unfold(1, self.window, 1)[:, 1:]            # [B, T, window]
        x = self.drop(self.embed(contexts).flatten(2))                # [B, T, window * emb_size]
        return self.out(self.drop(torch.tanh(self.hidden(x)))), joined[:, T:]
