"""The one reader of run stores (analysis/load.py) through `lit-attention report`: each run counted
once by its identity, every directory left out named in excluded.csv with the count printed
agreeing, every message bounded, the output directory checked before any work (FIXTURE run
stores, tests/analysis_stores.py; a seeded fuzz of whole trees)."""

from __future__ import annotations

import json
import os
import random
import shutil

import pandas as pd
import pytest

from analysis_stores import lstm, write_run, write_study
from conftest import cli_in_process
from lit_attention.analysis import load, report

BLEU = {"none": [10.0, 14.0, 12.0], "luong": [20.0, 25.0, 21.0]}



@pytest.fixture
def runs(tmp_path):
    """runs/study: 2 configurations x 3 seeds (FIXTURE)."""
    write_study(tmp_path / "runs", BLEU)
    return tmp_path / "runs"


def set_summary(run_dir, **fields):
    path = run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def report_of(runs, out, *args):
    result = cli_in_process("report", runs, "--out", out, "--no-figures", "--baseline", "off", *args)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def excluded_count(stdout: str) -> int:
    """The number of runs excluded, as the report's last line says it."""
    line = next(line for line in stdout.splitlines() if " configurations, " in line)
    return int(line.split(" configurations, ")[1].split(" excluded")[0])


def test_a_backup_copy_of_a_study_beside_it_counts_each_run_once(runs, tmp_path):
    """The copies are named and counted once: n and the CI are those of the study alone."""
    alone = report_of(runs, tmp_path / "alone")
    shutil.copytree(runs / "study", runs / "study-backup")
    shutil.copytree(runs / "study" / "luong-s1", runs / "study" / "luong-s1-copy")
    result = report_of(runs, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    table, before = (pd.read_csv(out / "table.csv") for out in (tmp_path / "out", tmp_path / "alone"))
    assert table["n"].tolist() == [3, 3] and table[["ci_lo", "ci_hi"]].equals(before[["ci_lo", "ci_hi"]])
    excluded = pd.read_csv(tmp_path / "out" / "excluded.csv")
    assert len(excluded) == 7 and set(excluded["status"]) == {"duplicate"}
    assert str(runs / "study" / "luong-s1-copy") in set(excluded["run_dir"])
    copy = excluded.set_index("run_dir").loc[str(runs / "study-backup" / "none-s2")]
    assert copy["reason"].endswith(f"a copy of {runs / 'study' / 'none-s2'} (the same run: study/none-s2): "
                                   "counted once") and copy["run_id"] == "none-s2"
    assert "6 runs, 2 configurations, 7 excluded (7 duplicate)" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == load.MAX_WARNINGS + 1 and "2 more run directories left out" in warnings[-1]
    assert alone.stdout.splitlines()[0].endswith("6 runs, 2 configurations, 0 excluded")


def test_a_run_is_its_uuid_wherever_it_lies(runs, tmp_path):
    """Two stores that both hold a run `none-s1` of group `study` are two runs when their uuids
    differ; one run under two names is one."""
    other = tmp_path / "runs" / "elsewhere"
    shutil.copytree(runs / "study" / "none-s1", other / "study" / "none-s1")
    for path, uuid in ((runs / "study" / "none-s1", "a" * 32), (other / "study" / "none-s1", "b" * 32),
                       (runs / "study" / "none-s2", "c" * 32), (runs / "study" / "none-s3", "c" * 32)):
        set_summary(path, uuid=uuid)
    frame, skipped = load.scan_runs(runs)
    assert sorted(frame["run_dir"].str.removeprefix(str(runs) + "/")) == [
        "elsewhere/study/none-s1", *[f"study/{name}" for name in ("luong-s1", "luong-s2", "luong-s3", "none-s1", "none-s2")]]
    [(path, status, reason, *_)] = skipped
    assert path == runs / "study" / "none-s3" and status == "duplicate" and f"the same run: {'c' * 32}" in reason
    assert "its files differ" in reason       # its seed and BLEU are not the other copy's


def test_without_a_uuid_a_run_is_its_group_id_start_and_commit(runs, tmp_path):
    """Older stores: two machines' `t0000-s0` of one study started at different times are two runs."""
    for name, started in (("a", "2026-01-01T00:00:00Z"), ("b", "2026-01-02T00:00:00Z"), ("c", "2026-01-02T00:00:00Z")):
        run = write_run(tmp_path / "runs" / name, "study", "t0000-s0", seed=1, model=lstm("none"), val_bleu=5.0)
        set_summary(run, started_at=started, git_commit="abc")
    frame, skipped = load.scan_runs(runs)
    assert len(frame) == 6 + 2 and [s.path for s in skipped] == [runs / "c" / "study" / "t0000-s0"]
    assert "(the same run: study/t0000-s0/2026-01-02T00:00:00Z/abc)" in skipped[0].reason


def test_the_excluded_count_is_the_rows_of_excluded_csv(runs, tmp_path):
    """Every run left out is counted in the one number printed: finished without the metric,
    failed, unreadable."""
    set_summary(runs / "study" / "none-s1", val_bleu=None)
    set_summary(runs / "study" / "none-s2", status="failed")
    (runs / "study" / "luong-s1" / "summary.json").write_text("{")
    (runs / "study" / "luong-s2" / "summary.json").unlink()
    (runs / "study" / "luong-s2" / "summary.json").mkdir()
    (runs / "study" / "luong-s3" / "summary.json").unlink()      # a run that lost its summary
    result = report_of(runs, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    excluded = pd.read_csv(tmp_path / "out" / "excluded.csv")
    assert excluded_count(result.stdout) == len(excluded) == 5
    assert "5 excluded (1 no val_bleu, 1 failed, 3 unreadable)" in result.stdout
    reasons = excluded.set_index("run_id")["reason"]
    assert reasons["luong-s2"].endswith("cannot be read (Is a directory)")
    assert reasons["luong-s3"] == f"{runs / 'study' / 'luong-s3' / 'summary.json'}: does not exist"


def test_a_huge_value_is_shown_cut_with_its_size(runs, tmp_path):
    """A 10 MB string in a summary is a warning line of a few hundred characters and a few kB of
    report files."""
    huge = "x" * 10_000_000
    set_summary(runs / "study" / "none-s1", val_bleu=huge, name=huge)
    set_summary(runs / "study" / "none-s2", status=huge)
    result = report_of(runs, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert max(map(len, result.stderr.splitlines())) <= load.MAX_MESSAGE + 100
    assert f"val_bleu is {'x' * 60!r}... (10,000,000 characters), not a finite number" in result.stderr
    assert sum(p.stat().st_size for p in (tmp_path / "out").iterdir()) < 200_000
    excluded = pd.read_csv(tmp_path / "out" / "excluded.csv").set_index("run_id")
    assert excluded.loc["none-s1", "reason"] == f"val_bleu is {'x' * 60!r}... (10,000,000 characters)"
    assert excluded.loc["none-s2", "status"] == "unreadable" and len(excluded.loc["none-s2", "reason"]) < 500


def test_links_are_followed_once_and_a_loop_ends(runs, tmp_path):
    (runs / "study" / "loop").symlink_to(runs)
    (runs / "same-study").symlink_to(runs / "study")
    frame, skipped = load.scan_runs(runs)
    assert len(frame) == 6 and not skipped


def test_a_directory_that_cannot_be_listed_is_named(runs, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root lists every directory")
    locked = runs / "locked"
    locked.mkdir(mode=0)
    try:
        _, [(path, status, reason, *_)] = load.scan_runs(runs)
    finally:
        locked.chmod(0o755)
    assert (path, status) == (locked, "unreadable") and "cannot be listed (Permission denied)" in reason


@pytest.mark.parametrize("case", ["a file", "under a file", "a directory where a file goes", "wandb-runs a file"])
def test_an_output_path_that_cannot_be_written_stops_before_any_work(runs, tmp_path, case):
    (runs / "study" / "none-s1" / "summary.json").write_text("{")     # reading it would warn
    (tmp_path / "file").write_text("mine")
    out, extra = {"a file": (tmp_path / "file", ()), "under a file": (tmp_path / "file" / "report", ()),
                  "a directory where a file goes": (tmp_path / "out", ()),
                  "wandb-runs a file": (tmp_path / "out", ("--wandb", "me/project"))}[case]
    if case == "a directory where a file goes":
        (out / "table.md").mkdir(parents=True)
    if case == "wandb-runs a file":
        out.mkdir()
        (out / "wandb-runs").write_text("mine")
    source = () if extra else (runs,)
    result = cli_in_process("report", *source, "--out", out, "--no-figures", *extra)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: --out {out}: ") and "Traceback" not in result.stderr
    assert (tmp_path / "file").read_text() == "mine"


@pytest.mark.slow
def test_a_read_only_output_directory_stops_before_any_work(runs, tmpfs):
    fs = tmpfs("1m")
    fs.remount("ro")
    result = cli_in_process("report", runs, "--out", fs.path / "report", "--no-figures")
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: --out {fs.path / 'report'}: cannot write there (Read-only file system)\n"


def test_a_report_refused_leaves_no_output_directory_behind(runs, tmp_path):
    result = report_of(runs, tmp_path / "new" / "out", "--metric", "nonsense")
    assert result.returncode == 2 and not (tmp_path / "new").exists()


def test_an_os_error_shows_its_message_not_its_number():
    assert report.error_text(FileNotFoundError(2, "No such file or directory", "/x/y")) == \
        "/x/y: No such file or directory"
    assert report.error_text(FileNotFoundError("no run stores here")) == "no run stores here"


# -- fuzz: random trees of runs, copies and damage ----------------------------------------------

DAMAGE = {   # what is done to a run -> what the reader makes of it
    "not JSON": ("unreadable", lambda d: (d / "summary.json").write_bytes(b"\x00{\xff" * 7)),
    "an array": ("unreadable", lambda d: (d / "summary.json").write_text("[1, 2]")),
    "nested deep": ("unreadable", lambda d: (d / "summary.json").write_text("[" * 100_000 + "]" * 100_000)),
    "a directory": ("unreadable", lambda d: ((d / "summary.json").unlink(), (d / "summary.json").mkdir())),
    "empty": ("unreadable", lambda d: (d / "summary.json").write_text("")),
    "no summary": ("unreadable", lambda d: (d / "summary.json").unlink()),
    "a huge name": ("ok", lambda d: set_summary(d, name="n" * 300_000)),
    "a huge metric": ("invalid", lambda d: set_summary(d, val_bleu="7" * 300_000)),
    "no config": ("ok", lambda d: (d / "config.yaml").unlink()),
    "no metrics": ("ok", lambda d: (d / "metrics.csv").unlink()),
    "config not YAML": ("unreadable", lambda d: (d / "config.yaml").write_text("model: [\n")),
}


@pytest.mark.slow
def test_random_trees_report_each_run_once_or_fail_in_one_line(tmp_path):
    rng = random.Random(52)
    outcomes = {0: 0, 2: 0}
    for case in range(40):
        root = tmp_path / f"tree{case}" / "runs"
        state = {}
        for attention, scores in BLEU.items():
            for seed, bleu in enumerate(scores, start=1):
                run = write_run(root, "study", f"{attention}-s{seed}", seed=seed, model=lstm(attention), val_bleu=bleu)
                state[run] = ("ok", attention)
        for run in rng.sample(sorted(state), rng.randint(0, 6)):
            kind, damage = DAMAGE[rng.choice(sorted(DAMAGE))]
            damage(run)
            state[run] = (kind, state[run][1])
        copies = 0
        unreadable = sum(kind == "unreadable" for kind, _ in state.values())
        for run in rng.sample(sorted(state), rng.randint(0, 3)):   # a copied run directory
            shutil.copytree(run, run.with_name(run.name + "-copy"))
            copies, unreadable = copies + (state[run][0] != "unreadable"), unreadable + (state[run][0] == "unreadable")
        if rng.random() < 0.4:    # a backup of the whole study beside it
            shutil.copytree(root / "study", root / "study-backup", symlinks=True)
            readable = sum(kind != "unreadable" for kind, _ in state.values()) + copies
            copies, unreadable = copies + readable, 2 * unreadable
        if rng.random() < 0.3:
            (root / "study" / "loop").symlink_to(root)
        out = tmp_path / f"out{case}"
        result = report_of(root, out)
        assert result.returncode in (0, 2), (case, result.returncode, result.stderr[-2000:])
        assert len(result.stderr) < 4000 and max(map(len, result.stderr.splitlines() or [""])) < 600, case
        outcomes[result.returncode] += 1
        if result.returncode == 2:
            assert len(result.stderr.splitlines()) == 1, (case, result.stderr)
            assert all(kind == "unreadable" for kind, _ in state.values()), (case, result.stderr)
            continue
        ok = {attention: sum(kind == "ok" and a == attention for kind, a in state.values()) for attention in BLEU}
        invalid = sum(kind == "invalid" for kind, _ in state.values())
        excluded = pd.read_csv(out / "excluded.csv")
        assert excluded_count(result.stdout) == len(excluded) == invalid + unreadable + copies, (case, excluded)
        assert (excluded["status"] == "duplicate").sum() == copies, case
        # n summed per attention: a run without config.yaml may make a row of its own, and with
        # one attention left the rows are by family
        table = pd.read_csv(out / "table.csv")
        n = table.groupby("model.attention")["n"].sum().to_dict() if "model.attention" in table else {}
        assert table["n"].sum() == sum(ok.values()) and n == {a: k for a, k in ok.items() if a in n}, (case, table)
        assert sum(p.stat().st_size for p in out.iterdir()) < 300_000, case
    assert outcomes[0] > 20, outcomes
