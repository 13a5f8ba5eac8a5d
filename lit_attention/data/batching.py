"""Token-count batching with length bucketing and rank sharding, and the batch collate function.

A batch's cost is its padded size: the longest example times the number of examples. Batches are
formed by sorting examples by length within large random chunks (similar lengths share a batch,
yet batches still differ from epoch to epoch), then the batch order is shuffled. Everything
random is drawn from ``(seed, epoch)``, so every rank computes the same global list of batches
and takes every ``num_replicas``-th one.

Training batches may be padded to a few listed lengths (``fit_length``) so that few batch shapes
occur: a compiled step builds a graph per shape, and the FLOP counter counts each shape once.
The sampler then counts each example at its listed length and keeps one length per batch.
"""

from __future__ import annotations

import bisect
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.threads import allowed_cores, env_threads

# Worker processes a loader gets for a CUDA device when data.num_workers is not given.
CUDA_WORKERS = 2


def padded_length(src_ids: Sequence[int], tgt_ids: Sequence[int]) -> int:
    """Length an example occupies in a batch: ``x EOS`` or ``BOS y``, whichever is longer."""
    return max(len(src_ids), len(tgt_ids)) + 1


def fit_length(length: int, lengths: Sequence[int]) -> int:
    """The smallest of the increasing ``lengths`` that holds ``length`` (ValueError: none does)."""
    i = bisect.bisect_left(lengths, length)
    if i == len(lengths):
        raise ValueError(f"no listed length holds {length} positions (the largest is {lengths[-1]})")
    return lengths[i]


class Position:
    """The epoch and the batches of it done: what a checkpoint keeps of a loader's place."""

    epoch, batches_done = 0, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batches_done": self.batches_done}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.batches_done = int(state["epoch"]), int(state["batches_done"])


class TokenBatchSampler(Position):
    """Yields lists of example indices whose padded size stays within ``max_tokens``.

    ``lengths`` are per-example padded lengths (see ``padded_length``). A single example longer
    than ``max_tokens`` still gets a batch of its own (filter long training pairs beforehand).
    With ``pad_to_equal`` every rank gets the same number of batches: the global list is
    extended by repeating its first batches until it divides evenly. With ``one_length`` a batch
    holds examples of one length only (lengths padded to a few values: see ``fit_length``), each
    length's examples are batched in the epoch's random order as one chunk, so its batches are full
    but for one, and every epoch has the same batch shapes.
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, shuffle: bool = True,
                 seed: int = 0, num_replicas: int = 1, rank: int = 0,
                 bucket_size_multiplier: int = 100, pad_to_equal: bool = True,
                 mark_padding: bool = False, one_length: bool = False):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in 0..{num_replicas - 1}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.max_tokens, self.bucket_size_multiplier = max_tokens, bucket_size_multiplier
        self.shuffle, self.seed = shuffle, seed
        self.num_replicas, self.rank, self.pad_to_equal = num_replicas, rank, pad_to_equal
        # Evaluation pads too (a rank with no batch breaks DDP), but marks the repeats by offsetting
        # their indices by len(lengths): `MarkedExamples` turns them into examples with dup=True.
        self.mark_padding, self.one_length = mark_padding, one_length
        self.start = 0            # batches of this epoch to skip when iteration (re)starts
        self.first = 0            # where the current iteration started
        self._cache: tuple[int, list[list[int]]] | None = None

    @property
    def sampler(self):
        # Lightning calls set_epoch on `dataloader.batch_sampler.sampler` at each epoch start.
        return self

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.start, self.batches_done = epoch, 0, 0

    def global_batches(self, epoch: int) -> list[list[int]]:
        """Every rank's batches for ``epoch``, before sharding and padding."""
        n = len(self.lengths)
        if n == 0:
            return []
        rng = np.random.default_rng([self.seed, epoch])
        if self.shuffle:
            order = rng.permutation(n)
            typical_batch = max(1, self.max_tokens // max(1, int(np.median(self.lengths))))
            # one length per batch: a stable sort of the whole epoch keeps each length's random order
            chunk = n if self.one_length else self.bucket_size_multiplier * typical_batch
        else:
            order, chunk = np.arange(n), n
        batches = []
        for begin in range(0, n, chunk):
            ids = order[begin:begin + chunk]
            ids = ids[np.argsort(self.lengths[ids], kind="stable")]
            batch, longest = [], 0
            for i in ids.tolist():
                length = int(self.lengths[i])
                full = max(longest, length) * (len(batch) + 1) > self.max_tokens
                if batch and (full or (self.one_length and length != longest)):
                    batches.append(batch)
                    batch, longest = [], 0
                batch.append(i)
                longest = max(longest, length)
            batches.append(batch)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def rank_batches(self) -> list[list[int]]:
        """This rank's batches for the current epoch."""
        if self._cache is None or self._cache[0] != self.epoch:
            batches = self.global_batches(self.epoch)
            remainder = len(batches) % self.num_replicas
            if self.pad_to_equal and remainder and batches:
                missing = self.num_replicas - remainder
                offset = len(self.lengths) if self.mark_padding else 0
                batches = batches + [[j + offset for j in batches[i % len(batches)]]
                                     for i in range(missing)]
            self._cache = (self.epoch, batches[self.rank::self.num_replicas])
        return self._cache[1]

    def __len__(self) -> int:
        return len(self.rank_batches())

    def __iter__(self):
        self.first, self.start = self.start, 0
        self.batches_done = self.first
        for batch in self.rank_batches()[self.first:]:
            self.batches_done += 1
            yield batch

    def load_state_dict(self, state: dict) -> None:
        """Resume mid-epoch: the next iteration skips the batches already consumed."""
        super().load_state_dict(state)
        self.start = self.batches_done


class ResumableDataLoader(Position, DataLoader):
    """A DataLoader whose position Lightning saves in checkpoints (it has ``state_dict``).

    It counts the batches it has returned rather than asking its TokenBatchSampler, which worker
    processes run ahead of.
    """

    def __iter__(self):
        sampler = self.batch_sampler
        for count, batch in enumerate(super().__iter__(), start=1):
            # the sampler has begun its iteration by now, so sampler.first is this epoch's start
            self.epoch, self.batches_done = sampler.epoch, sampler.first + count
            yield batch

    def load_state_dict(self, state: dict) -> None:
        self.batch_sampler.load_state_dict(state)
        super().load_state_dict(state)


class SplitLoaders:
    """Lightning's loader hooks of a data module, each its split's loader from ``_loader(split)``
    (put before LightningDataModule among the bases, whose hooks it replaces)."""

    def train_dataloader(self):
        return self._loader("train")

    def val_dataloader(self):
        return self._loader("val")

    def test_dataloader(self):
        return self._loader("test")


class MarkedExamples:
    """Examples indexed as usual; index i >= len marks a padding repeat of example i - len."""

    def __init__(self, examples: Sequence[dict]):
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict:
        if i >= len(self.examples):
            return {**self.examples[i - len(self.examples)], "dup": True}
        return self.examples[i]


def pin_memory(trainer) -> bool:
    """Whether a loader should pin its batches: when they go to a CUDA device (then the copy is
    asynchronous and overlaps the step before it)."""
    strategy = getattr(trainer, "strategy", None)
    return strategy is not None and strategy.root_device.type == "cuda"


def loader_workers(asked: int | None, trainer) -> int:
    """DataLoader worker processes: ``asked`` (data.num_workers) when given; else none for a CPU,
    where a worker would take a core from the model's own threads, and for a CUDA device up to
    ``CUDA_WORKERS`` of the cores this process may use beyond its main one: collating a batch on
    the main thread is time a launch-bound GPU step waits for."""
    if asked is not None:
        return asked
    if not pin_memory(trainer):
        return 0
    return max(0, min(CUDA_WORKERS, (env_threads() or allowed_cores()) - 1))


class Batch(dict):
    """A collated batch: a dict of tensors that a DataLoader worker sends as one buffer.

    torch.multiprocessing sends each CPU tensor's storage as a file descriptor, with a socket
    handshake each, which the receiving thread of the main process (on a GPU, the loader's
    pin-memory thread, beside the launch-bound training thread) runs in Python: one buffer costs it
    one handshake instead of five. Pickled, a batch of plain CPU tensors (strided, no
    gradient) becomes their bytes in one uint8 tensor, each part at a multiple of 8 bytes, and
    arrives as views of it; any other batch pickles as a dict.
    """

    def __reduce__(self):
        if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.layout == torch.strided
                   and not t.requires_grad for t in self.values()):
            return Batch, (dict(self),)
        parts, layout, offset = [], [], 0
        for key, t in self.items():
            raw = t.contiguous().reshape(-1).view(torch.uint8)
            parts.append(raw)
            layout.append((key, t.dtype, tuple(t.shape), offset, raw.numel()))
            offset += raw.numel()
            if offset % 8:
                parts.append(torch.zeros(8 - offset % 8, dtype=torch.uint8))
                offset += 8 - offset % 8
        return _unpack, (torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8), tuple(layout))

    def __copy__(self) -> "Batch":
        return Batch(self)


def _unpack(buffer: torch.Tensor, layout: tuple) -> Batch:
    return Batch({key: buffer[offset:offset + size].view(dtype).view(shape)
                  for key, dtype, shape, offset, size in layout})


def collate(examples: Sequence[dict], pad_to: Sequence[int] | None = None) -> Batch:
    """Batch dict: ``src`` = x EOS, ``tgt_in`` = BOS y, ``tgt_out`` = y EOS, PAD-padded; ``idx``;
    ``keep`` is False on padding repeats (evaluation under DDP), which metrics must skip.

    With ``pad_to`` (increasing lengths) source and target are both padded to the smallest of
    them that holds the batch's longest side: [B, L] each, L one of ``pad_to``."""
    # Padded Python rows, then one tensor each: a few times faster than per-example tensor writes,
    # on the training loop's thread.
    src_len = max(len(ex["src"]) for ex in examples) + 1
    tgt_len = max(len(ex["tgt"]) for ex in examples) + 1
    if pad_to is not None:
        src_len = tgt_len = fit_length(max(src_len, tgt_len), pad_to)
    src = torch.tensor([[*ex["src"], EOS, *[PAD] * (src_len - 1 - len(ex["src"]))] for ex in examples],
                       dtype=torch.long)
    tgt_in = torch.tensor([[BOS, *ex["tgt"], *[PAD] * (tgt_len - 1 - len(ex["tgt"]))] for ex in examples],
                          dtype=torch.long)
    tgt_out = torch.tensor([[*ex["tgt"], EOS, *[PAD] * (tgt_len - 1 - len(ex["tgt"]))] for ex in examples],
                           dtype=torch.long)
    idx = torch.tensor([ex["idx"] for ex in examples], dtype=torch.long)
    keep = torch.tensor([not ex.get("dup", False) for ex in examples])
    return Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out, idx=idx, keep=keep)
