"""A checkpoint's content checksum: written into every checkpoint, checked whenever one is loaded.

torch.load does not check the CRCs of its zip archive: a checkpoint whose tensor bytes were
overwritten in place loads without a word and evaluates to other numbers. Every checkpoint the
Trainer saves carries ``content_sha256``, a SHA-256 over everything else in it (each tensor's
place, dtype, shape and bytes; each plain value's place and repr), and one that no longer matches
is refused (ChecksumError) before any of it is used.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from lightning.fabric.utilities import move_data_to_device
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
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
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


class ChecksummedCheckpointIO(TorchCheckpointIO):
    """Lightning's torch.save/torch.load checkpoint I/O, with ``content_sha256`` written and checked."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        # One copy off the device for both the checksum and the file: each reads every tensor on
        # the CPU, and each tensor's copy waits for the device (2,100 waits a checkpoint of the
        # reference Transformer on a GPU, issue 38).
        checkpoint = move_data_to_device(checkpoint, torch.device("cpu"))
        super().save_checkpoint({**checkpoint, CHECKSUM_KEY: content_checksum(checkpoint)}, path,
                                storage_options)

    def load_checkpoint(self, path, map_location=lambda storage, loc: storage, weights_only=None) -> dict[str, Any]:
        checkpoint = super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        verify(checkpoint, path)
        return checkpoint
