"""Gradient flow through time: ‖∂L/∂h_t‖, the total derivative of the loss w.r.t. each encoder state."""

import pandas as pd
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from lit_attention.analysis.aggregate import gradflow_decay
from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.diagnostics import (global_grad_norm, gradient_flow, long_sentence_sample,
                                       module_path, per_module_grad_norms, summed_cross_entropy)
from lit_attention.diagnostics.gradflow import replay
from lit_attention.models import build_seq2seq
from lit_attention.models.base import DecoderOutput, Seq2SeqModel

V, E, H = 12, 8, 16


class ElmanToy(Seq2SeqModel):
    """Elman (tanh) encoder; a decoder that sees only the last position's state, or also attends
    (dot product) to every state. recurrent_scale: the spectral norm of W_hh, which is orthogonal
    times that scale when `orthogonal`."""

    def __init__(self, recurrent_scale: float = 0.2, attend: bool = False, orthogonal: bool = False,
                 input_scale: float = 1.0):
        super().__init__()
        self.attend = attend
        self.encoder = nn.ModuleDict({"embed": nn.Embedding(V, E, padding_idx=PAD),
                                      "rnn": nn.RNN(E, H, nonlinearity="tanh", batch_first=True)})
        with torch.no_grad():
            w = self.encoder["rnn"].weight_hh_l0
            if orthogonal:
                w.copy_(torch.linalg.qr(torch.randn(H, H))[0])
            w.mul_(recurrent_scale / torch.linalg.matrix_norm(w, ord=2))
            self.encoder["embed"].weight.mul_(input_scale)
            self.encoder["rnn"].bias_ih_l0.mul_(input_scale)
            self.encoder["rnn"].bias_hh_l0.mul_(input_scale)
        self.decoder = nn.ModuleDict({"embed": nn.Embedding(V, H),
                                      "layers": nn.ModuleList([nn.Linear(H, H), nn.Linear(H, V)]),
                                      "dropout": nn.Dropout(0.5)})

    def encode(self, src):
        states, _ = self.encoder["rnn"](self.encoder["embed"](src))
        return {"states": states, "src_pad": src == PAD}

    def decode(self, memory, tgt_in, need_weights=False, teacher_forcing=1.0):
        states = memory["states"]
        query = self.decoder["embed"](tgt_in) + states[:, -1:]          # [B, T, H]
        if self.attend:
            scores = (query @ states.transpose(1, 2)).masked_fill(memory["src_pad"][:, None],
                                                                  float("-inf"))
            query = query + scores.softmax(-1) @ states
        hidden = torch.tanh(self.decoder["layers"][0](self.decoder["dropout"](query)))
        return DecoderOutput(hidden, self.decoder["layers"][1])


def batch_of(src, vocab=V):
    torch.manual_seed(1)
    tgt = torch.randint(4, vocab, (src.size(0), 5))
    tgt_in = torch.cat([torch.full((src.size(0), 1), BOS), tgt], dim=1)
    tgt_out = torch.cat([tgt, torch.full((src.size(0), 1), EOS)], dim=1)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}


def equal_length_batch(n=16, m=8, vocab=V, seed=0):
    torch.manual_seed(seed)
    src = torch.cat([torch.randint(4, vocab, (n, m - 1)), torch.full((n, 1), EOS)], dim=1)
    return batch_of(src, vocab)


def norms_of(rows, direction="forward"):
    """{(sentence, position): norm} of one direction."""
    return {(r["sentence"], r["position"]): r["norm"] for r in rows if r["direction"] == direction}


def hand_unrolled_state_gradients(model, batch):
    """∂L/∂h_t of ElmanToy by an explicit tanh recurrence whose states keep their gradient."""
    rnn = model.encoder["rnn"]
    x = model.encoder["embed"](batch["src"])
    h, states = x.new_zeros(x.size(0), H), []
    for t in range(x.size(1)):
        h = torch.tanh(x[:, t] @ rnn.weight_ih_l0.T + rnn.bias_ih_l0 + h @ rnn.weight_hh_l0.T
                       + rnn.bias_hh_l0)
        h.retain_grad()
        states.append(h)
    memory = {"states": torch.stack(states, dim=1), "src_pad": batch["src"] == PAD}
    logits = model.decode(memory, batch["tgt_in"]).logits
    summed_cross_entropy(logits, batch["tgt_out"]).backward()
    return torch.stack([h.grad for h in states], dim=1)               # [B, S, H]


@pytest.mark.parametrize("attend", [False, True])
def test_the_measured_gradient_is_the_total_derivative_wrt_each_state(attend):
    # nn.RNN computes every h_t in one op; a hand-written recurrence has each h_t as a node:
    # its .grad is the textbook ∂L/∂h_t, through later states and direct reads alike.
    torch.manual_seed(0)
    model = ElmanToy(recurrent_scale=0.9, attend=attend).eval()
    batch = equal_length_batch(n=4, m=7)
    expected = hand_unrolled_state_gradients(model, batch).norm(dim=-1)
    model.zero_grad(set_to_none=True)
    measured = norms_of(gradient_flow(model, batch))
    assert len(measured) == 4 * 7
    for (b, t), norm in measured.items():
        assert norm == pytest.approx(expected[b, t].item(), rel=1e-4, abs=1e-9)
    # not what the fused op's output receives: without attention only the last state is read
    states = model.encode(batch["src"])["states"]
    (direct,) = torch.autograd.grad(summed_cross_entropy(
        model.decode({"states": states, "src_pad": batch["src"] == PAD}, batch["tgt_in"]).logits,
        batch["tgt_out"]), states)
    if not attend:
        assert (direct[:, :-1] == 0).all() and all(measured[b, 0] > 0 for b in range(4))


def test_a_near_linear_recurrence_decays_by_its_spectral_norm_per_step():
    # W_hh = 0.7·Q (Q orthogonal) and tiny inputs: tanh' ≈ 1, so ∂L/∂h_t = (W^T)^k ∂L/∂h_last and
    # ‖∂L/∂h_t‖ = 0.7^k ‖∂L/∂h_last‖ exactly, k = m-1-t.
    torch.manual_seed(0)
    model = ElmanToy(recurrent_scale=0.7, orthogonal=True, input_scale=1e-3)
    batch = equal_length_batch(n=8, m=12)
    batch["idx"] = torch.arange(100, 108)
    rows = gradient_flow(model, batch)
    by_sentence = {}
    for r in rows:
        by_sentence.setdefault(r["sentence"], {})[r["distance"]] = r["norm"]
    assert sorted(by_sentence) == list(range(100, 108))
    for norms in by_sentence.values():
        assert sorted(norms) == list(range(12))
        for k in range(1, 12):
            assert norms[k] / norms[k - 1] == pytest.approx(0.7, rel=1e-3)
    fit = gradflow_decay(pd.DataFrame(rows)).set_index("direction")
    assert fit.loc["forward", "decay"] == pytest.approx(0.7, rel=1e-3)
    assert fit.loc["forward", "ci_lo"] <= 0.7 * (1 + 1e-3) and fit.loc["forward", "ci_hi"] >= 0.7 * (1 - 1e-3)
    assert fit.loc["forward", "sentences"] == 8 and fit.loc["forward", "max_distance"] == 11


def real_model(family, **options):
    torch.manual_seed(0)
    sizes = (dict(d_model=32, heads=4, enc_layers=2, dec_layers=2, ffn=64) if family == "transformer"
             else dict(emb_size=32, d_model=32))
    return build_seq2seq(family, 24, 24, dropout=0.0, **sizes, **options)


def test_each_direction_of_a_bidirectional_encoder_decays_from_its_own_end():
    # The forward state h_t reaches the loss after m-1-t steps, the backward one after t: by
    # position, their sum would be U-shaped; per direction, each decays with its own distance.
    model = real_model("rnn", cell="elman-tanh", attention="none", bidirectional=True)
    batch = equal_length_batch(n=16, m=16, vocab=24)
    rows = gradient_flow(model, batch)
    assert {r["direction"] for r in rows} == {"forward", "backward"}
    assert len(rows) == 16 * 16 * 2
    fwd, bwd = norms_of(rows, "forward"), norms_of(rows, "backward")
    mean = lambda norms, t: sum(norms[b, t] for b in range(16)) / 16      # noqa: E731
    assert all(mean(fwd, t) < mean(fwd, t + 1) for t in range(15))         # grows toward the end
    assert all(mean(bwd, t) > mean(bwd, t + 1) for t in range(15))         # shrinks away from 0
    assert all(r["distance"] == (r["position"] if r["direction"] == "backward" else 15 - r["position"])
               for r in rows)
    fit = gradflow_decay(pd.DataFrame(rows)).set_index("direction")
    assert (fit["decay"] < 0.8).all() and (fit["ci_hi"] < 1).all()


def test_replay_reproduces_every_fused_recurrent_encoder():
    torch.manual_seed(0)
    x = torch.randn(3, 6, 5)
    lengths = torch.tensor([6, 2, 4])
    for mode, extra in [("rnn_tanh", {}), ("rnn_relu", {"nonlinearity": "relu"}), ("gru", {}),
                        ("lstm", {})]:
        cls = {"gru": nn.GRU, "lstm": nn.LSTM}.get(mode, nn.RNN)
        for layers, bidirectional, batch_first in [(1, False, True), (2, True, True), (2, True, False)]:
            rnn = cls(5, 7, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first,
                      **extra).eval()
            probe = torch.zeros(3, 6, 2 if bidirectional else 1, 7)
            inputs = x if batch_first else x.transpose(0, 1)
            hx = torch.randn(layers * (2 if bidirectional else 1), 3, 7)
            hx = (hx, torch.randn_like(hx)) if mode == "lstm" else hx
            for given, hidden in [(inputs, hx), (pack_padded_sequence(x, lengths, batch_first=True,
                                                                      enforce_sorted=False), None)]:
                if not batch_first and hidden is None:
                    continue
                fused_out, fused_final = rnn(given, hidden)
                out, final = replay(rnn, given, hidden, probe)
                if hidden is None:
                    fused_out = pad_packed_sequence(fused_out, batch_first=True)[0]
                    out = pad_packed_sequence(out, batch_first=True)[0]
                torch.testing.assert_close(out, fused_out, rtol=1e-5, atol=1e-6)
                for a, b in zip(*(f if isinstance(f, tuple) else (f,) for f in (final, fused_final))):
                    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_elman_decays_faster_than_lstm_and_the_transformer_is_flat():
    """The acceptance check of the measurement, on the project's own models at initialisation.

    Task: copy the first 3 of 30 random symbols through the encoder's last state (unidirectional,
    no attention), a dependency over ~27 steps; 32 sentences, distances 0-20, fixed seeds.
    At initialisation, because the question is whether the diagnostic measures the architectures'
    gradient propagation, not what an optimiser happens to learn in a few steps: an Elman tanh
    recurrence multiplies by diag(tanh')·W_hh each step (PyTorch's U(±1/√H) init: spectral norm
    ≈ 0.58), the LSTM's gradient also rides the additive cell path (forget gate ≈ 0.5 at init, plus
    the gates' contributions), and a Transformer encoder has no recurrence at all. A few hundred
    training steps keep this order (measured: Elman 0.46, LSTM 0.74) while making the
    Transformer's curve task-shaped (attention learns where the needed symbols are).
    """
    torch.manual_seed(7)
    body = torch.randint(4, 24, (32, 29))
    src = torch.cat([body, torch.full((32, 1), EOS)], dim=1)
    tgt = body[:, :3]
    batch = {"src": src, "tgt_in": torch.cat([torch.full((32, 1), BOS), tgt], 1),
             "tgt_out": torch.cat([tgt, torch.full((32, 1), EOS)], 1), "idx": torch.arange(32)}
    fits = {}
    for name, family, options in [
            ("elman", "rnn", dict(cell="elman-tanh", attention="none", bidirectional=False)),
            ("lstm", "rnn", dict(cell="lstm", attention="none", bidirectional=False)),
            ("transformer", "transformer", dict(positional="sinusoidal"))]:
        rows = gradient_flow(real_model(family, **options), batch, max_distance=20)
        fit = gradflow_decay(pd.DataFrame(rows))
        assert len(fit) == 1 and fit["sentences"].item() == 32 and fit["max_distance"].item() == 20
        fits[name] = fit.iloc[0]
    elman, lstm, transformer = fits["elman"], fits["lstm"], fits["transformer"]
    assert (elman["direction"], lstm["direction"], transformer["direction"]) == (
        "forward", "forward", "undirected")
    assert elman["ci_hi"] < lstm["ci_lo"], fits                 # measurably steeper
    assert elman["decay"] < 0.6 and lstm["decay"] < 0.8          # both vanish at init
    assert 0.98 < transformer["ci_lo"] and transformer["ci_hi"] < 1.02, transformer


def test_transformer_gradient_is_taken_at_the_first_encoder_layer_input():
    model = real_model("transformer", positional="sinusoidal").eval()
    batch = equal_length_batch(n=3, m=6, vocab=24)
    captured = []

    def keep(module, args, output):
        output.retain_grad()
        captured.append(output)

    handle = model.encoder.layers[0].register_forward_pre_hook(lambda m, args: keep(m, None, args[0]))
    summed_cross_entropy(model(batch["src"], batch["tgt_in"]).logits, batch["tgt_out"]).backward()
    handle.remove()
    expected = captured[0].grad.norm(dim=-1)
    model.zero_grad(set_to_none=True)
    measured = norms_of(gradient_flow(model, batch), "undirected")
    assert len(measured) == 18
    for (b, t), norm in measured.items():
        assert norm == pytest.approx(expected[b, t].item(), rel=1e-5)


@pytest.mark.parametrize("family,options", [
    ("rnn", dict(cell="lstm", attention="bahdanau", scoring="additive", enc_layers=2)),
    ("rnn", dict(cell="gru", attention="luong", scoring="general", bidirectional=False)),
    ("rnn", dict(cell="elman-relu", attention="none", context="every-step")),
    ("transformer", dict(positional="rotary", norm="post"))])
def test_every_state_of_real_models_reaches_the_loss(family, options):
    model = real_model(family, **options).train()
    src = torch.randint(4, 24, (4, 9))
    for row, length in enumerate([9, 3, 6, 1]):
        src[row, length - 1], src[row, length:] = EOS, PAD
    batch = batch_of(src, vocab=24)
    batch["idx"] = torch.tensor([5, 6, 7, 8])
    rows = gradient_flow(model, batch)
    directions = 2 if family == "rnn" and options.get("bidirectional", True) else 1
    assert len(rows) == (9 + 3 + 6 + 1) * directions
    assert {r["sentence"] for r in rows} == {5, 6, 7, 8}
    assert all(r["norm"] > 0 for r in rows)
    assert model.training and all(p.grad is None for p in model.parameters())
    capped = gradient_flow(model, batch, max_distance=2)
    assert {r["distance"] for r in capped} == {0, 1, 2}
    assert len(capped) == (3 + 3 + 3 + 1) * directions


def test_rows_cover_each_sentence_once_per_position_with_padding():
    src = torch.tensor([[5, 6, 7, EOS], [5, EOS, PAD, PAD], [8, 9, EOS, PAD]])
    rows = gradient_flow(ElmanToy(attend=True), batch_of(src))
    assert sorted((r["sentence"], r["position"], r["distance"]) for r in rows) == [
        (0, 0, 3), (0, 1, 2), (0, 2, 1), (0, 3, 0), (1, 0, 1), (1, 1, 0),
        (2, 0, 2), (2, 1, 1), (2, 2, 0)]


def test_sentences_do_not_influence_each_other():
    src = torch.tensor([[5, 6, 7, EOS], [5, EOS, PAD, PAD]])
    torch.manual_seed(0)
    model = ElmanToy(attend=True)
    both = norms_of(gradient_flow(model, batch_of(src)))
    alone = norms_of(gradient_flow(model, {k: v[:1] for k, v in batch_of(src).items()}))
    assert set(alone) == {(0, t) for t in range(4)}
    assert all(both[key] == pytest.approx(alone[key]) for key in alone)


@pytest.mark.parametrize("training", [True, False])
def test_gradient_flow_leaves_parameters_and_mode_alone(training):
    model = ElmanToy(attend=True).train(training)
    rows = gradient_flow(model, equal_length_batch(m=5))
    assert len(rows) == 16 * 5
    assert model.training is training
    assert all(p.grad is None for p in model.parameters())
    # with existing gradients, they are left exactly as they were
    model(equal_length_batch()["src"], equal_length_batch()["tgt_in"]).logits.sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    gradient_flow(model, equal_length_batch(m=5))
    assert all(torch.equal(b, p.grad) for b, p in zip(before, model.parameters()))


def test_gradient_flow_measures_the_model_without_dropout():
    # ElmanToy's decoder has dropout 0.5: a training-mode gradient differs from the eval one, and
    # gradient_flow of a model in training mode must give the eval-mode gradient, every time.
    torch.manual_seed(0)
    model = ElmanToy(recurrent_scale=0.9, attend=True)
    batch = equal_length_batch(n=4, m=6)
    expected = hand_unrolled_state_gradients(model.eval(), batch).norm(dim=-1)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    with_dropout = hand_unrolled_state_gradients(model.train(), batch).norm(dim=-1)
    model.zero_grad(set_to_none=True)
    assert not torch.allclose(with_dropout, expected, rtol=1e-3)      # dropout would show
    for _ in range(2):
        measured = norms_of(gradient_flow(model.train(), batch))
        assert all(norm == pytest.approx(expected[b, t].item(), rel=1e-4)
                   for (b, t), norm in measured.items())


def examples(lengths):
    return [{"idx": i, "src": list(range(4, 4 + n)), "tgt": [5, 6]} for i, n in enumerate(lengths)]


def test_the_sample_is_fixed_and_reaches_every_distance():
    data = examples([3, 25, 8, 21, 30, 20, 22, 40, 2] * 5)           # 45 sentences, 25 reach 20
    batch, distance = long_sentence_sample(data, n=10)
    assert distance == 20
    lengths = (batch["src"] != PAD).sum(1)
    assert (lengths >= 21).all() and batch["src"].size(0) == 10       # m tokens with EOS: d ≤ m-1
    assert batch["idx"].tolist() == sorted(batch["idx"].tolist())
    again, _ = long_sentence_sample(list(reversed(data)), n=10)       # order of the split: same sample
    assert torch.equal(again["idx"], batch["idx"]) and torch.equal(again["src"], batch["src"])
    other, _ = long_sentence_sample(data, n=10, seed=1)
    assert not torch.equal(other["idx"], batch["idx"])


def test_the_default_distance_shrinks_to_what_the_sentences_reach_and_an_explicit_one_does_not():
    data = examples([4, 5, 6, 7, 8, 9, 10])
    assert long_sentence_sample(data, n=3)[1] == 8                     # 3rd longest: 8 src tokens + EOS
    assert long_sentence_sample(data, n=3, max_distance=6)[1] == 6
    with pytest.raises(ValueError, match="gradflow_distance=9: only 2 sentences reach it, "
                                         "gradflow_sentences=3"):
        long_sentence_sample(data, n=3, max_distance=9)
    with pytest.raises(ValueError, match="gradflow_sentences=8 but the split has 7"):
        long_sentence_sample(data, n=8)
    everything, distance = long_sentence_sample(data)                  # default 32, split of 7: all 7
    assert everything["idx"].tolist() == list(range(7)) and distance == 4


def test_module_paths():
    assert module_path("encoder.layers.0.attn.q.weight", 2) == "encoder.layers.0"
    assert module_path("encoder.layers.0.attn.q.weight", 1) == "encoder"
    assert module_path("encoder.layers.0.attn.q.weight", 3) == "encoder.layers.0.attn"
    assert module_path("generator.weight", 2) == "generator"
    assert module_path("bias", 2) == "root"
    assert module_path("blocks.3.mlp.weight", 1) == "blocks.3"


def test_grad_norms_per_module_and_global():
    torch.manual_seed(0)
    model = ElmanToy(attend=True)
    batch = equal_length_batch()
    model(batch["src"], batch["tgt_in"]).logits.pow(2).mean().backward()
    per_module = per_module_grad_norms(model, depth=2)
    assert set(per_module) == {"encoder.embed", "encoder.rnn", "decoder.embed",
                               "decoder.layers.0", "decoder.layers.1"}
    expected = torch.cat([p.grad.flatten() for p in model.decoder["layers"][0].parameters()])
    assert per_module["decoder.layers.0"] == pytest.approx(expected.norm().item())
    total = global_grad_norm(model.parameters()).item()
    assert total == pytest.approx(sum(v ** 2 for v in per_module.values()) ** 0.5)
    assert total == pytest.approx(torch.nn.utils.get_total_norm(
        [p.grad for p in model.parameters()]).item(), rel=1e-5)
    assert global_grad_norm([nn.Parameter(torch.ones(2))]).item() == 0.0


def test_the_probe_runs_recurrent_kernels_that_have_a_backward_in_eval_mode():
    """cuDNN's RNN refuses a backward in eval mode (on a GPU every rnn trial of the demo sweep
    failed so at its first gradient-flow step): the probe's forward runs with cuDNN off."""
    model = real_model("rnn", cell="gru", attention="none").train()
    src = torch.randint(4, 24, (2, 5))
    src[:, -1] = EOS
    seen = []
    rnn = next(m for m in model.encoder.modules() if isinstance(m, nn.RNNBase))
    rnn.register_forward_pre_hook(lambda module, args: seen.append((module.training,
                                                                    torch.backends.cudnn.enabled)))
    gradient_flow(model, batch_of(src, vocab=24))
    assert seen and all(not training and not cudnn for training, cudnn in seen)
    assert torch.backends.cudnn.enabled
