"""Writing files the way every layer needs: atomically, with the user's umask."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def atomic_write(path: Path | str, data: str | bytes) -> None:
    """Write ``data`` to ``path`` so that a reader never sees a partial file (temp file + rename).

    The temp file is created like any other file (mode 0666 minus the umask), not with
    tempfile.mkstemp's 0600, so that what the suite writes is as readable as the user intends.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        if isinstance(data, str):
            with open(tmp, "x", encoding="utf-8") as f:
                f.write(data)
        else:
            with open(tmp, "xb") as f:
                f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_writable(directory: Path) -> None:
    """Create `directory` and a 4 KiB file in it, then remove the file: OSError (naming the path)
    if the file system refuses (read-only, full, no permission)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".write-test-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"x" * 4096)
            f.flush()
            os.fsync(f.fileno())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)
