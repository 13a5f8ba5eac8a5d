"""`lit-attention sweep FILE --test`: every finished run of a study evaluated on its test split.

Each run is one `lit-attention test` subprocess on the run's own config.yaml (so its decoding
settings: beam size, length penalty, length limits) and its best checkpoint (lowest validation
loss, checkpoints/best.ckpt), writing test_* metrics and hyps/test.txt into the same run store.
Runs are tested one at a time; a run already tested on its current best checkpoint is skipped,
so a second `--test` after `--resume` tests only the new runs. Pruned, failed and unfinished runs
are not tested (they are not completed cells) and are counted.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lit_attention.sweep.trial import flag_args
from lit_attention.tracking.schema import (BEST_CHECKPOINT, CHECKPOINTS, CONFIG, SUMMARY, Status,
                                          SummaryError, read_summary, summary_path)

TEST_COMMAND = [sys.executable, "-m", "lit_attention.cli", "test"]
BEST = Path(CHECKPOINTS) / f"{BEST_CHECKPOINT}.ckpt"


@dataclass
class Tested:
    """What `test_study` did: run ids tested, skipped (already tested) and failed (with why),
    and how many runs were not finished (not tested)."""
    tested: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    not_finished: int = 0

    def line(self) -> str:
        failed = f", {len(self.failed)} failed" if self.failed else ""
        return (f"tested {len(self.tested)} run(s) on the test split, {len(self.skipped)} already "
                f"tested{failed}, {self.not_finished} not finished (not tested)")


def test_metric(objective: str) -> str:
    """The test split's counterpart of the sweep's objective: val_bleu -> test_bleu."""
    prefix, _, rest = objective.partition("_")
    return f"test_{rest}" if prefix == "val" and rest else objective


def already_tested(run_dir: Path, summary: dict) -> bool:
    """A test result newer than the best checkpoint."""
    try:
        return (summary.get("test_loss") is not None and
                summary_path(run_dir).stat().st_mtime_ns >= (run_dir / BEST).stat().st_mtime_ns)
    except OSError:
        return False


def command(run_dir: Path, accelerator: str | None = None, tracking: str | None = None) -> list[str]:
    """The `lit-attention test` command of one run: its config, its best checkpoint, its run store,
    one process."""
    cmd = TEST_COMMAND + ["--config", str(run_dir / CONFIG), "--ckpt_path", str(run_dir / BEST),
                          "--run.root", str(run_dir.parent.parent), "--run.group", run_dir.parent.name,
                          "--run.id", run_dir.name, "--trainer.devices", "1", "--trainer.num_nodes", "1",
                          "--trainer.strategy", "auto"]
    return cmd + flag_args({"--trainer.accelerator": accelerator, "--tracking": tracking})


def test_study(study_dir: Path, accelerator: str | None = None, tracking: str | None = None,
               log=print) -> Tested:
    """Test every finished run under `study_dir` that has a best checkpoint and no test result
    on it yet; one line per run through `log`."""
    done = Tested()
    for run_dir in sorted(p.parent for p in study_dir.glob(f"*/{SUMMARY}")):
        try:
            summary = dict(read_summary(run_dir))
        except SummaryError as exc:       # unreadable: a failure with its reason, not "unfinished"
            done.failed.append((run_dir.name, str(exc)))
            continue
        if summary.get("status") != Status.FINISHED:
            done.not_finished += 1
            continue
        if not (run_dir / BEST).is_file():
            done.failed.append((run_dir.name, f"no {BEST}"))
            continue
        if already_tested(run_dir, summary):
            done.skipped.append(run_dir.name)
            continue
        out = subprocess.run(command(run_dir, accelerator, tracking), capture_output=True, text=True,
                             check=False)
        with contextlib.suppress(SummaryError):   # unreadable after its test: failed, and why
            if out.returncode == 0 and read_summary(run_dir).get("test_loss") is not None:
                done.tested.append(run_dir.name)
                log(f"  tested {run_dir.name}")
                continue
        lines = (out.stderr or out.stdout).strip().splitlines()
        why = lines[-1] if lines else f"exit {out.returncode}"
        done.failed.append((run_dir.name, why))
        log(f"  test of {run_dir.name} failed: {why}")
    return done
