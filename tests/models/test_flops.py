"""Training FLOPs: the recurrent formula, the attention fill-in and the per-step counter."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils.flop_counter import FlopCounterMode

from lit_attention import registry
from lit_attention.data.vocab import PAD
from lit_attention.models import build_seq2seq
from lit_attention.models.flops import ATTENTION_FORMULAS, TrainingFlopCounter, batch_key, recurrent_flops
from lit_attention.models.lm import build_lm, detach_state
from lit_attention.models.loss import decoder_loss

# torch.backends.mkldnn.flags() warns about Intel-GPU TF32 on every use
pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")


def counted(fn) -> int:
    """FlopCounterMode's count of fn() with every recurrent kernel unrolled (oneDNN off), so that
    it sees every product, and with the fused CPU attention kernel's formula filled in."""
    counter = FlopCounterMode(display=False, custom_mapping=ATTENTION_FORMULAS)
    with torch.backends.mkldnn.flags(enabled=False), counter:
        fn()
    return counter.get_total_flops()


def test_fused_kernels_count_nothing_in_plain_flop_counter_mode():
    """Why the fill-ins exist: FlopCounterMode sees no product in oneDNN's LSTM or in the fused
    CPU attention kernel (torch 2.13)."""
    lstm = nn.LSTM(8, 16, batch_first=True)
    x = torch.randn(2, 5, 8, requires_grad=True)
    q = torch.randn(2, 4, 7, 8, requires_grad=True)
    for fn in (lambda: lstm(x)[0].sum().backward(),
               lambda: F.scaled_dot_product_attention(q, q, q).sum().backward()):
        plain = FlopCounterMode(display=False)
        with plain:
            fn()
        assert plain.get_total_flops() == 0


def test_attention_formula_equals_the_explicit_products():
    q, k, v = (torch.randn(2, 4, n, 8, requires_grad=True) for n in (7, 9, 9))
    fused = counted(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward())
    explicit = counted(lambda: ((q @ k.transpose(-1, -2)).softmax(-1) @ v).sum().backward())
    assert fused == explicit == 3 * (2 * 2 * 4 * 7 * 9 * 8 * 2)


def test_every_fused_attention_kernel_counts_the_explicit_products():
    """The GPU kernels (run here on meta tensors) count as the explicit products and as the
    function mode does, backward included: torch's own backward formula adds a recomputation of
    the scores, and the first step's check then sent every new shape to FlopCounterMode on a GPU."""
    from lit_attention.models.flops import MatmulFlops
    aten = torch.ops.aten
    q, k, v = (torch.empty(2, 4, n, 8, device="meta", requires_grad=True) for n in (7, 9, 9))
    product = 2 * 2 * 4 * 7 * 9 * 8        # one [7, 8] x [8, 9] product per batch row and head
    with MatmulFlops() as fast:
        F.scaled_dot_product_attention(*(torch.randn(t.shape, requires_grad=True) for t in (q, k, v)))
    assert fast.flops == 6 * product       # 2 forward, 4 backward
    calls = {
        "efficient": lambda: aten._scaled_dot_product_efficient_attention(q, k, v, None, True),
        "flash": lambda: aten._scaled_dot_product_flash_attention(q, k, v),
    }
    for name, call in calls.items():
        with FlopCounterMode(display=False, custom_mapping=ATTENTION_FORMULAS) as counter:
            out = call()
            if name == "efficient":
                o, lse, seed, offset = out
                aten._scaled_dot_product_efficient_attention_backward(
                    torch.empty_like(o), q, k, v, None, o, lse, seed, offset, 0.0, [True, True, True, False])
            else:
                o, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = out
                aten._scaled_dot_product_flash_attention_backward(
                    torch.empty_like(o), q, k, v, o, lse, cum_q, cum_k, max_q, max_k, 0.0, False, seed, offset)
        counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
        assert sorted(counts.values()) == [2 * product, 4 * product], (name, counts)
        assert counter.get_total_flops() == fast.flops


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True)])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("state", ["none", "detached", "trainable"])
def test_recurrent_formula_equals_the_unrolled_kernels_count(cls, layers, bidirectional, packed, state):
    torch.manual_seed(0)
    rnn = cls(8, 16, num_layers=layers, batch_first=True, bidirectional=bidirectional)
    x = torch.randn(3, 5, 8, requires_grad=True)
    hx = None
    if state != "none":
        h = torch.randn(layers * (2 if bidirectional else 1), 3, 16, requires_grad=state == "trainable")
        hx = (h, h.clone()) if cls is nn.LSTM else h
    inputs = (pack_padded_sequence(x, torch.tensor([5, 2, 4]), batch_first=True, enforce_sorted=False)
              if packed else x)

    def step():
        out, _ = rnn(inputs, hx)
        (out.data if packed else out).sum().backward()

    forward, training = recurrent_flops(rnn, inputs, hx)
    assert training == counted(step)
    with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False):
        plain = FlopCounterMode(display=False)
        with plain:
            rnn(inputs, hx)
    assert forward == plain.get_total_flops()


def test_recurrent_formula_equals_a_loop_of_lstm_cells():
    """An independent unrolling: nn.LSTMCell step by step, initial state zero (no gradient)."""
    torch.manual_seed(0)
    lstm = nn.LSTM(8, 16, batch_first=True)
    cell = nn.LSTMCell(8, 16)
    x = torch.randn(3, 5, 8, requires_grad=True)

    def loop():
        state, outs = None, []
        for t in range(x.size(1)):
            state = cell(x[:, t], state)
            outs.append(state[0])
        torch.stack(outs, 1).sum().backward()

    assert recurrent_flops(lstm, x)[1] == counted(loop)


def test_transformer_count_is_three_times_the_textbook_forward():
    B, S, T, d, f, V, layers = 3, 7, 5, 32, 64, 50, 2
    net = build_seq2seq("transformer", V, V, d_model=d, heads=4, enc_layers=layers, dec_layers=layers,
                        ffn=f, dropout=0.0)
    src, tgt = torch.randint(4, V, (B, S)), torch.randint(4, V, (B, T))
    encoder = layers * (4 * 2 * B * S * d * d + 2 * 2 * B * S * S * d + 2 * 2 * B * S * d * f)
    decoder = layers * (4 * 2 * B * T * d * d + 2 * 2 * B * T * T * d             # self-attention
                        + 2 * 2 * B * T * d * d + 2 * 2 * B * S * d * d            # cross q, o; k, v
                        + 2 * 2 * B * T * S * d + 2 * 2 * B * T * d * f)           # cross products, FFN
    forward = encoder + decoder + 2 * B * T * d * V                                # + output layer
    counter = TrainingFlopCounter(net)
    counter.start(batch_key(src))
    net(src, tgt).logits.sum().backward()
    assert counter.stop() == 3 * forward


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("family,bias", [("transformer", False), ("rnn", True)])
def test_the_fused_training_loss_counts_the_products_of_logits_then_loss(family, bias, autocast):
    """Budgets count FLOPs, so fusing the output projection into the loss must not change them."""
    torch.manual_seed(0)
    V, B, T = 300, 4, 9
    sizes = dict(heads=2, ffn=32) if family == "transformer" else dict(emb_size=16)
    net = build_seq2seq(family, V, V, d_model=16, enc_layers=1, dec_layers=1, dropout=0.0, **sizes)
    assert (net.generator.bias is not None) is bias
    src, tgt = torch.randint(4, V, (B, 8)), torch.randint(4, V, (B, T + 1))
    tgt[0, 5:] = PAD

    def loss(fused: bool):
        def step():
            net.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = net(src, tgt[:, :-1])
                if fused:
                    value = decoder_loss(out, tgt[:, 1:], 0.1, ignore_index=PAD)
                else:
                    value = F.cross_entropy(out.logits.flatten(0, 1).float(), tgt[:, 1:].flatten(),
                                            ignore_index=PAD, label_smoothing=0.1)
            value.backward()
        return step

    assert counted(loss(fused=True)) == counted(loss(fused=False)) > 3 * 2 * B * T * 16 * V


SEQ2SEQ = [*[dict(family="transformer", positional=positional, scoring=scoring)
             for positional, scoring in registry.transformer_variants()],
           *[dict(family="rnn", cell=cell, attention=attention, scoring="general")
             for cell in ("lstm", "gru", "elman-tanh") for attention in ("none", "bahdanau", "luong")],
           *[dict(family="rnn", cell="gru", attention="luong", scoring=scoring, bidirectional=False)
             for scoring in registry.SCORING if scoring != "general"]]


@pytest.mark.parametrize("options", SEQ2SEQ, ids=lambda o: "-".join(map(str, o.values())))
def test_counter_equals_a_full_count_also_from_its_cache(options):
    """The counter (fused kernels on, cache per shape) gives FlopCounterMode's full count, also for
    a later batch of the same shape whose packed source lengths differ."""
    torch.manual_seed(0)
    V = 40
    options = dict(options)
    family = options.pop("family")
    sizes = dict(heads=2, ffn=32) if family == "transformer" else dict(emb_size=16)
    net = build_seq2seq(family, V, V, d_model=16, enc_layers=1, dec_layers=1, dropout=0.0,
                        **sizes, **options)
    counter = TrainingFlopCounter(net)
    for rows, cut in ((3, 3), (3, 6), (5, 2)):   # the third batch is a new shape
        src, tgt = torch.randint(4, V, (rows, 8)), torch.randint(4, V, (rows, 6))
        src[1, cut:] = PAD
        tgt[2, 4:] = PAD

        def step():
            net.zero_grad()
            F.cross_entropy(net(src, tgt).logits.flatten(0, 1), tgt.flatten(), ignore_index=PAD).backward()

        counter.start(batch_key({"src": src, "tgt": tgt}))
        step()
        assert counter.stop() == counted(step) > 0
    assert len(counter.cached) == 2
    assert counter.checked and counter.fast   # the new shape was counted by the function mode
    counter.remove()


@pytest.mark.parametrize("autocast", [False, True])
def test_the_function_mode_counts_the_fused_training_loss_and_autocast(autocast):
    torch.manual_seed(0)
    V = 50
    net = build_seq2seq("transformer", V, V, d_model=16, heads=2, ffn=32, enc_layers=1, dec_layers=1, dropout=0.0)
    counter = TrainingFlopCounter(net)
    for rows, width in ((3, 7), (4, 9)):
        src, tgt = torch.randint(4, V, (rows, width)), torch.randint(4, V, (rows, width - 1))

        def step():
            net.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                decoder_loss(net(src, tgt[:, :-1]), tgt[:, 1:], 0.1, ignore_index=PAD).backward()

        counter.start(batch_key((src, tgt)))
        step()
        assert counter.stop() == counted(step) > 0
    assert counter.checked and counter.fast


def test_a_product_the_function_mode_does_not_know_makes_every_new_shape_count_in_full(capsys):
    """A three-operand einsum is no product the function mode knows: the first step's check finds
    the two counts differ, says so, and the run counts every new shape under FlopCounterMode."""
    class Einsum(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 8))
            self.u = nn.Parameter(torch.randn(8, 8))

        def forward(self, x):
            return torch.einsum("btd,de,ef->btf", x, self.w, self.u)

    net = Einsum()
    counter = TrainingFlopCounter(net)
    for rows in (2, 3):
        x = torch.randn(rows, 5, 8)

        def step():
            net.zero_grad()
            net(x).sum().backward()

        counter.start(batch_key(x))
        step()
        assert counter.stop() == counted(step) > 0
    assert counter.checked and not counter.fast
    assert "counted under FlopCounterMode" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["transformer", "rnn", "window"])
def test_counter_counts_language_models_with_carried_state(family):
    torch.manual_seed(0)
    sizes = {"transformer": dict(heads=2, layers=2, ffn=32), "rnn": dict(emb_size=16, layers=2, cell="lstm"),
             "window": dict(emb_size=16)}[family]
    lm = build_lm(family, 30, d_model=16, dropout=0.0, **sizes)
    counter = TrainingFlopCounter(lm)
    state = None
    for width in (6, 6, 5):   # the third a new shape: counted by the function mode
        tokens = torch.randint(4, 30, (2, width))
        carried = state if state is None or width == 6 else None

        def step():
            lm.zero_grad()
            logits, new = lm(tokens, carried)
            logits.sum().backward()
            return new

        counter.start(batch_key(tokens))
        state = step()
        state = detach_state(state)
        assert counter.stop() == counted(step) > 0
    assert counter.checked and counter.fast


def test_any_hashable_is_a_key_none_included():
    """bench/benchlib.count_flops counts one step under the key None."""
    lstm = nn.LSTM(8, 16, batch_first=True)
    x = torch.randn(2, 5, 8, requires_grad=True)
    counter = TrainingFlopCounter(lstm)
    counter.start(None)
    lstm(x)[0].sum().backward()
    assert counter.stop() == recurrent_flops(lstm, x)[1] > 0
