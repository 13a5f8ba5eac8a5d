"""Fuzz test: random sweep files and random edits of a run store, from a seeded
generator. Whatever the input, the outcome is a correct result or a one-line error (exit 2),
never a traceback, and `report` changes no file outside its output directory (besides the
derived caches it keeps beside what it read: config.cache.json, hyps/*.stats.npz)."""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis_stores import write_run
from conftest import CONFIGS, cli_in_process
from lit_attention.sweep.schema import SweepError, load_sweep

JUNK = [None, 0, -1, 1.5, 10**30, math.nan, math.inf, "", "x", "50", True, False, [], [1, "a"], {}, {"a": 1},
        "../../etc/passwd", "é\u2028\x85", 3e-3]


def junk(rng: random.Random):
    return rng.choice(JUNK)


def good_sweep(tmp_path: Path) -> dict:
    return {
        "study_name": "fz", "base": str(CONFIGS / "copy.yaml"), "root": str(tmp_path / "runs"),
        "objective": {"metric": "val_loss", "direction": "minimize"}, "sampler": "grid", "seeds": 2,
        "fixed": {"trainer.max_epochs": 1},
        "space": {"model.lr": {"choices": [1e-3, 3e-3]},
                  "model.dropout": {"choices": [0.1, 0.2], "when": {"model.lr": 3e-3}},
                  "model.warmup": {"low": 10, "high": 100, "step": 10}},
    }


def mutate_sweep(data: dict, rng: random.Random) -> dict:
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        if kind == 0 and data:                                     # a key removed
            data.pop(rng.choice(list(data)))
        elif kind == 1:                                            # a top-level value replaced
            data[rng.choice(["study_name", "base", "objective", "sampler", "pruner", "seeds", "n_trials",
                             "fixed", "space", "workers", "kind", "heartbeat", "tracking", "colour"])] = junk(rng)
        elif kind == 2 and isinstance(data.get("space"), dict) and data["space"]:   # a parameter spoilt
            name = rng.choice(list(data["space"]))
            spec = data["space"][name]
            if isinstance(spec, dict) and spec:
                spec[rng.choice(list(spec) + ["when", "log", "type"])] = junk(rng)
            else:
                data["space"][name] = junk(rng)
        elif kind == 3 and isinstance(data.get("space"), dict):    # a condition on anything
            data["space"][rng.choice(["model.heads", "model.lr", "data.n_train", "bogus"])] = {
                "choices": [rng.choice([1, 2, 4, "a"])], "when": {rng.choice(["model.lr", "model.dropout", "x"]): junk(rng)}}
        elif kind == 4 and isinstance(data.get("fixed"), dict):    # a fixed value
            data["fixed"][rng.choice(["trainer.max_epochs", "model.lr", "model.hiden", "data.task"])] = junk(rng)
        else:                                                      # the objective
            data["objective"] = {"metric": rng.choice(["val_loss", "val_bleu", "", 3]),
                                 "direction": rng.choice(["minimize", "maximize", "up", None])}
    return data


def test_random_sweep_files_load_or_fail_in_one_line(tmp_path):
    rng = random.Random(35)
    loaded = refused = 0
    for case in range(300):
        path = tmp_path / f"s{case}.yaml"
        text = yaml.safe_dump(mutate_sweep(good_sweep(tmp_path), rng), sort_keys=False, allow_unicode=True)
        if rng.random() < 0.15:                                    # a file cut short
            text = text[:rng.randrange(len(text))]
        path.write_text(text, encoding="utf-8")
        try:
            load_sweep(path)
            loaded += 1
        except SweepError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(path)), (case, text, str(exc))
            refused += 1
        except Exception as exc:   # noqa: BLE001 -- any other exception is the bug this test looks for
            pytest.fail(f"case {case}: {type(exc).__name__}: {exc}\n{text}")
    assert loaded > 10 and refused > 100, (loaded, refused)   # the generator reaches both outcomes


STORE_FILES = ("summary.json", "config.yaml", "metrics.csv")


def mutate_run(run_dir: Path, rng: random.Random) -> None:
    name = rng.choice(STORE_FILES)
    path = run_dir / name
    kind = rng.randrange(5)
    if kind == 0:                                                  # cut short (or emptied)
        data = path.read_bytes()
        path.write_bytes(data[:rng.randrange(len(data))])
    elif kind == 1:                                                # bytes that are no UTF-8
        path.write_bytes(path.read_bytes() + b"\xff\xfe")
    elif kind == 2 or name != "summary.json":                      # a summary field of another type
        summary = json.loads((run_dir / "summary.json").read_text())
        summary[rng.choice(["val_bleu", "status", "seed", "model", "run_id", "params", "train_seconds",
                            "val_bleu_by_length", "version", "task", "steps"])] = junk(rng)
        (run_dir / "summary.json").write_text(json.dumps(summary))
    elif kind == 3:                                                # a key missing
        summary = json.loads(path.read_text())
        summary.pop(rng.choice(["val_bleu", "status", "model", "run_id", "seed", "group"]), None)
        path.write_text(json.dumps(summary))
    else:
        path.unlink()


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "config.cache.json" and not p.name.endswith(".stats.npz")}


def check_table(out: Path, store: Path) -> None:
    """What a report that exits 0 averages: finished runs with a val_bleu in [0, 100], and
    the mean it shows is theirs."""
    table = pd.read_csv(out / "table.csv")
    run_dirs = pd.read_csv(out / "runs.csv", dtype=str).groupby("run_id")["run_dir"].agg(list)
    for row in table.itertuples():
        if not isinstance(row.run_ids, str):
            continue
        values = []
        for run_id in row.run_ids.split(";"):
            if len(run_dirs[run_id]) > 1:   # a run_id edited into another run's: no telling them apart here
                return
            summary = json.loads((Path(run_dirs[run_id][0]) / "summary.json").read_text())
            value = summary["val_bleu"]
            assert summary["status"] == "finished" and type(value) in (int, float) and 0 <= value <= 100, summary
            values.append(value)
        assert row.mean == pytest.approx(sum(values) / len(values)), (row, values)


@pytest.mark.slow
def test_random_run_store_edits_report_or_fail_in_one_line(tmp_path):
    rng = random.Random(35)
    outcomes = {0: 0, 2: 0}
    for case in range(100):
        store = tmp_path / f"store{case}"
        for attention, bleu in (("none", 10.0), ("luong", 20.0)):
            for seed in (1, 2, 3):
                write_run(store, "g", f"{attention}-s{seed}", seed=seed, val_bleu=bleu + seed,
                          model=dict(family="rnn", cell="lstm", attention=attention, d_model=32))
        runs = sorted((store / "g").iterdir())
        for run_dir in rng.sample(runs, rng.randint(1, 3)):
            mutate_run(run_dir, rng)
        before = digests(store)
        out = tmp_path / f"out{case}"
        result = cli_in_process("report", store / "g", "--out", out, "--no-figures", "--baseline", "off")
        assert "Traceback" not in result.stderr, (case, result.stderr)
        assert result.returncode in (0, 2), (case, result.returncode, result.stderr[-2000:])
        outcomes[result.returncode] += 1
        if result.returncode == 2:
            errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
            assert len(errors) == 1, (case, result.stderr)
        else:
            check_table(out, store)
        assert digests(store) == before, case
    assert outcomes[0] > 20, outcomes
