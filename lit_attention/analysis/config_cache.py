"""config.yaml of a run, parsed once: the parse is kept beside it as config.cache.json.

Parsing LightningCLI's config dump is the slowest part of loading a run (~1-3 ms with libyaml,
~8 ms without; JSON of the same tree: ~0.1 ms), and `lit-attention report` loads every run of a
sweep each time it is run. The cache is keyed by a hash of the YAML text, so an edited
config.yaml is parsed again, never read stale; a store that cannot be written to is only read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

from lit_attention.files import atomic_write

CACHE = "config.cache.json"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when installed


def read_config(path: Path | str) -> dict:
    """The parsed config.yaml at `path` (an empty dict for an empty file)."""
    path = Path(path)
    text = path.read_bytes()
    key = hashlib.blake2b(text, digest_size=16).hexdigest()
    cache = path.with_name(CACHE)
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return cached["config"]
    except (OSError, ValueError, AttributeError):    # missing, unreadable or foreign
        pass
    config = yaml.load(text.decode("utf-8"), Loader=LOADER) or {}
    _write(cache, key, config)
    return config


def _write(cache: Path, key: str, config) -> None:
    try:
        text = json.dumps({"key": key, "config": config})
    except (TypeError, ValueError):      # YAML types JSON has not (dates, sets): parse each time
        return
    if json.loads(text)["config"] != config:    # e.g. non-string keys would come back as strings
        return
    try:
        atomic_write(cache, text)
    except OSError:     # a read-only store: the config is parsed each time
        pass
