"""Run store paths stay under the runs root; files are written atomically with the user's umask."""

import os
import stat

import pytest

from conftest import CONFIGS, cli_in_process
from lit_attention.files import atomic_write
from lit_attention.tracking.identity import latest_run
from lit_attention.tracking.run_store import RunDir
from lit_attention.tracking.schema import check_name, run_path

UNSAFE = ["..", ".", "../../escape", "a/b", "/abs", "", ".hidden", "x" * 129, "tab\tname"]


@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_run_ids_and_groups_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="not a safe name"):
        run_path(tmp_path, "group", name)
    with pytest.raises(ValueError, match="--run.group"):
        run_path(tmp_path, name, "run")
    if name:
        with pytest.raises(ValueError):
            latest_run(tmp_path, name)


def test_safe_names_resolve_under_the_root(tmp_path):
    assert check_name("--run.id", "t0001-s2_v1.3") == "t0001-s2_v1.3"
    assert run_path(tmp_path, "study", "t0001-s2") == (tmp_path / "study" / "t0001-s2").resolve()


def test_cli_refuses_an_escaping_run_id_and_writes_nothing(tmp_path):
    root = tmp_path / "inner" / "runs"
    for option, value in (("--run.id", "../../escape"), ("--run.group", "..")):
        done = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", root, option, value,
                              "--trainer.max_epochs", "1")
        assert done.returncode == 2, done.stderr[-2000:]
        assert "not a safe name" in done.stderr and len(done.stderr.strip().splitlines()) <= 5
    assert sorted(p.name for p in tmp_path.rglob("*")) == []  # not even the runs root


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_files_honour_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        atomic_write(tmp_path / "a.txt", "text")
        RunDir(tmp_path / "run").update_summary(status="running")
    finally:
        os.umask(previous)
    for path in (tmp_path / "a.txt", tmp_path / "run" / "summary.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no temp left


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "summary.json"
    atomic_write(path, "old")
    with pytest.raises(TypeError):
        atomic_write(path, 12345)               # neither text nor bytes: nothing written
    assert path.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def test_a_hyps_file_has_one_line_per_sentence_whatever_line_separator_a_sentence_holds(tmp_path):
    """A test line holding U+2028 or U+0085 is still one line: a reader splitting with
    str.splitlines() must find as many lines as sentences were written."""
    from lit_attention.tracking import sentence_stats as ss
    from lit_attention.analysis.load import read_hyps
    from lit_attention.tracking.run_store import RunDir
    sentences = [f"a{br}b c" for br in BREAKS] + ["plain"]
    run = RunDir(tmp_path / "r")
    run.write_lines("hyps/test.txt", sentences)
    run.write_lines("hyps/test.ref.txt", sentences)
    hyps, refs = read_hyps(run.path, "test")
    assert hyps == refs == ["a b c"] * len(BREAKS) + ["plain"], hyps
    assert len(ss.load_or_compute(run.path, "test")) == len(sentences)


def test_a_hyps_file_written_before_is_split_at_newlines_only(tmp_path):
    """A run store written by the old writer (only \\n replaced) still reads one sentence a line."""
    from lit_attention.tracking import sentence_stats as ss
    from lit_attention.analysis.load import read_hyps
    text = "".join(f"a{br}b\n" for br in BREAKS if br not in ("\n", "\r\n", "\r")) + "last\n"
    (tmp_path / "hyps").mkdir()
    for name in ("test.txt", "test.ref.txt"):
        (tmp_path / "hyps" / name).write_text(text, encoding="utf-8", newline="")
    hyps, refs = read_hyps(tmp_path, "test")
    assert len(hyps) == len(refs) == len(BREAKS) - 2 and hyps[-1] == "last"
    assert len(ss.load_or_compute(tmp_path, "test")) == len(BREAKS) - 2
