"""Recurrent encoder-decoder: Elman/GRU/LSTM cells, no attention or Bahdanau/Luong attention.

Shapes: B batch, S source length, T target length, H hidden size (d_model), L layers, E embedding
size (emb_size).
The encoder reads packed sequences, so padding never reaches its final states. A bidirectional
encoder gives 2H states; a bridge (Linear + tanh per decoder layer) maps its final states to the
decoder's size. Decoder wirings:

- ``none``: the bridged final state initialises the decoder ("init"), and with
  context="every-step" the top layer's bridged final state is also fed at every step (Cho 2014).
- ``bahdanau``: query s_{t-1}; the context c_t joins the embedding at the RNN input;
  readout tanh(W [s_t; c_t; e_t]).
- ``luong``: query s_t; readout (attentional hidden) tanh(W [c_t; s_t]).

Input feeding (the previous readout joins the next input) is a separate switch, valid with either
wiring, so that a table can tell the wiring's effect from input feeding's. What attention attends
over is ``enc_output`` (registry.ENC_OUTPUT): the encoder states as they are (2H when
bidirectional), the sum of the two directions, or a projection to H, shared by every scorer.

The decoder loops over target steps only where a step needs the previous one (attention on
s_{t-1}, input feeding, scheduled sampling); otherwise it runs the RNN over the whole target.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from lit_attention.data.vocab import PAD
from lit_attention.models.base import DecoderOutput, Seq2SeqModel, tree_map
from lit_attention.models.scoring import attend, build_scorer
from lit_attention.registry import ATTENTION, CELLS, CONTEXT, ENC_OUTPUT, check, check_rnn, implementation


class Wiring(NamedTuple):
    """Where attention enters the decoder (the implementation of a registry.ATTENTION row, whose
    ``attends`` says whether a scorer attends over the encoder output)."""
    previous_query: bool    # query s_{t-1}, context joins the RNN input (else query s_t, readout)
    input_size: Callable[[int], int]                # K -> what the context adds to the RNN input
    readout: Callable[[int, int, int, int], nn.Module]  # (H, K, E, O) -> the readout layer


# The wirings of registry.ATTENTION (see the module docstring). Without attention, with tied
# embeddings O = E: the readout is a bias-free projection into embedding space when E != H.
NO_ATTENTION = Wiring(False, lambda K: 0,
                      lambda H, K, E, O: nn.Linear(H, O, bias=False) if O != H else nn.Identity())
BAHDANAU = Wiring(True, lambda K: K, lambda H, K, E, O: nn.Linear(H + K + E, O))
LUONG = Wiring(False, lambda K: 0, lambda H, K, E, O: nn.Linear(K + H, O, bias=False))


class EncOutput(NamedTuple):
    """What attention attends over (the implementation of a registry.ENC_OUTPUT row)."""
    size: Callable[[int, int], int]     # (encoder output size, H) -> K
    projects: bool                      # the model owns enc_proj, a bias-free Linear to H
    attended: Callable[..., torch.Tensor]   # (model, states [B, S, dirs*H]) -> [B, S, K]


def _sum_directions(model: RNNSeq2Seq, states: torch.Tensor) -> torch.Tensor:
    H = model.encoder.rnn.hidden_size
    return states[..., :H] + states[..., H:] if model.encoder.directions == 2 else states


# The encoder outputs of registry.ENC_OUTPUT.
CONCAT_DIRECTIONS = EncOutput(lambda enc, H: enc, False, lambda model, states: states)
SUM_DIRECTIONS = EncOutput(lambda enc, H: H, False, _sum_directions)
PROJECT_DIRECTIONS = EncOutput(lambda enc, H: H, True, lambda model, states: model.enc_proj(states))


def make_rnn(cell: str, input_size: int, hidden_size: int, layers: int, dropout: float,
             bidirectional: bool = False) -> nn.RNNBase:
    """The torch.nn recurrent module of registry.CELLS row ``cell``, with the row's arguments."""
    module = implementation(CELLS, check("cell", cell, CELLS))
    return module(input_size, hidden_size, num_layers=layers, batch_first=True,
                  bidirectional=bidirectional, dropout=dropout if layers > 1 else 0.0,
                  **CELLS[cell].arguments)


def to_rnn(state):
    """Batch-first state [B, L, H] (or a pair of those, or None) -> the [L, B, H] layout nn.RNN
    takes."""
    return tree_map(lambda s: s.transpose(0, 1).contiguous(), state)


def from_rnn(state):
    """nn.RNN's final state [L, B, H] (or a pair of those) -> batch first."""
    return tree_map(lambda s: s.transpose(0, 1), state)


class Encoder(nn.Module):
    """Embedding -> (bi)RNN over packed sequences."""

    def __init__(self, vocab_size: int, cell: str, emb_size: int, d_model: int, layers: int,
                 dropout: float, bidirectional: bool):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_size, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
        self.rnn = make_rnn(cell, emb_size, d_model, layers, dropout, bidirectional)
        self.layers, self.directions = layers, 2 if bidirectional else 1
        self.output_size = d_model * self.directions

    def forward(self, src: torch.Tensor, src_pad: torch.Tensor):
        """Returns states [B, S, dirs*H] (zeros on padding) and final states per layer
        [B, L, dirs*H]: (h,) or (h, c) for the LSTM."""
        lengths = (~src_pad).sum(1).clamp(min=1)            # an all-padding row reads one PAD
        x = self.dropout(self.embed(src))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, final = self.rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        finals = final if isinstance(final, tuple) else (final,)
        # [L*dirs, B, H] -> [B, L, dirs*H] (forward and backward concatenated per layer)
        L, D, B, H = self.layers, self.directions, src.size(0), self.rnn.hidden_size
        finals = [f.view(L, D, B, H).permute(2, 0, 1, 3).reshape(B, L, D * H) for f in finals]
        # The top layer's final h equals the states at the sequence ends; reading it from
        # `states` makes every decoder path go through memory["states"] (gradient diagnostics).
        top = states[torch.arange(B, device=src.device), lengths - 1, :H]
        if self.directions == 2:
            top = torch.cat([top, states[:, 0, H:]], dim=-1)
        finals[0] = torch.cat([finals[0][:, :-1], top.unsqueeze(1)], dim=1)
        return states, tuple(finals)


class Bridge(nn.Module):
    """Encoder final states [B, Le, De] -> decoder initial states [B, Ld, H].

    Layers are aligned from the top (the top encoder layer feeds the top decoder layer); decoder
    layers below the encoder's depth reuse the bottom encoder layer. With ``project`` each decoder
    layer gets its own Linear + tanh, else the states are copied (sizes must match)."""

    def __init__(self, enc_size: int, dec_size: int, enc_layers: int, dec_layers: int,
                 project: bool):
        super().__init__()
        self.source_layer = [max(0, l + enc_layers - dec_layers) for l in range(dec_layers)]
        self.proj = (nn.ModuleList(nn.Linear(enc_size, dec_size) for _ in range(dec_layers))
                     if project else None)

    def forward(self, finals: torch.Tensor) -> torch.Tensor:
        layers = [finals[:, l] for l in self.source_layer]
        if self.proj is not None:
            layers = [torch.tanh(p(x)) for p, x in zip(self.proj, layers)]
        return torch.stack(layers, dim=1)


class RNNSeq2Seq(Seq2SeqModel):
    """Recurrent encoder-decoder (see the module docstring for the wirings).

    Submodules: encoder (embed, rnn), bridges (h, and c for the LSTM), tgt_embed, decoder (the
    decoder RNN), enc_output (with attention and enc_output="project"), scorer (with attention),
    readout, generator. Keys and values of attention are the same tensor, the encoder states
    after ``enc_output``; the scorer owns only the parameters of its formula. With
    ``tie_embeddings`` the readout has the embedding size (a bias-free projection when there is
    no attention and E != H), so the generator can use the target embedding matrix.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cell: str, emb_size: int,
                 d_model: int, enc_layers: int, dec_layers: int, dropout: float, bidirectional: bool,
                 attention: str, scoring: str, context: str, input_feeding: bool, rank: int,
                 tie_embeddings: bool, enc_output: str):
        super().__init__()
        check_rnn(cell, attention, scoring, context, input_feeding, bidirectional, enc_output)
        self.attends = ATTENTION[attention].attends
        # the rows' names, not their implementations (which hold lambdas): the model pickles, as a
        # DDP rank started by spawn receives it
        self.attention, self.enc_output_kind = attention, enc_output
        self.previous_query = self.wiring.previous_query   # read at every decoder step
        # without attention: whether the decoder also reads the source context (the top layer's
        # bridged final state) at every step, besides starting from it
        self.context_at_every_step = CONTEXT[context].every_step
        # the LSTM's state is a pair (h, c), the others' h alone
        self.cell_state = implementation(CELLS, cell) is nn.LSTM
        self.input_feeding = input_feeding
        H = d_model

        self.encoder = Encoder(src_vocab_size, cell, emb_size, H, enc_layers, dropout,
                               bidirectional)
        # K: size of what attention attends over (keys and values)
        K = self.enc_output.size(self.encoder.output_size, H)
        self.bridges = nn.ModuleList(Bridge(self.encoder.output_size, H, enc_layers, dec_layers,
                                            project=bidirectional)
                                     for _ in range(2 if self.cell_state else 1))

        # With tied embeddings the readout lives in embedding space, so it can share its weights.
        self.out_size = emb_size if tie_embeddings else H
        extra = (self.wiring.input_size(K) + (H if self.context_at_every_step else 0)
                 + (self.out_size if input_feeding else 0))
        self.tgt_embed = nn.Embedding(tgt_vocab_size, emb_size, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
        self.decoder = make_rnn(cell, emb_size + extra, H, dec_layers, dropout)

        if self.attends:
            if self.enc_output.projects:
                self.enc_proj = nn.Linear(self.encoder.output_size, H, bias=False)
            self.scorer = build_scorer(scoring, query_size=H, key_size=K, attn_size=H,
                                       options={"rank": rank})
        self.readout = self.wiring.readout(H, K, emb_size, self.out_size)
        self.generator = nn.Linear(self.out_size, tgt_vocab_size)
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.weight

    @property
    def wiring(self) -> Wiring:
        return implementation(ATTENTION, self.attention)

    @property
    def enc_output(self) -> EncOutput:
        return implementation(ENC_OUTPUT, self.enc_output_kind)

    # ---- encoder -------------------------------------------------------------------------

    def encode(self, src: torch.Tensor) -> dict[str, Any]:
        src_pad = src == PAD
        states, finals = self.encoder(src, src_pad)
        memory = {"states": states, "src_pad": src_pad}
        for name, bridge, final in zip(("init_h", "init_c"), self.bridges, finals):
            memory[name] = bridge(final)                    # [B, L_dec, H]
        if self.attends:
            memory["values"] = self.enc_output.attended(self, states)   # [B, S, K]
            memory["keys"] = self.scorer.precompute(memory["values"])
        elif self.context_at_every_step:
            memory["context"] = memory["init_h"][:, -1]     # [B, H]
        return memory

    # ---- decoder pieces shared by decode (whole sequence) and step (one token) --------------

    def init_state(self, memory: dict[str, Any]) -> dict[str, Any]:
        state = {k[-1]: v for k, v in memory.items() if k in ("init_h", "init_c")}   # h (and c)
        if self.input_feeding:
            state["feed"] = memory["init_h"].new_zeros(memory["init_h"].size(0), self.out_size)
        return state

    def _hidden(self, state):
        """State dict ([B, L, H]) -> what nn.RNN/GRU/LSTM takes ([L, B, H])."""
        return to_rnn((state["h"], state["c"]) if self.cell_state else state["h"])

    def _state(self, hidden, **extra):
        hidden = from_rnn(hidden)
        return {**dict(zip(("h", "c"), hidden if self.cell_state else (hidden,))), **extra}

    def _attend(self, memory, query):
        """query [B, Tq, H] -> context [B, Tq, K], weights [B, Tq, S]."""
        return attend(self.scorer.score(query, memory["keys"]), memory["values"], memory["src_pad"])

    def _advance(self, memory, state, emb):
        """One decoder step from embedded tokens emb [B, E]: readout [B, O], weights [B, S]
        or None, new state."""
        inputs, weights = [emb], None
        if self.previous_query:
            context, weights = self._attend(memory, state["h"][:, -1:])   # query s_{t-1}
            inputs.append(context[:, 0])
        elif self.context_at_every_step:
            inputs.append(memory["context"])
        if self.input_feeding:
            inputs.append(state["feed"])
        out, hidden = self.decoder(torch.cat(inputs, -1).unsqueeze(1), self._hidden(state))
        if self.previous_query:
            readout = torch.tanh(self.readout(torch.cat([out[:, 0], context[:, 0], emb], -1)))
        else:
            readout, weights = self._readout(memory, out)
            readout = readout[:, 0]
        extra = {"feed": readout} if self.input_feeding else {}
        return readout, (None if weights is None else weights[:, 0]), self._state(hidden, **extra)

    def _readout(self, memory, out):
        """Readout of the wirings that need only s_t (none, luong) from out [B, T, H]:
        readout [B, T, O] and attention weights [B, T, S] or None."""
        if not self.attends:
            return self.readout(out), None
        context, weights = self._attend(memory, out)                       # query s_t
        return torch.tanh(self.readout(torch.cat([context, out], -1))), weights

    def step(self, memory, state, last_tokens):
        emb = self.dropout(self.tgt_embed(last_tokens))
        readout, _, state = self._advance(memory, state, emb)
        return self.generator(self.dropout(readout)), state

    # ---- decoder over a whole target --------------------------------------------------------

    def decode(self, memory, tgt_in, need_weights=False, teacher_forcing=1.0):
        sampling = self.training and teacher_forcing < 1.0
        state = self.init_state(memory)
        if not sampling and not self.previous_query and not self.input_feeding:
            readout, weights = self._decode_parallel(memory, state, tgt_in)
        else:
            readout, weights = self._decode_loop(memory, state, tgt_in,
                                                 teacher_forcing if sampling else 1.0)
        attention = {"cross": weights.unsqueeze(1)} if need_weights and weights is not None else None
        return DecoderOutput(self.dropout(readout), self.generator, attention)

    def _decode_parallel(self, memory, state, tgt_in):
        """Teacher forcing when no step depends on the previous one: one RNN call over T."""
        inputs = self.dropout(self.tgt_embed(tgt_in))
        if self.context_at_every_step:
            ctx = memory["context"].unsqueeze(1).expand(-1, tgt_in.size(1), -1)
            inputs = torch.cat([inputs, ctx], -1)
        out, _ = self.decoder(inputs, self._hidden(state))
        return self._readout(memory, out)

    def _decode_loop(self, memory, state, tgt_in, teacher_forcing):
        readouts, weights = [], []
        for t in range(tgt_in.size(1)):
            tokens = tgt_in[:, t]
            if t > 0 and teacher_forcing < 1.0:   # scheduled sampling: gold or own argmax
                gold = torch.rand(tokens.shape, device=tokens.device) < teacher_forcing
                with torch.no_grad():
                    own = self.generator(readouts[-1]).argmax(-1)
                tokens = torch.where(gold, tokens, own)
            emb = self.dropout(self.tgt_embed(tokens))
            readout, w, state = self._advance(memory, state, emb)
            readouts.append(readout)
            weights.append(w)
        weights = None if weights[0] is None else torch.stack(weights, dim=1)
        return torch.stack(readouts, dim=1), weights
