"""The statistic columns of the summary table (table.tex/.md), one row each: its --columns name,
its header, what it shows, how its cells are made from the aggregate and the test, and its place
among the columns a default table.tex keeps while it fits. `summary_table` builds the table from
the rows, `choose_columns` picks the columns asked for, and `columns_help` is --columns' help.

A new statistic is one row here (and its computation in aggregate.py or significance.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from lit_attention.analysis import latex_width
from lit_attention.analysis.load import AnalysisError
from lit_attention.metric_facts import higher_is_better
from lit_attention.analysis.tables import (EQUIVALENT, _by_config, _index, count, marks, mean_std,
                                           number, p_text, tabular_width)


@dataclass
class Table:
    """What a column's cells are made of: the aggregate (one row per configuration), its keys,
    the metric, the test against the baseline (None: no test), which rows are the baseline."""
    agg: pd.DataFrame
    keys: list[str]
    metric: str
    sig: pd.DataFrame | None
    baseline: pd.Series | None
    digits: int


@dataclass(frozen=True)
class Column:
    name: str                                       # its --columns name
    header: str                                     # {metric}: the metric; {margin}: the TOST margin
    source: str                                     # what it shows
    format: Callable[[Table], list[str] | None]     # its cells; None: not in this table
    priority: int | None = None                     # a default table.tex keeps it in this order
    blank: str | None = None                        # a default table.tex leaves it out when all are this

    def header_of(self, table: Table) -> str:
        margin = table.sig.attrs.get("equivalence") if table.sig is not None else None
        return self.header.format(metric=table.metric, margin=margin)

    def matches(self, header: str, metric_header: str) -> bool:
        """Whether `header` is this column's (the metric's column is headed `metric_header`)."""
        pattern = re.sub(r"\\\{margin[^}]*\\\}", ".+", re.escape(self.header))
        return re.fullmatch(pattern.replace(re.escape("{metric}"), re.escape(metric_header)),
                            str(header)) is not None


def _each(source: str, fmt: Callable) -> Callable[[Table], list[str] | None]:
    """The cells of one aggregate column, formatted; no column where the aggregate has no value."""
    def cells(t: Table) -> list[str] | None:
        if source in t.agg and t.agg[source].notna().any():
            return [fmt(x) for x in t.agg[source]]
        return None
    return cells


def _mean(t: Table) -> list[str]:
    shown = marks(t.agg, t.keys, t.sig)
    return [mean_std(m, s, t.digits, k) for m, s, k in zip(t.agg["mean"], t.agg["std"], shown)]


def _ci(t: Table) -> list[str]:
    return ["" if pd.isna(lo) else f"[{number(lo, t.digits)}, {number(hi, t.digits)}]"
            for lo, hi in zip(t.agg["ci_lo"], t.agg["ci_hi"])]


def _excluded(t: Table) -> list[str]:
    agg = t.agg
    return [f"{f}/{p}" + (f" (+{i} invalid)" if i else "") + (f" (+{m} no metric)" if m else "")
            + (f" (+{o} other)" if o else "")
            for f, p, i, m, o in zip(agg["n_failed"], agg["n_pruned"], agg.get("n_invalid", [0] * len(agg)),
                                     agg.get("n_missing", [0] * len(agg)), agg["n_other"])]


def gradflow_cells(agg: pd.DataFrame) -> list[str]:
    """"forward 0.436 [0.432, 0.439]; backward ..." per configuration, from the gradflow_decay_*
    columns of `aggregate` (one entry per direction the configuration's encoder has)."""
    directions = [c[len("gradflow_decay_"):] for c in agg
                  if c.startswith("gradflow_decay_") and not c.endswith(("_lo", "_hi"))]
    cells = []
    for _, row in agg.iterrows():
        parts = []
        for d in directions:
            decay, lo, hi = (row[f"gradflow_decay_{d}{end}"] for end in ("", "_lo", "_hi"))
            if not pd.isna(decay):
                parts.append(f"{d} {number(decay, 3)} [{number(lo, 3)}, {number(hi, 3)}]")
        cells.append("; ".join(parts))
    return cells


def _gradflow(t: Table) -> list[str] | None:
    decays = gradflow_cells(t.agg)
    return decays if any(decays) else None


def _budget(t: Table) -> list[str] | None:
    if "budget" in t.agg and t.agg["budget"].nunique() > 1:
        return t.agg["budget"].fillna("").tolist()
    return None


def _under_budget(t: Table) -> list[str] | None:
    if "n_under_budget" in t.agg and t.agg["n_under_budget"].any():
        return t.agg["n_under_budget"].astype(int).astype(str).tolist()
    return None


def p_cells(agg: pd.DataFrame, keys: list[str], sig: pd.DataFrame, baseline: pd.Series | None) -> list[str]:
    """The p column: 'baseline', the Holm-adjusted p (p_text), 'n=1' (one seed: no seed-aware
    test) or '–' (nothing to test)."""
    is_base = baseline if baseline is not None else pd.Series(False, index=agg.index)
    cells = []
    for base, row in zip(is_base, _by_config(agg, keys, sig)):
        if base:
            cells.append("baseline")
        elif row is None:
            cells.append("–")
        elif row["note"]:
            cells.append("n=1" if row["note"] == "n=1" else "–")
        else:
            resamples = sig.attrs.get("n_samples", 0) if sig.attrs.get("test") != "seeds" else math.inf
            cells.append(p_text(row["p_holm"], row["p"], resamples))   # seed test: p from t, no floor
    return cells


def delta_cells(agg: pd.DataFrame, keys: list[str], sig: pd.DataFrame, digits: int) -> list[str]:
    """The effect beside p: the difference of seed means against the baseline, '+27.2 [19.8,
    35.0]' with its 95% bootstrap interval (without one where nothing was resampled)."""
    cells = []
    for row in _by_config(agg, keys, sig):
        if row is None or pd.isna(row["delta"]):
            cells.append("")
            continue
        text = f"{row['delta']:+.{digits}f}"
        if not pd.isna(row["delta_lo"]):
            text += f" [{number(row['delta_lo'], digits)}, {number(row['delta_hi'], digits)}]"
        cells.append(text)
    return cells


def _mde(t: Table) -> list[str] | None:
    """The smallest difference the row's test detects with 80 % power ('' where untested)."""
    if t.sig is None or "mde" not in t.sig or not t.sig["mde"].notna().any():
        return None
    return ["" if row is None or pd.isna(row.get("mde", math.nan)) else number(row["mde"], t.digits)
            for row in _by_config(t.agg, t.keys, t.sig)]


def _equivalence(t: Table) -> list[str] | None:
    """'≈ 0.012' where TOST finds the row equivalent to the baseline (Holm-adjusted p), else p."""
    if t.sig is None or t.sig.attrs.get("equivalence") is None:
        return None
    cells = []
    for row in _by_config(t.agg, t.keys, t.sig):
        if row is None or pd.isna(row["p_equivalent_holm"]):
            cells.append("")
        else:
            p = p_text(row["p_equivalent_holm"], row["p_equivalent"], math.inf)
            cells.append(f"{EQUIVALENT} {p}" if row["equivalent"] else p)
    return cells


def _tested(cells: Callable) -> Callable[[Table], list[str] | None]:
    """A column of the test against the baseline: none without a test."""
    return lambda t: None if t.sig is None else cells(t)


# In the order of the table's columns (after the configuration keys).
COLUMNS = (
    Column("mean", "{metric}", "the metric: mean ± std over seeds (▲/▼: better/worse than the baseline)",
           _mean),
    Column("ci", "95% CI", "the t-interval of the mean", _ci, priority=1),
    Column("n", "n", "seeds averaged", lambda t: t.agg["n"].astype(int).astype(str).tolist(), priority=2),
    Column("excluded", "failed/pruned", "runs left out of the mean", _excluded, priority=8, blank="0/0"),
    Column("params", "params", "parameters", _each("params", count), priority=9),
    Column("steps", "steps", "training steps", _each("steps", lambda x: number(x, 0))),
    Column("time", "train s", "training wall time (s)", _each("train_seconds", lambda x: number(x, 0))),
    Column("train_flops", "train FLOPs", "training FLOPs", _each("train_flops", count)),
    Column("speed", "tok/s", "training tokens per second", _each("tokens_per_second", count)),
    Column("gflops", "machine GFLOP/s", "the machine's matmul speed",
           _each("machine_gflops", lambda x: number(x, 0))),
    Column("grad_norm", "grad norm", "median gradient norm", _each("grad_norm_median", lambda x: number(x, 2))),
    Column("clip", "clip %", "steps with a clipped gradient", _each("clip_fraction", lambda x: number(100 * x, 0))),
    Column("gradflow", "‖∂L/∂h_t‖ decay/step [95% CI]", "gradient decay through time", _gradflow),
    Column("budget", "budget", "training budgets (when they differ)", _budget, priority=3),
    Column("under_budget", "under budget", "runs that stopped before their budget", _under_budget,
           priority=4),
    Column("p", "p (Holm)", "the test against the baseline",
           _tested(lambda t: p_cells(t.agg, t.keys, t.sig, t.baseline)), priority=5),
    Column("delta", "Δ [95% CI]", "difference from the baseline",
           _tested(lambda t: delta_cells(t.agg, t.keys, t.sig, t.digits)), priority=6),
    Column("mde", "MDE", "the difference the test detects with 80 % power", _mde, priority=7),
    Column("equivalent", EQUIVALENT + " ±{margin:g} (TOST, Holm)", "equivalence to the baseline (--equivalence)",
           _equivalence),
)
BY_NAME = {column.name: column for column in COLUMNS}
HEADER = {column.name: column.header for column in COLUMNS}   # P_COLUMN etc. for the captions


def _best(values: pd.Series, metric: str, digits: int) -> pd.Series:
    # Compare at the displayed precision, so values that print the same are bolded together.
    shown = values.round(digits)
    target = shown.max() if higher_is_better(metric) else shown.min()
    return shown == target


def summary_table(agg: pd.DataFrame, keys: list[str], metric: str, sig: pd.DataFrame | None = None,
                  baseline: pd.Series | None = None, digits: int = 1) -> tuple:
    """One row per configuration, one column per row of COLUMNS that has cells here: the metric's
    mean ± std, 95% CI, n, excluded runs, costs, gradients, p and Δ, ... (best metric in bold)."""
    table = Table(agg, keys, metric, sig, baseline, digits)
    found = {}
    for column in COLUMNS:
        cells = column.format(table)
        if cells is not None:
            found[column.header_of(table)] = cells
    cells = pd.DataFrame(found, index=_index(agg, keys))
    best = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    best[metric] = _best(agg["mean"], metric, digits).to_numpy()
    return cells, best


def _slug(header) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(header).lower()).strip("_")


def name_of(header, metric_header: str) -> str:
    """The --columns name of a summary table's column."""
    for column in COLUMNS:
        if column.matches(header, metric_header):
            return column.name
    raise ValueError(f"column {header!r} has no row in columns.COLUMNS")


def column_names(cells: pd.DataFrame, metric_header: str) -> dict[str, str]:
    """{--columns name: header} of a summary table's columns ('mean' is the metric's column)."""
    return {name_of(c, metric_header): c for c in cells.columns}


def choose_columns(cells: pd.DataFrame, best: pd.DataFrame, metric_header: str,
                   wanted: list[str] | None = None, limit: float = latex_width.COLUMN_WIDTH) -> tuple:
    """(cells, best, left out): the columns named in `wanted` (--columns: a name, a header, or a
    header in lower case with '_' for other characters), in that order, or by default the metric
    and then the columns with a priority, in its order, and the rest, each while the table fits
    `limit` pt."""
    names = column_names(cells, metric_header)
    if wanted:
        if "all" in wanted:
            return cells, best, []
        lookup = {**{_slug(c): c for c in cells.columns}, **{c: c for c in cells.columns}, **names}
        unknown = [w for w in wanted if w not in lookup]
        if unknown:
            raise AnalysisError(f"unknown --columns {', '.join(unknown)}; this table has: "
                                f"{', '.join(names)} (or all)")
        chosen = list(dict.fromkeys(lookup[w] for w in wanted))
        return cells[chosen], best[chosen], [c for c in cells.columns if c not in chosen]
    for name in list(names):
        blank = BY_NAME[name].blank
        if blank is not None and not cells[names[name]].ne(blank).any():
            names.pop(name)                          # nothing to show
    ranked = sorted((c for c in COLUMNS if c.priority is not None), key=lambda c: c.priority)
    order = ["mean"] + [c.name for c in ranked if c.name in names] + [n for n in names]
    chosen = []
    for name in dict.fromkeys(order):
        if name not in names:
            continue
        trial = chosen + [names[name]]
        if name == "mean" or tabular_width(cells[trial], best[trial]) <= limit:
            chosen = trial
    return cells[chosen], best[chosen], [c for c in names.values() if c not in chosen]


def columns_help() -> str:
    """--columns' help, from COLUMNS."""
    ranked = [c.name for c in sorted((c for c in COLUMNS if c.priority is not None), key=lambda c: c.priority)]
    listed = ", ".join(c.name + (" (the metric)" if c.name == "mean" else "") for c in COLUMNS)
    return (f"the columns of table.tex/table.md beside the configuration keys, in the order given, of: {listed}, "
            f"or all; default: the metric, then {', '.join(ranked)} and the rest, as long as table.tex "
            "fits one column of a two-column paper (table.md: all)")
