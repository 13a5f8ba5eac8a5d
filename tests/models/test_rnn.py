"""Recurrent encoder-decoder: every cell x wiring x scoring trains, decodes incrementally,
masks padding, and handles teacher forcing."""

import pytest
import torch
import torch.nn.functional as F

from lit_attention import registry
from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.models import build_seq2seq
from lit_attention.models.base import select
from lit_attention.models.rnn import RNNSeq2Seq
from lit_attention.models.scoring import Dot, masked_softmax
from seq2seq_training import fingerprint, fingerprints_differing, loss_of, train_on_batch

pytestmark = pytest.mark.numeric   # floating-point equivalences: they hold on every CPU kernel set

V = 16
CELLS, SCORING = tuple(registry.CELLS), tuple(registry.SCORING)


TINY = dict(emb_size=8, d_model=12, dropout=0.0, rank=4, enc_layers=1, dec_layers=1, tie_embeddings=False)


def rnn(**options):
    """The rnn encoder-decoder, the options left out at the registry's defaults."""
    return build_seq2seq("rnn", V, V, **options)

# (attention, scoring, context, input_feeding) for every wiring the model supports
WIRINGS = ([("none", "additive", "init", False), ("none", "additive", "every-step", False)]
           + [(a, s, "init", f) for a in ("bahdanau", "luong") for s in SCORING for f in (True, False)])
WIRING_IDS = [f"{a}-{s}-{c}-{'feed' if f else 'nofeed'}" for a, s, c, f in WIRINGS]


# every encoder output meets some scorer; the parameter-free ones need keys of the decoder's size
ENC_OUTPUT_FOR = {"dot": "sum", "scaled_dot": "project", "general": "project", "low_rank": "sum"}


def make(cell="lstm", wiring=("bahdanau", "additive", "init", False), **kw):
    attention, scoring, context, feed = wiring
    kw.setdefault("enc_output", ENC_OUTPUT_FOR.get(scoring, "concat"))
    return rnn(cell=cell, attention=attention, scoring=scoring, context=context, input_feeding=feed,
               **{**TINY, **kw})


def batch(seed=0, B=4, S=7, T=6):
    """Random src/tgt with ragged lengths: PAD-padded, EOS-terminated source, BOS-first target."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (B, S), generator=g)
    tgt = torch.randint(4, V, (B, T + 1), generator=g)
    for b in range(B):
        n = S - b % 3
        src[b, n - 1], src[b, n:] = EOS, PAD
        m = T - b % 2
        tgt[b, m], tgt[b, m + 1:] = EOS, PAD
    return src, torch.cat([torch.full((B, 1), BOS), tgt[:, :-1]], 1), tgt


@pytest.mark.parametrize("wiring", WIRINGS, ids=WIRING_IDS)
@pytest.mark.parametrize("cell", CELLS)
def test_every_configuration_trains(cell, wiring):
    torch.manual_seed(0)
    # alternate encoder direction and depth so both paths meet every cell/wiring somewhere
    variant = WIRINGS.index(wiring) + CELLS.index(cell)
    model = make(cell, wiring, bidirectional=variant % 2 == 0, enc_layers=1 + variant % 2,
                 dec_layers=1 + (variant // 2) % 2)
    first, last = train_on_batch(model, *batch(), steps=8, lr=1e-2)
    assert last < first - 0.05


@pytest.mark.parametrize("bidirectional", [True, False], ids=["bi", "uni"])
@torch.no_grad()   # decoding is inference (beam search runs without autograd); 40 % less CPU
def test_step_by_step_matches_teacher_forced_decode(bidirectional):
    src, tgt_in, _ = batch(1)
    for cell in CELLS:
        for wiring in WIRINGS:
            torch.manual_seed(0)
            model = make(cell, wiring, bidirectional=bidirectional, enc_layers=2,
                         dec_layers=2).eval()
            memory = model.encode(src)
            expected = model.decode(memory, tgt_in).logits
            state, steps = model.init_state(memory), []
            for t in range(tgt_in.size(1)):
                logits, state = model.step(memory, state, tgt_in[:, t])
                steps.append(logits)
            torch.testing.assert_close(torch.stack(steps, 1), expected, atol=1e-5, rtol=1e-5,
                                       msg=f"{cell} {wiring}")


def test_memory_and_state_keep_batch_first_for_beam_reordering():
    torch.manual_seed(0)
    model = make("lstm", ("luong", "general", "init", True), enc_layers=2, dec_layers=3).eval()
    src, tgt_in, _ = batch(2)
    memory = model.encode(src)
    state = model.init_state(memory)
    assert state["h"].shape == state["c"].shape == (4, 3, 12)
    index = torch.tensor([2, 2, 0, 1])
    # stepping a reordered batch equals reordering a stepped batch
    logits, _ = model.step(select(memory, index), select(state, index), tgt_in[index, 0])
    expected, _ = model.step(memory, state, tgt_in[:, 0])
    torch.testing.assert_close(logits, expected[index])


@pytest.mark.parametrize("wiring", [w for w in WIRINGS if w[0] != "none"],
                         ids=[i for i, w in zip(WIRING_IDS, WIRINGS) if w[0] != "none"])
def test_attention_weights_sum_to_one_and_ignore_padding(wiring):
    torch.manual_seed(0)
    model = make("gru", wiring).eval()
    src, tgt_in, _ = batch(3)
    out = model(src, tgt_in, need_weights=True)
    weights = out.attention["cross"]
    assert weights.shape == (4, 1, tgt_in.size(1), src.size(1))
    pad = (src == PAD)[:, None, None, :].expand_as(weights)
    assert pad.any()
    assert (weights[pad] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


@pytest.mark.parametrize("attention", ["bahdanau", "luong"])
def test_query_is_previous_state_for_bahdanau_and_current_for_luong(attention):
    """Bahdanau scores with s_{t-1}, so the first step's weights cannot depend on the first
    input token; Luong scores with s_t, which has read it."""
    torch.manual_seed(0)
    model = make("lstm", (attention, "general", "init", False)).eval()
    src, tgt_in, _ = batch(7)
    first = model(src, tgt_in, need_weights=True).attention["cross"][:, 0, 0]
    other = tgt_in.clone()
    other[:, 0] = 5
    changed = model(src, other, need_weights=True).attention["cross"][:, 0, 0]
    assert torch.equal(first, changed) == (attention == "bahdanau")


def test_no_attention_returns_no_weights():
    src, tgt_in, _ = batch()
    assert make(wiring=WIRINGS[0])(src, tgt_in, need_weights=True).attention is None
    assert make()(src, tgt_in).attention is None


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("wiring", [WIRINGS[1], ("bahdanau", "dot", "init", False),
                                    ("luong", "concat", "init", True)], ids=str)
def test_extra_padding_changes_nothing(cell, wiring):
    torch.manual_seed(0)
    model = make(cell, wiring, enc_layers=2).eval()
    src, tgt_in, _ = batch(4)
    longer = torch.cat([src, torch.full((src.size(0), 3), PAD)], 1)
    short_mem, long_mem = model.encode(src), model.encode(longer)
    S = src.size(1)
    torch.testing.assert_close(long_mem["states"][:, :S], short_mem["states"])
    assert (long_mem["states"][:, S:] == 0).all()
    torch.testing.assert_close(long_mem["init_h"], short_mem["init_h"])
    torch.testing.assert_close(model.decode(long_mem, tgt_in).logits,
                               model.decode(short_mem, tgt_in).logits)
    # a padded sentence in a batch encodes as it does alone, unpadded
    n = int((src[2] != PAD).sum())
    alone = model.encode(src[2:3, :n])
    torch.testing.assert_close(short_mem["states"][2:3, :n], alone["states"])
    torch.testing.assert_close(short_mem["init_h"][2:3], alone["init_h"])


def test_teacher_forcing_ratio():
    torch.manual_seed(0)
    model = make("lstm", ("luong", "additive", "init", False))    # dropout 0: train == eval
    src, tgt_in, _ = batch(5)
    model.train()
    default = model(src, tgt_in).logits
    torch.testing.assert_close(model(src, tgt_in, teacher_forcing=1.0).logits, default)
    torch.manual_seed(1)
    sampled = model(src, tgt_in, teacher_forcing=0.5).logits
    assert sampled.shape == default.shape and torch.isfinite(sampled).all()
    assert not torch.allclose(sampled, default)
    loss = F.cross_entropy(sampled.reshape(-1, V), tgt_in.reshape(-1))
    loss.backward()
    # evaluation ignores the ratio
    model.eval()
    torch.testing.assert_close(model(src, tgt_in, teacher_forcing=0.0).logits, default)


def test_teacher_forcing_zero_feeds_own_argmax():
    torch.manual_seed(0)
    model = make("gru", ("bahdanau", "general", "init", False)).train()
    src, tgt_in, _ = batch(6)
    free_running = model(src, tgt_in, teacher_forcing=0.0).logits
    memory = model.encode(src)
    state, tokens, greedy = model.init_state(memory), tgt_in[:, 0], []
    for _ in range(tgt_in.size(1)):
        logits, state = model.step(memory, state, tokens)
        greedy.append(logits)
        tokens = logits.argmax(-1)
    torch.testing.assert_close(free_running, torch.stack(greedy, 1))


@pytest.mark.parametrize("wiring", [WIRINGS[0], WIRINGS[1], ("bahdanau", "additive", "init", False),
                                    ("luong", "dot", "init", True)], ids=str)
def test_tied_embeddings_share_the_output_matrix(wiring):
    torch.manual_seed(0)
    model = make("lstm", wiring, tie_embeddings=True)              # emb 8 != hidden 12
    assert model.generator.weight is model.tgt_embed.weight
    src, tgt_in, tgt_out = batch()
    loss_of(model, src, tgt_in, tgt_out).backward()
    assert model.tgt_embed.weight.grad is not None


def test_states_carry_gradient_without_attention():
    """Every wiring's loss reaches the encoder states, the no-attention ones through the final
    states (the backward direction's is at position 0)."""
    torch.manual_seed(0)
    model = make("lstm", WIRINGS[0])
    src, tgt_in, tgt_out = batch()
    memory = model.encode(src)
    memory["states"].retain_grad()
    logits = model.decode(memory, tgt_in).logits
    F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD).backward()
    grad = memory["states"].grad.norm(dim=-1)                      # [B, S]
    assert (grad[:, 0] > 0).all()                                  # backward final state


def test_invalid_configurations_are_rejected():
    with pytest.raises(ValueError, match="valid choices"):
        rnn(cell="transformer")
    with pytest.raises(ValueError, match="valid choices"):
        rnn(attention="local")
    with pytest.raises(ValueError, match="every-step"):
        rnn(attention="luong", context="every-step")
    with pytest.raises(ValueError, match="input_feeding"):
        rnn(attention="none", input_feeding=True)
    with pytest.raises(ValueError, match="enc_output"):
        rnn(attention="luong", scoring="dot", bidirectional=True, enc_output="concat")


@pytest.mark.parametrize("enc_output", ["sum", "project"])
def test_attention_attends_over_the_encoder_output_choice(enc_output):
    """Keys and values are the encoder states after enc_output: the two directions summed, or
    their concatenation through one shared bias-free Linear."""
    torch.manual_seed(0)
    model = make("gru", ("luong", "dot", "init", False), enc_output=enc_output).eval()
    src, _, _ = batch()
    memory = model.encode(src)
    states, H = memory["states"], TINY["d_model"]
    expected = (states[..., :H] + states[..., H:] if enc_output == "sum"
                else states @ model.enc_proj.weight.T)
    torch.testing.assert_close(memory["values"], expected)
    torch.testing.assert_close(memory["keys"], expected)        # dot: keys are the values as they are


def test_input_feeding_feeds_the_previous_readout_with_either_wiring():
    """With input feeding the first step sees a zero feed, so only later steps change."""
    src, tgt_in, _ = batch(5)
    for attention in ("bahdanau", "luong"):
        torch.manual_seed(0)
        model = make("gru", (attention, "general", "init", True)).eval()
        memory = model.encode(src)
        state = model.init_state(memory)
        assert (state["feed"] == 0).all()
        readout, _, state = model._advance(memory, state, model.tgt_embed(tgt_in[:, 0]))
        torch.testing.assert_close(state["feed"], readout)


def test_default_model_overfits_a_reverse_task():
    torch.manual_seed(0)
    n, length = 8, 5
    body = torch.randint(4, V, (n, length))
    src = torch.cat([body, torch.full((n, 1), EOS)], 1)
    tgt_out = torch.cat([body.flip(1), torch.full((n, 1), EOS)], 1)
    tgt_in = torch.cat([torch.full((n, 1), BOS), body.flip(1)], 1)
    model = rnn(emb_size=32, d_model=64, dropout=0.0, enc_layers=1, dec_layers=1,
                tie_embeddings=False)                          # lstm + additive bahdanau
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        loss = loss_of(model, src, tgt_in, tgt_out)
        loss.backward()
        opt.step()
        if loss.item() < 0.01:
            break
    model.eval()
    assert loss_of(model, src, tgt_in, tgt_out).item() < 0.05
    assert torch.equal(model(src, tgt_in).logits.argmax(-1), tgt_out)
    # free-running greedy decoding reproduces the reversed sources too
    memory = model.encode(src)
    state, tokens, output = model.init_state(memory), tgt_in[:, 0], []
    for _ in range(tgt_out.size(1)):
        logits, state = model.step(memory, state, tokens)
        tokens = logits.argmax(-1)
        output.append(tokens)
    assert torch.equal(torch.stack(output, 1), tgt_out)


def test_every_registered_cell_builds_its_torch_module():
    from lit_attention.models.rnn import make_rnn
    built = {cell: make_rnn(cell, 4, 6, 2, 0.0) for cell in CELLS}
    assert {type(m).__name__ for m in built.values()} == {"RNN", "GRU", "LSTM"}
    assert (built["elman-tanh"].nonlinearity, built["elman-relu"].nonlinearity) == ("tanh", "relu")
    assert all(m.hidden_size == 6 and m.num_layers == 2 and m.batch_first for m in built.values())
    with pytest.raises(ValueError, match="valid choices: elman-tanh"):
        make_rnn("mlstm", 4, 6, 1, 0.0)


def reference_decode(model, memory, tgt_in, attention, context, feed, enc_output):
    """Teacher-forced logits [B, T, V] of each wiring as the module docstring states it, one step at
    a time from the model's own modules (the decoder RNN and the scorer are tested elsewhere)."""
    states, H = memory["states"], model.decoder.hidden_size
    values = {"concat": states, "sum": states[..., :H] + states[..., H:] if states.size(-1) == 2 * H else states,
              "project": states @ model.enc_proj.weight.T if enc_output == "project" else None}[enc_output]
    hidden = tuple(memory[k].transpose(0, 1).contiguous() for k in ("init_h", "init_c") if k in memory)
    hidden = hidden if len(hidden) == 2 else hidden[0]
    readout = torch.zeros(tgt_in.size(0), model.out_size)

    def attend(query):                                            # query [B, H] -> context [B, K]
        scores = model.scorer(query[:, None], values)
        return (masked_softmax(scores, memory["src_pad"]) @ values)[:, 0]

    logits = []
    for t in range(tgt_in.size(1)):
        emb = model.tgt_embed(tgt_in[:, t])
        inputs = [emb]
        top = (hidden[0] if isinstance(hidden, tuple) else hidden)[-1]
        if attention == "bahdanau":                               # query s_{t-1}, context at the input
            ctx = attend(top)
            inputs.append(ctx)
        if context == "every-step":
            inputs.append(memory["init_h"][:, -1])
        if feed:
            inputs.append(readout)
        out, hidden = model.decoder(torch.cat(inputs, -1)[:, None], hidden)
        s = out[:, 0]
        if attention == "bahdanau":                               # tanh(W [s_t; c_t; e_t])
            readout = torch.tanh(model.readout(torch.cat([s, ctx, emb], -1)))
        elif attention == "luong":                                # query s_t: tanh(W [c_t; s_t])
            readout = torch.tanh(model.readout(torch.cat([attend(s), s], -1)))
        else:
            readout = model.readout(s)
        logits.append(model.generator(readout))
    return torch.stack(logits, 1)


# (cell, attention, scoring, context, input_feeding, bidirectional, enc_output, tie_embeddings):
# every wiring, context, encoder output and kind of cell state, with and without input feeding
GOLDEN_VARIANTS = [
    ("lstm", "none", "additive", "init", False, True, "concat", False),
    ("gru", "none", "additive", "every-step", False, False, "concat", True),
    ("lstm", "bahdanau", "additive", "init", False, True, "concat", False),
    ("gru", "bahdanau", "dot", "init", True, True, "sum", True),
    ("elman-tanh", "luong", "general", "init", False, True, "project", False),
    ("lstm", "luong", "low_rank", "init", True, False, "concat", True),
    ("elman-relu", "luong", "concat", "init", False, True, "sum", False),
    ("gru", "bahdanau", "scaled_dot", "init", False, False, "project", False),
]


def golden_model(variant):
    cell, attention, scoring, context, feed, bidirectional, enc_output, tie = variant
    torch.manual_seed(0)
    return RNNSeq2Seq(V, V, cell=cell, attention=attention, scoring=scoring, context=context,
                      input_feeding=feed, bidirectional=bidirectional, enc_output=enc_output,
                      **{**TINY, "tie_embeddings": tie, "enc_layers": 2, "dec_layers": 2}).eval()


@pytest.mark.parametrize("variant", GOLDEN_VARIANTS, ids=str)
def test_each_wiring_computes_what_its_docstring_states(variant):
    model = golden_model(variant)
    src, tgt_in, _ = batch(8)
    _, attention, _, context, feed, _, enc_output, _ = variant
    with torch.no_grad():
        memory = model.encode(src)
        expected = reference_decode(model, memory, tgt_in, attention, context, feed, enc_output)
        torch.testing.assert_close(model.decode(memory, tgt_in).logits, expected)


def golden_fingerprints() -> dict[str, tuple]:
    src, tgt_in, _ = batch(8)
    return {"-".join(map(str, v)): fingerprint(lambda: golden_model(v), src, tgt_in) for v in GOLDEN_VARIANTS}


# golden_fingerprints()' values: what each variant computes, in float64 (seq2seq_training.fingerprint)
GOLDEN = {
    'lstm-none-additive-init-False-True-concat-False': [11.135187661306091, -1.0901910133658568, 12.566168639292073],
    'gru-none-additive-every-step-False-False-concat-True': [2.745165024457888, 10.052483798548716, 39.72903963028378],
    'lstm-bahdanau-additive-init-False-True-concat-False': [16.95962799803274, -11.098937305251676, 20.231045711678146],
    'gru-bahdanau-dot-init-True-True-sum-True': [11.091576678574544, 39.00479294689612, 428.57450092687964],
    'elman-tanh-luong-general-init-False-True-project-False': [10.2676681505853, -19.99704211256867, 18.970857081540395],
    'lstm-luong-low_rank-init-True-False-concat-True': [18.048467106102414, 10.38732667043448, 54.363472681979296],
    'elman-relu-luong-concat-init-False-True-sum-False': [10.381783474872336, 3.7152145352167487, 9.493830901147847],
    'gru-bahdanau-scaled_dot-init-False-False-project-False': [2.4094125411166787, -2.2309304576731357, 23.551949311016614],
}


@pytest.mark.numeric
def test_models_compute_their_golden_fingerprints():
    assert fingerprints_differing(golden_fingerprints(), GOLDEN) == []


@pytest.mark.numeric
def test_golden_tolerance_catches_a_one_ulp_change_of_the_attention_scale(monkeypatch):
    """The error bound is tighter than a real change: scaled_dot's 1/sqrt(d) off by one float32 ulp
    moves exactly the scaled_dot variants beyond it. Planted and unplanted run here, on the same kernels."""
    unplanted = {name: values for name, (values, _) in golden_fingerprints().items()}
    init = Dot.__init__

    def planted(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self.scale != 1.0:
            self.scale *= 1 + 2 ** -23

    monkeypatch.setattr(Dot, "__init__", planted)
    assert fingerprints_differing(golden_fingerprints(), unplanted) == [
        name for name in GOLDEN if "-scaled_dot-" in name]
