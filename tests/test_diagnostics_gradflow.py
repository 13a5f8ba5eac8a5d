import pytest
import torch
from torch import nn

from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.diagnostics import (global_grad_norm, gradient_flow, module_path,
                                       per_module_grad_norms)
from lit_attention.models.base import DecoderOutput, Seq2SeqModel

V, E, H = 12, 8, 16


class ElmanToy(Seq2SeqModel):
    """Elman (tanh) encoder with small recurrent weights; a decoder that sees only the final
    state, or attends (dot product) to every state."""

    def __init__(self, recurrent_scale: float = 0.2, attend: bool = False):
        super().__init__()
        self.attend = attend
        self.encoder = nn.ModuleDict({"embed": nn.Embedding(V, E, padding_idx=PAD),
                                      "rnn": nn.RNN(E, H, nonlinearity="tanh", batch_first=True)})
        with torch.no_grad():
            w = self.encoder["rnn"].weight_hh_l0
            w.mul_(recurrent_scale / torch.linalg.matrix_norm(w, ord=2))
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
        return DecoderOutput(self.decoder["layers"][1](hidden))


def batch_of(src):
    torch.manual_seed(1)
    tgt = torch.randint(4, V, (src.size(0), 5))
    tgt_in = torch.cat([torch.full((src.size(0), 1), BOS), tgt], dim=1)
    tgt_out = torch.cat([tgt, torch.full((src.size(0), 1), EOS)], dim=1)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}


def equal_length_batch(n=16, m=8):
    torch.manual_seed(0)
    src = torch.cat([torch.randint(4, V, (n, m - 1)), torch.full((n, 1), EOS)], dim=1)
    return batch_of(src)


def test_gradient_through_an_elman_encoder_decays_with_distance():
    torch.manual_seed(0)
    model = ElmanToy(recurrent_scale=0.2)
    rows = gradient_flow(model, equal_length_batch(m=8), wrt="encoder.embed")
    assert [r["distance"] for r in rows] == list(range(8))
    assert [r["position"] for r in rows] == [7 - d for d in range(8)]
    assert all(r["n"] == 16 for r in rows)
    norms = [r["norm"] for r in rows]
    assert all(a > b for a, b in zip(norms, norms[1:])), norms
    assert norms[-1] < 1e-3 * norms[0]


def test_gradient_wrt_states_counts_only_direct_uses():
    # nn.RNN's recurrence is one op: the states' gradient comes only from the decoder's reads.
    torch.manual_seed(0)
    rows = gradient_flow(ElmanToy(), equal_length_batch(m=6))
    assert rows[0]["norm"] > 0
    assert all(r["norm"] == 0 for r in rows[1:])
    rows = gradient_flow(ElmanToy(attend=True), equal_length_batch(m=6))
    assert all(r["norm"] > 0 for r in rows)


def test_rows_line_up_by_distance_with_padding():
    src = torch.tensor([[5, 6, 7, EOS], [5, EOS, PAD, PAD], [8, 9, EOS, PAD]])
    model = ElmanToy(attend=True)
    by_distance = gradient_flow(model, batch_of(src))
    assert [(r["distance"], r["n"]) for r in by_distance] == [(0, 3), (1, 3), (2, 2), (3, 1)]
    assert by_distance[3]["position"] == 0 and by_distance[0]["position"] == pytest.approx(2.0)
    by_position = gradient_flow(model, batch_of(src), by="position")
    assert [(r["position"], r["n"]) for r in by_position] == [(0, 3), (1, 3), (2, 2), (3, 1)]
    assert by_position[3]["distance"] == 0 and by_position[0]["distance"] == pytest.approx(2.0)
    # distance 3 is position 0 of the first sentence alone
    first = {k: v[:1] for k, v in batch_of(src).items()}
    assert by_distance[3]["norm"] == pytest.approx(gradient_flow(model, first)[3]["norm"])
    assert sum(r["n"] for r in by_distance) == int((src != PAD).sum())


def test_sentences_do_not_influence_each_other():
    src = torch.tensor([[5, 6, 7, EOS], [5, EOS, PAD, PAD]])
    torch.manual_seed(0)
    model = ElmanToy(attend=True)
    both = gradient_flow(model, batch_of(src), by="position", wrt="encoder.embed")
    first = {k: v[:1] for k, v in batch_of(src).items()}
    alone = gradient_flow(model, first, by="position", wrt="encoder.embed")
    assert both[3]["norm"] == pytest.approx(alone[3]["norm"])     # only sentence 0 has position 3


@pytest.mark.parametrize("training", [True, False])
def test_gradient_flow_leaves_parameters_and_mode_alone(training):
    model = ElmanToy(attend=True).train(training)
    rows = gradient_flow(model, equal_length_batch(m=5))
    assert len(rows) == 5
    assert model.training is training
    assert all(p.grad is None for p in model.parameters())
    # with existing gradients, they are left exactly as they were
    model(equal_length_batch()["src"], equal_length_batch()["tgt_in"]).logits.sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    gradient_flow(model, equal_length_batch(m=5), wrt="encoder.embed")
    assert all(torch.equal(b, p.grad) for b, p in zip(before, model.parameters()))


def test_gradient_flow_runs_without_dropout():
    model = ElmanToy(attend=True).train()
    a = gradient_flow(model, equal_length_batch())
    b = gradient_flow(model, equal_length_batch())
    assert a == b


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
    total = global_grad_norm(model.parameters())
    assert total == pytest.approx(sum(v ** 2 for v in per_module.values()) ** 0.5)
    assert total == pytest.approx(torch.nn.utils.get_total_norm(
        [p.grad for p in model.parameters()]).item(), rel=1e-5)
    assert global_grad_norm([nn.Parameter(torch.ones(2))]) == 0.0
