"""Gradient flow through time (‖∂L/∂h_t‖ by distance to the loss) and gradient norms per module.

The quantity is the textbook one: the total derivative of the loss with respect to the encoder's
hidden state h_t, i.e. through every path from h_t to the loss (the later states and the decoder's
direct reads alike). A fused nn.RNN/GRU/LSTM computes all h_t inside one op, so its output states
only carry the *direct* part of that gradient. `gradient_flow` therefore replays the encoder's
recurrence one step at a time with the module's own weights (the cells of torch.nn via
`torch.func.functional_call`) and adds a zero probe δ_t to every state of the top layer:
∂L/∂δ_t = ∂L/∂h_t. The replayed states are the fused module's, so the loss is unchanged.

Distance to the loss, for a source of m tokens (its EOS included) and position t:
- forward direction: m-1-t recurrent steps from h_t to the last state read (the source's EOS);
- backward direction of a bidirectional encoder: t steps to its last state (position 0);
- ``undirected`` (an encoder without recurrence, the Transformer): the gradient at the input of the
  first encoder layer (token embedding + absolute position), measured against m-1-t, the same
  positional distance as the forward direction; no path length grows with it, since every
  self-attention layer links every pair of positions in one step.

Nothing here creates or changes a parameter's ``.grad``.
"""

from __future__ import annotations

import random
import re
from contextlib import contextmanager
from functools import partial
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from lit_attention.data.batching import collate
from lit_attention.data.vocab import PAD
from lit_attention.models.base import Seq2SeqModel

DEFAULT_DISTANCE = 20
DEFAULT_SENTENCES = 32
# the cell of each nn.RNNBase mode (replay passes it the fused module's weights)
CELLS = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell,
         "RNN_TANH": partial(nn.RNNCell, nonlinearity="tanh"),
         "RNN_RELU": partial(nn.RNNCell, nonlinearity="relu")}
SAMPLE_SEED = 0          # one sample for every run on the same data, so runs compare like for like


def summed_cross_entropy(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """Token cross-entropy summed over non-pad targets: each sentence's gradient is then its own,
    whatever else is in the batch."""
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD,
                           reduction="sum")


def gradient_flow(model: Seq2SeqModel, batch: dict, max_distance: int | None = None) -> list[dict]:
    """‖∂L/∂h_t‖ of every sentence, direction and position up to `max_distance` (default: all).

    Rows {sentence, direction, position, distance, norm}: sentence is batch["idx"] (the example's
    index in its split) when present, else the row of the batch; norm is the L2 norm over the state
    of that direction. The loss is `summed_cross_entropy(logits, tgt_out)`. Runs in eval
    mode (no dropout) and restores the caller's mode.
    """
    was_training = model.training
    model.eval()
    try:
        # cuDNN's RNN has no backward in eval mode ("cudnn RNN backward can only be called in
        # training mode"): the probe runs the native kernels, which do.
        with (torch.enable_grad(), torch.backends.cudnn.flags(enabled=False),
              probed_encoder(model, batch["src"]) as (probe, directions)):
            logits = model(batch["src"], batch["tgt_in"]).logits
            loss = summed_cross_entropy(logits, batch["tgt_out"])
            (grad,) = torch.autograd.grad(loss, probe)                  # ∂L/∂h [B, S, D, H]
    finally:
        model.train(was_training)
    norms = grad.norm(dim=-1).tolist()                                  # [B][S][D]
    lengths = (batch["src"] != PAD).sum(dim=1).tolist()
    ids = batch["idx"].tolist() if "idx" in batch else range(len(lengths))
    # distance: t steps back to position 0 for the backward direction, m - 1 - t for the others
    return [{"sentence": sentence, "direction": direction, "position": t, "distance": distance,
             "norm": norms[b][t][d]}
            for b, (sentence, m) in enumerate(zip(ids, lengths))
            for d, direction in enumerate(directions)
            for t, distance in enumerate(range(m) if direction == "backward" else range(m)[::-1])
            if max_distance is None or distance <= max_distance]


@contextmanager
def probed_encoder(model: Seq2SeqModel, src: torch.Tensor):
    """While open, the model's next encode adds a zero probe [B, S, D, H] to every encoder state;
    yields (a list that holds that probe once the encode has run, the direction names)."""
    recurrent = [m for m in getattr(model, "encoder", nn.Module()).modules()
                 if isinstance(m, nn.RNNBase)]
    if len(recurrent) > 1:
        raise ValueError(f"the encoder has {len(recurrent)} recurrent modules; gradient flow "
                         "measures an encoder with one nn.RNN/GRU/LSTM")
    made: list[torch.Tensor] = []
    if recurrent:
        rnn = recurrent[0]
        directions = ("forward", "backward") if rnn.bidirectional else ("forward",)

        def replace(module, args, kwargs, output):
            handle.remove()   # the next encode only
            made.append(rnn.weight_hh_l0.new_zeros(*src.shape, len(directions), rnn.hidden_size,
                                                   requires_grad=True))
            hx = args[1] if len(args) > 1 else kwargs.get("hx")
            return replay(rnn, args[0] if args else kwargs["input"], hx, made[0])

        handle = rnn.register_forward_hook(replace, with_kwargs=True)
    else:
        directions = ("undirected",)

        def replace(module, args, output):
            handle.remove()   # the next encode only
            made.append(torch.zeros_like(output, requires_grad=True).unsqueeze(2))
            return output + made[0][:, :, 0]

        handle = model.get_submodule(model.source_embedding).register_forward_hook(replace)

    try:
        yield made, directions
    finally:
        handle.remove()


def replay(rnn: nn.RNNBase, inputs, hx, probe: torch.Tensor):
    """What rnn(inputs, hx) returns, computed one step at a time with rnn's own weights, with
    probe[:, t, d] added to the top layer's state h_t of direction d (so h_t is a graph node).

    inputs: [B, S, In] (or [S, B, In] without batch_first) or a PackedSequence; eval mode only
    (no dropout between layers)."""
    if getattr(rnn, "proj_size", 0):
        raise ValueError("gradient flow does not replay an LSTM with proj_size")
    packed = isinstance(inputs, PackedSequence)
    if packed:
        x, lengths = pad_packed_sequence(inputs, batch_first=True)
    else:
        x = inputs if rnn.batch_first else inputs.transpose(0, 1)
        lengths = torch.full((x.size(0),), x.size(1), dtype=torch.long)
    B, S = x.shape[:2]
    lstm, D = isinstance(rnn, nn.LSTM), 2 if rnn.bidirectional else 1
    valid = (torch.arange(S)[None, :] < lengths[:, None]).to(x.device)[..., None]   # [B, S, 1]
    if hx is None:
        zeros = x.new_zeros(rnn.num_layers * D, B, rnn.hidden_size)
        hx = (zeros, zeros) if lstm else zeros
    starts = list(zip(*(hx if lstm else (hx,))))   # per layer and direction: (h, c) or (h,)
    finals = []
    for layer in range(rnn.num_layers):
        # a cell of rnn's kind without weights of its own: functional_call passes rnn's
        cell = CELLS[rnn.mode](x.size(-1), rnn.hidden_size, bias=rnn.bias, device="meta")
        outputs = []
        for d in range(D):
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            weights = {name: getattr(rnn, name + suffix) for name in
                       ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if rnn.bias else ())}
            state, out = starts[layer * D + d], [None] * S
            for t in (range(S - 1, -1, -1) if d else range(S)):
                new = functional_call(cell, weights, (x[:, t], state if lstm else state[0]))
                new = new if lstm else (new,)
                if layer == rnn.num_layers - 1:
                    new = (new[0] + probe[:, t, d], *new[1:])
                # padding leaves the state as it was, and outputs zeros
                state = tuple(torch.where(valid[:, t], n, old) for n, old in zip(new, state))
                out[t] = torch.where(valid[:, t], new[0], 0.0)
            outputs.append(torch.stack(out, dim=1))
            finals.append(state)
        x = torch.cat(outputs, dim=-1)
    final = tuple(torch.stack(parts) for parts in zip(*finals))   # (h_n, c_n) or (h_n,)
    final = final if lstm else final[0]
    if packed:
        return pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False), final
    return (x if rnn.batch_first else x.transpose(0, 1)), final


def long_sentence_sample(examples: Sequence[dict], n: int | None = None,
                         max_distance: int | None = None,
                         seed: int = SAMPLE_SEED) -> tuple[dict, int]:
    """A fixed-seed batch of `n` examples ({"idx", "src", "tgt"}, src without EOS) long enough to
    reach every distance up to `max_distance`, i.e. with at least max_distance + 1 source tokens,
    EOS included. Returns (batch, max_distance).

    n None: DEFAULT_SENTENCES, or every example of a smaller split. max_distance None:
    DEFAULT_DISTANCE, or less when fewer than n examples are that long (the longest distance n
    examples reach). An explicit n larger than the split, or an explicit max_distance that fewer
    than n examples reach, is an error.
    """
    reach = sorted((len(ex["src"]) for ex in examples), reverse=True)   # distances 0..len(src)
    if n is None:
        n = min(DEFAULT_SENTENCES, len(reach))
    if n < 1:
        raise ValueError(f"gradient flow needs at least one sentence, got gradflow_sentences={n}")
    if len(reach) < n:
        raise ValueError(f"gradflow_sentences={n} but the split has {len(reach)} sentences")
    if max_distance is None:
        max_distance = min(DEFAULT_DISTANCE, reach[n - 1])
    elif reach[n - 1] < max_distance:
        longest = sum(r >= max_distance for r in reach)
        raise ValueError(f"gradflow_distance={max_distance}: only {longest} sentences reach it, "
                         f"gradflow_sentences={n} asked; the longest distance {n} reach is "
                         f"{reach[n - 1]}")
    candidates = sorted((ex for ex in examples if len(ex["src"]) >= max_distance),
                        key=lambda ex: ex["idx"])
    chosen = sorted(random.Random(seed).sample(candidates, n), key=lambda ex: ex["idx"])
    return collate(chosen), max_distance


def global_grad_norm(parameters: Iterable[torch.Tensor]) -> torch.Tensor:
    """L2 norm of all existing gradients together (parameters without .grad are skipped), as a
    0-dim tensor on the gradients' device, read by nobody yet."""
    # No .detach() per gradient (get_total_norm runs without autograd): on a CPU the 89 detached
    # views of a small Transformer took longer than its norm. One foreach kernel per dtype instead
    # of three ops per tensor: this runs every training step.
    grads = [p.grad for p in parameters if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads, 2.0, foreach=True) if grads else torch.zeros(())


def module_path(parameter_name: str, depth: int) -> str:
    """'encoder.layers.0.attn.q.weight' -> 'encoder.layers.0' at depth 2.

    The parameter's own name is dropped; a numeric part (ModuleList/Sequential index) stays with
    the name before it and does not count as a level. Parameters of the root module are 'root'.
    """
    levels = re.findall(r"[^.]+(?:\.\d+(?=\.|$))*", parameter_name.rpartition(".")[0])
    return ".".join(levels[:depth]) or "root"


def per_module_grad_norms(model: nn.Module, depth: int = 2) -> dict[str, float]:
    """L2 gradient norm per module path (see `module_path`), over parameters that have a grad.

    One norm kernel per gradient, combined per module on the device, then one read for all of
    them (a read per module made as many waits on a GPU)."""
    norms: dict[str, list[torch.Tensor]] = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            norms.setdefault(module_path(name, depth), []).append(
                torch.linalg.vector_norm(p.grad, dtype=torch.float64))
    if not norms:
        return {}
    totals = torch.stack([torch.linalg.vector_norm(torch.stack(parts)) for parts in norms.values()])
    return dict(zip(norms, totals.tolist()))
