"""The GPU step loops and batches that bench/gpu_throughput.py and bench/gpu_fit_parts.py both time."""

from __future__ import annotations

import time

import torch

import benchlib as B


def card(device: str) -> str:
    if device == "cpu":
        return B.machine()
    props = torch.cuda.get_device_properties(0)
    return (f"{props.name} ({props.total_memory / 2 ** 30:.0f} GiB, sm{props.major}{props.minor}), "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def plain_loop(template, batches: list[dict], precision: str, compiled: bool, warmup: int,
               device: str, cuda_graphs: bool = False, cudnn_attention: bool = False,
               cpu: dict | None = None, graphed_loss: bool = False) -> float:
    """Steps/s of the plain loop over ``batches`` (the first ``warmup`` untimed). ``cudnn_attention``:
    the cuDNN attention kernel allowed besides models/sdpa_backends.py's choice (first in line).
    ``cpu``: filled with the timed span's seconds of wall and CPU time (step_clock.cpu_span).
    ``graphed_loss``: the loss's forward and backward from a CUDA graph per batch shape, by what
    `fit --model.graph_step true` uses (lightning/graphed_step.GraphedLoss: a shape's first step
    eager, its second captured, the later ones replayed); clipping, Adam and the schedule eager."""
    import copy
    import types

    from step_clock import clocks, cpu_span

    from torch.nn.attention import SDPBackend, sdpa_kernel

    from lit_attention.models.sdpa_backends import allowed, attention_backends
    net = copy.deepcopy(template).to(device).train()
    mode = "reduce-overhead" if cuda_graphs else None
    model = torch.compile(net, dynamic=True, mode=mode) if compiled else net
    loss_of = lambda batch: B.seq2seq_loss(model, batch)   # noqa: E731
    if graphed_loss:
        from lit_attention.lightning.graphed_step import GraphedLoss
        inputs = ("src", "tgt_in", "tgt_out")
        graphed = GraphedLoss(types.SimpleNamespace(
            net=net, loss_inputs=inputs, target_key="tgt_out",
            training_loss=lambda batch: (B.seq2seq_loss(net, batch), batch["tgt_out"])))
        loss_of = lambda batch: graphed(batch)[0]   # noqa: E731
    opt, sched = B.adam_with_warmup(net.parameters(), 1e-3, 400)
    bf16 = precision == "bf16-mixed"
    start = None
    backends = (sdpa_kernel([SDPBackend.CUDNN_ATTENTION, *allowed(device, precision)], set_priority=True)
                if cudnn_attention else attention_backends(device, precision))
    with backends:
        for i, batch in enumerate(batches):
            if i == warmup:
                sync(device)
                start = clocks()
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            if cuda_graphs:   # a new training step: the graphs' outputs of the last one are done with
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
                loss = loss_of(batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            del loss   # as Lightning drops it: a loss kept alive would fail the next capture (graphed_step.py)
    sync(device)
    span = cpu_span(start)
    if cpu is not None:
        cpu.update(span)
    return (len(batches) - warmup) / span["wall"]


def no_gpu(args, script: str) -> bool:
    """True, after saying so (and the SUMMARY line), where ``--device cuda`` finds no CUDA GPU."""
    if args.device != "cuda" or torch.cuda.is_available():
        return False
    print(f"no CUDA GPU on this machine (torch {torch.__version__}): nothing measured")
    B.summary(f"{script}: not measured: no CUDA GPU on this machine")
    return True


def reference_batches(args, **options) -> tuple[dict, object, list[dict]]:
    """(data arguments, prepared TranslationDataModule, its first ``args.steps`` training batches,
    pinned on a GPU): Multi30k in the reference config's settings, or synthetic toy-mt with
    ``--quick`` or without ../shared/data; ``options``: more data module arguments."""
    import fit_overhead as F
    from lit_attention.data.translation import TranslationDataModule
    data = multi30k_args() if B.have_multi30k() and not args.quick else F.data_args(args.quick, 4096)
    dm = TranslationDataModule(**data, **options)
    dm.setup("fit")
    batches = B.train_batches(dm, args.steps)
    if args.device == "cuda":
        batches = [{k: v.pin_memory() for k, v in b.items()} for b in batches]
    return data, dm, batches


def padded_lengths(dm) -> list[int]:
    """``data.pad_to_lengths`` of the padded rows: multiples of 8 up to the data module's longest."""
    return list(range(8, dm.max_len + 9, 8))


def multi30k_args() -> dict:
    """TranslationDataModule arguments of the reference data (configs/reference/multi30k-*.yaml), 4,096-token batches."""
    return dict(task="files", data_dir=str(B.MULTI30K), src_lang="de", tgt_lang="en", train_split="train",
                val_split="val", test_split="test_2016_flickr", tokenizer="sentencepiece", spm_model="unigram",
                vocab_size=8000, joint_vocab=True, max_tokens=4096, max_len=128,
                cache_dir=str(B.REPO / ".cache" / "lit_attention"))
