"""`report --wandb` on W&B runs: each offline run's run store, as it logged it (its artifact's
files, kept in the W&B run's directory) or beside it, is read by the local report's reader, and
the report is the one of the local store, p-values and excluded runs included (real offline W&B
runs, written by wandb itself, and real killed runs). A project's runs without the artifact fall
back to their summaries one by one."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pandas as pd
import pytest

from analysis_stores import demo_study, write_run
from conftest import CONFIGS, REPO, cli_env, cli_in_process, run_cli
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
    """Read after W&B's staging cache is gone and the W&B directory has moved (another machine,
    or after `wandb sync`): the run store each run logged is still there."""
    runs = demo_study(tmp_path / "runs")
    log_offline(sorted(find_run_dirs(runs)), tmp_path / "wb", monkeypatch)
    shutil.rmtree(tmp_path / "wb" / "data", ignore_errors=True)  # the staging cache, if any
    shutil.move(tmp_path / "wb", tmp_path / "moved")
    local = cli_in_process("report", runs, "--out", tmp_path / "local", "--samples", "2000")
    assert local.returncode == 0, local.stderr[-2000:]
    remote = cli_in_process("report", "--wandb", tmp_path / "moved", "--out", tmp_path / "remote",
                            "--samples", "2000")
    assert remote.returncode == 0, remote.stderr[-2000:]
    for name in ("table.md", "table.csv", "significance.csv", "table.tex", "excluded.csv"):
        assert (tmp_path / "remote" / name).read_text() == (tmp_path / "local" / name).read_text(), name
    assert "▲" in (tmp_path / "local" / "table.md").read_text()   # a test ran, and it marks a row
    figures = {p.name for p in (tmp_path / "local").glob("*.png")}
    assert {"gradflow.png", "bleu_by_length.png"} <= figures
    assert {p.name for p in (tmp_path / "remote").glob("*.png")} == figures
    read = pd.read_csv(tmp_path / "remote" / "runs.csv")["run_dir"]
    assert len(read) == len(find_run_dirs(runs)) and read.str.startswith(str(tmp_path / "moved")).all()


TINY = ["--config", CONFIGS / "copy.yaml", "--data.n_train", "300", "--data.n_val", "40",
        "--data.n_test", "40", "--model.d_model", "32", "--model.ffn", "64", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "1",
        "--diagnostics.heatmaps", "0", "--tracking", "wandb", "--run.group", "g"]


@pytest.mark.slow
def test_a_run_killed_before_it_logged_is_excluded_as_the_local_report_excludes_it(tmp_path):
    """kill -9 ends a W&B run before it logs its run store: the report of its W&B runs reads the
    store beside it and counts and names it as the local report does."""
    env = cli_env(WANDB_MODE="offline", PYTHONPATH=str(REPO / "tests"))
    for seed in (1, 2):
        done = run_cli("fit", *TINY, "--run.root", tmp_path / "runs", "--run.id", f"s{seed}",
                       "--seed_everything", seed, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
    killed = run_cli("fit", *TINY, "--run.root", tmp_path / "runs", "--run.id", "k",
                     "--trainer.callbacks+=interrupt.SigkillAtFirstValidation", env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert len(list((tmp_path / "runs" / "g").glob("*/wandb/offline-run-*"))) == 3
    args = ("--metric", "val_loss", "--no-figures", "--baseline", "off")
    local = cli_in_process("report", tmp_path / "runs", "--out", tmp_path / "local", *args)
    remote = cli_in_process("report", "--wandb", tmp_path / "runs", "--out", tmp_path / "remote", *args)
    for result in (local, remote):
        assert result.returncode == 0, result.stderr[-2000:]
        assert "3 runs, 1 configurations, 1 excluded (1 killed)" in result.stdout, result.stdout[-500:]
    for name in ("excluded.csv", "table.md", "table.csv"):
        assert (tmp_path / "remote" / name).read_text() == (tmp_path / "local" / name).read_text(), name
    excluded = pd.read_csv(tmp_path / "remote" / "excluded.csv")
    assert excluded[["run_id", "status"]].values.tolist() == [["k", "killed"]]

    # without the run store beside it, the killed W&B run is still named, not lost
    moved = tmp_path / "wandb-only"
    for run in (tmp_path / "runs" / "g").glob("*/wandb/offline-run-*"):
        shutil.copytree(run, moved / run.parent.parent.name / run.name)
    alone = cli_in_process("report", "--wandb", moved, "--out", tmp_path / "alone", *args)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert "2 runs, 1 configurations, 1 excluded (1 no run store)" in alone.stdout, alone.stdout[-500:]
    [row] = pd.read_csv(tmp_path / "alone" / "excluded.csv").to_dict("records")
    assert row["status"] == "no run store" and row["run_id"] == "g-k" and "killed?" in row["reason"]


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
    """A directory that does not exist, or a project without an API key: one line, no output directory."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))      # no key from a developer's ~/.netrc
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    result = cli_in_process("report", "--wandb", source, "--out", tmp_path / "out", "--no-figures", cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


class Artifact:
    """A logged run-store artifact of a W&B project: `download` writes its files, as the public
    API's `Artifact.download` does (the W&B server does not run here)."""
    type = "run-store"

    def __init__(self, store: Path, version: int):
        self.store, self.version, self.name = store, f"v{version}", f"run-store-{store.name}:v{version}"

    def download(self, root: str) -> str:
        shutil.copytree(self.store, root)
        return root


def test_online_runs_without_the_artifact_fall_back_to_their_summaries_one_by_one(tmp_path):
    """A run without the artifact is read from its summary; the others from their run stores."""
    from wandb.apis.public import Run

    from lit_attention.analysis import load
    from lit_attention.analysis.wandb_import import online_stores

    model = dict(family="rnn", cell="gru", attention="luong", d_model=8)
    stored = write_run(tmp_path / "local", "g", "a", seed=1, model=model, val_bleu=20.0,
                       hyps=["a b"], refs=["a b"])

    class Logged(Run):
        def logged_artifacts(self):
            return [Artifact(stored, 0), Artifact(stored, 1)] if self.id == "a" else []

        def scan_history(self, keys=None, **_):
            return [{"trainer/global_step": 10, keys[1]: 1.0}]

    def wandb_run(run_id):
        summary = {"val_bleu": 21.0, "status": "finished", "run_id": run_id, "seed": 2, "model": model}
        attrs = {"name": run_id, "displayName": run_id, "state": "finished", "group": "g",
                 "config": json.dumps({}), "summaryMetrics": json.dumps(summary)}
        return Logged(None, "ent", "proj", run_id, attrs=attrs, lazy=False)   # no network: attrs given

    stores, rows, curves = online_stores([wandb_run("a"), wandb_run("b")], tmp_path / "into")
    assert stores == [tmp_path / "into" / "run-store-a"] and (stores[0] / "hyps" / "test.txt").is_file()
    assert [row["run_id"] for row in rows] == ["b"] and set(curves["run_id"]) == {"b"}
    runs, skipped = load.read_runs(stores, rows=rows)
    assert runs.set_index("run_id")["val_bleu"].to_dict() == {"a": 20.0, "b": 21.0} and not skipped
