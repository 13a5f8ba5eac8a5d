"""`lit-attention report RUNS_DIR [--out DIR]`: tables, significance and figures from run stores.

Writes into DIR (default RUNS_DIR/report): table.{tex,md,csv} (one row per configuration), pivot.{tex,md} (with --cols),
table_trace.csv (every run -> its cell), excluded.csv (failed/pruned/invalid/other runs, and the
directories the reader left out: unreadable ones, copies of a run read elsewhere), runs.csv,
significance.csv (when a baseline is tested) and the figures (PNG + PDF);
with --effects also effects_{importance,marginal,interactions}.{tex,md,csv} and their figures;
with --trials expected_max.csv/.md and its figure; with --improvement improvement.csv/.md; report-files.json
lists them, so that the next report into DIR removes those it does not write.
Prints the baseline and each configuration's mean, Δ, CI and p (tables.terminal_view) and
the files written. A run whose summary.json or config.yaml is malformed, or whose metric is
inf/NaN, gets one warning line on stderr and is counted, never averaged.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

import pandas as pd

from lit_attention.analysis import aggregate as agg_mod
from lit_attention.analysis import effects, load, plots
from lit_attention import metric_facts
from lit_attention.analysis import captions, significance, tables
from lit_attention.analysis.load import AnalysisError
from lit_attention.analysis.trials import (expected_max_markdown, expected_max_table, improvement_markdown,
                                           improvement_table)
from lit_attention.files import atomic_write, check_writable
from lit_attention.registry import NO_ATTENTION
from lit_attention.tracking import schema
from lit_attention.tracking.schema import hyps_file


WANDB_STORES = "wandb-runs"   # under --out: the run stores fetched from W&B


# What one report is asked for: the options of `lit-attention report`, checked (parse_args), with
# `out` a Path. runs_dir None: read W&B (--wandb); baseline ['off']: no test, None: the default;
# trials None: no --trials, []: by family.
Request = argparse.Namespace


def parse_args(argv: list[str]) -> Request:
    p = argparse.ArgumentParser(prog="lit-attention report", description=__doc__.splitlines()[0])
    p.add_argument("runs_dir", nargs="?", help="a runs/ directory, one group (study) or one run")
    p.add_argument("--out", help="output directory (default: RUNS_DIR/report; needed with --wandb)")
    p.add_argument("--rows", nargs="+",
                   help="configuration keys for the rows (e.g. model.scoring); default: the keys "
                        "that tell the configurations apart. Every other key that varies is shown "
                        "beside them: as columns where table.tex still fits, else in the caption")
    p.add_argument("--cols", nargs="+",
                   help="configuration keys for the columns of a pivot table (e.g. model.family)")
    p.add_argument("--metric", default="val_bleu", help="summary.json metric to tabulate")
    p.add_argument("--baseline", nargs="+", metavar="KEY=VALUE",
                   help="the configuration every other one is tested against; default: "
                        "attention=none when exactly one configuration has it; 'off': no test")
    p.add_argument("--where", nargs="+", metavar="KEY=VALUE",
                   help="keep only runs matching every KEY=VALUE")
    p.add_argument("--split",
                   help="hypotheses a BLEU/chrF test resamples (default: the metric's split if its "
                        "hypotheses are stored, else test, else val)")
    p.add_argument("--samples", type=int,
                   help=f"bootstrap draws of the sentences (default {significance.N_SAMPLES} for the "
                        f"test over seeds, which estimates the sentence variance from them; for "
                        f"--test bootstrap/permutation enough for Holm-corrected p-values below 0.01, "
                        f"at most {significance.MAX_DEFAULT_SAMPLES})")
    p.add_argument("--test", choices=list(significance.TESTS),
                   help="test against the baseline: seeds (default; bootstrap over seeds x "
                        "sentences, one-sided, with the difference's CI and MDE), or sacreBLEU's "
                        "sentence-level bootstrap / permutation of one run against one run")
    p.add_argument("--pool-seeds", action="store_true", default=None,
                   help="the test over seeds uses one seed standard deviation pooled over the arms "
                        "tested (when their spreads agree; stated in the caption) instead of each "
                        "arm's own (Welch)")
    p.add_argument("--equivalence", type=float, metavar="MARGIN",
                   help="also test whether each row is within ±MARGIN of the baseline (two one-sided "
                        "tests, Holm-corrected) and mark equivalent rows ≈")
    p.add_argument("--resample-seed", type=int,
                   help=f"seed of the resampled test sets (default: {significance.SEED}; in the caption)")
    p.add_argument("--digits", type=int, default=1, help="decimals shown in the tables")
    p.add_argument("--columns", nargs="+", metavar="NAME", help=tables.columns_help())
    p.add_argument("--wide", action="store_true",
                   help="table.tex as a table* that fits the text width of a two-column paper")
    p.add_argument("--label", help=r"\label of table.tex (pivot.tex: LABEL-grid); default: none")
    p.add_argument("--no-figures", action="store_true",
                   help="write the tables only, from summary.json, config.yaml and hypotheses (fast: "
                        "metrics.csv and gradflow.csv are not read, so gradient columns show only "
                        "what summaries record)")
    p.add_argument("--wandb", metavar="ENTITY/PROJECT|DIR",
                   help="read runs from W&B instead of RUNS_DIR: a directory of offline W&B runs "
                        "(the run store each logged, or the one beside it) or a project (needs "
                        "network and an API key; each run's run-store artifact is downloaded under "
                        "OUT/wandb-runs); read like a local store")
    p.add_argument("--group",
                   help="the group (study) to read: of a W&B project, or of the runs under RUNS_DIR")
    p.add_argument("--effects", action="store_true",
                   help="factor effects of a sweep: importance (type-II ANOVA; PED-ANOVA when the "
                        "study's study.db is beside the runs), marginal means, interactions")
    p.add_argument("--interactions", nargs="+", metavar="A:B",
                   help="with --effects: factor pairs to plot (default: the two most important)")
    p.add_argument("--trials", nargs="*", metavar="KEY",
                   help="expected best metric against the number of trials per family (Dodge et "
                        "al. 2019): a family is a value of KEY ... (default: model.family), a trial "
                        "one finished run; expected_max.csv, .png/.pdf")
    p.add_argument("--improvement", action="store_true",
                   help="probability that each row beats the baseline over pairs of runs, and the "
                        "interquartile mean over runs and tasks, with stratified-bootstrap 95 %% CIs "
                        "(Agarwal et al. 2021); improvement.csv")
    args = p.parse_args(argv)
    if args.interactions and not args.effects:
        p.error("--interactions needs --effects")
    swallowed = [k for k in args.trials or [] if Path(k).exists()]
    if swallowed and not args.runs_dir and not args.wandb:   # `report --trials runs/x`
        p.error(f"--trials took {swallowed[0]} as a KEY: put RUNS_DIR before --trials (or write --trials=KEY)")
    if not args.runs_dir and not args.wandb:
        p.error("give RUNS_DIR or --wandb ENTITY/PROJECT")
    if args.runs_dir and args.wandb:
        p.error("give RUNS_DIR or --wandb, not both")
    for flag, value, low, need in (("--samples", args.samples, 1, "at least 1"),
                                   ("--digits", args.digits, 0, "0 or more"),
                                   ("--resample-seed", args.resample_seed, 0, "0 or more")):
        if value is not None and value < low:
            p.error(f"{flag} must be {need}, got {value}")
    if args.equivalence is not None and not args.equivalence > 0:
        p.error(f"--equivalence must be a positive margin, got {args.equivalence}")
    if args.out is None and args.wandb:
        p.error("give --out DIR with --wandb")
    args.out = Path(args.runs_dir) / "report" if args.out is None else Path(args.out)
    return args


def selector(runs: pd.DataFrame, pairs: list[str]) -> dict[str, str]:
    """['attention=none'] -> {'model.attention': 'none'}."""
    found = {}
    for pair in pairs:
        if "=" not in pair:
            raise AnalysisError(f"expected KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        column = load.resolve_key(runs, key)
        try:
            number = float(value)
        except ValueError:
            number = None
        # a number as the column's own values spell it: 1e-3 as 0.001 (runs are matched on text)
        same = next((v for v in runs[column].dropna()
                     if isinstance(v, (int, float)) and not isinstance(v, bool) and v == number), None)
        found[column] = value if same is None else tables.label(same)
    return found


def choose_keys(runs: pd.DataFrame, rows: list[str] | None, cols: list[str] | None) -> tuple[list, list]:
    """Resolve --rows/--cols so that a row is the full configuration minus the seed. By default
    the rows are every key that varies: the summary's task and model fields, then any config
    field that still tells runs apart (a swept learning rate), with a notice. A key that varies
    but is hidden by the --rows/--cols asked for stops the report, naming it."""
    # Family first: it explains most. Attention next, before the fields that restate it (a scoring
    # of "none"): it is the ablation the suite exists for, and the default baseline is attention=none.
    columns = sorted(load.config_columns(runs), key=lambda c: (c != "model.family", c != "model.attention"))
    hidden = agg_mod.hidden_differences(runs.assign(_all=0), ["_all"])   # config.* fields that vary
    candidates = columns + [c for c in hidden if c not in columns]
    cols = [load.resolve_key(runs, k) for k in cols or []]
    if rows:
        rows = [load.resolve_key(runs, k) for k in rows]
    else:
        fallback = [c for c in ("model.family", "task") if c in runs][:1]  # a single configuration
        rows = [k for k in load.distinguishing(runs, candidates, given=cols) if k not in cols] or fallback
        if not rows + cols:
            raise load.AnalysisError("the runs record no model.family or task and no key tells them apart: "
                                     "name the key of their rows with --rows KEY")
        added = [k for k in rows if k not in columns]
        if added:
            print(f"rows: {', '.join(added)} added: runs that differ in it are different "
                  "configurations, never seeds of one", file=sys.stderr)
    twice = [k for i, k in enumerate(rows + cols) if k in (rows + cols)[:i]]
    if twice:   # pandas refused the duplicate column: a traceback
        raise AnalysisError(f"{twice[0]} is given twice in --rows/--cols: a key is one axis of the table")
    missing = load.distinguishing(runs, candidates, given=rows + cols)
    if missing:
        raise AnalysisError(f"configuration keys {missing} vary across the runs but are not in "
                            "--rows/--cols: seeds of different configurations would be averaged; "
                            "add them or filter with --where")
    return rows, cols


def decoding(runs: pd.DataFrame, metric: str) -> str | None:
    """How the hypotheses behind a BLEU/chrF metric were decoded: a recorded `decoding` field,
    else greedy for validation (always) and the config's beam for test; None for other metrics."""
    if not metric_facts.from_hypotheses(metric):
        return None
    used = runs[agg_mod.usable(runs, metric)]
    if "decoding" in used and used["decoding"].notna().any():
        return "; ".join(sorted(set(used["decoding"].dropna().astype(str))))
    if metric_facts.split_of(metric) == "val":
        return "greedy decoding"
    if "config.model.beam_size" not in used or used["config.model.beam_size"].isna().all():
        return None
    penalties = used.get("config.model.length_penalty", pd.Series(index=used.index, dtype=float))
    return "; ".join(sorted({"greedy decoding" if int(k) <= 1 else
                             f"beam {int(k)}" + ("" if pd.isna(lp) else f", length penalty {lp:g}")
                             for k, lp in zip(used["config.model.beam_size"], penalties) if pd.notna(k)}))


def hyps_split(runs: pd.DataFrame, wanted: str | None, metric: str) -> str:
    """The split whose hypotheses a test resamples: asked for, else the metric's own when stored,
    else test, else val. A split asked for whose hypotheses no run stores is refused: the test
    would test nothing."""
    def stored(split: str) -> bool:
        return any((Path(d) / hyps_file(split)).is_file() for d in runs["run_dir"])
    if wanted:
        if not stored(wanted):
            splits = sorted(set().union(*(schema.hyps_splits(d) for d in runs["run_dir"])))
            have = f"the splits whose hypotheses are stored: {', '.join(splits)}" if splits else "nor any hypotheses"
            raise AnalysisError(f"--split {wanted}: no run stores {hyps_file(wanted)}; {have}")
        return wanted
    return next((s for s in (metric_facts.split_of(metric), "test") if s and stored(s)), "val")


def load_input(request: Request) -> tuple[pd.DataFrame, pd.DataFrame, list]:
    """(runs, metrics, skipped): the runs of RUNS_DIR or of W&B, read by load.py's reader (each
    run once); skipped: the directories it left out (load.Skipped), each named on stderr."""
    curves = pd.DataFrame()
    if request.wandb:
        from lit_attention.analysis import wandb_import
        runs, curves, skipped = wandb_import.scan_wandb(request.wandb, request.group, request.out / WANDB_STORES,
                                                        request.metric)
    else:
        runs, skipped = load.scan_runs(request.runs_dir)
    if request.group is not None:
        kept = runs[runs["group"] == request.group]
        if kept.empty:
            groups = ", ".join(sorted(map(str, runs["group"].dropna().unique()))) or "(no group recorded)"
            raise AnalysisError(f"--group {request.group}: no run of that group here; the groups: {groups}")
        runs = kept
    load.warn_skipped(skipped)
    metrics = pd.DataFrame()
    if not request.no_figures:
        metrics = pd.concat([frame for frame in (load.load_metrics(runs), curves) if not frame.empty] or [metrics],
                            ignore_index=True)
    if request.where:
        runs = runs[significance.matches(runs, selector(runs, request.where))]
        if runs.empty:
            raise AnalysisError(f"no run matches --where {' '.join(request.where)}")
    if request.metric not in runs:
        statuses = runs["status"].value_counts() if "status" in runs else pd.Series(dtype=int)
        counts = ", ".join(f"{n} {status}" for status, n in statuses.items())
        later = ("; a run records it at its first validation: report again then"
                 if "running" in statuses else "")
        raise AnalysisError(f"metric {request.metric!r} is in no run summary yet ({len(runs)} run"
                            f"{'s' * (len(runs) != 1)}: {counts}){later}")
    runs = runs if request.no_figures else agg_mod.add_gradient_stats(runs)
    for run_dir, column, value in agg_mod.invalid_values(runs, [request.metric]):
        why = schema.invalid_number(column, value) or "not a finite number"
        load.warn(f"{run_dir}: {column} is {load.quoted(value)}, {why}; the run is not averaged")
    for run_dir, column, value in agg_mod.invalid_values(runs, agg_mod.COSTS + agg_mod.GRADIENT):
        load.warn(f"{run_dir}: {column} is {load.quoted(value)}; left out of the {column} mean")
    return runs, metrics, skipped


def significance_vs_baseline(request: Request, runs, agg, keys) -> tuple:
    """(significance table, which agg row is the baseline, baseline text), or Nones. The default
    baseline: the model without attention when it is one configuration of the table."""
    pairs = request.baseline
    if pairs is None and "model.attention" in keys and (agg["model.attention"] == NO_ATTENTION).sum() == 1:
        pairs = [f"model.attention={NO_ATTENTION}"]
        print(f"significance against the configuration without attention ({pairs[0]}); "
              "choose another with --baseline KEY=VALUE", file=sys.stderr)
    if not pairs or pairs == ["off"]:
        given = [f"--{name.replace('_', '-')}" for name in ("samples", "test", "resample_seed", "split",
                                                            "pool_seeds", "equivalence")
                 if getattr(request, name) is not None]
        if given:
            raise AnalysisError(f"{', '.join(given)} given but no significance test runs: "
                                "choose a baseline with --baseline KEY=VALUE")
        return None, None, None
    chosen = selector(runs, pairs)
    outside = [k for k in chosen if k not in keys]
    if outside:
        raise AnalysisError(f"baseline keys {outside} are not among the table keys {keys}")
    column = None if metric_facts.from_hypotheses(request.metric) else request.metric
    if column and request.split:
        raise AnalysisError(f"--split chooses the hypotheses of a BLEU/chrF test; {request.metric} is "
                            "tested on the runs' values over seeds (and its own split's token blocks)")
    used = runs[agg_mod.usable(runs, request.metric)]      # the runs the table averages
    split = hyps_split(used, request.split, request.metric)
    if column is None and request.split is None and metric_facts.split_of(request.metric) not in (None, split):
        print(f"note: the test resamples the {split} hypotheses (the only ones stored); the table "
              f"shows {request.metric}", file=sys.stderr)
    sig = significance.compare_to_baseline(
        used, keys, chosen, split=split,
        metric=metric_facts.base_metric(request.metric) if column is None else "bleu", n_samples=request.samples,
        seed=significance.SEED if request.resample_seed is None else request.resample_seed,
        test=request.test or significance.DEFAULT_TEST, column=column,
        higher_is_better=metric_facts.higher_is_better(request.metric), pool_seeds=bool(request.pool_seeds),
        equivalence=request.equivalence)
    return sig, significance.matches(agg, chosen), ", ".join(f"{k}={v}" for k, v in chosen.items())


def write_tables(request: Request, runs, agg, rows, cols, sig, is_base, baseline,
                 excluded: pd.DataFrame, also: list[str]) -> None:
    """Every table file. `excluded`: excluded.csv
    (aggregate.excluded_runs). `also`: the configuration fields
    outside the keys that differ between rows: columns of table.csv, and of table.tex/.md where
    table.tex still fits (else, and in a pivot, listed in the caption)."""
    out = request.out
    keys = rows + cols
    # the sacreBLEU signature(s) of the metric's scores (chrF's for a chrF table), and the language
    # models' evaluation protocols ("not recorded" for runs written before it was)
    field = metric_facts.signature_field(request.metric)
    signed = "; ".join(sorted(set(runs[field].dropna()))) if field in runs else None
    protocols = runs.loc[agg_mod.usable(runs, request.metric)].get("eval_protocol", pd.Series())
    protocols = sorted(set(protocols.dropna())) + (["not recorded"] if protocols.isna().any() else [])

    def caption(cells: pd.DataFrame, legend: str | None) -> str:
        shown = list(cells.columns) if cells.columns.names[0] is None else []   # a pivot: the metric only
        return captions.caption_text(request.metric, agg, captions.CI_METHOD, signed,
                                   captions.test_method_of(sig) if sig is not None else None,
                                   baseline, eval_protocols=protocols,
                                   unreadable=int((excluded["status"] == load.UNREADABLE).sum()),
                                   notes=(captions.test_notes(sig, keys), captions.scoring_note(runs), legend),
                                   decoding=decoding(runs, request.metric),
                                   test_split=(sig.attrs["split"] if sig is not None
                                               and not sig.attrs["values"] else None),
                                   marked=sig is None or sig.attrs["test"] == significance.DEFAULT_TEST,
                                   shown=shown)
    summary = tables.labelled(*tables.summary_table(agg, keys, request.metric, sig, is_base, request.digits),
                              request.metric)
    legend = captions.differences_note(agg, keys, also)
    table_legend = None
    if also:
        wider = tables.with_keys(*summary, agg, keys, also)
        if keys_fit(request, *wider):
            summary, where = wider, "as columns"
        else:
            table_legend, where = legend, "in the caption (as columns table.tex would not fit)"
        print(f"rows also differ in {', '.join(also)}: shown {where} and in table.csv", file=sys.stderr)
    fitted = fit_columns(request, *summary)     # before any file: an unknown --columns writes nothing
    numeric = agg if sig is None else agg.assign(baseline=is_base).merge(sig, on=keys, how="left")
    trace = tables.trace_table(runs, keys, request.metric)
    for name, frame in (("runs", runs), ("excluded", excluded), ("significance", sig),
                        ("table", numeric), ("table_trace", trace)):
        if frame is not None:    # significance.csv: when a baseline is tested
            atomic_write(out / f"{name}.csv", frame.to_csv(index=False))

    # table.md: every column, unless --columns
    layouts = [("table", request.label, fitted, fitted if request.columns else summary, table_legend)]
    if cols:
        grid = tables.labelled(*tables.pivot_table(agg, rows, cols, request.metric, sig, request.digits),
                               request.metric)
        check_width(request, "pivot", *grid)
        layouts.append(("pivot", request.label and f"{request.label}-grid", grid, grid, legend))
    for name, tex_label, (cells, best), markdown, note in layouts:
        atomic_write(out / f"{name}.tex", tables.to_latex(cells, best, caption(cells, note), label=tex_label,
                                                          wide=request.wide))
        atomic_write(out / f"{name}.md", tables.to_markdown(*markdown, caption(markdown[0], note)))


def fit_columns(request: Request, cells: pd.DataFrame, best: pd.DataFrame) -> tuple:
    """The columns of table.tex (and of table.md with --columns): those asked for, or what fits."""
    cells, best, left_out = tables.choose_columns(cells, best, metric_facts.metric_label(request.metric),
                                                  request.columns, tables.width_limit(request.wide))
    if left_out and request.columns is None:
        print(f"table.tex: {', '.join(left_out)} left out to fit the {'text' if request.wide else 'column'} "
              f"width of a two-column paper (in table.md and table.csv; choose with --columns"
              f"{'' if request.wide else ' or --wide'})", file=sys.stderr)
    check_width(request, "table", cells, best)
    return cells, best


def keys_fit(request: Request, cells: pd.DataFrame, best: pd.DataFrame) -> bool:
    """Whether table.tex fits with every key as a column and the metric, its CI and n (or the
    --columns asked for): the other statistics then make room for the keys."""
    metric = metric_facts.metric_label(request.metric)
    wanted = request.columns or [n for n in ("mean", "ci", "n") if n in tables.column_names(cells, metric)]
    cells, best, _ = tables.choose_columns(cells, best, metric, wanted)
    return tables.tabular_width(cells, best) <= tables.width_limit(request.wide)


def check_width(request: Request, name: str, cells: pd.DataFrame, best: pd.DataFrame) -> None:
    limit = tables.width_limit(request.wide)
    width = tables.tabular_width(cells, best)
    if width > limit:
        print(f"warning: {name}.tex is about {width:.0f} pt wide, wider than the "
              f"{'text' if request.wide else 'column'} width of a two-column paper ({limit:g} pt): "
              f"{'' if request.wide else 'use --wide, '}fewer --rows/--cols or --columns", file=sys.stderr)


def write_figures(request: Request, runs, metrics, agg, keys, sig, is_base) -> list[Path]:
    out = request.out
    m = request.metric
    chosen, more = tables.leading(agg, keys, m, sig, is_base, plots.SHOWN)
    if more:    # a sweep: what a reader can tell apart in a figure; every row is in table.csv
        agg = agg.iloc[chosen]
        drawn = set(tables.config_names(agg, keys))
        runs = runs[[name in drawn for name in tables.config_names(runs, keys)]]
        print(f"figures: {'the baseline and ' if sig is not None else ''}the {plots.SHOWN} configurations "
              f"of {'largest |Δ|' if sig is not None else 'best mean'}; {more} more in table.csv", file=sys.stderr)
    figures = plots.plot_ablation_bars(agg, keys, m, out / "ablation_bars", runs, tables.marks(agg, keys, sig))
    # against the step, and against the target tokens seen when the summaries record them
    for x in ("step", "tokens"):
        for y in ("val_ppl", "val_bleu"):
            stem = out / ("learning_curves_" + y[4:] + ("" if x == "step" else "_tokens"))
            figures += plots.plot_learning_curves(metrics, runs, keys, stem, y=y, x=x, metric=m)
    stored = runs[runs["run_dir"].map(lambda d: Path(d).is_dir())]   # not runs read from W&B summaries
    if len(stored):  # these read files that only run stores hold
        figures += plots.plot_bleu_by_length(load.load_length_buckets(stored), stored, keys,
                                             out / "bleu_by_length", metric=m)
        figures += plots.plot_gradflow(load.load_gradflow(stored), stored, keys, out / "gradflow", metric=m)
        figures += plots.plot_attention_grid(stored, keys, out / "attention_grid", metric=m)
    return figures


def improvement_vs_baseline(request: Request, runs: pd.DataFrame, agg: pd.DataFrame, keys: list[str],
                            is_base) -> pd.DataFrame | None:
    """--improvement: trials.improvement_table of every row against the significance test's baseline."""
    if not request.improvement:
        return None
    if is_base is None:
        raise AnalysisError("--improvement compares every row with a baseline: choose one with "
                            "--baseline KEY=VALUE")
    config = [k for k in keys if k != "task"]
    chosen = agg.loc[is_base, config].drop_duplicates()
    if len(chosen) != 1:
        raise AnalysisError(f"--improvement needs one baseline configuration; the baseline matches "
                            f"{len(chosen)}")
    seed = significance.SEED if request.resample_seed is None else request.resample_seed
    return improvement_table(runs, config, chosen.iloc[0].to_dict(), request.metric,
                                         metric_facts.higher_is_better(request.metric), seed=seed)


class Terminated(Exception):
    """SIGTERM while the report runs (raised by its handler, so that no file is left half written)."""


def _terminated(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    request = parse_args(list(sys.argv[1:] if argv is None else argv))
    out = request.out
    # Every output is written whole or not at all (files.atomic_write); SIGTERM ends the report
    # between two files, with its exit status and one line.
    handles = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if handles else None
    state: dict = {}   # "earlier": the report files in OUT before this report wrote any
    try:
        return _report(request, state)
    except Terminated:   # what this report wrote is recorded, so the next one can replace it
        if "earlier" in state:
            record_outputs(out, state["earlier"], finished=False)
        print(f"lit-attention report: interrupted (SIGTERM): {out} holds whole files only, some of them "
              f"from an earlier report; run the report again", file=sys.stderr)
        return 143
    finally:
        if handles:
            signal.signal(signal.SIGTERM, previous)


def _report(request: Request, state: dict) -> int:
    out, better = request.out, metric_facts.higher_is_better(request.metric)
    made = [p for p in (out, *out.parents) if not p.exists()]   # deepest first
    try:
        try:
            check_out(request)
            runs, metrics, skipped = load_input(request)
        except OSError as exc:    # a run store or W&B directory that cannot be read
            raise AnalysisError(error_text(exc)) from None
        rows, cols = choose_keys(runs, request.rows, request.cols)
        also = agg_mod.other_differences(runs, rows + cols)
        agg = agg_mod.aggregate(runs, rows + cols, request.metric, also)
        sig, is_base, baseline = significance_vs_baseline(request, runs, agg, rows + cols)
        # --effects: every swept factor's effects (effects.py) and the interaction pairs to draw
        found = effects.analyse(runs, request.metric, better) if request.effects else None
        pairs = effects.resolve_pairs(found, runs, request.interactions) if request.effects else []
        # --trials: the expected best metric per family (trials.py), a family a value of these keys
        trial_keys = ([load.resolve_key(runs, k) for k in request.trials or []]
                      or [k for k in ("model.family",) if k in runs])
        trials = None if request.trials is None else expected_max_table(runs, trial_keys, request.metric, better)
        improved = improvement_vs_baseline(request, runs, agg, rows + cols, is_base)
        excluded = agg_mod.excluded_runs(runs, request.metric, skipped)
        earlier = state["earlier"] = outputs(out)
        write_tables(request, runs, agg, rows, cols, sig, is_base, baseline, excluded, also)
    except AnalysisError as exc:
        if "earlier" not in state:   # nothing written: the directories this report made go again
            for path in made:
                try:
                    path.rmdir()
                except OSError:
                    break
        print(f"error: {load.cut(error_text(exc), load.MAX_MESSAGE)}", file=sys.stderr)
        return 2
    figures = [] if request.no_figures else write_figures(request, runs, metrics, agg, rows + cols, sig, is_base)
    if found is not None:
        figures += effects.write_effects(found, out, pairs, better, request.digits, not request.no_figures)[1]
    if improved is not None:
        atomic_write(out / "improvement.csv", improved.to_csv(index=False))
        atomic_write(out / "improvement.md", improvement_markdown(improved, request.metric, baseline, better,
                                                                  digits=request.digits))
    if trials is not None:
        atomic_write(out / "expected_max.csv", trials.to_csv(index=False))
        atomic_write(out / "expected_max.md", expected_max_markdown(trials, trial_keys, request.metric, better,
                                                                    request.digits))
        if not request.no_figures:
            figures += plots.plot_expected_max(trials, trial_keys, request.metric, out / "expected_max")
    why = f" ({agg_mod.excluded_counts(excluded, request.metric)})" if len(excluded) else ""
    against = f"; Δ and p against {baseline}" if baseline else ""
    print(tables.abbreviate(f"{request.metric} ({metric_facts.metric_label(request.metric)}): {len(runs)} runs, "
                            f"{len(agg)} configurations, {len(excluded)} excluded{why}{against}", tables.WIDTH))
    print("\n".join(tables.terminal_view(agg, rows + cols, request.metric, sig, is_base, request.digits)))
    written = ["table.md (full table, caption)", "table.csv", "table.tex", *(["pivot.md/.tex"] if cols else []),
               *(["effects_*.md"] if found is not None else []), *(["expected_max.md"] if trials is not None else []),
               *(["improvement.md"] if improved is not None else []),
               *([f"{len({f.stem for f in figures})} figures"] if figures else []), "excluded.csv"]
    print(f"in {out}: {', '.join(written)}")
    removed, kept = record_outputs(out, earlier, finished=True)
    if removed:
        print(f"removed {len(removed)} file{'s' * (len(removed) != 1)} of the earlier report in {out} that this "
              f"one did not write: {_names(removed)}", file=sys.stderr)
    if kept:
        print(f"note: {len(kept)} file{'s' * (len(kept) != 1)} in {out} are not from this report, left as they "
              f"are (no earlier report wrote them, or they changed since): {_names(kept)}", file=sys.stderr)
    return 0


OUTPUT_SUFFIXES = (".csv", ".md", ".tex", ".png", ".pdf")
MANIFEST = "report-files.json"   # the files the last report in OUT wrote, as it left them


def check_out(request: Request) -> None:
    """Before any work: OUT is made (if missing) and a file written and removed in it, and no
    directory stands where the report writes a file (or a file where --wandb downloads run
    stores); AnalysisError naming what is wrong otherwise."""
    out = request.out
    if out.exists() and not out.is_dir():
        raise AnalysisError(f"--out {out}: is a file, not a directory")
    try:
        check_writable(out)
    except OSError as exc:
        raise AnalysisError(f"--out {out}: cannot write there ({exc.strerror})") from None
    for path in sorted(out.iterdir()):
        if (path.suffix in OUTPUT_SUFFIXES or path.name == MANIFEST) and not path.is_file():
            raise AnalysisError(f"--out {out}: {path.name} is no file, and the report writes a file of that name")
    stores = out / WANDB_STORES     # where the artifacts of a W&B project's runs are downloaded
    if request.wandb and not Path(request.wandb).is_dir() and stores.exists() and not stores.is_dir():
        raise AnalysisError(f"--out {out}: {WANDB_STORES} is a file, and --wandb downloads run stores into it")


def error_text(exc: Exception) -> str:
    """What went wrong, in words: an OSError's message and file (never its bare errno)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc.args[0]) if exc.args else str(exc)


def outputs(out: Path) -> dict[Path, tuple[int, int, int]]:
    """The report files in ``out``, each with its (inode, mtime in ns, size)."""
    stats = {path: path.stat() for path in out.iterdir() if path.suffix in OUTPUT_SUFFIXES and path.is_file()}
    return {path: (stat.st_ino, stat.st_mtime_ns, stat.st_size) for path, stat in stats.items()}


def record_outputs(out: Path, earlier: dict, finished: bool) -> tuple[list[str], list[str]]:
    """Record in MANIFEST the files this report wrote (every file is replaced whole, as a new
    inode: one whose identity is not what it was before this report began is this report's).
    ``finished``: remove the files of the earlier report (those MANIFEST listed, unchanged since)
    that this one did not write, and return (removed, kept: the other files this one did not
    write). Not ``finished`` (SIGTERM): remove nothing, and keep the earlier report's files listed
    beside this one's."""
    now = outputs(out)
    written = {p: identity for p, identity in now.items() if earlier.get(p) != identity}
    try:
        listed = {out / name: tuple(identity) for name, identity in json.loads((out / MANIFEST).read_text()).items()}
    except (OSError, ValueError, TypeError, AttributeError):   # none yet, or not ours to trust
        listed = {}
    theirs = {p: identity for p, identity in listed.items() if now.get(p) == identity and p not in written}
    removed = list(theirs) if finished else []
    for path in removed:
        path.unlink(missing_ok=True)
    record = {**({} if finished else theirs), **written}
    atomic_write(out / MANIFEST, json.dumps({p.name: list(i) for p, i in sorted(record.items())}, indent=1) + "\n")
    kept = [p for p in now if p not in written and p not in removed]
    return sorted(p.name for p in removed), sorted(p.name for p in kept)


def _names(names: list[str]) -> str:
    return ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")


if __name__ == "__main__":
    sys.exit(main())
