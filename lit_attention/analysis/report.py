"""`lit-attention report RUNS_DIR [--out DIR]`: tables, significance and figures from run stores.

Writes into DIR (default RUNS_DIR/report): table.{tex,md,csv} (one row per configuration), pivot.{tex,md} (with --cols),
table_trace.csv (every run -> its cell), excluded.csv (failed/pruned/other runs), runs.csv,
significance.csv (when a baseline is tested) and the figures (PNG + PDF). Prints the Markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from lit_attention.analysis import aggregate as agg_mod
from lit_attention.analysis import load, plots, significance, tables
from lit_attention.analysis.load import AnalysisError


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lit-attention report", description=__doc__.splitlines()[0])
    p.add_argument("runs_dir", nargs="?", help="a runs/ directory, one group (study) or one run")
    p.add_argument("--out", default=None,
                   help="output directory (default: RUNS_DIR/report; needed with --wandb)")
    p.add_argument("--rows", nargs="+", default=None,
                   help="configuration keys for the rows (e.g. model.scoring); default: every "
                        "configuration key that varies")
    p.add_argument("--cols", nargs="+", default=None,
                   help="configuration keys for the columns of a pivot table (e.g. model.family)")
    p.add_argument("--metric", default="val_bleu", help="summary.json metric to tabulate")
    p.add_argument("--baseline", nargs="+", default=None, metavar="KEY=VALUE",
                   help="the configuration every other one is tested against (paired bootstrap); "
                        "default: attention=none when exactly one configuration has it; 'off': no test")
    p.add_argument("--where", nargs="+", default=None, metavar="KEY=VALUE",
                   help="keep only runs matching every KEY=VALUE")
    p.add_argument("--split", default=None,
                   help="hypotheses used for significance (default: test if stored, else val)")
    p.add_argument("--samples", type=int, default=None,
                   help=f"resamples per test (default: 100 x comparisons, at least "
                        f"{significance.N_SAMPLES}, at most {significance.MAX_DEFAULT_SAMPLES}: "
                        "enough for Holm-corrected p-values below 0.01)")
    p.add_argument("--test", choices=sorted(significance.TESTS), default=None,
                   help="paired test against the baseline (default: bootstrap; sacreBLEU's bs or ar)")
    p.add_argument("--resample-seed", type=int, default=None,
                   help=f"seed of the resampled test sets (default: {significance.SEED}; in the caption)")
    p.add_argument("--digits", type=int, default=1, help="decimals shown in the tables")
    p.add_argument("--no-figures", action="store_true",
                   help="write the tables only, from summary.json, config.yaml and hypotheses (fast: "
                        "metrics.csv and gradflow.csv are not read, so gradient columns show only "
                        "what summaries record)")
    p.add_argument("--wandb", default=None, metavar="ENTITY/PROJECT",
                   help="read runs from W&B instead of RUNS_DIR (needs network and an API key)")
    p.add_argument("--group", default=None, help="the W&B group (study) to read")
    args = p.parse_args(argv)
    if not args.runs_dir and not args.wandb:
        p.error("give RUNS_DIR or --wandb ENTITY/PROJECT")
    if args.samples is not None and args.samples < 1:
        p.error(f"--samples must be at least 1, got {args.samples}")
    if args.out is None:
        if args.wandb:
            p.error("give --out DIR with --wandb")
        args.out = str(Path(args.runs_dir) / "report")
    return args


def selector(runs: pd.DataFrame, pairs: list[str]) -> dict[str, str]:
    """['attention=none'] -> {'model.attention': 'none'}."""
    found = {}
    for pair in pairs:
        if "=" not in pair:
            raise AnalysisError(f"expected KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        found[load.resolve_key(runs, key)] = value
    return found


def choose_keys(runs: pd.DataFrame, rows: list[str] | None, cols: list[str] | None) -> tuple[list, list]:
    """Resolve --rows/--cols; every configuration key that varies must be among them."""
    columns = load.config_columns(runs)
    columns = sorted(columns, key=lambda c: c != "model.family")     # family first: it explains most
    moving = load.distinguishing(runs, columns)
    cols = [load.resolve_key(runs, k) for k in cols or []]
    if rows:
        rows = [load.resolve_key(runs, k) for k in rows]
    else:
        fallback = [c for c in ("model.family", "task") if c in runs][:1]  # a single configuration
        rows = [k for k in moving if k not in cols] or fallback
    missing = load.distinguishing(runs, columns, given=rows + cols)
    if missing:
        raise AnalysisError(f"configuration keys {missing} vary across the runs but are not in "
                          "--rows/--cols: seeds of different configurations would be averaged; "
                          "add them or filter with --where")
    return rows, cols


def default_baseline(agg: pd.DataFrame, keys: list[str]) -> list[str] | None:
    """attention=none (the model without attention) when it is one configuration of the table."""
    if "model.attention" in keys and (agg["model.attention"] == "none").sum() == 1:
        print("significance against the configuration without attention (model.attention=none); "
              "choose another with --baseline KEY=VALUE", file=sys.stderr)
        return ["model.attention=none"]
    return None


def signature(runs: pd.DataFrame, metric: str) -> str | None:
    """The sacreBLEU signature(s) of the metric's scores (chrF's for a chrF table)."""
    column = "chrf_signature" if "chrf" in metric else "sacrebleu_signature"
    if column not in runs:
        return None
    return "; ".join(sorted(set(runs[column].dropna()))) or None


def hyps_split(runs: pd.DataFrame, wanted: str | None) -> str:
    if wanted:
        return wanted
    has_test = any((Path(d) / "hyps" / "test.txt").is_file() for d in runs["run_dir"])
    return "test" if has_test else "val"


def load_input(args) -> tuple[pd.DataFrame, pd.DataFrame]:
    if args.wandb:
        from lit_attention.analysis.wandb_export import load_wandb
        runs, metrics = load_wandb(args.wandb, args.group, args.metric)
    else:
        runs = load.load_runs(args.runs_dir)
        metrics = pd.DataFrame() if args.no_figures else load.load_metrics(runs)
    if args.where:
        runs = runs[significance.matches(runs, selector(runs, args.where))]
        if runs.empty:
            raise AnalysisError(f"no run matches --where {' '.join(args.where)}")
        if not metrics.empty:
            metrics = metrics[metrics["run_dir"].isin(runs["run_dir"])]
    if args.metric not in runs:
        raise AnalysisError(f"metric {args.metric!r} is in no run summary")
    return (runs if args.no_figures else agg_mod.add_gradient_stats(runs)), metrics


def significance_vs_baseline(args, runs, agg, keys) -> tuple:
    """(significance table, which agg row is the baseline, baseline text), or Nones."""
    pairs = default_baseline(agg, keys) if args.baseline is None else args.baseline
    if not pairs or pairs == ["off"]:
        given = [f for f, v in (("--samples", args.samples), ("--test", args.test),
                                ("--resample-seed", args.resample_seed)) if v is not None]
        if given:
            raise AnalysisError(f"{', '.join(given)} given but no significance test runs: "
                                "choose a baseline with --baseline KEY=VALUE")
        return None, None, None
    chosen = selector(runs, pairs)
    outside = [k for k in chosen if k not in keys]
    if outside:
        raise AnalysisError(f"baseline keys {outside} are not among the table keys {keys}")
    sig = significance.compare_to_baseline(
        runs, keys, chosen, split=hyps_split(runs, args.split),
        metric="chrf" if "chrf" in args.metric else "bleu", n_samples=args.samples,
        seed=significance.SEED if args.resample_seed is None else args.resample_seed,
        test=args.test or "bootstrap")
    text = ", ".join(f"{k}={v}" for k, v in chosen.items())
    return sig, significance.matches(agg, chosen), text


def write_tables(args, out: Path, runs, agg, rows, cols, sig, is_base, baseline) -> list[str]:
    """Every table file; returns the Markdown tables to print."""
    keys = rows + cols
    caption = tables.caption_text(args.metric, agg, agg_mod.CI_METHOD, signature(runs, args.metric),
                                  significance.method(**sig.attrs) if sig is not None else None,
                                  baseline, notes=(tables.scoring_note(runs),))
    runs.to_csv(out / "runs.csv", index=False)
    agg_mod.excluded_runs(runs, args.metric).to_csv(out / "excluded.csv", index=False)
    tables.trace_table(runs, keys, args.metric).to_csv(out / "table_trace.csv", index=False)
    numeric = agg
    if sig is not None:
        sig.to_csv(out / "significance.csv", index=False)
        numeric = agg.assign(baseline=is_base).merge(sig, on=keys, how="left")
    numeric.to_csv(out / "table.csv", index=False)

    summary = tables.summary_table(agg, keys, args.metric, sig, is_base, args.digits)
    layouts = [("table", "tab:results", summary)]
    if cols:
        grid = tables.pivot_table(agg, rows, cols, args.metric, sig, args.digits)
        layouts.append(("pivot", "tab:grid", grid))
    printed = []
    for name, tex_label, (cells, best) in layouts:
        (out / f"{name}.tex").write_text(tables.to_latex(cells, best, caption, label=tex_label))
        markdown = tables.to_markdown(cells, best, caption)
        (out / f"{name}.md").write_text(markdown)
        printed.append(markdown)
    return printed


def write_figures(args, out: Path, runs, metrics, agg, keys) -> list[Path]:
    m = args.metric
    figures = plots.plot_ablation_bars(agg, keys, m, out / "ablation_bars")
    # against the step, and against wall-clock time when metrics.csv records it
    xs = ["step"] + [x for x in ("time", "wall_time", "elapsed") if x in metrics][:1]
    for x in xs:
        for y in ("val_ppl", "val_bleu"):
            stem = out / ("learning_curves_" + y[4:] + ("" if x == "step" else "_time"))
            figures += plots.plot_learning_curves(metrics, runs, keys, stem, y=y, x=x, metric=m)
    if not args.wandb:  # these read files that only run stores hold
        figures += plots.plot_bleu_by_length(load.load_length_buckets(runs), runs, keys,
                                             out / "bleu_by_length", metric=m)
        figures += plots.plot_gradflow(load.load_gradflow(runs), runs, keys, out / "gradflow", metric=m)
        figures += plots.plot_attention_grid(runs, keys, out / "attention_grid", metric=m)
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    out = Path(args.out)
    try:
        runs, metrics = load_input(args)
        rows, cols = choose_keys(runs, args.rows, args.cols)
        agg = agg_mod.aggregate(runs, rows + cols, args.metric)
        hidden = agg_mod.hidden_differences(runs[agg_mod.usable(runs, args.metric)], rows + cols)
        if hidden:
            print(f"warning: runs averaged together differ in {', '.join(hidden)}; add them to "
                  "--rows/--cols or filter with --where if they matter", file=sys.stderr)
        sig, is_base, baseline = significance_vs_baseline(args, runs, agg, rows + cols)
        out.mkdir(parents=True, exist_ok=True)
        printed = write_tables(args, out, runs, agg, rows, cols, sig, is_base, baseline)
    except (AnalysisError, FileNotFoundError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    figures = [] if args.no_figures else write_figures(args, out, runs, metrics, agg, rows + cols)
    print("\n".join(printed))
    excluded = int(agg[["n_failed", "n_pruned", "n_other"]].to_numpy().sum())
    print(f"{len(runs)} runs, {len(agg)} configurations, {excluded} runs excluded "
          f"(see {out / 'excluded.csv'}); wrote tables and {len(figures)} figure files to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
