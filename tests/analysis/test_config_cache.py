"""config.yaml is parsed once and its parse reused until the file changes."""

from __future__ import annotations

import json

import yaml

from lit_attention.analysis.config_cache import CACHE, read_config

CONFIG = """# lightning.pytorch==2.6.6
seed_everything: 3
trainer: {max_epochs: 8, gradient_clip_val: 1.0, logger: null, devices: auto}
model:
  class_path: x.Y
  init_args: {family: rnn, betas: [0.9, 0.98], lr: 2.0e-3, name: "über", inf: .inf}
"""


def test_parse_is_cached_and_never_stale(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    first = read_config(path)
    assert first == yaml.safe_load(CONFIG)
    cache = tmp_path / CACHE
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
    assert not (tmp_path / CACHE).exists()
    path.write_text("", encoding="utf-8")
    assert read_config(path) == {}
    (tmp_path / CACHE).unlink()
    (tmp_path / CACHE).mkdir()                 # a store the cache cannot be written into
    path.write_text(CONFIG, encoding="utf-8")
    assert read_config(path) == yaml.safe_load(CONFIG)
