"""calibration_results.py and analysis/calibrate.py: the calibration tables are committed results
that the simulation gives again, read back to the same numbers, and refused when malformed."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import REPO
from lit_attention.analysis import calibration_results

COMMITTED = sorted((REPO / "results" / "calibration").glob("*.csv"))


def _calibrate():
    spec = importlib.util.spec_from_file_location("calibrate", REPO / "analysis" / "calibrate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


calibrate = _calibrate()


def test_the_committed_files_are_the_three_tables_docs_show():
    assert [p.name for p in COMMITTED] == ["blocks.csv", "seeds-pooled6.csv", "seeds.csv"]
    text = (REPO / "docs" / "REPORT.md").read_text()
    for path in COMMITTED:
        assert f"<!-- calibration {path.relative_to(REPO)} -->" in text


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_the_smallest_cell_of_each_committed_file_is_what_the_simulation_gives_now(path):
    """Its 2 seeds go through every step of the others (0.2-1.6 CPU-s; all 60 cells: a few
    minutes, `analysis/calibrate.py --check`). Fails when a change to a simulation or to the test
    moves its numbers: simulate the files again (calibrate.py) and regenerate the docs."""
    rows = calibration_results.read(path)
    assert len(rows) == 20 and min(r["seeds"] for r in rows) == rows[0]["seeds"] == 2
    assert calibrate.check(path, cells=1) == []


def test_a_written_file_reads_back_to_the_same_rows_and_table(tmp_path):
    rows = [calibration_results.simulate("blocks", n, ratio, experiments=40) for ratio in (0.5, 2.0) for n in (2, 3)]
    calibration_results.write(tmp_path / "b.csv", rows)
    assert calibration_results.read(tmp_path / "b.csv") == rows
    table = calibration_results.markdown(rows).splitlines()
    assert table[0] == "| σ²_seed / σ²_text | 2 seeds | 3 seeds |" and [line.split()[1] for line in table[2:]] == ["0.5", "2"]
    assert calibrate.check(tmp_path / "b.csv") == []


def test_check_names_a_cell_whose_committed_number_is_not_the_simulations(tmp_path, capsys):
    path = tmp_path / "s.csv"
    assert calibrate.main([str(path), "seeds", "--seeds", "2,3", "--ratios", "1", "--experiments", "50"]) == 0
    lines = path.read_text().splitlines()
    fields = lines[2].split(",")
    fields[6] = "0.5"                     # the false-positive rate of 3 seeds at ratio 1
    path.write_text("\n".join([*lines[:2], ",".join(fields)]) + "\n")
    assert calibrate.main(["--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "3 seeds at ratio 1: committed -> now {'false_positive': (0.5," in out and "2 seeds" not in out


def test_the_mde_may_differ_in_its_last_bits_between_cpus_and_a_rate_may_not():
    row = calibration_results.read(COMMITTED[0])[0]
    assert calibration_results.differences(row, {**row, "detectable": row["detectable"] * (1 + 1e-12)}) == {}
    assert calibration_results.differences(row, {**row, "detectable": row["detectable"] * 1.001})
    assert list(calibration_results.differences(row, {**row, "power": row["power"] + 1 / 4000})) == ["power"]


@pytest.mark.parametrize("content, said", [
    ("", "no cells"),
    ("kind,seeds\nnope,2\n", "kind 'nope' is not one of seeds, blocks"),
    ("kind,seeds,ratio\nseeds,2,1\n", "columns kind, seeds, ratio; a seeds table has kind, seeds, ratio, experiments"),
    ("kind,seeds,ratio,experiments,pooled_arms,seed,false_positive,power,detectable\n"
     "seeds,two,1,50,,1,0.1,0.5,3\n", "line 2: invalid literal for int() with base 10: 'two'"),
])
def test_a_malformed_file_is_refused_with_its_name_and_what_is_wrong(tmp_path, content, said):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(calibration_results.CalibrationFileError, match="bad.csv") as caught:
        calibration_results.read(path)
    assert said in str(caught.value)


def test_a_table_with_a_missing_cell_is_refused(tmp_path):
    rows = [calibration_results.simulate("seeds", n, 1.0, experiments=20) for n in (2, 3)]
    rows.append(calibration_results.simulate("seeds", 2, 3.0, experiments=20))
    with pytest.raises(calibration_results.CalibrationFileError, match="missing 3 seeds at ratio 3"):
        calibration_results.markdown(rows)


@pytest.mark.parametrize("argv, said", [
    (["out.csv", "blocks", "--pooled-arms", "6"], "pooled_arms is an option of the seeds calibration only, not of blocks"),
    (["--check", "a.csv", "--experiments", "10"], "it takes no --experiments"),
    (["out.csv"], "give OUT and KIND"),
    (["out.csv", "seeds", "--seeds", "2,x"], "not a comma-separated list of int"),
    (["out.csv", "seeds", "--experiments", "0"], "not a positive integer: '0'"),
])
def test_calibrate_usage_errors_exit_2_and_write_nothing(tmp_path, monkeypatch, capsys, argv, said):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        calibrate.main(argv)
    assert done.value.code == 2 and said in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
