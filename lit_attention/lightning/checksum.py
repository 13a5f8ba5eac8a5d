"""A checkpoint's content checksum: written into every checkpoint, checked whenever one is loaded.

torch.load does not check the CRCs of its zip archive: a checkpoint whose tensor bytes were
overwritten in place loads without a word and evaluates to other numbers. Every checkpoint the
Trainer saves carries ``content_sha256``, a SHA-256 over everything else in it (each tensor's
place, dtype, shape and bytes; each plain value's place and repr), and one that no longer matches
is refused (ChecksumError) before any of it is used.

On an accelerator a checkpoint is copied to the CPU as it is at the save (from a CUDA device without
waiting for the device) and written by a thread of its own while training goes on
(ChecksummedCheckpointIO).
"""

from __future__ import annotations

import copy
import hashlib
import os
import weakref
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_warn

CHECKSUM_KEY = "content_sha256"
PLAIN = (int, float, str, bool, type(None))


class ChecksumError(ValueError):
    """A checkpoint whose contents differ from what was saved."""


def _feed(digest, place: str, value: Any) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _feed(digest, f"{place}/{key!r}", item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{place}:{type(value).__name__}[{len(value)}]".encode())
        for i, item in enumerate(value):
            _feed(digest, f"{place}/{i}", item)
    elif isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        digest.update(f"{place}:{t.dtype}{tuple(t.shape)}".encode())
        digest.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))   # the bytes, not a copy
    elif isinstance(value, PLAIN):
        digest.update(f"{place}={value!r}".encode())
    else:   # no stable bytes to hash (a weights-only load refuses most such objects anyway)
        digest.update(f"{place}:{type(value).__name__}".encode())


def content_checksum(checkpoint: dict) -> str:
    """SHA-256 (hex) of a checkpoint dict's contents, its own checksum field left out."""
    digest = hashlib.sha256()
    _feed(digest, "", {k: v for k, v in checkpoint.items() if k != CHECKSUM_KEY})
    return digest.hexdigest()


def verify(checkpoint: dict, path) -> None:
    """ChecksumError if ``checkpoint`` (loaded from ``path``) is not what was saved; a warning if it
    carries no checksum (written before checkpoints had one: loaded unchecked)."""
    written = checkpoint.get(CHECKSUM_KEY)
    if written is None:
        rank_zero_warn(f"{path}: no content checksum (a checkpoint written before lit-attention wrote "
                       f"them): loaded without a check")
        return
    if content_checksum(checkpoint) != written:
        raise ChecksumError(f"--ckpt_path {path}: its contents differ from the checksum saved with it "
                            f"(changed or damaged since it was written): refused to load it")


def map_tensors(value: Any, fn) -> Any:
    """``value`` with each tensor ``t`` in its dicts, lists and tuples replaced by ``fn(t)``; the
    containers are copies of the same types (a state dict keeps its ``_metadata``)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        new = copy.copy(value)
        new.update((key, map_tensors(item, fn)) for key, item in value.items())
        return new
    if isinstance(value, list):
        return [map_tensors(item, fn) for item in value]
    if isinstance(value, tuple):
        items = [map_tensors(item, fn) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


def snapshot_on_cpu(checkpoint: dict, moved=lambda t: t.device.type != "cpu", split: bool = True,
                    landed: list | None = None) -> dict:
    """``checkpoint`` with its tensors off the CPU (those ``moved`` selects) copied to it in one
    transfer per (device, dtype), then split into a storage per tensor, as torch.save writes them
    (a tensor object that appears twice is copied once). Tensors on the CPU stay as they are.
    ``split=False`` leaves the copies views of their transfer's storage: torch.save then writes
    that storage once, and a load gives views into it (the writer thread's way: a copy per tensor
    there takes the training thread several times what the rest of the write does).

    The checksum and the file both read every tensor on the CPU. A copy per tensor waits for the
    device each time: hundreds of waits for each checkpoint of the reference Transformer, twice per
    epoch (best and last).

    ``landed`` (a list; views only, ``split=False``): a transfer from a CUDA device goes into pinned
    memory without waiting for the device, and the list receives the event it completes at; the
    snapshot's bytes may be read once those events are done (the writer thread's way: a snapshot
    made with that wait and a pageable copy holds the training thread)."""
    groups: dict[tuple, list[torch.Tensor]] = defaultdict(list)
    seen: set[int] = set()

    def collect(t: torch.Tensor) -> torch.Tensor:
        if moved(t) and id(t) not in seen:
            seen.add(id(t))
            groups[(t.device, t.dtype)].append(t)
        return t

    map_tensors(checkpoint, collect)
    if not groups:
        return checkpoint
    copies: dict[int, torch.Tensor] = {}
    for tensors in groups.values():
        flat = _to_host(torch.cat([t.detach().reshape(-1) for t in tensors]), landed)
        for t, piece in zip(tensors, flat.split([t.numel() for t in tensors])):
            copies[id(t)] = piece.view(t.shape).clone() if split else piece.view(t.shape)
    return map_tensors(checkpoint, lambda t: copies.get(id(t), t))


def _to_host(flat: torch.Tensor, landed: list | None) -> torch.Tensor:
    """``flat`` copied to the CPU: from a CUDA device with ``landed``, into pinned memory in the
    device's stream order, the event it completes at appended to ``landed``; else at once."""
    if landed is None or flat.device.type != "cuda":
        return flat.cpu()
    host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
    host.copy_(flat, non_blocking=True)   # `flat` may be freed now: its memory is reused in stream order
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(flat.device))
    landed.append(event)
    return host


class _Writer:
    """The file torch.save writes through, keeping the OSError of a write that failed: torch
    reports it as a RuntimeError without its errno, and a full disk must be named as one."""

    def __init__(self, file):
        self.file, self.error = file, None

    def _kept(self, method, *args):
        try:
            return method(*args)
        except OSError as exc:
            self.error = exc
            raise

    def write(self, data) -> int:
        return self._kept(self.file.write, data)

    def flush(self) -> None:
        self._kept(self.file.flush)


def _write(checkpoint: dict, path: Path, landed: tuple = ()) -> None:
    """``checkpoint`` and its checksum, torch.saved straight into a file beside ``path`` once the
    snapshot's transfers from the device (``landed``) are done, then renamed over it: a reader, or
    a kill, finds the old file or the new one, never a part of one. (Lightning's save first builds
    the whole file in memory, a copy of the checkpoint, twice an epoch.)"""
    for event in landed:
        event.synchronize()
    checkpoint = {**checkpoint, CHECKSUM_KEY: content_checksum(checkpoint)}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with open(partial, "wb") as f:
            writer = _Writer(f)
            try:
                torch.save(checkpoint, writer)
            except RuntimeError as exc:   # torch's report of a failed write drops its errno
                if writer.error is not None:
                    raise writer.error from exc
                raise
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _off_cpu(checkpoint: dict) -> bool:
    found = []
    map_tensors(checkpoint, lambda t: found.append(t.device.type != "cpu") or t)
    return any(found)


class ChecksummedCheckpointIO(TorchCheckpointIO):
    """Lightning's torch.save/torch.load checkpoint I/O, with ``content_sha256`` written and checked.

    A checkpoint whose tensors are on an accelerator (or any, with ``background=True``) is copied
    whole to the CPU (one storage per dtype; from a CUDA device into pinned memory, without waiting
    for the device), then checksummed and written by a writer thread while training goes on.
    Written in line, the two checkpoints an epoch (best and last) hold the GPU idle for a share of
    the epoch (bench/gpu_throughput.py --part writes). Writes keep their order; loading, removing,
    ``flush()`` and teardown wait for them, as does a fork (a DataLoader worker); a write that failed
    is raised by the next save or by any of those. Elsewhere a checkpoint is written before
    ``save_checkpoint`` returns.
    """

    def __init__(self, background: bool | None = None):
        super().__init__()
        self.background = background
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        _LIVE.add(self)

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        remote = storage_options is not None or "://" in str(path)
        background = not remote and (self.background if self.background is not None else _off_cpu(checkpoint))
        if not background:
            self.flush()   # earlier writes first, and their failure
            checkpoint = snapshot_on_cpu(checkpoint)   # for both the checksum and the file
            if remote:   # Lightning's way
                super().save_checkpoint({**checkpoint, CHECKSUM_KEY: content_checksum(checkpoint)},
                                        path, storage_options)
            else:
                _write(checkpoint, Path(path))
            return
        if any(f.done() and f.exception() is not None for f in self._pending):
            self.flush()   # a write that failed: raised now
        while len(self._pending) >= 2:   # bounded memory: at most two snapshots wait to be written
            self._pending.pop(0).result()
        landed: list = []
        snapshot = snapshot_on_cpu(checkpoint, moved=lambda t: True, split=False, landed=landed)   # this moment's
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self._pending.append(self._writer.submit(_write, snapshot, Path(path), tuple(landed)))

    def flush(self) -> None:
        """Wait for the checkpoints being written; raise the first write's error, if one failed."""
        pending, self._pending = self._pending, []
        for error in [f.exception() for f in pending]:   # each waits for its write
            if error is not None:
                raise error

    def load_checkpoint(self, path, map_location=lambda storage, loc: storage, weights_only=None) -> dict[str, Any]:
        self.flush()
        checkpoint = super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        verify(checkpoint, path)
        return checkpoint

    def remove_checkpoint(self, path) -> None:
        self.flush()
        super().remove_checkpoint(path)

    def teardown(self) -> None:
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None


_LIVE: "weakref.WeakSet[ChecksummedCheckpointIO]" = weakref.WeakSet()


def _finish_writes_before_fork() -> None:
    # A child forked while the writer thread holds a lock (the allocator's, a file's) could wait on
    # it forever; errors stay with their writes (flush raises them in this process).
    wait([f for io in list(_LIVE) for f in io._pending])


os.register_at_fork(before=_finish_writes_before_fork)
