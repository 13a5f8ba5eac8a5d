"""The local run store: always written, readable without any server.

runs/<group>/<run_id>/{config.yaml, metrics.csv, summary.json, hyps/<split>.txt, checkpoints/}
(the format: tracking/schema.py). Every file is written atomically (temp file + rename) so a
reader polling it (the sweep driver) never sees half a file.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
from lightning.pytorch.loggers.logger import Logger
from lightning.pytorch.utilities import rank_zero_only

from lit_attention.files import atomic_write  # noqa: F401  (the run store's writers import it from here)
from lit_attention.tracking import schema


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    names = ("lit-attention", "torch", "lightning", "sacrebleu", "sentencepiece", "optuna", "wandb")
    found = {}
    for name in names:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


class RunDir:
    """One run's directory and its files."""

    def __init__(self, path: Path | str):
        self.path = Path(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def checkpoints(self) -> Path:
        return self.path / schema.CHECKPOINTS

    def read_summary(self) -> schema.Summary:
        """The run's summary so far (empty before its first write)."""
        return schema.read_summary(self.path, missing_ok=True)

    def update_summary(self, **fields: Any) -> schema.Summary:
        return schema.update_summary(self.path, **fields)

    def write_lines(self, relpath: str, lines: list[str]) -> None:
        atomic_write(self.path / relpath, "".join(schema.as_line(line) + "\n" for line in lines))

    def write_array(self, relpath: str, array) -> None:
        """A numpy array as a .npy file (atomically)."""
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        atomic_write(self.path / relpath, buffer.getvalue())


class RunStoreLogger(Logger):
    """Lightning logger writing metrics.csv: one row per logged step, columns grow as needed."""

    def __init__(self, run_dir: RunDir):
        super().__init__()
        self.run_dir = run_dir
        self._columns = dict.fromkeys(schema.METRICS_COLUMNS)   # an ordered set
        self._last_flush = 0.0
        self._start = time.monotonic()

    @functools.cached_property
    def rows(self) -> list[dict]:
        """The rows so far: a resumed run keeps those it logged before the interruption (read at
        first use, once the run is claimed: what its last holder wrote up to its end)."""
        rows, metrics = [], self.run_dir.path / schema.METRICS
        with contextlib.suppress(FileNotFoundError), open(metrics, newline="") as f:
            for row in csv.DictReader(f):
                rows.append({k: v for k, v in row.items() if v != ""})
                self._columns.update(dict.fromkeys(row))
        return rows

    @rank_zero_only
    def rewind(self, step: int) -> None:
        """Forget rows logged after `step`: a run resumed from a checkpoint at `step` logs them again."""
        self.rows = [r for r in self.rows if float(r.get("step") or 0) <= step]
        kept = float(self.rows[-1].get("time") or 0) if self.rows else 0.0
        self._start = time.monotonic() - kept   # the time column continues where the kept rows end
        self.save()

    @property
    def name(self) -> str:
        return "run_store"

    @property
    def version(self) -> str:
        return self.run_dir.run_id

    @property
    def save_dir(self) -> str:
        return str(self.run_dir.path)

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        row = {"step": step, "time": round(time.monotonic() - self._start, 3)}
        row.update({k: float(v) for k, v in metrics.items()})
        self.rows.append(row)   # (the earlier rows' columns first)
        self._columns.update(dict.fromkeys(row))
        # Validation rows are what the sweep driver polls for: flush them at once.
        if any(k.startswith("val_") for k in metrics) or time.monotonic() - self._last_flush > 30:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        rows, buf = self.rows, io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(self._columns), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write(self.run_dir.path / schema.METRICS, buf.getvalue())
        self._last_flush = time.monotonic()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self.rows or (self.run_dir.path / schema.METRICS).exists():   # (a run refused in setup logged nothing)
            self.save()
