"""Read run stores (runs/<group>/<run_id>/...) into tidy DataFrames: the one reader of run stores
for analysis (a local tree, or the stores W&B runs logged: wandb_import.py).

One row per run in `load_runs`: the summary's scalar fields, the model dict flattened to
`model.<field>`, and the resolved config.yaml flattened to `config.<path>`. Curves, gradient-flow
tables and length buckets come in long form, one row per (run, step/position/bucket).

Each run is counted once, by its identity (summary field `uuid`; in older stores its group, run
id, start time and commit): a copy of a run (a backup of a study beside it, a copied run
directory) is named and left out. A run whose summary.json or config.yaml cannot be read or has
the wrong shape is left out too, never half-read; `scan_runs` returns each directory left out with
its status and why. Non-finite numbers (NaN, Infinity in the JSON) are kept and named in the
`nonfinite` column, so aggregation can leave them out of every mean. Text is bounded: a value
longer than MAX_TEXT characters is kept cut, with its size; a message shows a value cut to a few
dozen characters.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

import pandas as pd

from lit_attention.files import FileError, atomic_write, read_yaml, shown
from lit_attention.tracking import schema
from lit_attention.tracking.identity import run_identity
from lit_attention.tracking.liveness import run_state
from lit_attention.tracking.schema import SUMMARY, Status, Summary, SummaryError
from lit_attention.tracking.wandb import RUN_FOLDER

FINISHED = Status.FINISHED
MAX_TEXT = 10_000      # characters of a text value a row keeps (a value is data, not a dump)
MAX_NAME = 200         # characters of a field name: longer is no field any writer writes
MAX_MESSAGE = 400      # characters of one warning or error line
MAX_WARNINGS = 5       # runs left out named one line each on stderr; the rest in excluded.csv
# Directories of a run store that hold no other run: its checkpoints, and W&B's directory of the
# run (whose run-store snapshots are this same run, as logged).
RUN_PARTS = (schema.CHECKPOINTS, RUN_FOLDER)
UNREADABLE, DUPLICATE = "unreadable", "duplicate"


class AnalysisError(ValueError):
    """A problem with the runs or the request that the user can fix (unknown key, unreadable
    summary, ambiguous table...): `lit-attention report` prints the message and exits 2."""


class Skipped(NamedTuple):
    """A directory left out of the runs, and why. status: "unreadable", "duplicate" (a copy of a
    run read elsewhere) or, from W&B, "no run store"."""
    path: Path
    status: str
    reason: str
    group: str | None = None
    run_id: str | None = None


# Summary fields that are not scalars and live in their own tables (or nowhere).
NESTED = ("model", "versions", "test_bleu_by_length", "val_bleu_by_length",
          "attention_entropy", "machine_gflops_probes", "process")


def cut(text: str, limit: int = MAX_TEXT) -> str:
    """``text``, or its first ``limit`` characters and its size when it is longer."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


CUT_SIZE = re.compile(r"\.\.\. \(([\d,]+) characters\)$")   # the size `cut` appends


def quoted(value, limit: int = 60) -> str:
    """``value`` as a message shows it: its repr, cut to ``limit`` characters with its size (the
    size before `cut`, for a value cut already)."""
    if isinstance(value, str) and len(value) > limit:
        size = CUT_SIZE.search(value[-40:])
        return f"{value[:limit]!r}... ({size[1] if size else f'{len(value):,}'} characters)"
    return cut(repr(value), limit)


def warn(message: str) -> None:
    """One line on stderr: something was left out of the report, and why."""
    print(f"warning: {shown(message, MAX_MESSAGE)}", file=sys.stderr)


def warn_skipped(skipped: list[Skipped]) -> None:
    """A warning line per directory left out, the first MAX_WARNINGS of them, then their count."""
    for item in skipped[:MAX_WARNINGS]:
        warn(f"skipped run: {item.reason}")
    if (more := len(skipped) - MAX_WARNINGS) > 0:
        warn(f"{more} more run director{'ies' if more > 1 else 'y'} left out (excluded.csv lists each, and why)")


def skipped_frame(skipped: Iterable[Skipped]) -> pd.DataFrame:
    """The directories left out, as rows of excluded.csv."""
    return pd.DataFrame([{"group": s.group or s.path.parent.name, "run_id": s.run_id or s.path.name,
                          "status": s.status, "run_dir": str(s.path), "reason": s.reason} for s in skipped],
                        columns=["group", "run_id", "status", "run_dir", "reason"])


def find_run_dirs(root: Path | str) -> list[Path]:
    """Every directory under `root` (or `root` itself) holding a summary.json or a metrics.csv."""
    return _walk(Path(root))[0]


def _walk(root: Path) -> tuple[list[Path], list[Skipped]]:
    """(run dirs, directories that cannot be listed) under ``root``. Symbolic links are followed,
    each directory read once; RUN_PARTS of a run are not entered."""
    if (root / SUMMARY).exists() or (root / schema.METRICS).exists():
        return [root], []
    if not root.is_dir():
        raise FileNotFoundError(f"no run stores ({SUMMARY}) found under {root}: "
                                f"{'not a directory' if root.exists() else 'no such directory'}")
    found, problems, seen = [], [], set()

    def unlisted(exc: OSError) -> None:
        problems.append(Skipped(Path(exc.filename), UNREADABLE, f"{exc.filename}: cannot be listed ({exc.strerror})"))

    for here, dirs, files in os.walk(root, onerror=unlisted, followlinks=True):
        stat = os.stat(here)
        if (stat.st_dev, stat.st_ino) in seen:   # reached again through a link: the same files
            dirs[:] = []
            continue
        seen.add((stat.st_dev, stat.st_ino))
        if SUMMARY in files or SUMMARY in dirs or schema.METRICS in files:   # a run that lost its summary too
            found.append(Path(here))
            dirs[:] = [d for d in dirs if d not in RUN_PARTS]
        dirs.sort()
    return sorted(found), problems


def _scalar(value):
    # Lists and dicts (e.g. tuple-valued model fields) become JSON text so they can be grouped on.
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def flatten(tree: dict, prefix: str) -> dict:
    """{'a': {'b': 1}} -> {'<prefix>.a.b': 1}; LightningCLI's class_path/init_args levels vanish."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            flat.update(flatten(value, prefix if key == "init_args" else name))
        else:
            flat[name] = _scalar(value)
    return flat


def identity(fields: Mapping, where: Path | str) -> str:
    """What makes a run one run: tracking/identity.run_identity; with no run id recorded, the
    directory ``where`` itself."""
    return run_identity(fields) if fields.get("uuid") or fields.get("run_id") else f"directory {where}"


def _read(run_dir: Path) -> tuple[tuple, dict]:
    """(identity, row) of the run in ``run_dir``; AnalysisError if it cannot be read."""
    try:
        summary = read_summary(run_dir)
        row = {k: _scalar(v) for k, v in summary.items() if k not in NESTED}
        row.update(flatten(summary.get("model") or {}, "model"))
        config = run_dir / schema.CONFIG
        config = flatten(read_config(config), "config") if config.is_file() else {}
    except RecursionError:
        raise AnalysisError(f"{run_dir}: its summary.json or config.yaml is nested too deeply to read") from None
    row["run_id"] = summary.get("run_id") or run_dir.name
    row["group"] = summary.get("group") or run_dir.parent.name
    row["run_dir"] = str(run_dir)  # where it is now, not where it was written
    status, error = run_state(summary)   # a "running" run whose process is gone: killed, and why
    row["status"] = status.value if status else "unknown"
    if error:
        row["error"] = error
    # every value that is none of its field (schema.invalid_number: "50", true, a BLEU of 150) or
    # no finite number: the aggregation counts it invalid, never a value
    row["nonfinite"] = ";".join(k for k, v in summary.items()
                                if (isinstance(v, float) and not math.isfinite(v)) or schema.invalid_number(k, v))
    row.update(config)
    if (long := next((k for k in row if len(k) > MAX_NAME), None)) is not None:
        raise AnalysisError(f"{run_dir}: holds a field name of {len(long):,} characters ({quoted(long)})")
    return identity(summary, run_dir), {k: cut(v) if isinstance(v, str) else v for k, v in row.items()}


def read_summary(run_dir: Path | str) -> Summary:
    """The run's summary (tracking/schema.py reads it); AnalysisError naming the file and what
    is wrong with it."""
    try:
        return schema.read_summary(run_dir)
    except SummaryError as exc:
        raise AnalysisError(cut(str(exc), MAX_MESSAGE)) from None


CONFIG_CACHE = "config.cache.json"    # a run's config.yaml parsed, beside it


def read_config(path: Path) -> dict:
    """A run's config.yaml as a dict; AnalysisError naming the file and what is wrong with it.

    Parsing LightningCLI's config dump is the slowest part of loading a run, and `report` loads
    every run of a sweep each time: the parse is kept beside it (CONFIG_CACHE) as JSON, keyed by a
    hash of the YAML text, so an edited config.yaml is parsed again, never read stale; a store that
    cannot be written to is only read."""
    path, cache = Path(path), Path(path).with_name(CONFIG_CACHE)
    try:
        text = path.read_bytes()
        key = hashlib.blake2b(text, digest_size=16).hexdigest()
        # a cache missing, unreadable, foreign or of another text: parsed again
        with contextlib.suppress(OSError, ValueError, AttributeError, KeyError, TypeError):
            cached = json.loads(cache.read_text(encoding="utf-8"))
            if cached.get("key") == key:
                return cached["config"]
        config = read_yaml(text.decode("utf-8"), path, mapping=False)[0]
    except UnicodeDecodeError as exc:
        raise AnalysisError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise AnalysisError(f"{path}: cannot be read ({exc.strerror})") from None
    except (FileError, ValueError) as exc:    # libyaml's constructors raise ValueError too (a 13th month)
        raise AnalysisError(shown(exc, MAX_MESSAGE)) from None
    if config is not None and not isinstance(config, dict):
        raise AnalysisError(f"{path}: holds a YAML {type(config).__name__}, not a mapping")
    config = config or {}
    # Parsed each time: a config with YAML types JSON has not (dates, sets), one that would come
    # back otherwise (non-string keys as strings), and in a read-only store.
    with contextlib.suppress(TypeError, ValueError, OSError):
        text = json.dumps({"key": key, "config": config})
        if json.loads(text)["config"] == config:
            atomic_write(cache, text)
    return config


def read_runs(run_dirs: Iterable[Path], skipped: Iterable[Skipped] = (), rows: Iterable[dict] = (),
              where: str = "the runs given") -> tuple[pd.DataFrame, list[Skipped]]:
    """(runs, skipped): one row per run of ``run_dirs`` and ``rows`` (runs read elsewhere, e.g. W&B
    summaries), each run once; ``skipped`` extended by every directory left out (unreadable, or a
    copy of a run read from another directory: the copy at <group>/<run_id>, else the first by
    path, is read)."""
    skipped = list(skipped)
    read = []
    for run_dir in run_dirs:
        try:
            read.append(_read(Path(run_dir)))
        except AnalysisError as exc:
            skipped.append(Skipped(Path(run_dir), UNREADABLE, str(exc)))
    read += [(identity(row, row["run_dir"]), row) for row in rows]

    def home_first(item):
        path = Path(item[1]["run_dir"])
        return path.name != item[1]["run_id"] or path.parent.name != item[1]["group"], item[1]["run_dir"]

    kept: dict[tuple, dict] = {}
    for key, row in sorted(read, key=home_first):
        first = kept.setdefault(key, row)
        if first is not row:
            differs = {k: v for k, v in row.items() if k != "run_dir"} != {k: v for k, v in first.items() if k != "run_dir"}
            skipped.append(Skipped(Path(row["run_dir"]), DUPLICATE,
                                   f"{row['run_dir']}: a copy of {first['run_dir']} (the same run: {key}"
                                   f"{'; its files differ' if differs else ''}): counted once",
                                   row["group"], row["run_id"]))
    # in the order of the runs, not of where they lie: a W&B report lists them as the local one
    rows = sorted(kept.values(), key=lambda row: (str(row["group"]), str(row["run_id"]), row["run_dir"]))
    if not rows and not skipped:
        raise FileNotFoundError(f"no run stores ({SUMMARY}) found under {where}")
    if not rows:
        raise AnalysisError(f"no readable run under {where}: all {len(skipped)} are unreadable, "
                            f"e.g. {skipped[0].reason}")
    runs = pd.DataFrame(rows)
    first = ["group", "run_id", "status", "task", "seed"]
    return runs[[c for c in first if c in runs] + [c for c in runs if c not in first]], skipped


def scan_runs(root: Path | str) -> tuple[pd.DataFrame, list[Skipped]]:
    """(runs, skipped): one row per run under `root` (a runs/ dir, a group dir or one run dir),
    each run once, and every directory left out (`Skipped`: unreadable, or a copy)."""
    run_dirs, unlisted = _walk(Path(root))
    return read_runs(run_dirs, unlisted, where=str(root))


def load_runs(root: Path | str) -> pd.DataFrame:
    """All readable runs under `root`, one row per run; each directory left out is named on a
    warning line."""
    runs, skipped = scan_runs(root)
    warn_skipped(skipped)
    return runs


def config_columns(runs: pd.DataFrame) -> list[str]:
    """The columns that make a configuration: task plus the model dict (never the seed)."""
    return (["task"] if "task" in runs else []) + [c for c in runs if c.startswith("model.")]


def varying(runs: pd.DataFrame, columns: list[str]) -> list[str]:
    """The subset of `columns` taking more than one value across `runs`."""
    return [c for c in columns if runs[c].astype(str).nunique(dropna=False) > 1]


def distinguishing(runs: pd.DataFrame, columns: list[str], given: list[str] = ()) -> list[str]:
    """The columns, in order, that split the runs into more configurations than `given` and the
    columns kept before them. A field that only restates another (a Transformer has no `cell`,
    so `cell` splits nothing once `family` is there) is left out."""
    text = runs[[c for c in dict.fromkeys([*given, *columns]) if c in runs]].astype(str)
    keys = list(given)
    for column in columns:
        before = text.groupby(keys, dropna=False).ngroups if keys else 1
        if column not in keys and text.groupby(keys + [column], dropna=False).ngroups > before:
            keys.append(column)
    return keys[len(given):]


def resolve_key(runs: pd.DataFrame, key: str) -> str:
    """Map a user key (`model.scoring`, `scoring`, `data.max_len`) to a configuration column of
    `runs`: the task, a model field or a config field (a run's seed, id or status is none)."""
    for name in (key, f"model.{key}", f"config.{key}"):
        if name in runs.columns and (name == "task" or name.startswith(("model.", "config."))):
            return name
    from lit_attention.config_check import suggest
    swept = [c.removeprefix("config.") for c in varying(runs, [c for c in runs.columns if c.startswith("config.")
                                                               and c != "config.seed_everything"])]
    known = ", ".join(dict.fromkeys([*config_columns(runs), *swept]))
    near = suggest(key, [c.removeprefix("config.") for c in runs.columns
                         if c.startswith(("model.", "config.")) or c == "task"])
    hint = f" — did you mean {near}?" if near else ""
    raise AnalysisError(f"unknown key {key!r}{hint}; configuration keys: {known}")


def read_csv(path: Path) -> pd.DataFrame | None:
    """A run's CSV table, or None (with a warning line) when it cannot be parsed."""
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        warn(f"{path}: unreadable CSV ({' '.join(str(exc).split())}); left out of the report")
        return None


def _read_csv_per_run(runs: pd.DataFrame, filename: str) -> pd.DataFrame:
    frames = []
    for run in runs.itertuples():
        path = Path(run.run_dir) / filename
        frame = read_csv(path) if path.is_file() and path.stat().st_size else None
        if frame is not None:
            frame.insert(0, "run_dir", run.run_dir)
            frame.insert(0, "run_id", run.run_id)
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_metrics(runs: pd.DataFrame) -> pd.DataFrame:
    """Every run's metrics.csv stacked (long form: run_id, run_dir, step, epoch, metrics...)."""
    return _read_csv_per_run(runs, schema.METRICS)


def load_gradflow(runs: pd.DataFrame) -> pd.DataFrame:
    """Every run's gradflow.csv stacked (run_id, run_dir, step, direction, sentence, position,
    distance, norm)."""
    return _read_csv_per_run(runs, schema.GRADFLOW)


def load_length_buckets(runs: pd.DataFrame) -> pd.DataFrame:
    """BLEU by source length of every run (test split if evaluated, else validation), one row per
    (run, bucket), with the bucket's sentence count `n` and length `unit` ("words"; run stores
    written before the unit was recorded counted the model's source tokens: "tokens", which
    tracking/schema.py's migration fills in)."""
    rows = []
    for run in runs.itertuples():
        summary = read_summary(run.run_dir)
        buckets = summary.get("test_bleu_by_length") or summary.get("val_bleu_by_length") or []
        rows += [{"run_id": run.run_id, "run_dir": run.run_dir, **bucket} for bucket in buckets]
    return pd.DataFrame(rows)


def read_hyps(run_dir: Path | str, split: str = "test") -> tuple[list[str], list[str] | None]:
    """Hypotheses of a split and, if stored beside them (hyps/<split>.ref.txt), the references."""
    hyps = schema.split_lines((Path(run_dir) / schema.hyps_file(split)).read_text(encoding="utf-8"))
    ref_path = Path(run_dir) / schema.refs_file(split)
    refs = schema.split_lines(ref_path.read_text(encoding="utf-8")) if ref_path.is_file() else None
    return hyps, refs
