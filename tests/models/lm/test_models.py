"""Neural language models as plain nn.Modules: learning, causality, carried state."""

import pytest
import torch
import torch.nn.functional as F

from lit_attention.data.synthetic import generate
from lit_attention.data.tokenizers import WordTokenizer
from lit_attention.data.vocab import BOS
from lit_attention.data.lm import batchify, encode_stream
from lit_attention.models.lm import build_lm, detach_state
from lit_attention.registry import CELLS, POSITIONAL

pytestmark = pytest.mark.numeric   # floating-point equivalences: they hold on every CPU kernel set


@pytest.fixture(scope="module")
def toy_stream():
    lines = generate("toy-mt", 300, seed=1)[1]
    tok = WordTokenizer.train(lines)
    return batchify(encode_stream(tok, lines), 8), tok.vocab_size


# Each family's options only (an option of another family is refused).
SMALL = {"window": dict(window=3, emb_size=32, d_model=32, dropout=0.0),
         "rnn": dict(emb_size=32, d_model=32, layers=1, dropout=0.0),
         "transformer": dict(d_model=32, heads=4, layers=1, ffn=64, dropout=0.0)}

VARIANTS = ([("window", {})] + [("rnn", {"cell": c}) for c in CELLS]
            + [("rnn", {"cell": "lstm", "tie_embeddings": False})]
            + [("transformer", {"positional": p}) for p in POSITIONAL])


@pytest.mark.parametrize("family,options", VARIANTS, ids=lambda v: str(v))
def test_trains_with_truncated_bptt_and_loss_decreases(family, options, toy_stream):
    data, vocab = toy_stream
    torch.manual_seed(0)
    lm = build_lm(family, vocab, **{**SMALL[family], **options})
    opt = torch.optim.Adam(lm.parameters(), lr=3e-3)
    bptt, state, losses = 16, None, []
    for step in range(40):
        start = (step * bptt) % (data.shape[1] - bptt - 1)
        if start < bptt:
            state = None                       # wrapped around: a new pass over the streams
        x, y = data[:, start:start + bptt], data[:, start + 1:start + bptt + 1]
        logits, state = lm(x, state)
        state = detach_state(state)
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.5, (first, last)


@pytest.mark.parametrize("positional", list(POSITIONAL))
def test_transformer_lm_is_causal(positional):
    torch.manual_seed(0)
    lm = build_lm("transformer", 30, positional=positional, d_model=32, heads=4, layers=2,
                  ffn=64).eval()
    tokens = torch.randint(4, 30, (3, 20))
    logits, state = lm(tokens)
    assert state is None
    for t in (0, 9, 19):
        changed = tokens.clone()
        changed[:, t] = 4 + (changed[:, t] - 4 + 7) % 26
        other, _ = lm(changed)
        assert torch.allclose(other[:, :t], logits[:, :t], atol=1e-6, rtol=0), positional
        assert not torch.allclose(other[:, t], logits[:, t], atol=1e-4), positional


@pytest.mark.parametrize("family,options", [("window", {})] + [("rnn", {"cell": c}) for c in CELLS])
def test_carried_state_continues_the_stream(family, options):
    torch.manual_seed(0)
    lm = build_lm(family, 30, **{**SMALL[family], **options}).eval()
    tokens = torch.randint(4, 30, (4, 24))
    whole, _ = lm(tokens)
    first, state = lm(tokens[:, :10])
    second, _ = lm(tokens[:, 10:], state)
    assert torch.allclose(torch.cat([first, second], 1), whole, atol=1e-5)
    fresh, _ = lm(tokens[:, 10:])
    assert not torch.allclose(fresh, second, atol=1e-4)


def test_window_lm_pads_the_first_context_with_bos():
    torch.manual_seed(0)
    lm = build_lm("window", 30, **SMALL["window"]).eval()
    tokens = torch.randint(4, 30, (2, 5))
    logits, state = lm(tokens)
    bos = torch.full((2, 3), BOS)
    same, _ = lm(tokens, bos)
    assert torch.equal(logits, same)
    assert torch.equal(state, tokens[:, -3:])


@pytest.mark.parametrize("cell", CELLS)
def test_detached_state_stops_gradients_at_the_batch_boundary(cell):
    torch.manual_seed(0)
    # Untied, so the output layer does not touch every embedding row.
    lm = build_lm("rnn", 30, cell=cell, emb_size=16, d_model=16, layers=2, dropout=0.0,
                  tie_embeddings=False)
    tokens = torch.randint(4, 30, (3, 12))
    _, state = lm(tokens[:, :6])
    leaves = state if isinstance(state, tuple) else (state,)
    assert all(s.shape == (3, 2, 16) and s.abs().sum() > 0 for s in leaves)   # batch first, not zeros
    carried = detach_state(state)
    assert all(s.grad_fn is None and not s.requires_grad for s in
               (carried if isinstance(carried, tuple) else (carried,)))
    # Gradients of the second batch's loss reach the embeddings of its own tokens only.
    logits, _ = lm(tokens[:, 6:], carried)
    logits.sum().backward()
    touched = lm.embed.weight.grad.abs().sum(1) > 0
    own = set(tokens[:, 6:].flatten().tolist())
    only_first = set(tokens[:, :6].flatten().tolist()) - own
    assert only_first and all(not touched[i] for i in only_first)
    assert all(touched[i] for i in own)
    # Without the detach the same loss reaches the first batch's tokens.
    lm.zero_grad()
    logits, _ = lm(tokens[:, 6:], state)
    logits.sum().backward()
    assert all(lm.embed.weight.grad[i].abs().sum() > 0 for i in only_first)


def test_tied_embeddings_share_one_matrix():
    lm = build_lm("rnn", 50, cell="gru", emb_size=16, d_model=24, tie_embeddings=True)
    assert lm.out.weight is lm.embed.weight
    untied = build_lm("rnn", 50, cell="gru", emb_size=16, d_model=24, tie_embeddings=False)
    assert untied.out.weight is not untied.embed.weight
    tlm = build_lm("transformer", 50, d_model=16, heads=2, layers=1, ffn=32)
    assert tlm.out.weight is tlm.embed.token.weight


def test_unknown_family_lists_the_choices():
    with pytest.raises(ValueError, match="ngram, window, rnn, transformer"):
        build_lm("lstm", 10)
