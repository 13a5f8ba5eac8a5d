"""Read run stores (runs/<group>/<run_id>/...) into tidy DataFrames.

One row per run in `load_runs`: the summary's scalar fields, the model dict flattened to
`model.<field>`, and the resolved config.yaml flattened to `config.<path>`. Curves, gradient-flow
tables and length buckets come in long form, one row per (run, step/position/bucket).

A run whose summary.json or config.yaml cannot be read or has the wrong shape is skipped, never
half-read: `scan_runs` returns it with what is wrong, and the report warns and counts it.
Non-finite numbers (NaN, Infinity in the JSON) are kept and named in the `nonfinite` column, so
aggregation can leave them out of every mean.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

import yaml

from lit_attention.analysis import config_cache
from lit_attention.tracking import schema
from lit_attention.tracking.liveness import run_state
from lit_attention.tracking.schema import SUMMARY, Status, Summary, SummaryError

FINISHED = Status.FINISHED


class AnalysisError(ValueError):
    """A problem with the runs or the request that the user can fix (unknown key, unreadable
    summary, ambiguous table...): `lit-attention report` prints the message and exits 2."""

# Summary fields that are not scalars and live in their own tables (or nowhere).
NESTED = ("model", "versions", "test_bleu_by_length", "val_bleu_by_length",
          "attention_entropy", "machine_gflops_probes", "process")


def warn(message: str) -> None:
    """One line on stderr: something was left out of the report, and why."""
    print(f"warning: {message}", file=sys.stderr)


def find_run_dirs(root: Path | str) -> list[Path]:
    """Every directory under `root` (or `root` itself) holding a summary.json."""
    root = Path(root)
    if (root / SUMMARY).is_file():
        return [root]
    return sorted(p.parent for p in root.rglob(SUMMARY) if schema.CHECKPOINTS not in p.parts)


def _scalar(value):
    # Lists and dicts (e.g. tuple-valued model fields) become JSON text so they can be grouped on.
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def flatten(tree: dict, prefix: str) -> dict:
    """{'a': {'b': 1}} -> {'<prefix>.a.b': 1}; LightningCLI's class_path/init_args levels vanish."""
    flat = {}
    for key, value in tree.items():
        if key == "init_args" and isinstance(value, dict):
            flat.update(flatten(value, prefix))
            continue
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            flat.update(flatten(value, name))
        else:
            flat[name] = _scalar(value)
    return flat


def load_run(run_dir: Path | str) -> dict:
    """One run as a flat dict (the row `load_runs` builds); AnalysisError if it cannot be read."""
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    row = {k: _scalar(v) for k, v in summary.items() if k not in NESTED}
    row.update(flatten(summary.get("model") or {}, "model"))
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
    config = run_dir / schema.CONFIG
    if config.is_file():
        row.update(flatten(read_config(config), "config"))
    return row


def read_summary(run_dir: Path | str) -> Summary:
    """The run's summary (tracking/schema.py reads it); AnalysisError naming the file and what
    is wrong with it."""
    try:
        return schema.read_summary(run_dir)
    except SummaryError as exc:
        raise AnalysisError(str(exc)) from None


def read_config(path: Path) -> dict:
    """A run's config.yaml as a dict; AnalysisError naming the file and what is wrong with it."""
    try:
        config = config_cache.read_config(path)          # parsed once, kept beside it
    except UnicodeDecodeError as exc:
        raise AnalysisError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise AnalysisError(f"{path}: cannot be read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise AnalysisError(f"{path}: not valid YAML ({problem}{where})") from None
    if config is not None and not isinstance(config, dict):
        raise AnalysisError(f"{path}: holds a YAML {type(config).__name__}, not a mapping")
    return config or {}


def scan_runs(root: Path | str) -> tuple[pd.DataFrame, list[tuple[Path, str]]]:
    """(runs, skipped): one row per readable run under `root` (a runs/ dir, a group dir or one
    run dir), and (run dir, what is wrong) per run that cannot be read."""
    rows, skipped = [], []
    for run_dir in find_run_dirs(root):
        try:
            rows.append(load_run(run_dir))
        except AnalysisError as exc:
            skipped.append((run_dir, str(exc)))
    if not rows and not skipped:
        raise FileNotFoundError(f"no run stores ({SUMMARY}) found under {root}")
    if not rows:
        raise AnalysisError(f"no readable run under {root}: all {len(skipped)} are unreadable, "
                            f"e.g. {skipped[0][1]}")
    runs = pd.DataFrame(rows)
    first = ["group", "run_id", "status", "task", "seed"]
    return runs[[c for c in first if c in runs] + [c for c in runs if c not in first]], skipped


def load_runs(root: Path | str) -> pd.DataFrame:
    """All readable runs under `root`, one row per run; each unreadable one is skipped with a
    warning line."""
    runs, skipped = scan_runs(root)
    for _, problem in skipped:
        warn(f"skipped run: {problem}")
    return runs


def config_columns(runs: pd.DataFrame) -> list[str]:
    """The columns that make a configuration: task plus the model dict (never the seed)."""
    cols = [c for c in runs.columns if c.startswith("model.")]
    return (["task"] if "task" in runs else []) + cols


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
        if column in keys:
            continue
        before = text.groupby(keys, dropna=False).ngroups if keys else 1
        if text.groupby(keys + [column], dropna=False).ngroups > before:
            keys.append(column)
    return keys[len(given):]


def resolve_key(runs: pd.DataFrame, key: str) -> str:
    """Map a user key (`model.scoring`, `scoring`, `data.max_len`) to a column of `runs`."""
    for name in (key, f"model.{key}", f"config.{key}"):
        if name in runs.columns:
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
        if path.is_file() and path.stat().st_size:
            frame = read_csv(path)
            if frame is None:
                continue
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
        for bucket in buckets:
            rows.append({"run_id": run.run_id, "run_dir": run.run_dir, **bucket})
    return pd.DataFrame(rows)


def read_hyps(run_dir: Path | str, split: str = "test") -> tuple[list[str], list[str] | None]:
    """Hypotheses of a split and, if stored beside them (hyps/<split>.ref.txt), the references."""
    hyps = schema.split_lines((Path(run_dir) / schema.hyps_file(split)).read_text(encoding="utf-8"))
    ref_path = Path(run_dir) / schema.refs_file(split)
    refs = schema.split_lines(ref_path.read_text(encoding="utf-8")) if ref_path.is_file() else None
    return hyps, refs
