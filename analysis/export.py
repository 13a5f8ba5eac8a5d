"""Copy the compact part of run stores into the committed results/ store.

    python analysis/export.py runs/multi30k results/multi30k [--runs ID ...] [--finished]

Per run: summary.json, config.yaml, metrics.csv, gradflow.csv and hyps/ (hypotheses and
references: what significance tests and BLEU by length need). Of gradflow.csv only the rows of the
last measured step are kept: all the analysis reads (aggregate.last_gradflow), where every step of
a reference run is about 1 MB. Checkpoints, attention heatmaps and
W&B files stay behind, so the store is a few hundred KB per run. A run already in the destination
is replaced (re-exporting a finished run after `lit-attention test` adds its test hypotheses), but
only by the same run: one whose task, seed and model settings differ (a new study reusing the run
ids t0000-s0, ... of a lost one) is refused, and nothing is exported.
A run whose summary.json cannot be read (tracking/schema.py) is not exported: nothing is copied,
and the message names the file and what is wrong. Paths of the machine that made a run (the
summary's run_dir, the config's run.root) stay behind too: a committed store names none.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import pandas as pd

from lit_attention.analysis.aggregate import last_gradflow
from lit_attention.tracking import schema

KEEP_FILES = (schema.SUMMARY, schema.CONFIG, schema.METRICS)
KEEP_DIRS = (schema.HYPS,)
CACHES = ("*.stats.npz",)      # the report's caches: rebuilt from the files they hash


def export_run(run_dir: Path, destination: Path) -> Path:
    """Copy one run's compact files to destination/<run_id>; returns that directory."""
    target = destination / run_dir.name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in KEEP_FILES:
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, target / name)
    if (run_dir / schema.GRADFLOW).is_file():
        last_gradflow(pd.read_csv(run_dir / schema.GRADFLOW)).to_csv(target / schema.GRADFLOW, index=False)
    for name in KEEP_DIRS:
        if (run_dir / name).is_dir():
            shutil.copytree(run_dir / name, target / name, ignore=shutil.ignore_patterns(*CACHES))
    without_machine_paths(target)
    return target


ROOT_LINE = re.compile(r"^(\s+root: )(/.*)$", re.M)   # run.root in a resolved config.yaml


def without_machine_paths(run: Path) -> None:
    """Drop summary.json's run_dir, keep only the file names of its tokenizer_digest, and make
    config.yaml's run.root the relative `runs`."""
    summary = schema.summary_path(run)
    fields = json.loads(summary.read_text())
    digest = fields.get("tokenizer_digest") or {}
    named = [entry for entry in digest.values() if isinstance(entry, dict) and "path" in entry]
    for entry in named:                       # the file's name and bytes say which tokenizer it was
        entry["path"] = Path(entry["path"]).name
    if fields.pop("run_dir", None) is not None or named:
        summary.write_text(json.dumps(fields, indent=2) + "\n")
    config = run / schema.CONFIG
    if config.is_file():
        config.write_text(ROOT_LINE.sub(r"\1runs", config.read_text()))


IDENTITY = ("task", "seed", "model")   # summary.json fields that say which cell a run is


def replaced_by_another_run(run_dir: Path, destination: Path) -> str | None:
    """Why exporting run_dir would replace a different run of the same id, or None."""
    target = destination / run_dir.name
    if not schema.summary_path(target).is_file():
        return None
    old, new = schema.read_summary(target), schema.read_summary(run_dir)
    differ = [k for k in IDENTITY if old.get(k) != new.get(k)]
    if not differ:
        return None
    if "model" in differ:
        a, b = old.get("model") or {}, new.get("model") or {}
        keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        differ[differ.index("model")] = ", ".join(f"model.{k} {a.get(k)!r} -> {b.get(k)!r}" for k in keys)
    for k in ("task", "seed"):
        if k in differ:
            differ[differ.index(k)] = f"{k} {old.get(k)!r} -> {new.get(k)!r}"
    return (f"{target} holds another run of the same id ({'; '.join(differ)}); export to another "
            f"destination, or remove {target} if the committed run is to go")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a group of run stores (runs/<group>)")
    parser.add_argument("destination", type=Path, help="results/<name>")
    parser.add_argument("--runs", dest="only", nargs="+", default=None, metavar="ID",
                        help="export only these run ids")
    parser.add_argument("--finished", action="store_true",
                        help="export only finished runs (not one still training, killed or failed)")
    args = parser.parse_args(argv)
    found = sorted(p for p in args.runs.iterdir() if schema.summary_path(p).is_file()) \
        if args.runs.is_dir() else []
    if args.only:
        missing = set(args.only) - {p.name for p in found}
        if missing:
            print(f"error: no run store {', '.join(sorted(missing))} in {args.runs}", file=sys.stderr)
            return 2
        found = [p for p in found if p.name in args.only]
    if not found:
        print(f"error: no run store (a directory with {schema.SUMMARY}) in {args.runs}", file=sys.stderr)
        return 2
    for run_dir in found:
        try:
            schema.read_summary(run_dir)
        except schema.SummaryError as exc:
            print(f"error: {exc}; nothing exported", file=sys.stderr)
            return 2
    if args.finished:
        found = [p for p in found if schema.read_summary(p).status is schema.Status.FINISHED]
        if not found:
            print(f"error: no finished run in {args.runs}", file=sys.stderr)
            return 2
    for run_dir in found:
        try:
            clash = replaced_by_another_run(run_dir, args.destination)
        except schema.SummaryError as exc:
            clash = str(exc)
        if clash:
            print(f"error: {clash}; nothing exported", file=sys.stderr)
            return 2
    for run_dir in found:
        export_run(run_dir, args.destination)
    print(f"exported {len(found)} runs to {args.destination}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
