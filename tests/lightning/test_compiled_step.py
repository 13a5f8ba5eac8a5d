"""The optional compiled training step (``model.compile_step``, lightning/base.py)."""

import pytest
import torch

from lit_attention.data.translation import TranslationDataModule
from lit_attention.lightning.translation import TranslationModule

SIZE = dict(family="transformer", d_model=32, heads=4, enc_layers=1, dec_layers=1, ffn=64, val_bleu=False)


def batches(tmp_path, n: int) -> list[dict]:
    """The first ``n`` training batches of a toy-mt data module, of more than one shape."""
    dm = TranslationDataModule(task="toy-mt", n_train=200, n_val=10, n_test=10, max_len_words=12,
                               tokenizer="word", max_tokens=256, cache_dir=str(tmp_path))
    dm.setup("fit")
    loader = iter(dm.train_dataloader())
    out = [next(loader) for _ in range(n)]
    assert len({tuple(b["src"].shape) + tuple(b["tgt_in"].shape) for b in out}) > 1
    return out, dm


def module(dm, **options) -> TranslationModule:
    torch.manual_seed(0)
    m = TranslationModule(**SIZE, **options, src_vocab_size=dm.src_vocab_size, tgt_vocab_size=dm.tgt_vocab_size)
    m.configure_model()
    return m.train()


@pytest.mark.slow   # 1.6-2.1 CPU-s (the fast set's 2-minute target)
def test_the_step_function_is_compiled_only_when_asked(tmp_path):
    _, dm = batches(tmp_path, 2)
    eager, compiled = module(dm), module(dm, compile_step=True)
    assert eager.step_loss() == eager.training_loss
    step = compiled.step_loss()
    assert step != compiled.training_loss and compiled.step_loss() is step   # built once
    assert compiled.hparams.compile_step is True
    assert list(compiled.state_dict()) == list(eager.state_dict())           # checkpoints unchanged


@pytest.mark.slow   # a dynamo trace each: 2.6-2.7 CPU-s
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_the_transformer_training_loss_traces_as_one_graph_for_every_batch_shape(tmp_path, dropout):
    """A value read inside the step (``.any()`` on a mask, say) would break the graph in two;
    fullgraph=True turns a break into an error. The eager backend runs the traced ops as they are."""
    data, dm = batches(tmp_path, 3)
    m = module(dm, dropout=dropout)
    traced = torch.compile(m.training_loss, backend="eager", fullgraph=True, dynamic=True)
    for batch in data:
        torch.manual_seed(1)
        loss, targets = traced(batch)
        assert targets is batch["tgt_out"] and torch.isfinite(loss)
        if dropout == 0.0:
            reference, _ = m.training_loss(batch)
            torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_compiled_steps_train_as_the_eager_ones_do(tmp_path):
    """Three optimizer steps through inductor's kernels and through eager PyTorch, on one seed
    and without dropout (inductor draws dropout masks from its own generator): the same losses
    and weights within float32 rounding of reordered sums. (SGD: Adam would blow the rounding of a
    gradient that is zero in exact arithmetic, such as the key bias's, up to a full step.)"""
    data, dm = batches(tmp_path, 3)
    runs = {}
    for compiled in (False, True):
        m = module(dm, dropout=0.0, compile_step=compiled)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = []
        for batch in data:
            loss, _ = m.step_loss()(batch)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        runs[compiled] = torch.stack(losses), m.state_dict()
    torch.testing.assert_close(runs[True][0], runs[False][0], rtol=1e-5, atol=1e-5)
    for name, value in runs[False][1].items():
        torch.testing.assert_close(runs[True][1][name], value, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow   # over 2 CPU seconds (2.2-4.3 s alone on 2 cores)
def test_padding_to_listed_lengths_bounds_the_graphs_a_static_compile_builds(tmp_path):
    """With ``dynamic=False`` (what CUDA graphs need) torch.compile builds a graph for every batch
    shape. ``data.pad_to_lengths`` bounds the shapes: per listed length, full batches of one size
    and the batch that ends the length. A backend that counts the graphs it is given, one epoch
    (unpadded, the same epoch has more shapes than torch's recompile limit of 8 lets it build)."""
    listed = [16, 24, 32, 48, 129]

    def data(pad):
        dm = TranslationDataModule(task="toy-mt", n_train=600, n_val=10, n_test=10, tokenizer="word",
                                   max_tokens=512, cache_dir=str(tmp_path), pad_to_lengths=pad)
        dm.setup("fit")
        return dm

    def shape(batch):
        return tuple(batch["src"].shape) + tuple(batch["tgt_in"].shape)

    unpadded_shapes = {shape(batch) for batch in data(None).train_dataloader()}
    dm = data(listed)
    m = module(dm, dropout=0.0)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    graphs, shapes = [], set()

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.compiler.reset()
    step = torch.compile(m.training_loss, backend=counting_backend, dynamic=False)
    for batch in dm.train_dataloader():
        shapes.add(shape(batch))
        loss, _ = step(batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.compiler.reset()
    assert len(graphs) == len(shapes) <= 2 * len(listed)
    assert len(unpadded_shapes) > 8 > len(shapes)
