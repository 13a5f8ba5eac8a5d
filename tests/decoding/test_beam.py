import math

import pytest
import torch

from decoding_toys import A, B_, C, TableModel, exhaustive_best
from lit_attention.data.vocab import EOS, PAD
from lit_attention.decoding import beam_search, greedy_decode

pytestmark = pytest.mark.numeric   # floating-point equivalences: they hold on every CPU kernel set

# Greedy takes A (0.6) and then ends with p = 0.6 * 0.4 = 0.24; B then EOS has p = 0.36.
GREEDY_TRAP = {
    (A, ()): {A: 0.6, B_: 0.4},
    (A, (A,)): {EOS: 0.4, A: 0.3, C: 0.3},
    (A, (B_,)): {EOS: 0.9, C: 0.1},
}
# Stopping at once has p = 0.5 (length 1); A A EOS has p = 0.49 * 0.9 * 0.95 (length 3).
SHORT_OR_LONG = {
    (A, ()): {EOS: 0.5, A: 0.49, C: 0.01},
    (A, (A,)): {A: 0.9, EOS: 0.05, C: 0.05},
    (A, (A, A)): {EOS: 0.95, C: 0.05},
}


def test_beam_finds_the_sequence_greedy_misses():
    src = torch.tensor([[A, EOS]])
    assert greedy_decode(TableModel(GREEDY_TRAP), src).tolist() == [[A, EOS]]
    out, score = beam_search(TableModel(GREEDY_TRAP), src, beam_size=2, length_penalty=0.0,
                             return_scores=True)
    assert out.tolist() == [[B_, EOS]]
    assert score.item() == pytest.approx(math.log(0.36))


def test_length_penalty_changes_the_choice():
    src = torch.tensor([[A, EOS]])
    short = beam_search(TableModel(SHORT_OR_LONG), src, beam_size=3, length_penalty=0.0)
    long_ = beam_search(TableModel(SHORT_OR_LONG), src, beam_size=3, length_penalty=1.0)
    assert short.tolist() == [[EOS]]
    assert long_.tolist() == [[A, A, EOS]]
    # the reported score is log p / ((5 + 3) / 6) ** 1
    _, score = beam_search(TableModel(SHORT_OR_LONG), src, beam_size=3, return_scores=True)
    assert score.item() == pytest.approx(math.log(0.49 * 0.9 * 0.95) / (8 / 6))


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
@pytest.mark.parametrize("table", [GREEDY_TRAP, SHORT_OR_LONG])
def test_wide_beam_equals_exhaustive_search(table, alpha):
    model = TableModel(table)
    expected, expected_score = exhaustive_best(model, A, max_len=4, alpha=alpha)
    out, score = beam_search(model, torch.tensor([[A, EOS]]), beam_size=7, length_penalty=alpha,
                             max_len_a=0.0, max_len_b=4, return_scores=True)
    row = out[0].tolist()
    assert row[:len(expected)] == expected
    assert score.item() == pytest.approx(expected_score)


def test_sentences_in_a_batch_are_independent():
    table = {**GREEDY_TRAP, (B_, ()): {C: 0.7, EOS: 0.3}, (B_, (C,)): {C: 0.6, EOS: 0.4}}
    src = torch.tensor([[A, EOS, PAD], [B_, C, EOS]])
    batch = beam_search(TableModel(table), src, beam_size=2, length_penalty=0.0, max_len_b=3)
    for row in range(2):
        alone = beam_search(TableModel(table), src[row:row + 1], beam_size=2, length_penalty=0.0,
                            max_len_b=3)
        assert batch[row, :alone.size(1)].tolist() == alone[0].tolist()
        assert (batch[row, alone.size(1):] == PAD).all()


def test_done_sentences_leave_the_batch():
    # sentence A is done after one step (alpha = 0), sentence B_ runs to its budget of 5
    table = {**SHORT_OR_LONG, (B_, ()): {C: 0.6, A: 0.4}}
    model = TableModel(table, default={C: 0.7, A: 0.2, EOS: 0.1})
    src = torch.tensor([[A, EOS], [B_, EOS]])
    out = beam_search(model, src, beam_size=2, length_penalty=0.0, max_len_a=0.0, max_len_b=5)
    assert model.rows == [4, 2, 2, 2, 2]
    assert out.tolist() == [[EOS, PAD, PAD, PAD, PAD], [C, C, C, C, C]]


def test_early_stop_when_no_live_beam_can_win():
    # alpha = 0: EOS (log 0.5) beats the live A (log 0.49) for good after one step
    model = TableModel(SHORT_OR_LONG)
    beam_search(model, torch.tensor([[A, EOS]]), beam_size=3, length_penalty=0.0, max_len_b=50)
    assert model.calls == 1


def test_early_stop_when_every_beam_has_finished():
    model = TableModel({(A, ()): {A: 0.5, B_: 0.3, C: 0.2}})    # then EOS with p = 1
    out = beam_search(model, torch.tensor([[A, EOS]]), beam_size=3, max_len_b=50)
    assert out.tolist() == [[A, EOS]]
    assert model.calls == 2


def test_beam_respects_max_length():
    model = TableModel({}, default={A: 0.6, B_: 0.3, EOS: 0.1})
    src = torch.tensor([[A, EOS, PAD], [A, B_, EOS]])
    out = beam_search(model, src, beam_size=3, length_penalty=0.0, max_len_a=1.0, max_len_b=1)
    # with alpha = 0 the best is EOS at once (p 0.1) or A...A without EOS at the budget (0.6^n)
    assert out.tolist() == [[A, A, A, PAD], [A, A, A, A]]


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_of_one_is_greedy_on_toy_models(alpha):
    table = {**GREEDY_TRAP, **{(B_, k[1]): v for k, v in SHORT_OR_LONG.items()}}
    src = torch.tensor([[A, EOS], [B_, EOS], [C, EOS]])
    default = {A: 0.3, B_: 0.35, EOS: 0.35}
    greedy = greedy_decode(TableModel(table, default), src, max_len_b=6)
    beam = beam_search(TableModel(table, default), src, beam_size=1, length_penalty=alpha,
                       max_len_b=6)
    assert beam.tolist() == greedy.tolist()


def test_a_model_with_non_finite_scores_stops_beam_search_with_the_reason():
    """Weights of 1e30 (every score inf or NaN) still decode: no empty candidate list in beam.py."""
    from lit_attention.models import build_seq2seq
    torch.manual_seed(0)
    net = build_seq2seq("transformer", 12, 12, d_model=16, heads=2, enc_layers=1, dec_layers=1, ffn=16, dropout=0.0).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(1e30)
    src = torch.randint(4, 12, (2, 5))
    with pytest.raises(FloatingPointError, match=r"beam search: the model's scores are not finite \(nan\) "
                                                 r"at output position 1"):
        beam_search(net, src, beam_size=3)
