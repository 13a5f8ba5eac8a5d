"""Regenerate every table, number and figure of docs/RESULTS.md (from the committed results/
store) and docs/ANALYSIS.md (the calibration of the test, from results/calibration/).

    python analysis/reproduce.py            # rewrite both documents (and RESULTS.md's figures)
    python analysis/reproduce.py --check    # exit 1, with a diff, if either differs

The documents mark what is generated with HTML comments (invisible on GitHub); everything
between a marker and the next `<!-- end -->` is replaced:

    <!-- report results/demo --metric val_bleu -->      a table: `lit-attention report` on the
    ...                                                 store with these options, as Markdown
    <!-- end -->                                        (`... --trials :: expected_max`: the
                                                        table of --trials; `:: improvement`: of
                                                        --improvement)
    <!-- value results/demo val_bleu mean model.family=transformer digits=1 -->61.8<!-- end -->
                                                        one number in the text: mean, std, min,
                                                        max, median or n of a metric over the
                                                        finished runs matching every KEY=VALUE
    <!-- figures results/demo --metric val_bleu -> figures/demo -->
                                                        the report's PNG figures, copied to
                                                        docs/figures/demo (not compared by --check,
    <!-- end -->                                        which does not draw them: image bytes vary
                                                        with matplotlib versions)
    <!-- sig results/demo --metric val_bleu :: model.scoring=dot delta_hi digits=1 -->45.4<!-- end -->
                                                        one statistic of the report's test against
                                                        its baseline (significance.csv): delta,
                                                        delta_lo, delta_hi, mde, se, df, p, p_holm,
                                                        p_equivalent_holm, for the row matching
                                                        every KEY=VALUE after `::`
    <!-- calibration results/calibration/seeds.csv -->  the seed test's false-positive rate, power
    ...                                                 and MDE on simulated experiments, as a
    <!-- end -->                                        Markdown table, from the committed results
                                                        of the simulation (analysis/calibrate.py
                                                        writes and checks them)

A number in these documents outside such a block is one nobody can regenerate: don't write it.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import math
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS_MD = REPO / "docs" / "RESULTS.md"
DOCS = (RESULTS_MD, REPO / "docs" / "ANALYSIS.md")

BLOCK = re.compile(r"<!-- (report|value|figures|calibration|sig)(?: ([^\n]*?))? -->(.*?)<!-- end -->", re.S)
STATS = ("mean", "std", "min", "max", "median", "n")
TEST_STATS = ("delta", "delta_lo", "delta_hi", "mde", "se", "df", "p", "p_holm", "p_equivalent_holm")


class ReproduceError(ValueError):
    """A marker that cannot be regenerated (bad arguments, missing store, no matching run)."""


def _report(args: list[str], out: Path) -> Path:
    """Run `lit-attention report ARGS --out OUT` in this process; its own output is dropped."""
    from lit_attention.analysis import report
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        status = report.main([*args, "--out", str(out)])
    if status != 0:
        raise ReproduceError(f"lit-attention report {' '.join(args)} failed:\n{captured.getvalue()}")
    return out


def _store(path: str) -> str:
    store = (REPO / path).resolve()
    if not store.is_dir():
        raise ReproduceError(f"results store {path} does not exist")
    return str(store)


def table(spec: str, scratch: Path) -> str:
    """`STORE OPTIONS [:: NAME]` -> the report's table.md, or its NAME.md (expected_max,
    improvement: the tables of --trials and --improvement)."""
    report_part, _, name = spec.partition(" :: ")
    store, *options = shlex.split(report_part)
    out = _report([_store(store), *options, "--no-figures"], scratch / "table")
    path = out / f"{name.strip() or 'table'}.md"
    if not path.is_file():
        written = ", ".join(sorted(p.stem for p in out.glob("*.md")))
        raise ReproduceError(f"the report {report_part!r} wrote no {path.name} (it wrote {written})")
    return "\n" + path.read_text().strip() + "\n"


def figures(spec: str, scratch: Path, docs: Path | None) -> str:
    """Markdown image links to the report's figures, copied under ``docs`` when given."""
    report_part, _, target = spec.partition(" -> ")
    if not target:
        raise ReproduceError(f"figures marker needs '-> DIR': {spec!r}")
    store, *options = shlex.split(report_part)
    from lit_attention.analysis import plots
    # --check compares the links only: the figures are made, but not drawn into files
    with plots.undrawn() if docs is None else contextlib.nullcontext():
        out = _report([_store(store), *options], scratch / "figures")
    names = sorted(p.name for p in out.glob("*.png"))
    if docs is not None:
        destination = docs / target.strip()
        shutil.rmtree(destination, ignore_errors=True)
        destination.mkdir(parents=True)
        for name in names:
            shutil.copy(out / name, destination / name)
    links = [f"![{Path(n).stem.replace('_', ' ')}]({target.strip()}/{n})" for n in names]
    return "\n" + "\n".join(links) + "\n"


def value(spec: str) -> str:
    """`STORE METRIC STAT [KEY=VALUE ...] [digits=N]` -> the number as text."""
    import pandas as pd

    from lit_attention.analysis import load
    from lit_attention.tracking.schema import Status
    store, metric, stat, *rest = shlex.split(spec)
    if stat not in STATS:
        raise ReproduceError(f"unknown statistic {stat!r} in {spec!r}; use one of {', '.join(STATS)}")
    digits = 1
    where = {}
    for pair in rest:
        key, _, wanted = pair.partition("=")
        if key == "digits":
            digits = int(wanted)
        else:
            where[key] = wanted
    runs = load.load_runs(_store(store))
    chosen = runs["status"] == Status.FINISHED
    for key, wanted in where.items():
        column = load.resolve_key(runs, key)
        chosen &= runs[column].astype(str) == wanted
    if metric not in runs:
        raise ReproduceError(f"metric {metric!r} is in no run of {store}")
    values = pd.to_numeric(runs.loc[chosen, metric], errors="coerce")
    values = values[values.map(lambda x: math.isfinite(x) if pd.notna(x) else False)]
    if values.empty:
        raise ReproduceError(f"no finished run of {store} with a finite {metric} matches {where}")
    if stat == "n":
        return str(len(values))
    number = {"mean": values.mean, "std": values.std, "min": values.min, "max": values.max,
              "median": values.median}[stat]()
    return f"{number:,.{digits}f}"


def test_statistic(spec: str, scratch: Path, tests: dict) -> str:
    """`STORE REPORT-OPTIONS :: KEY=VALUE ... STAT [digits=N]` -> one number of the report's
    significance.csv (the report runs once per STORE and options: `tests` caches it)."""
    import pandas as pd

    from lit_attention.analysis import tables
    report_part, sep, row_part = spec.partition(" :: ")
    if not sep:
        raise ReproduceError(f"sig marker needs ':: KEY=VALUE ... STAT': {spec!r}")
    if report_part not in tests:
        store, *options = shlex.split(report_part)
        out = _report([_store(store), *options, "--no-figures"], scratch / f"sig{len(tests)}")
        if not (out / "significance.csv").is_file():
            raise ReproduceError(f"report {report_part} tests nothing (no baseline)")
        tests[report_part] = pd.read_csv(out / "significance.csv", dtype=str)
    found = tests[report_part]
    *pairs, stat = [w for w in shlex.split(row_part) if not w.startswith("digits=")]
    digits = int(next((w[7:] for w in shlex.split(row_part) if w.startswith("digits=")), 1))
    if stat not in TEST_STATS:
        raise ReproduceError(f"unknown test statistic {stat!r} in {spec!r}; use one of {', '.join(TEST_STATS)}")
    chosen = pd.Series(True, index=found.index)
    for pair in pairs:
        key, _, wanted = pair.partition("=")
        if key not in found:
            raise ReproduceError(f"{key!r} is not a row key of the report {report_part!r}")
        chosen &= found[key] == wanted
    if chosen.sum() != 1:
        raise ReproduceError(f"{chosen.sum()} rows of the report {report_part!r} match {pairs}")
    number = float(found.loc[chosen, stat].iloc[0])
    if math.isnan(number):
        raise ReproduceError(f"{stat} of {pairs} in {report_part!r} is not a number (untested?)")
    if stat.startswith("p"):
        return tables.p_text(number, number, math.inf)
    return f"{number:+,.{digits}f}" if stat == "delta" else f"{number:,.{digits}f}"


def calibration_table(spec: str) -> str:
    """`results/calibration/NAME.csv` -> its calibration table (calibration_sim.py)."""
    import calibration_sim
    paths = shlex.split(spec)
    if len(paths) != 1:
        raise ReproduceError(f"a calibration block names one file under results/calibration/, not {spec!r} "
                             "(analysis/calibrate.py simulates one)")
    try:
        return "\n" + calibration_sim.markdown(calibration_sim.read(REPO / paths[0])) + "\n"
    except calibration_sim.CalibrationFileError as exc:
        raise ReproduceError(str(exc)) from exc


def regenerate(text: str, docs: Path | None = None) -> str:
    """The document with every generated block rebuilt (figures copied under ``docs`` if given)."""
    with tempfile.TemporaryDirectory() as tmp:
        tests = {}

        def rebuild(match: re.Match) -> str:
            kind, spec = match.group(1), (match.group(2) or "").strip()
            with tempfile.TemporaryDirectory(dir=tmp) as scratch:
                if kind == "report":
                    body = table(spec, Path(scratch))
                elif kind == "figures":
                    body = figures(spec, Path(scratch), docs)
                elif kind == "calibration":
                    body = calibration_table(spec)
                elif kind == "sig":
                    body = test_statistic(spec, Path(tmp), tests)
                else:
                    body = value(spec)
            return f"<!-- {kind}{' ' * bool(spec)}{spec} -->{body}<!-- end -->"
        return BLOCK.sub(rebuild, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare instead of writing; exit 1 when a document differs")
    parser.add_argument("--file", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    status = 0
    for path in [args.file] if args.file else DOCS:
        status = max(status, _one(path, args.check))
    return status


def _one(path: Path, check: bool) -> int:
    current = path.read_text()
    try:
        fresh = regenerate(current, docs=None if check else path.parent)
    except ReproduceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if check:
        if fresh == current:
            print(f"{path.name}: every generated block matches")
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(keepends=True), fresh.splitlines(keepends=True),
            f"{path.name} (committed)", f"{path.name} (regenerated)"))
        print(f"\n{path.name} differs from what results/ and the simulations regenerate: "
              "run python analysis/reproduce.py", file=sys.stderr)
        return 1
    if fresh != current:
        path.write_text(fresh)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
