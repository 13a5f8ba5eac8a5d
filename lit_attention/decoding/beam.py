"""Batched beam search on the Seq2SeqModel protocol, with GNMT length normalisation.

All sentences and their beams run as one batch of B*K rows; `select` reorders memory and state,
and drops the rows of sentences that are done.
Scores are accumulated in float64 so that ranking ties do not appear from rounding (this keeps
beam_size=1 identical to greedy decoding).

A hypothesis' length counts its EOS. Normalised score = log p / lp(length) with
lp(n) = ((5 + n) / 6) ** length_penalty (Wu et al., 2016); length_penalty=0 is plain log p.

At each step the 2K best candidates of a sentence are ranked; EOS candidates among the first K
are set aside as finished, and the first K non-EOS candidates become the live beams (fairseq's
rule). A sentence is done when
  * it has K finished hypotheses (so beam_size=1 stops exactly where greedy stops; with
    length_penalty > 0 a live beam could in principle still overtake them, as in fairseq), or
  * no live beam can still beat its best finished hypothesis: log-probs only decrease, so a live
    beam's best possible normalised score is its score divided by the largest lp it can reach, or
  * it reached its length budget (live beams are then finished without EOS, as greedy does).
"""

from __future__ import annotations

import math

import torch
from torch.nn.utils.rnn import pad_sequence

from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.decoding.greedy import max_output_lengths
from lit_attention.models.base import Seq2SeqModel, select


def gnmt_length_penalty(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(model: Seq2SeqModel, src: torch.Tensor, beam_size: int = 5,
                length_penalty: float = 1.0, max_len_a: float = 1.5, max_len_b: int = 10,
                return_scores: bool = False):
    """Best hypothesis per sentence as token ids [B, L] (no BOS, EOS kept, PAD after it).

    With return_scores=True also returns their normalised scores [B] (float64).
    Sentences that are done leave the batch. The model's train/eval mode is left as the caller
    set it.
    """
    k, device = beam_size, src.device
    budget = max_output_lengths(src, max_len_a, max_len_b, model.max_positions).tolist()
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in budget]

    memory = model.encode(src)
    state = model.init_state(memory)
    active = list(range(src.size(0)))          # sentence id of each group of k rows
    to_beams = torch.arange(len(active), device=device).repeat_interleave(k)
    memory, state = select(memory, to_beams), select(state, to_beams)

    scores = torch.full((len(active), k), -math.inf, dtype=torch.float64, device=device)
    scores[:, 0] = 0.0                         # the k beams start identical: keep one alive
    history = torch.empty(len(active) * k, 0, dtype=torch.long, device=device)
    last = torch.full((len(active) * k,), BOS, dtype=torch.long, device=device)

    for length in range(1, max(budget) + 1):
        n = len(active)
        logits, state = model.step(memory, state, last)
        # A sentence's 2k best candidates are among each beam's 2k best tokens: rank those in
        # float64, not the whole vocabulary (a float64 log-softmax + topk over 8k tokens per row
        # took most of the beam's time). Ordering by the raw logits keeps greedy's order exactly.
        logits = logits.float()
        width = min(2 * k, logits.size(-1))
        row_logits, row_token = logits.topk(width, dim=-1)                  # [n*k, width]
        logp = row_logits.double() - logits.logsumexp(dim=-1, keepdim=True).double()
        if bool(torch.isnan(logp).any()):   # inf or nan logits: no hypothesis can be ranked
            raise FloatingPointError(f"beam search: the model's scores are not finite (nan) at output "
                                     f"position {length}: its weights or activations overflowed")
        candidates = (scores[:, :, None] + logp.view(n, k, width)).view(n, k * width)
        top_scores, top_index = candidates.topk(min(2 * k, k * width), dim=1)
        top_beam = top_index // width
        top_token = row_token.view(n, k * width).gather(1, top_index)
        is_eos = top_token == EOS

        lp = gnmt_length_penalty(length, length_penalty)
        for i, j in (is_eos[:, :k] & (top_scores[:, :k] > -math.inf)).nonzero().tolist():
            prefix = history[i * k + top_beam[i, j]].tolist()
            finished[active[i]].append((top_scores[i, j].item() / lp, prefix + [EOS]))

        # the first k non-EOS candidates live on (at most k of the 2k are EOS: one per beam)
        rank = torch.arange(top_scores.size(1), device=device)
        keep = (is_eos.long() * top_scores.size(1) + rank).argsort(dim=1)[:, :k]
        scores = top_scores.gather(1, keep)
        rows = (torch.arange(n, device=device)[:, None] * k + top_beam.gather(1, keep)).view(-1)
        last = top_token.gather(1, keep).view(-1)
        history = torch.cat([history[rows], last[:, None]], dim=1)
        state = select(state, rows)

        going = []
        for i, (b, live) in enumerate(zip(active, scores.tolist())):
            # log-probs only fall: a live beam's best is its score over the largest lp it can reach
            reach = max(gnmt_length_penalty(length + 1, length_penalty),
                        gnmt_length_penalty(budget[b], length_penalty))
            if length >= budget[b]:            # out of budget: live beams end without EOS
                finished[b] += [(s / lp, history[i * k + j].tolist())
                                for j, s in enumerate(live) if s > -math.inf]
            elif len(finished[b]) < k and not (finished[b]
                                               and max(finished[b])[0] >= max(live) / reach):
                going.append(i)
        if not going:
            break
        if len(going) < n:
            groups = torch.tensor(going, device=device)
            rows = (groups[:, None] * k + torch.arange(k, device=device)).view(-1)
            memory, state = select(memory, rows), select(state, rows)
            history, last, scores = history[rows], last[rows], scores[groups]
            active = [active[i] for i in going]

    if not all(finished):   # every candidate of a sentence scored -inf
        raise FloatingPointError("beam search: no hypothesis of finite score for a sentence (every "
                                 "token scored -inf)")
    best = [max(hyps, key=lambda h: h[0]) for hyps in finished]
    out = pad_sequence([torch.tensor(tokens, dtype=torch.long) for _, tokens in best],
                       batch_first=True, padding_value=PAD).to(device)
    return (out, torch.tensor([s for s, _ in best], dtype=torch.float64)) if return_scores else out
