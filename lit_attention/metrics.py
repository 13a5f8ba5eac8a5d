"""Metrics computed the way papers report them.

Perplexity is exp(total token NLL / number of target tokens), never an average of per-batch
exp(loss). BLEU and chrF come from sacreBLEU on detokenized text, with the signature kept.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU, CHRF

from lit_attention.data.vocab import PAD


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed negative log-likelihood over non-pad targets, and the number of those targets."""
    nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                          ignore_index=PAD, reduction="sum")
    return nll, (targets != PAD).sum()


def perplexity(nll_sum: float, n_tokens: float) -> float:
    return math.exp(min(nll_sum / n_tokens, 700.0)) if n_tokens > 0 else float("nan")


def bleu_chrf(hyps: list[str], refs: list[str]) -> dict:
    """Corpus BLEU and chrF with their sacreBLEU signatures."""
    bleu, chrf = BLEU(), CHRF()
    return {"bleu": bleu.corpus_score(hyps, [refs]).score,
            "chrf": chrf.corpus_score(hyps, [refs]).score,
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature())}
