"""The training step's forward and backward replayed from CUDA graphs (``model.graph_step``).

On a GPU the reference Transformer's step is launch-bound: about a thousand kernels launched one
by one from Python, the GPU idle for much of the step. Replayed from a CUDA graph, the same eager
kernels run the plain loop faster over padded batches (docs/BENCHMARKS.md). A graph holds one batch shape, so this needs
``data.pad_to_lengths`` (11 shapes on Multi30k instead of one nearly every step).

For each batch shape, ``torch.cuda.make_graphed_callables`` captures the task module's training
loss (forward and backward) once; its replay is an autograd node, so Lightning's loop, the
backward call, clipping, the optimizer step and the diagnostics run as they do eagerly. A shape's
first step runs eagerly (the training budget counts its FLOPs then), its second captures it (three
warm-up passes, then the capture), the later ones replay it. The warm-up passes draw dropout masks,
and the graphs draw theirs from the generator's captured offsets: with dropout, a fixed seed gives
other (equally random) masks than the eager step. Each shape's graph keeps its own memory pool.
A capture needs the autograd graphs of earlier steps gone, as Lightning leaves them (it keeps a
step's loss detached): a loss kept alive holds its graph's gradient accumulators, made on the
default stream, and the capture of the backward then fails ("operation would make the legacy
stream depend on a capturing blocking stream").

What it needs (checked before training, lightning/cli.py): one CUDA device, a family whose step
reads no value back to the host (the Transformer), 32-true or bf16-mixed, no ``compile_step``, no
gradient accumulation (a replay writes its gradients where the last one did).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn


class _Loss(nn.Module):
    """A task module's training loss as a module of its network's parameters, taking the batch's
    tensors in the order of ``keys``."""

    def __init__(self, net: nn.Module, training_loss, keys: tuple[str, ...]):
        super().__init__()
        self.net, self.training_loss, self.keys = net, training_loss, keys

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.training_loss(dict(zip(self.keys, tensors)))[0]


class GraphedLoss:
    """``module.training_loss`` from a graph per batch shape: ``loss, targets = graphed(batch)``.

    module: a task module (lightning/base.py) with ``net``, ``training_loss``, ``target_key`` and
    ``loss_inputs`` (the batch keys the loss reads)."""

    def __init__(self, module):
        self.module = module
        self.keys: tuple[str, ...] = tuple(module.loss_inputs)
        self.seen: set[tuple] = set()
        self.graphs: dict[tuple, nn.Module] = {}

    def __call__(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = tuple(batch[k] for k in self.keys)
        shape = tuple(tuple(t.shape) for t in inputs)
        graphed = self.graphs.get(shape)
        if graphed is None:
            if shape not in self.seen:          # first: eager, its FLOPs counted by the budget
                self.seen.add(shape)
                return self.module.training_loss(batch)
            graphed = self.graphs[shape] = self._capture(inputs)
        # a copy: the graph's output tensor is overwritten by its next replay
        return graphed(*inputs).clone(), batch[self.module.target_key]

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> nn.Module:
        loss = _Loss(self.module.net, self.module.training_loss, self.keys)
        sample = tuple(t.clone() for t in inputs)
        # captures refuse autocast's weight cache (a cast cached in one replay is stale in the next)
        uncached = (torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)
                    if torch.is_autocast_enabled("cuda") else contextlib.nullcontext())
        with uncached:
            return torch.cuda.make_graphed_callables(loss, sample, allow_unused_input=True)
