"""`lit-attention report RUNS_DIR --out DIR`: tables, significance and figures from run stores.

Writes into DIR: table.{tex,md,csv} (one row per configuration), pivot.{tex,md} (with --cols),
table_trace.csv (cell -> run ids), excluded.csv, significance.csv (with --baseline), runs.csv,
and the figures (PNG + PDF). Prints the Markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from lit_attention.analysis import aggregate as agg_mod
from lit_attention.analysis import load, plots, significance, tables


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lit-attention report", description=__doc__.splitlines()[0])
    p.add_argument("runs_dir", nargs="?", help="a runs/ directory, one group (study) or one run")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--rows", nargs="+", default=None,
                   help="configuration keys for the rows (e.g. model.scoring); default: every "
                        "configuration key that varies")
    p.add_argument("--cols", nargs="+", default=None,
                   help="configuration keys for the columns of a pivot table (e.g. model.family)")
    p.add_argument("--metric", default="val_bleu", help="summary.json metric to tabulate")
    p.add_argument("--baseline", nargs="+", default=None, metavar="KEY=VALUE",
                   help="the configuration every other one is tested against (paired bootstrap)")
    p.add_argument("--where", nargs="+", default=None, metavar="KEY=VALUE",
                   help="keep only runs matching every KEY=VALUE")
    p.add_argument("--split", default=None, help="hypotheses used for significance (default: "
                                                 "test if stored, else val)")
    p.add_argument("--samples", type=int, default=significance.N_SAMPLES, help="bootstrap resamples")
    p.add_argument("--digits", type=int, default=1)
    p.add_argument("--wandb", default=None, metavar="ENTITY/PROJECT",
                   help="read runs from W&B instead of RUNS_DIR (needs network and an API key)")
    p.add_argument("--group", default=None, help="W&B group (study) to read")
    args = p.parse_args(argv)
    if not args.runs_dir and not args.wandb:
        p.error("give RUNS_DIR or --wandb ENTITY/PROJECT")
    return args


def _selector(runs: pd.DataFrame, pairs: list[str]) -> dict[str, str]:
    selector = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"error: expected KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        selector[load.resolve_key(runs, key)] = value
    return selector


def choose_keys(runs: pd.DataFrame, rows: list[str] | None, cols: list[str] | None) -> tuple[list, list]:
    """Resolve --rows/--cols; every configuration key that varies must be among them."""
    config = load.config_columns(runs)
    moving = load.varying(runs, config)
    cols = [load.resolve_key(runs, k) for k in cols or []]
    if rows:
        rows = [load.resolve_key(runs, k) for k in rows]
    else:
        rows = [k for k in moving if k not in cols] or [c for c in ("model.family", "task") if c in runs][:1]
    missing = [k for k in moving if k not in rows + cols]
    if missing:
        raise SystemExit(f"error: configuration keys {missing} vary across the runs but are not in "
                         "--rows/--cols: seeds of different configurations would be averaged; "
                         "add them or filter with --where")
    return rows, cols


def _signature(runs: pd.DataFrame) -> str | None:
    if "sacrebleu_signature" not in runs:
        return None
    found = sorted(set(runs["sacrebleu_signature"].dropna()))
    return "; ".join(found) or None


def _split(runs: pd.DataFrame, wanted: str | None) -> str:
    if wanted:
        return wanted
    has_test = any((Path(d) / "hyps" / "test.txt").is_file() for d in runs["run_dir"])
    return "test" if has_test else "val"


def load_input(args) -> tuple[pd.DataFrame, pd.DataFrame]:
    if args.wandb:
        from lit_attention.analysis.wandb_export import load_wandb
        return load_wandb(args.wandb, args.group, args.metric)
    runs = load.load_runs(args.runs_dir)
    return runs, load.load_metrics(runs)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs, metrics = load_input(args)
    if args.where:
        runs = runs[significance.matches(runs, _selector(runs, args.where))]
        metrics = metrics[metrics["run_dir"].isin(runs["run_dir"])] if not metrics.empty else metrics
        if runs.empty:
            raise SystemExit(f"error: no run matches --where {' '.join(args.where)}")
    rows, cols = choose_keys(runs, args.rows, args.cols)
    keys = rows + cols
    if args.metric not in runs:
        raise SystemExit(f"error: metric {args.metric!r} is in no summary.json")
    runs = agg_mod.add_gradient_stats(runs)
    agg = agg_mod.aggregate(runs, keys, args.metric)
    runs.to_csv(out / "runs.csv", index=False)
    agg_mod.excluded_runs(runs, args.metric).to_csv(out / "excluded.csv", index=False)

    sig, is_base, baseline_text = None, None, None
    if args.baseline:
        selector = _selector(runs, args.baseline)
        outside = [k for k in selector if k not in keys]
        if outside:
            raise SystemExit(f"error: baseline keys {outside} are not among the table keys {keys}")
        sig = significance.compare_to_baseline(
            runs, keys, selector, split=_split(runs, args.split),
            metric="chrf" if "chrf" in args.metric else "bleu", n_samples=args.samples)
        sig.to_csv(out / "significance.csv", index=False)
        is_base = significance.matches(agg, selector)
        baseline_text = ", ".join(f"{k}={v}" for k, v in selector.items())

    caption = tables.caption_text(args.metric, agg, agg_mod.CI_METHOD, _signature(runs),
                                  significance.METHOD if sig is not None else None, baseline_text)
    numeric = agg if sig is None else agg.assign(baseline=is_base).merge(sig, on=keys, how="left")
    numeric.to_csv(out / "table.csv", index=False)
    tables.trace_table(runs, keys, args.metric).to_csv(out / "table_trace.csv", index=False)

    cells, best = tables.summary_table(agg, keys, args.metric, sig, is_base, args.digits)
    (out / "table.tex").write_text(tables.to_latex(cells, best, caption, label="tab:results"))
    markdown = tables.to_markdown(cells, best, caption)
    (out / "table.md").write_text(markdown)
    printed = [markdown]
    if cols:
        pcells, pbest = tables.pivot_table(agg, rows, cols, args.metric, sig, args.digits)
        (out / "pivot.tex").write_text(tables.to_latex(pcells, pbest, caption, label="tab:grid"))
        pmarkdown = tables.to_markdown(pcells, pbest, caption)
        (out / "pivot.md").write_text(pmarkdown)
        printed.append(pmarkdown)

    figures = []
    figures += plots.plot_ablation_bars(agg, keys, args.metric, out / "ablation_bars")
    figures += plots.plot_learning_curves(metrics, runs, keys, out / "learning_curves_ppl",
                                          y="val_ppl", metric=args.metric)
    figures += plots.plot_learning_curves(metrics, runs, keys, out / "learning_curves_bleu",
                                          y="val_bleu", metric=args.metric)
    if not args.wandb:
        figures += plots.plot_bleu_by_length(load.load_length_buckets(runs), runs, keys,
                                             out / "bleu_by_length", metric=args.metric)
        figures += plots.plot_gradflow(load.load_gradflow(runs), runs, keys, out / "gradflow",
                                       metric=args.metric)
        figures += plots.plot_attention_grid(runs, keys, out / "attention_grid", metric=args.metric)

    print("\n".join(printed))
    n_excluded = int((agg[["n_failed", "n_pruned", "n_other"]].sum()).sum())
    print(f"{len(runs)} runs, {len(agg)} configurations, {n_excluded} runs excluded "
          f"(see {out / 'excluded.csv'}); wrote tables and {len(figures)} figure files to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
