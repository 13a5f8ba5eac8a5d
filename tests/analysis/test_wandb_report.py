"""`report --wandb` on offline W&B runs: each run's run-store artifact (tracking/wandb.py) is read
back into a local run store, and the report is the one of the local store, p-values included
(real offline W&B runs, written by wandb itself; their logs read with `wandb leet inspect`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis_stores import demo_study
from conftest import cli_in_process
from lit_attention.analysis.load import find_run_dirs


def log_offline(run_dirs: list[Path], wandb_dir: Path, monkeypatch) -> None:
    """One offline W&B run per run store, each logging the store as its artifact."""
    import wandb

    from lit_attention.tracking.wandb import finish
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DATA_DIR", str(wandb_dir / "data"))   # artifacts' staged copies
    for run_dir in run_dirs:
        wandb.init(project="demo", group="demo", id=f"demo-{run_dir.name}", dir=str(wandb_dir))
        finish(run_dir)


@pytest.mark.slow
def test_report_on_offline_wandb_runs_equals_the_report_on_the_local_store(tmp_path, monkeypatch):
    runs = demo_study(tmp_path / "runs")
    log_offline(sorted(find_run_dirs(runs)), tmp_path / "wb", monkeypatch)
    local = cli_in_process("report", runs, "--out", tmp_path / "local", "--samples", "2000")
    assert local.returncode == 0, local.stderr[-2000:]
    remote = cli_in_process("report", "--wandb", tmp_path / "wb", "--out", tmp_path / "remote",
                            "--samples", "2000")
    assert remote.returncode == 0, remote.stderr[-2000:]
    for name in ("table.md", "table.csv", "significance.csv", "table.tex"):
        assert (tmp_path / "remote" / name).read_text() == (tmp_path / "local" / name).read_text(), name
    assert "▲" in (tmp_path / "local" / "table.md").read_text()   # a test ran, and it marks a row
    figures = {p.name for p in (tmp_path / "local").glob("*.png")}
    assert {"gradflow.png", "bleu_by_length.png"} <= figures
    assert {p.name for p in (tmp_path / "remote").glob("*.png")} == figures
    fetched = sorted(p.name for p in (tmp_path / "remote" / "wandb-runs").iterdir())
    assert len(fetched) == len(find_run_dirs(runs))


def test_report_wandb_dir_without_offline_runs_says_so(tmp_path):
    result = cli_in_process("report", "--wandb", tmp_path, "--out", tmp_path / "out")
    assert result.returncode == 2
    assert f"no offline W&B runs (offline-run-*) under {tmp_path}" in result.stderr


def test_report_refuses_a_runs_dir_and_wandb_together(tmp_path):
    result = cli_in_process("report", tmp_path, "--wandb", "me/project", "--out", tmp_path / "out")
    assert result.returncode == 2 and "give RUNS_DIR or --wandb, not both" in result.stderr


@pytest.mark.parametrize("source, message", [
    ("missing/dir/x", "--wandb missing/dir/x: no such directory, and not a W&B project (ENTITY/PROJECT)"),
    ("entity/project", "--wandb entity/project: reading a W&B project needs an API key"),
])
def test_a_wandb_source_that_cannot_be_read_is_one_line_not_a_traceback(tmp_path, monkeypatch, source, message):
    """Was: wandb's UsageError traceback (no API key), exit 1, also for a directory that does not exist."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))      # no key from a developer's ~/.netrc
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    result = cli_in_process("report", "--wandb", source, "--out", tmp_path / "out", "--no-figures", cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
