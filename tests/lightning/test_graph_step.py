"""The training step replayed from CUDA graphs (``model.graph_step``, lightning/graphed_step.py).

On the CPU: what is refused before training, and the loss module the graphs capture. On a CUDA GPU
(not in CI: run this file there): the graphed losses equal the eager ones step by step."""

import itertools

import pytest
import torch

from conftest import CONFIGS, cli_in_process
from lit_attention.data.translation import TranslationDataModule
from lit_attention.lightning.graphed_step import GraphedLoss, _Loss
from lit_attention.lightning.translation import TranslationModule

SIZE = dict(family="transformer", d_model=32, heads=4, enc_layers=1, dec_layers=1, ffn=64, val_bleu=False)
PADDED = ["--data.pad_to_lengths", "[8,16,24,32,64,136]"]


@pytest.mark.parametrize("args,why", [
    ([], "needs data.pad_to_lengths"),
    ([*PADDED, "--model.family", "rnn", "--model.positional", "null", "--model.heads", "null", "--model.ffn", "null"],
     "captures the step of the transformer family only, not 'rnn'"),
    ([*PADDED, "--model.compile_step", "true"], "and model.compile_step: choose one"),
    ([*PADDED, "--trainer.precision", "64-true", "--trainer.accelerator", "cpu"],
     "runs in 32-true or bf16-mixed, not 64-true"),
    ([*PADDED, "--trainer.accumulate_grad_batches", "2"],
     "replays each batch's gradients into the same memory: not with trainer.accumulate_grad_batches 2"),
    ([*PADDED, "--trainer.accelerator", "cpu"], "replays CUDA graphs: it needs a CUDA GPU, and this run trains on cpu"),
])
def test_what_graph_step_needs_is_checked_before_training(args, why, tmp_path):
    out = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path / "runs",
                         "--model.graph_step", "true", *args)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"lit-attention fit: error: invalid configuration: model.graph_step {why}" in out.stderr
    assert not (tmp_path / "runs").exists()


def padded_batches(tmp_path, n: int):
    """The first ``n`` training batches (or all, if the epoch has fewer) of a toy set padded to 5 lengths."""
    dm = TranslationDataModule(task="toy-mt", n_train=200, n_val=10, n_test=10, max_len_words=12, tokenizer="word",
                               max_tokens=256, cache_dir=str(tmp_path), pad_to_lengths=[8, 16, 24, 32, 136], max_len=135)
    dm.setup("fit")
    return list(itertools.islice(dm.train_dataloader(), n)), dm


def test_the_gpu_test_batches_come_in_several_shapes(tmp_path):
    """What the GPU test below replays (its data part runs here: on the first GPU it met, it asked
    for more batches than the epoch has)."""
    batches, _ = padded_batches(tmp_path, 12)
    assert len(batches) >= 6
    assert len({tuple(b["src"].shape) + tuple(b["tgt_in"].shape) for b in batches}) >= 2


def module(dm, device: str = "cpu") -> TranslationModule:
    torch.manual_seed(0)
    m = TranslationModule(**SIZE, dropout=0.0, graph_step=True, src_vocab_size=dm.src_vocab_size,
                          tgt_vocab_size=dm.tgt_vocab_size)
    m.configure_model()
    return m.to(device).train()


def test_the_captured_module_computes_the_training_loss_from_the_batch_tensors(tmp_path):
    batches, dm = padded_batches(tmp_path, 1)
    m = module(dm)
    assert isinstance(m.step_loss(), GraphedLoss) and m.step_loss() is m.step_loss()
    loss = _Loss(m.net, m.training_loss, m.loss_inputs)
    batch = batches[0]
    assert torch.equal(loss(*(batch[k] for k in m.loss_inputs)), m.training_loss(batch)[0])
    assert [p for p in loss.parameters()] == [p for p in m.net.parameters()]
    first, targets = m.step_loss()(batch)   # a shape's first step: eager
    assert torch.equal(first, m.training_loss(batch)[0]) and targets is batch["tgt_out"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CUDA graphs)")
def test_graphed_steps_equal_eager_steps_on_a_gpu(tmp_path):
    batches, dm = padded_batches(tmp_path, 12)
    eager, graphed = module(dm, "cuda"), module(dm, "cuda")
    losses = {}
    for name, m, step in (("eager", eager, eager.training_loss), ("graphed", graphed, graphed.step_loss())):
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        losses[name] = []
        for batch in batches * 2:   # every shape again: its second step captures, the later replay
            batch = {k: v.cuda() for k, v in batch.items()}
            loss, _ = step(batch)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses[name].append(loss.item())
            # Dropped, as Lightning drops a step's loss: a loss kept to the next step keeps its
            # graph's gradient accumulators, made on the default stream, and a capture's backward
            # then fails ("operation would make the legacy stream depend on a capturing blocking
            # stream")
            del loss
    assert graphed.step_loss().graphs, "no shape came twice: nothing was captured"
    torch.testing.assert_close(losses["graphed"], losses["eager"], rtol=1e-4, atol=1e-5)
