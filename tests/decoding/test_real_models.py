"""Decoding and diagnostics on the package's own models."""

import pytest
import torch

from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.decoding import beam_search, gnmt_length_penalty, greedy_decode
from lit_attention.diagnostics import attention_entropy
from lit_attention.models import build_seq2seq

V = 24




CONFIGS = {
    "rnn-lstm-bahdanau": ("rnn", "RNNSeq2Seq", dict(cell="lstm", attention="bahdanau",
                                                    scoring="additive")),
    "rnn-gru-luong": ("rnn", "RNNSeq2Seq", dict(cell="gru", attention="luong", scoring="general",
                                                bidirectional=False)),
    "rnn-elman-none": ("rnn", "RNNSeq2Seq", dict(cell="elman-tanh", attention="none",
                                                 context="every-step")),
    "transformer-sinusoidal": ("transformer", "TransformerSeq2Seq", dict(positional="sinusoidal")),
    "transformer-rotary-post": ("transformer", "TransformerSeq2Seq",
                                dict(positional="rotary", norm="post")),
}
SIZES = {"rnn": dict(emb_size=16, d_model=16, dropout=0.1, enc_layers=1, dec_layers=1,
                    tie_embeddings=False),
         "transformer": dict(d_model=16, heads=2, enc_layers=2, dec_layers=2, ffn=32,
                             dropout=0.1)}


def build(name):
    family, _, kwargs = CONFIGS[name]
    torch.manual_seed(0)
    model = build_seq2seq(family, V, V, **SIZES[family], **kwargs).eval()
    return model


def source_batch():
    torch.manual_seed(1)
    src = torch.randint(4, V, (5, 7))
    for row, length in enumerate([7, 3, 5, 1, 6]):
        src[row, length - 1] = EOS
        src[row, length:] = PAD
    return src


def sequence_logprob(model, src_row, hyp):
    tgt_in = torch.tensor([[BOS] + hyp[:-1]])
    logits = model(src_row[None], tgt_in).logits.double().log_softmax(-1)
    return logits[0, torch.arange(len(hyp)), torch.tensor(hyp)].sum().item()


@pytest.mark.parametrize("name", CONFIGS)
def test_beam_of_one_equals_greedy(name):
    model = build(name)
    src = source_batch()
    greedy = greedy_decode(model, src, max_len_a=1.0, max_len_b=4)
    assert torch.equal(beam_search(model, src, beam_size=1, max_len_a=1.0, max_len_b=4), greedy)
    assert not model.training


@pytest.mark.parametrize("name", CONFIGS)
def test_beam_scores_match_teacher_forced_log_probs(name):
    model = build(name)
    src = source_batch()
    alpha = 0.6
    out, scores = beam_search(model, src, beam_size=4, length_penalty=alpha, max_len_a=1.0,
                              max_len_b=4, return_scores=True)
    with torch.no_grad():
        for row in range(src.size(0)):
            hyp = [t for t in out[row].tolist() if t != PAD]
            expected = sequence_logprob(model, src[row], hyp)
            lp = gnmt_length_penalty(len(hyp), alpha)
            assert scores[row].item() * lp == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("name", ["rnn-lstm-bahdanau", "rnn-elman-none", "transformer-sinusoidal"])
def test_attention_entropy_on_real_models(name):
    # (gradient flow on these models: tests/diagnostics/test_gradflow.py)
    model = build(name).train()
    src = source_batch()
    torch.manual_seed(2)
    tgt = torch.randint(4, V, (src.size(0), 4))
    batch = {"src": src, "tgt_in": torch.cat([torch.full((5, 1), BOS), tgt], 1)}
    with torch.no_grad():
        out = model(src, batch["tgt_in"], need_weights=True)
    cross = {k: w for k, w in (out.attention or {}).items() if k.startswith("cross")}
    if name.startswith("rnn-lstm") or name.startswith("transformer"):
        assert cross, f"no cross-attention weights in {sorted(out.attention or {})}"
    for weights in cross.values():
        entropy = attention_entropy(weights, src == PAD, batch["tgt_in"] == PAD)
        assert entropy.shape == (weights.size(1),)
        assert (entropy >= 0).all() and (entropy <= torch.log(torch.tensor(7.0)) + 1e-6).all()
