"""Reading run stores: a malformed summary.json or config.yaml is skipped with what is wrong,
non-finite numbers are kept and named, config.yaml is parsed once and its parse reused until the
file changes (FIXTURE run stores, tests/analysis_stores.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from analysis_stores import write_run
from lit_attention.analysis import load
from lit_attention.analysis.load import CONFIG_CACHE, AnalysisError, read_config

MODEL = dict(family="rnn", cell="lstm", attention="luong", d_model=32)


@pytest.mark.parametrize("content, problem", [
    (b'{"run_id": "x", "status": "fin', "not valid JSON"),
    (b"", "not valid JSON"),
    (b"[1, 2]", "holds an array, not a JSON object"),
    (b"null", "holds null, not a JSON object"),
    (b'{"status": "\xff"}', "not UTF-8 text"),
    (b'{"status": "finished", "model": "rnn"}', "field 'model' is a string, not an object"),
    (b'{"status": 3}', "field 'status' is a number, not a string"),
    (b'{"status": "finished", "test_bleu_by_length": [1, 2]}', "'test_bleu_by_length' is not an array of objects"),
])
def test_malformed_summary_is_skipped_naming_file_and_problem(tmp_path, content, problem):
    write_run(tmp_path, "g", "good", seed=1, model=MODEL, val_bleu=20.0)
    bad = write_run(tmp_path, "g", "bad", seed=2, model=MODEL, val_bleu=21.0)
    (bad / "summary.json").write_bytes(content)
    runs, skipped = load.scan_runs(tmp_path / "g")
    assert runs["run_id"].tolist() == ["good"]
    [(run_dir, status, message, *_)] = skipped
    assert run_dir == bad and status == "unreadable"
    assert message.startswith(str(bad / "summary.json")) and problem in message
    assert "\n" not in message


BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(f"{k}: &{k} [{','.join([f'*{j}'] * 9)}]\n" for j, k in zip("abcdefgh", "bcdefghi"))


@pytest.mark.parametrize("content, problem", [
    ("model: [\n", "not valid YAML: "),          # the problem's wording depends on libyaml
    ("- a\n- b\n", "holds a YAML list, not a mapping"),
    (BOMB, "YAML nodes once aliases are expanded"),
])
def test_malformed_config_is_skipped(tmp_path, content, problem):
    write_run(tmp_path, "g", "good", seed=1, model=MODEL, val_bleu=20.0)
    bad = write_run(tmp_path, "g", "bad", seed=2, model=MODEL, val_bleu=21.0)
    (bad / "config.yaml").write_text(content)
    runs, [(run_dir, _, message, *_)] = load.scan_runs(tmp_path / "g")
    assert len(runs) == 1 and str(bad / "config.yaml") in message and problem in message
    assert "\n" not in message


def test_load_runs_warns_one_line_per_skipped_run(tmp_path, capsys):
    write_run(tmp_path, "g", "good", seed=1, model=MODEL, val_bleu=20.0)
    bad = write_run(tmp_path, "g", "bad", seed=2, model=MODEL, val_bleu=21.0)
    (bad / "summary.json").write_text("{")
    assert load.load_runs(tmp_path)["run_id"].tolist() == ["good"]
    assert capsys.readouterr().err.splitlines() == [
        f"warning: skipped run: {bad / 'summary.json'}: not valid JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"]


def test_only_unreadable_runs_is_an_analysis_error(tmp_path):
    bad = write_run(tmp_path, "g", "bad", seed=2, model=MODEL, val_bleu=21.0)
    (bad / "summary.json").write_text("[]")
    with pytest.raises(AnalysisError, match=r"no readable run under .*all 1 are unreadable"):
        load.scan_runs(tmp_path)


def test_non_finite_numbers_are_named_not_dropped(tmp_path):
    run = write_run(tmp_path, "g", "r", seed=1, model=MODEL, val_bleu=20.0)
    summary = json.loads((run / "summary.json").read_text())
    summary.update(val_bleu=float("inf"), val_ppl=float("nan"), val_chrf=None)
    (run / "summary.json").write_text(json.dumps(summary))    # Python writes Infinity and NaN
    row = load.load_runs(run).iloc[0]
    assert row["val_bleu"] == float("inf") and row["val_chrf"] is None
    assert set(row["nonfinite"].split(";")) == {"val_bleu", "val_ppl"}


def test_unparsable_metrics_csv_is_left_out_with_a_warning(tmp_path, capsys):
    good = write_run(tmp_path, "g", "good", seed=1, model=MODEL, val_bleu=20.0)
    bad = write_run(tmp_path, "g", "bad", seed=2, model=MODEL, val_bleu=21.0)
    (bad / "metrics.csv").write_bytes(b"step,epoch\n1,2,3,4\n\xff\xfe\n")
    metrics = load.load_metrics(load.load_runs(tmp_path))
    assert set(metrics["run_dir"]) == {str(good)}
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {bad / 'metrics.csv'}: unreadable CSV") and len(err.splitlines()) == 1


CONFIG = """# lightning.pytorch==2.6.6
seed_everything: 3
trainer: {max_epochs: 8, gradient_clip_val: 1.0, logger: null, devices: auto}
model:
  class_path: x.Y
  init_args: {family: rnn, betas: [0.9, 0.98], lr: 2.0e-3, name: "über", inf: .inf}
"""


def test_config_parse_is_cached_and_never_stale(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    first = read_config(path)
    assert first == yaml.safe_load(CONFIG)
    cache = tmp_path / CONFIG_CACHE
    assert cache.is_file()
    # the cache is what is read while its key matches the text
    planted = json.loads(cache.read_text())
    planted["config"]["seed_everything"] = 99
    cache.write_text(json.dumps(planted))
    assert read_config(path)["seed_everything"] == 99
    # an edited config.yaml is parsed again
    path.write_text(CONFIG.replace("seed_everything: 3", "seed_everything: 4"), encoding="utf-8")
    assert read_config(path)["seed_everything"] == 4
    assert json.loads(cache.read_text())["config"]["seed_everything"] == 4
    # a foreign cache file is ignored
    cache.write_text("[1, 2]")
    assert read_config(path) == yaml.safe_load(path.read_text())


def test_what_json_cannot_hold_is_parsed_each_time(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("started: 2026-01-01\n1: one\n", encoding="utf-8")   # a date, an int key
    assert read_config(path) == yaml.safe_load(path.read_text())
    assert not (tmp_path / CONFIG_CACHE).exists()
    path.write_text("", encoding="utf-8")
    assert read_config(path) == {}
    (tmp_path / CONFIG_CACHE).unlink()
    (tmp_path / CONFIG_CACHE).mkdir()                 # a store the cache cannot be written into
    path.write_text(CONFIG, encoding="utf-8")
    assert read_config(path) == yaml.safe_load(CONFIG)
