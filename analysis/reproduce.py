"""Regenerate every table, number and figure of README.md and docs/RESULTS.md (from the committed
results/ store) and docs/REPORT.md (the calibration of the test, from results/calibration/).

    python analysis/reproduce.py            # rewrite the documents (and RESULTS.md's figures)
    python analysis/reproduce.py --check    # exit 1, with a diff, if one differs

The documents mark what is generated with HTML comments (invisible on GitHub); everything
between a marker and the next `<!-- end -->` is replaced:

    <!-- report results/demo --metric val_bleu -->      a table: `lit-attention report` on the
    ...                                                 store with these options, as Markdown,
    <!-- end -->                                        and its caption without the method
                                                        (short_caption); `... --trials ::
                                                        expected_max`: the table of --trials;
                                                        `:: improvement`: of --improvement
    <!-- method results/demo --metric val_bleu -->      the same report's whole caption: the
    ...                                                 method, stated once for the tables
    <!-- end -->                                        whose captions leave it out
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
    <!-- provenance results/demo -->                   which code made the store, when and where:
    ...                                                 its commit(s), dates and machines; --check
    <!-- end -->                                        fails when its training code (the
                                                        fingerprint of tracking/provenance.py)
                                                        differs from this checkout's, unless the
                                                        marker says `older` (the page then says
                                                        "made by older code; see CHANGELOG")
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
DOCS = (REPO / "README.md", REPO / "docs" / "RESULTS.md", REPO / "docs" / "REPORT.md")

BLOCK = re.compile(r"<!-- (report|method|value|figures|calibration|sig|provenance)(?: ([^\n]*?))? -->(.*?)"
                   r"<!-- end -->", re.S)
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


# The parts of a caption that state the method, the same in every table of a page: the page
# states them once (a `method` block) and each table's caption keeps what is its own.
METHOD_PARTS = [
    (r": mean ± standard deviation \(ddof=1\) over n = ", ", n = "),
    (r"; 95% CI: Student-t interval over seeds, mean ± t\(0\.975, n-1\)·s/√n; s with ddof=1"
     r"(?:, clipped to (?:\[[^\]]*\]|at least [\d.]+))?(?=\.)", ""),
    (r" Best value per column in bold\.", ""),
    (r"; steps, train s \(wall time\) and train FLOPs are what training used\.", "."),
    (r" Δ \[95% CI\]: difference of the seed means from the baseline's[^.]*\.", ""),
    (r" MDE: the difference the test finds with 80 % power at α = 0\.05 \(before Holm\)\.", ""),
    (r" ≈ (±\S+) \(TOST, Holm\): two one-sided tests that \|Δ\| is below the margin[^.]*\.",
     r" ≈: equivalent within \1 (TOST)."),
    (r" n=1: one seed \(here or in the baseline\), so no test over seeds and no mark\.", ""),
    (r" sacreBLEU signature: \S+\.", ""),
    (r" ‖∂L/∂h_t‖ decay/step: exp of the least-squares slope .*? the seeds there are\)\.", ""),
    (r" \(every token scored once, from the tokens of its window only; no state carried\)", ""),
]
TEST_PART = re.compile(r" [▲▼]/[▲▼]: better/worse than the baseline \((.*?)\)(?: on the \w+ hypotheses)?, "
                       r"Holm-adjusted p < 0\.05; [^:]*: (test over [^:]*): .*?Holm-corrected over both "
                       r"directions(?: of (\d+) comparisons?)?[^.]*\.")
POOLED = re.compile(r"one seed standard deviation pooled over the (\d+) arms tested \(([\d.]+), (\d+) df")
LEFT_OUT = re.compile(r"the evaluated text's own variance is left out: ([^;]*);")


def short_caption(caption: str) -> str:
    """``caption`` less the METHOD_PARTS (a part it lacks is left alone); the test against the
    baseline named by its baseline, kind, comparisons and a pooled seed SD."""
    for pattern, replacement in METHOD_PARTS:
        caption = re.sub(pattern, replacement, caption, count=1)
    test = TEST_PART.search(caption)
    if test:
        pooled, left_out = POOLED.search(test[0]), LEFT_OUT.search(test[0])
        said = (f" Baseline {test[1]}; {test[2]}" + (f", {test[3]} comparison{'s' * (test[3] != '1')}" if test[3] else "")
                + (f", seed SD pooled over {pooled[1]} arms ({pooled[2]}, {pooled[3]} df)" if pooled else "")
                + (f" (the text's variance left out: {left_out[1]})" if left_out else "") + ".")
        caption = caption[:test.start()] + said + caption[test.end():]
    return caption


def table(spec: str, scratch: Path, whole_caption: bool = False) -> str:
    """`STORE OPTIONS [:: NAME]` -> the report's table.md, or its NAME.md (expected_max,
    improvement: the tables of --trials and --improvement), with its caption shortened; with
    ``whole_caption``, that caption alone, the method included."""
    report_part, _, name = spec.partition(" :: ")
    store, *options = shlex.split(report_part)
    out = _report([_store(store), *options, "--no-figures"], scratch / "table")
    path = out / f"{name.strip() or 'table'}.md"
    if not path.is_file():
        written = ", ".join(sorted(p.stem for p in out.glob("*.md")))
        raise ReproduceError(f"the report {report_part!r} wrote no {path.name} (it wrote {written})")
    lines = path.read_text().strip().splitlines()
    rows = [line for line in lines if line.startswith("|")]
    caption = " ".join(line for line in lines if line.strip() and not line.startswith("|"))
    if whole_caption:
        return "\n" + caption + "\n"
    return "\n" + "\n".join(rows) + ("\n\n" + short_caption(caption) if caption else "") + "\n"


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


def provenance(spec: str) -> str:
    """`STORE [older]` -> one line: the store's commits, dates and machines, and whether its
    training code is this checkout's."""
    from lit_attention.analysis import load
    from lit_attention.tracking.provenance import code_fingerprint
    store, *flags = shlex.split(spec)
    if flags not in ([], ["older"]):
        raise ReproduceError(f"a provenance block takes a store and optionally 'older', not {spec!r}")
    runs = load.load_runs(_store(store))

    def values(column: str, shorten=lambda v: v) -> list[str]:
        found = runs[column].dropna() if column in runs else []
        return sorted({shorten(str(v)) for v in found})

    commits, dates = values("git_commit", lambda v: v[:7]), values("started_at", lambda v: v[:10])
    machines, made_by = values("machine"), values("code_fingerprint")
    recorded = runs["code_fingerprint"] if "code_fingerprint" in runs else runs["run_id"].map(lambda _: None)
    older = not (recorded.notna().all() and set(recorded) == {code_fingerprint()})
    if older and not flags:
        raise ReproduceError(
            f"{store} was made by training code other than this checkout's (fingerprint "
            f"{', '.join(made_by) or 'not recorded'}; now {code_fingerprint()}): re-make it, or mark its "
            f"provenance block 'older' and say what changed in CHANGELOG.md")
    if flags and not older:
        raise ReproduceError(f"{store} was made by this checkout's training code: drop 'older' from its provenance block")
    span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}" if dates else "date not recorded"
    code = "made by older code; see CHANGELOG" if older else "training code as in this checkout"
    commit = ("commit not recorded" if not commits else f"commit {commits[0]}" if len(commits) == 1 else
              f"commits {', '.join(commits[:3])}" + (f" and {len(commits) - 3} more" if len(commits) > 3 else ""))
    return (f"`{store}`: {commit}, {span}, "
            f"{'; '.join(machines) or 'machine not recorded'}; {code}.")


def stores_without_provenance(text: str) -> list[str]:
    """The run stores a document's blocks read that no provenance block of it describes."""
    used, described = set(), set()
    for match in BLOCK.finditer(text):
        kind, spec = match.group(1), (match.group(2) or "").strip()
        if kind in ("report", "value", "figures", "sig") and spec:
            used.add(shlex.split(spec)[0])
        elif kind == "provenance" and spec:
            described.add(shlex.split(spec)[0])
    return sorted(used - described)


def regenerate(text: str, docs: Path | None = None) -> str:
    """The document with every generated block rebuilt (figures copied under ``docs`` if given)."""
    missing = stores_without_provenance(text)
    if missing:
        raise ReproduceError(f"no <!-- provenance STORE --> block for {', '.join(missing)}: a page says "
                             "which code made every store it reports")
    with tempfile.TemporaryDirectory() as tmp:
        tests = {}

        def rebuild(match: re.Match) -> str:
            kind, spec = match.group(1), (match.group(2) or "").strip()
            with tempfile.TemporaryDirectory(dir=tmp) as scratch:
                if kind in ("report", "method"):
                    body = table(spec, Path(scratch), whole_caption=kind == "method")
                elif kind == "figures":
                    body = figures(spec, Path(scratch), docs)
                elif kind == "calibration":
                    body = calibration_table(spec)
                elif kind == "sig":
                    body = test_statistic(spec, Path(tmp), tests)
                elif kind == "provenance":
                    body = provenance(spec)
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
