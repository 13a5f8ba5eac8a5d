"""The local run store: always written, readable without any server.

runs/<group>/<run_id>/{config.yaml, metrics.csv, summary.json, hyps/<split>.txt, checkpoints/}
Every file is written atomically (temp file + rename) so a reader polling it (the sweep driver)
never sees half a file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import secrets
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers.logger import Logger, rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

STOP_FILE = "STOP"
RUN_ID_ENV = "LIT_ATTENTION_RUN_ID"


def atomic_write(path: Path | str, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
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
        return self.path / "checkpoints"

    def read_summary(self) -> dict:
        try:
            return json.loads((self.path / "summary.json").read_text())
        except FileNotFoundError:
            return {}

    def update_summary(self, **fields: Any) -> dict:
        summary = self.read_summary()
        summary.update(fields)
        atomic_write(self.path / "summary.json", json.dumps(_json_safe(summary), indent=2) + "\n")
        return summary

    def write_lines(self, relpath: str, lines: list[str]) -> None:
        atomic_write(self.path / relpath, "".join(line.replace("\n", " ") + "\n" for line in lines))

    def stop_requested(self) -> str | None:
        stop = self.path / STOP_FILE
        if stop.exists():
            return stop.read_text().strip() or "stopped"
        return None


def find_latest_run(root: Path | str, group: str, with_checkpoint: bool = True) -> Path | None:
    """The newest run in a group (by directory mtime), optionally only runs with a last.ckpt."""
    group_dir = Path(root) / group
    if not group_dir.is_dir():
        return None
    runs = [p for p in group_dir.iterdir()
            if p.is_dir() and (not with_checkpoint or (p / "checkpoints" / "last.ckpt").exists())]
    return max(runs, key=lambda p: p.stat().st_mtime, default=None)


class RunStoreLogger(Logger):
    """Lightning logger writing metrics.csv: one row per logged step, columns grow as needed."""

    def __init__(self, run_dir: RunDir):
        super().__init__()
        self.run_dir = run_dir
        self.rows: list[dict] = []
        self._columns: list[str] = ["step", "epoch", "time"]
        self._last_flush = 0.0
        self._start = time.monotonic()
        self._load_existing()

    def _load_existing(self) -> None:
        # A resumed run keeps the rows it logged before the interruption.
        path = self.run_dir.path / "metrics.csv"
        if path.exists():
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    self.rows.append({k: v for k, v in row.items() if v != ""})
                    for k in row:
                        if k not in self._columns:
                            self._columns.append(k)

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

    @property
    @rank_zero_experiment
    def experiment(self) -> None:
        return None

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        row = {"step": step, "time": round(time.monotonic() - self._start, 3)}
        row.update({k: float(v) for k, v in metrics.items()})
        for k in row:
            if k not in self._columns:
                self._columns.append(k)
        self.rows.append(row)
        # Validation rows are what the sweep driver polls for: flush them at once.
        if any(k.startswith("val_") for k in metrics) or time.monotonic() - self._last_flush > 30:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self._columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write(self.run_dir.path / "metrics.csv", buf.getvalue())
        self._last_flush = time.monotonic()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.save()
