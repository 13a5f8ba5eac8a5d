import pytest
import torch

from decoding_toys import A, B_, C, TableModel
from lit_attention.data.vocab import EOS, PAD
from lit_attention.decoding import greedy_decode, max_output_lengths

pytestmark = pytest.mark.numeric   # floating-point equivalences: they hold on every CPU kernel set


def test_greedy_follows_argmax_per_sentence_and_pads_after_eos():
    table = {
        (A, ()): {A: 0.6, B_: 0.4},
        (A, (A,)): {C: 0.7, EOS: 0.3},
        (B_, ()): {B_: 0.9, EOS: 0.1},
        (B_, (B_,)): {EOS: 0.8, C: 0.2},
    }
    model = TableModel(table)
    src = torch.tensor([[A, EOS], [B_, EOS]])
    out = greedy_decode(model, src)
    assert out.tolist() == [[A, C, EOS], [B_, EOS, PAD]]


def test_greedy_respects_per_sentence_max_length():
    model = TableModel({}, default={A: 0.9, EOS: 0.1})          # never chooses EOS
    src = torch.tensor([[A, EOS, PAD, PAD], [A, B_, C, EOS]])   # non-pad lengths 2 and 4
    budget = max_output_lengths(src, 1.5, 10)
    assert budget.tolist() == [13, 16]
    out = greedy_decode(model, src, max_len_a=1.5, max_len_b=10)
    assert out.shape == (2, 16)
    assert (out[0, :13] == A).all() and (out[0, 13:] == PAD).all()
    assert (out[1] == A).all()
    assert model.calls == 16


def test_greedy_stops_when_every_row_has_eos():
    model = TableModel({(A, ()): {A: 0.9, EOS: 0.1}})
    out = greedy_decode(model, torch.tensor([[A, EOS], [B_, EOS]]), max_len_b=50)
    assert out.tolist() == [[A, EOS], [EOS, PAD]]
    assert model.calls == 2


@pytest.mark.parametrize("training", [True, False])
def test_greedy_keeps_mode_and_builds_no_graph(training):
    class Linear(TableModel):
        def __init__(self):
            super().__init__({})
            self.proj = torch.nn.Linear(1, 7)

        def step(self, memory, state, last_tokens):
            logits = self.proj(last_tokens[:, None].float())
            assert not logits.requires_grad
            return logits, state

    model = Linear().train(training)
    greedy_decode(model, torch.tensor([[A, EOS]]), max_len_b=3)
    assert model.training is training


@pytest.mark.parametrize("beam", [1, 3])
def test_decoding_never_asks_for_more_positions_than_the_model_has(beam):
    """A 400-word source line would get a budget of 1.5 * 401 + 10 tokens, beyond the
    Transformer's 512 positions: decoding stops at the positions the model has."""
    import torch

    from lit_attention.decoding import beam_search
    from lit_attention.models import build_seq2seq
    torch.manual_seed(0)
    net = build_seq2seq("transformer", 12, 12, d_model=16, heads=2, enc_layers=1, dec_layers=1, ffn=16, dropout=0.0,
                             max_len=16).eval()
    assert net.max_positions == 16
    src = torch.randint(4, 12, (2, 15))   # a budget of floor(1.5 * 15 + 10) = 32 tokens uncapped
    out = greedy_decode(net, src) if beam == 1 else beam_search(net, src, beam_size=beam)
    assert out.shape[0] == 2 and out.shape[1] <= 16
    assert max_output_lengths(src, 1.5, 10, most=16).tolist() == [16, 16]
    assert build_seq2seq("transformer", 12, 12, d_model=16, heads=2, enc_layers=1, dec_layers=1, ffn=16,
                              positional="rotary").max_positions is None   # nothing to cap at
