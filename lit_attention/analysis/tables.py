"""Aggregated results -> paper tables: the summary table's columns, LaTeX (booktabs), Markdown,
CSV and a trace CSV, and how wide a table typesets.

A table is a pair of DataFrames with the same shape: `cells` (display strings, unescaped) and
`best` (True where the value is the best of its column, set in bold). Two layouts: the summary
table (one row per configuration, one column per row of COLUMNS) and `pivot_table` (rows x
columns of configuration keys, each cell "mean ± std"). Here: the formats of labels, numbers and
p-values (`p_text`, the one p-value formatter), `labelled` (the registry's human headers),
`to_latex` (booktabs at 9 pt) and `to_markdown`.

COLUMNS holds the statistic columns of the summary table, one row each: its --columns name, its
header, what it shows, how its cells are made from the aggregate and the test, and its place
among the columns a default table.tex keeps while it fits. `summary_table` builds the table from
the rows, `choose_columns` picks the columns asked for, and `columns_help` is --columns' help. A
new statistic is one row there (and its computation in aggregate.py or significance.py).

Widths come from Computer Modern Roman's metrics (the cmr10 AFM file matplotlib ships), scaled to
the table's font size, so the report can choose the columns that fit a column of a two-column
paper, without running LaTeX. The estimate errs on the wide side (cmr9 is a little wider per em
than cmr10); tests/analysis/test_tables.py holds it against pdflatex.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import matplotlib
import pandas as pd

from lit_attention import registry
from lit_attention.analysis.aggregate import usable
from lit_attention.analysis.load import AnalysisError
from lit_attention.metric_facts import higher_is_better, metric_label

# Page widths (pt) of \documentclass[twocolumn]{article}: \columnwidth and \textwidth.
COLUMN_WIDTH = 229.5
TEXT_WIDTH = 469.0
FONT_SIZE = 9.0          # \small in a 10 pt document
TABCOLSEP = 4.0          # set by to_latex; LaTeX's default is 6 pt
BOLD = 1.15              # cmbx10 over cmr10 (digits 0.575 em against 0.5 em)
SAFETY = 1.03            # cmr9 is about 3 % wider per em than cmr10
# Characters the tables print that cmr10's ASCII positions do not give, in em: what LaTeX sets
# for them (latex_text) in a 10 pt font.
EM = {"±": 0.778, "†": 0.31, "–": 0.5, "—": 1.0, "√": 0.833, "·": 0.278, "‖": 0.5, "×": 0.778,
      "≤": 0.778, "↑": 0.5, "↓": 0.5, "∂": 0.57, "_": 0.42, "|": 0.28, "<": 0.778, ">": 0.778,
      "~": 0.5, "\\": 0.5, "{": 0.5, "}": 0.5, "^": 0.5, '"': 0.5,
      "▲": 0.63, "▼": 0.63, "Δ": 0.833}
UNKNOWN = 0.6
NEGATIVE = re.compile(r"(?<![\w.])-(?=\d)")    # a minus sign, set as $-$ (0.778 em), not a hyphen


@functools.cache
def _cmr10() -> dict[str, float]:
    """Advance width in em of each printable ASCII character of cmr10 (TeX's OT1 positions agree
    with ASCII for letters, digits and the punctuation not in EM)."""
    afm = (Path(matplotlib.get_data_path()) / "fonts" / "afm" / "cmr10.afm").read_text(encoding="latin-1")
    metrics = re.findall(r"^C (-?\d+) ; WX ([\d.]+) ;", afm, re.MULTILINE)   # C code ; WX width ; ...
    return {" ": 1 / 3, **{chr(int(c)): float(wx) / 1000 for c, wx in metrics if 32 < int(c) < 127}}


def text_width(text: str, bold: bool = False) -> float:
    """Width in pt of `text` (the unescaped table string) typeset at FONT_SIZE pt."""
    text = str(text)
    em = sum(EM.get(ch) or _cmr10().get(ch, UNKNOWN) for ch in text)
    em += len(NEGATIVE.findall(text)) * (0.778 - _cmr10()["-"])
    return em * FONT_SIZE * SAFETY * (BOLD if bold else 1.0)


def table_width(columns: list[list[tuple[str, bool]]]) -> float:
    """Width in pt of a tabular whose columns hold these (text, bold) entries, header included."""
    widest = [max((text_width(t, b) for t, b in column), default=0.0) for column in columns]
    return sum(widest) + 2 * TABCOLSEP * len(columns)


BETTER, WORSE = "▲", "▼"      # significantly better / worse than the baseline
MARKS = {"better": BETTER, "worse": WORSE}
EQUIVALENT = "≈"
LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                 "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                 "^": r"\textasciicircum{}", "|": r"\textbar{}", "<": r"\textless{}",
                 ">": r"\textgreater{}"}
# Unicode that pdflatex without extra packages cannot typeset.
LATEX_UNICODE = {"±": r"$\pm$", "†": r"$^{\dagger}$", "–": "--", "√": r"$\surd$",
                 BETTER: r"$^{\bigtriangleup}$", WORSE: r"$^{\bigtriangledown}$", "Δ": r"$\Delta$",
                 "·": r"$\cdot$", "‖": r"$\|$", "×": r"$\times$", "≤": r"$\leq$",
                 "∂": r"$\partial$", "α": r"$\alpha$", EQUIVALENT: r"$\approx$"}
ARROWS = {"↑": r"$\uparrow$", "↓": r"$\downarrow$"}


def key_label(key) -> str:
    """A configuration key's header: registry.LABELS, else the key's last field ('model.lr' -> 'lr')."""
    if key is None:
        return ""
    return registry.LABELS.get(key) or str(key).rsplit(".", 1)[-1]


def label(value) -> str:
    """A configuration value as a table label: 4.0 -> '4', NaN -> '–', a sampled float to 6
    significant digits (0.0019634882601995383 -> '0.00196349')."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.6g}"
    return str(value)


def number(x, digits: int = 1) -> str:
    return "" if x is None or pd.isna(x) else f"{x:.{digits}f}"


def count(x) -> str:
    """Parameter counts and rates: 1234567 -> '1.23M'."""
    if x is None or pd.isna(x):
        return ""
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _index(agg: pd.DataFrame, keys: list[str]) -> pd.Index:
    labels = agg[keys].map(label)
    return pd.MultiIndex.from_frame(labels) if len(keys) > 1 else pd.Index(labels[keys[0]])


def with_keys(cells: pd.DataFrame, best: pd.DataFrame, agg: pd.DataFrame, keys: list[str],
              also: list[str]) -> tuple:
    """A summary table (rows in `agg`'s order) with the fields `also` as key columns after `keys`."""
    index = _index(agg, keys + also).set_names([key_label(n) for n in keys + also])
    return cells.set_axis(index), best.set_axis(index)


def config_names(frame: pd.DataFrame, keys: list[str]) -> list[tuple[str, ...]]:
    """Each row's configuration: the labels of its `keys`."""
    return [tuple(label(v) for v in row) for row in frame[keys].itertuples(index=False)]


def _by_config(agg: pd.DataFrame, keys: list[str], sig: pd.DataFrame | None) -> list[dict | None]:
    """The significance row of each configuration of `agg` (None: the baseline, or no test)."""
    if sig is None or sig.empty:
        return [None] * len(agg)
    found = dict(zip(config_names(sig, keys), sig.to_dict("records")))
    return [found.get(name) for name in config_names(agg, keys)]


def marks(agg: pd.DataFrame, keys: list[str], sig: pd.DataFrame | None) -> list[str]:
    """▲ / ▼ where a configuration is significantly better / worse than the baseline by a test
    over seeds: never for one seed on either side (a sentence-level test of single runs says
    nothing about training randomness)."""
    return ["" if row is None or not row["significant"] or row["n_tested"] < 2
            or row["n_baseline"] < 2 else MARKS.get(row["direction"], "")
            for row in _by_config(agg, keys, sig)]


def p_text(p_holm: float, p: float, n_samples: int) -> str:
    """A Holm-adjusted p-value to 3 decimals, or a bound: '<0.001' below that, and '<x' (x the
    adjusted p rounded up) when no resample went the other way (p at the floor 1/(B+1): the
    resamples cannot tell how much smaller it is). Never '0.000'."""
    if pd.isna(p_holm):
        return "–"
    at_floor = p <= 1 / (n_samples + 1) * (1 + 1e-9)
    if at_floor or p_holm < 0.001:
        return f"<{max(0.001, math.ceil(p_holm * 1000 - 1e-9) / 1000):.3f}"
    return f"{p_holm:.3f}"


def mean_std(mean, std, digits: int, mark: str = "") -> str:
    if pd.isna(mean):
        return "–"
    return number(mean, digits) + (f" ± {number(std, digits)}" if not pd.isna(std) else "") + mark


def pivot_table(agg: pd.DataFrame, rows: list[str], cols: list[str], metric: str,
                sig: pd.DataFrame | None = None, digits: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """rows x cols grid of "mean ± std" (▲/▼ where significantly better/worse than the baseline,
    "(n=1)" after a single seed's value); best per column in bold."""
    keys = rows + cols
    if agg.duplicated(keys).any():
        raise AnalysisError(f"rows {rows} x cols {cols} do not identify a configuration: "
                         "add the varying keys to --rows or --cols")
    frame = agg.assign(**{key: agg[key].map(label) for key in keys},
                       _cell=[mean_std(m, s, digits, k) + (" (n=1)" if n == 1 else "") for m, s, k, n in
                              zip(agg["mean"], agg["std"], marks(agg, keys, sig), agg["n"])])
    cells = frame.pivot(index=rows, columns=cols, values="_cell").fillna("")
    means = frame.pivot(index=rows, columns=cols, values="mean").reindex_like(cells)
    return cells, means.apply(_best, metric=metric, digits=digits)


def latex_text(text) -> str:
    """Escape LaTeX specials and replace the unicode symbols the tables use; a number's sign is
    a minus, not a hyphen ("[-1.6, 32.7]", not "1-10")."""
    out = "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(text))
    for symbol, tex in {**LATEX_UNICODE, **ARROWS}.items():
        out = out.replace(symbol, tex)
    return NEGATIVE.sub("$-$", out)


def labelled(cells: pd.DataFrame, best: pd.DataFrame, metric: str) -> tuple:
    """The table with human headers: key labels (registry.LABELS) for the configuration keys of
    the rows and a pivot's columns, 'BLEU ↑' for the metric column."""
    cells, best = cells.copy(), best.copy()
    for frame in (cells, best):
        frame.index.names = [key_label(n) for n in frame.index.names]
        if frame.columns.names[0] is not None:
            frame.columns.names = [key_label(n) for n in frame.columns.names]
        else:
            frame.columns = [metric_label(metric) if c == metric else c for c in frame.columns]
    return cells, best


def _index_labels(cells: pd.DataFrame) -> pd.DataFrame:
    return cells.index.to_frame(index=False).map(label)


def tabular_width(cells: pd.DataFrame, best: pd.DataFrame) -> float:
    """Estimated width (pt) of the tabular `to_latex` writes for this table."""
    rows = _index_labels(cells)
    key_columns = [[(str(name or ""), False)] + [(v, False) for v in rows[level]]
                   for name, level in zip(cells.index.names, rows.columns)]
    data_columns = [[(str(part), False) for part in (column if isinstance(column, tuple) else (column,))]
                    + list(zip(cells.iloc[:, j], best.iloc[:, j]))
                    for j, column in enumerate(cells.columns)]
    width = table_width(key_columns + data_columns)
    if cells.columns.names[0] is not None:           # a pivot's title spanning its columns
        title = text_width(" / ".join(map(str, cells.columns.names)))
        width += max(0.0, title + 2 * TABCOLSEP - table_width(data_columns))
    return width


def width_limit(wide: bool = False) -> float:
    """What a table may take (pt): a column of a two-column paper, or its text width."""
    return TEXT_WIDTH if wide else COLUMN_WIDTH


def _span_row(values: list, first: int) -> tuple[str, str]:
    """One header row of a pivot's column level: equal neighbours merged, with their cmidrules."""
    cells, rules = [], []
    for value, run in itertools.groupby(values):
        n, text = len(list(run)), latex_text(label(value))
        cells.append(text if n == 1 else rf"\multicolumn{{{n}}}{{c}}{{{text}}}")
        if n > 1:
            rules.append(rf"\cmidrule(lr){{{first}-{first + n - 1}}}")
        first += n
    return " & ".join(cells), " ".join(rules)


def _latex_header(cells: pd.DataFrame) -> list[str]:
    keys = [latex_text(n or "") for n in cells.index.names]
    n_keys, n_cols = len(keys), cells.shape[1]
    if cells.columns.names[0] is None:               # one header row: keys, then statistics
        return [" & ".join(keys + [latex_text(_flat(c)) for c in cells.columns]) + r" \\"]
    title = " / ".join(latex_text(n) for n in cells.columns.names)
    lines = ["& " * n_keys + rf"\multicolumn{{{n_cols}}}{{c}}{{{title}}} \\",
             rf"\cmidrule(lr){{{n_keys + 1}-{n_keys + n_cols}}}"]
    for level in range(cells.columns.nlevels):
        row, rules = _span_row(cells.columns.get_level_values(level), n_keys + 1)
        left = keys if level == cells.columns.nlevels - 1 else [""] * n_keys
        lines.append(" & ".join(left + [row]) + r" \\" + (f" {rules}" if rules else ""))
    return lines


def to_latex(cells: pd.DataFrame, best: pd.DataFrame, caption: str, label: str | None = None,
             wide: bool = False) -> str:
    """A booktabs table in \\small (9 pt in a 10 pt paper) with 4 pt column padding: a `table` for
    one column of a two-column paper, or a `table*` across the page (`wide`). Every text escaped,
    best values in bold, a label repeated from the row above left blank (outer keys only), a
    pivot's column keys as a header spanning their values."""
    env = "table*" if wide else "table"
    index = _index_labels(cells)
    body, previous = [], None
    for i in range(len(cells)):
        keys = list(index.iloc[i])
        shown = [("" if previous and previous[:j + 1] == keys[:j + 1] and j < len(keys) - 1 else k)
                 for j, k in enumerate(keys)]
        previous = keys
        values = [rf"\textbf{{{latex_text(v)}}}" if b and v else latex_text(v)
                  for v, b in zip(cells.iloc[i], best.iloc[i])]
        body.append(" & ".join([latex_text(k) for k in shown] + values) + r" \\")
    # "|" breaks nowhere: let a long sacreBLEU signature wrap in the caption.
    caption_tex = latex_text(caption).replace(r"\textbar{}", r"\textbar{}\allowbreak{}")
    lines = [rf"\begin{{{env}}}", r"\centering", rf"\caption{{{caption_tex}}}"]
    lines += [rf"\label{{{label}}}"] if label else []
    lines += [r"\small", rf"\setlength{{\tabcolsep}}{{{TABCOLSEP:g}pt}}",
              rf"\begin{{tabular}}{{{'l' * cells.index.nlevels + 'r' * cells.shape[1]}}}",
              r"\toprule", *_latex_header(cells), r"\midrule", *body, r"\bottomrule",
              r"\end{tabular}", rf"\end{{{env}}}"]
    return "\n".join(lines) + "\n"


def _flat(value) -> str:
    return " / ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def to_markdown(cells: pd.DataFrame, best: pd.DataFrame, caption: str = "") -> str:
    """A GitHub Markdown table (bold best values) followed by the caption."""
    shown = cells.where(~best, "**" + cells + "**")
    shown.columns = [_flat(c) for c in shown.columns]
    names = [n if n is not None else "" for n in shown.index.names]
    if cells.columns.names[0] is not None and cells.columns.nlevels >= 1:
        col_names = " / ".join(str(n) for n in cells.columns.names if n is not None)
        names[-1] = f"{names[-1]} \\ {col_names}"
    shown.index.names = names
    table = shown.reset_index().to_markdown(index=False, disable_numparse=True)
    return table + ("\n\n" + caption if caption else "") + "\n"


def trace_table(runs: pd.DataFrame, keys: list[str], metric: str) -> pd.DataFrame:
    """One row per run: the configuration (cell) it belongs to, whether it is averaged, its value."""
    frame = runs[keys].map(label)
    frame.insert(0, "cell", [" / ".join(r) for r in frame.itertuples(index=False)])
    extra = [c for c in ("group", "run_id", "seed", "status", metric, "run_dir") if c in runs]
    frame = frame.join(runs[extra])
    frame.insert(len(keys) + 1, "included", usable(runs, metric))
    return frame.sort_values(["cell", "included", "run_id"], ascending=[True, False, True])


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


def _each(source: str, fmt: Callable, shown: Callable = lambda values: values.notna().any()
          ) -> Callable[[Table], list[str] | None]:
    """The cells of one aggregate column, formatted; no column where the aggregate lacks it or
    `shown` of its values is false (by default: where it has no value)."""
    def cells(t: Table) -> list[str] | None:
        if source in t.agg and shown(t.agg[source]):
            return [fmt(x) for x in t.agg[source]]
        return None
    return cells


def _mean(t: Table) -> list[str]:
    shown = marks(t.agg, t.keys, t.sig)
    return [mean_std(m, s, t.digits, k) for m, s, k in zip(t.agg["mean"], t.agg["std"], shown)]


def ci_text(lo, hi, digits: int) -> str:
    return "" if pd.isna(lo) else f"[{number(lo, digits)}, {number(hi, digits)}]"


def _ci(t: Table) -> list[str]:
    return [ci_text(lo, hi, t.digits) for lo, hi in zip(t.agg["ci_lo"], t.agg["ci_hi"])]


def _excluded(t: Table) -> list[str]:
    agg = t.agg
    return [f"{f}/{p}" + (f" (+{i} invalid)" if i else "") + (f" (+{m} no metric)" if m else "")
            + (f" (+{o} other)" if o else "")
            for f, p, i, m, o in zip(agg["n_failed"], agg["n_pruned"], agg.get("n_invalid", [0] * len(agg)),
                                     agg.get("n_missing", [0] * len(agg)), agg["n_other"])]


def gradflow_cells(agg: pd.DataFrame) -> list[str]:
    """"forward 0.436 [0.432, 0.439]; backward ..." per configuration, from the gradflow_decay_*
    columns of `aggregate` (one entry per direction the configuration's encoder has)."""
    decays = [c for c in agg if c.startswith("gradflow_decay_") and not c.endswith(("_lo", "_hi"))]
    return ["; ".join(f"{c[len('gradflow_decay_'):]} {number(row[c], 3)} [{number(row[c + '_lo'], 3)}, "
                      f"{number(row[c + '_hi'], 3)}]" for c in decays if not pd.isna(row[c]))
            for _, row in agg.iterrows()]


def p_cells(agg: pd.DataFrame, keys: list[str], sig: pd.DataFrame, baseline: pd.Series | None) -> list[str]:
    """The p column: 'baseline', the Holm-adjusted p (p_text), 'n=1' (one seed: no seed-aware
    test) or '–' (nothing to test)."""
    is_base = baseline if baseline is not None else pd.Series(False, index=agg.index)

    def cell(base: bool, row: dict | None) -> str:
        if base:
            return "baseline"
        if row is None or row["note"]:
            return "n=1" if row is not None and row["note"] == "n=1" else "–"
        resamples = sig.attrs.get("n_samples", 0) if sig.attrs.get("test") != "seeds" else math.inf
        return p_text(row["p_holm"], row["p"], resamples)   # seed test: p from t, no floor
    return [cell(base, row) for base, row in zip(is_base, _by_config(agg, keys, sig))]


def delta_cells(agg: pd.DataFrame, keys: list[str], sig: pd.DataFrame, digits: int) -> list[str]:
    """The effect beside p: the difference of seed means against the baseline, '+27.2 [19.8,
    35.0]' with its 95% bootstrap interval (without one where nothing was resampled)."""
    return ["" if row is None or pd.isna(row["delta"]) else
            f"{row['delta']:+.{digits}f} {ci_text(row['delta_lo'], row['delta_hi'], digits)}".rstrip()
            for row in _by_config(agg, keys, sig)]


def _mde(t: Table) -> list[str] | None:
    """The smallest difference the row's test detects with 80 % power ('' where untested)."""
    if t.sig is None or "mde" not in t.sig or not t.sig["mde"].notna().any():
        return None
    return ["" if row is None else number(row["mde"], t.digits) for row in _by_config(t.agg, t.keys, t.sig)]


def _equivalence(t: Table) -> list[str] | None:
    """'≈ 0.012' where TOST finds the row equivalent to the baseline (Holm-adjusted p), else p."""
    if t.sig is None or t.sig.attrs.get("equivalence") is None:
        return None
    cells = []
    for row in _by_config(t.agg, t.keys, t.sig):
        tested = row is not None and not pd.isna(row["p_equivalent_holm"])
        p = p_text(row["p_equivalent_holm"], row["p_equivalent"], math.inf) if tested else ""
        cells.append(f"{EQUIVALENT} {p}" if tested and row["equivalent"] else p)
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
    Column("gradflow", "‖∂L/∂h_t‖ decay/step [95% CI]", "gradient decay through time",
           lambda t: decays if any(decays := gradflow_cells(t.agg)) else None),
    Column("budget", "budget", "training budgets (when they differ)",
           _each("budget", lambda x: "" if pd.isna(x) else x, lambda v: v.nunique() > 1), priority=3),
    Column("under_budget", "under budget", "runs that stopped before their budget",
           _each("n_under_budget", lambda x: str(int(x)), lambda values: values.any()), priority=4),
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
RANKED = [c.name for c in sorted((c for c in COLUMNS if c.priority is not None), key=lambda c: c.priority)]


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
    found = {column.header_of(table): cells for column in COLUMNS if (cells := column.format(table)) is not None}
    cells = pd.DataFrame(found, index=_index(agg, keys))
    best = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    best[metric] = _best(agg["mean"], metric, digits).to_numpy()
    return cells, best


def column_names(cells: pd.DataFrame, metric_header: str) -> dict[str, str]:
    """{--columns name: header} of a summary table's columns ('mean' is the metric's column)."""
    return {column.name: header for header in cells.columns for column in COLUMNS
            if column.matches(header, metric_header)}


def choose_columns(cells: pd.DataFrame, best: pd.DataFrame, metric_header: str,
                   wanted: list[str] | None = None, limit: float = COLUMN_WIDTH) -> tuple:
    """(cells, best, left out): the columns named in `wanted` (--columns: a name, a header, or a
    header in lower case with '_' for other characters), in that order, or by default the metric
    and then the columns with a priority, in its order, and the rest, each while the table fits
    `limit` pt."""
    names = column_names(cells, metric_header)
    if wanted:
        if "all" in wanted:
            return cells, best, []
        slugs = {re.sub(r"[^a-z0-9]+", "_", str(c).lower()).strip("_"): c for c in cells.columns}
        lookup = {**slugs, **{c: c for c in cells.columns}, **names}
        unknown = [w for w in wanted if w not in lookup]
        if unknown:
            raise AnalysisError(f"unknown --columns {', '.join(unknown)}; this table has: "
                                f"{', '.join(names)} (or all)")
        chosen = list(dict.fromkeys(lookup[w] for w in wanted))
        return cells[chosen], best[chosen], [c for c in cells.columns if c not in chosen]
    shown = {name: header for name, header in names.items()    # a column of blanks shows nothing
             if BY_NAME[name].blank is None or cells[header].ne(BY_NAME[name].blank).any()}
    chosen = []
    for name in dict.fromkeys(n for n in ["mean", *RANKED, *shown] if n in shown):
        trial = chosen + [shown[name]]
        if name == "mean" or tabular_width(cells[trial], best[trial]) <= limit:
            chosen = trial
    return cells[chosen], best[chosen], [c for c in shown.values() if c not in chosen]


def columns_help() -> str:
    """--columns' help, from COLUMNS."""
    listed = ", ".join(c.name + (" (the metric)" if c.name == "mean" else "") for c in COLUMNS)
    return (f"the columns of table.tex/table.md beside the configuration keys, in the order given, of: {listed}, "
            f"or all; default: the metric, then {', '.join(RANKED)} and the rest, as long as table.tex "
            "fits one column of a two-column paper (table.md: all)")


WIDTH = 100           # the terminal view's width
SHOWN = 10            # configurations the terminal view lists beside the baseline


def abbreviate(text: str, width: int) -> str:
    """`text` within `width` characters: the longest ' / ' part shortened first, each cut marked …."""
    parts = text.split(" / ")
    while len(" / ".join(parts)) > width:
        longest = max(range(len(parts)), key=lambda i: len(parts[i]))
        if len(parts[longest]) <= 2:
            return text[:max(width - 1, 0)] + "…"
        parts[longest] = parts[longest].rstrip("…")[:-1] + "…"
    return " / ".join(parts)


def leading(agg: pd.DataFrame, keys: list[str], metric: str, sig: pd.DataFrame | None,
            baseline: pd.Series | None, shown: int = SHOWN) -> tuple[list[int], int]:
    """(positions in `agg` of the baseline and the `shown` configurations of largest |Δ| (untested:
    of best mean), how many others there are): what the terminal view and the figures show."""
    is_base = baseline if baseline is not None else pd.Series(False, index=agg.index)
    rows = _by_config(agg, keys, sig)
    size = [abs(row["delta"]) if row is not None and pd.notna(row["delta"]) else -1.0 for row in rows]
    best = list(agg["mean"].fillna(-math.inf) * (1 if higher_is_better(metric) else -1))
    others = sorted((i for i in range(len(agg)) if not is_base.iloc[i]), key=lambda i: (-size[i], -best[i]))
    return [i for i in range(len(agg)) if is_base.iloc[i]] + others[:shown], max(0, len(others) - shown)


def terminal_view(agg: pd.DataFrame, keys: list[str], metric: str, sig: pd.DataFrame | None,
                  baseline: pd.Series | None, digits: int = 1) -> list[str]:
    """What the report prints: a header and the baseline's row, then each configuration's mean ±
    sd (n), Δ vs the baseline [95% CI], Holm p and mark, as `leading` picks them, and how many
    more table.md holds, each line within WIDTH characters."""
    names = [" / ".join(name) for name in config_names(agg, keys)]
    stats = [mean_std(m, s, digits) + f" ({int(n)})" for m, s, n in zip(agg["mean"], agg["std"], agg["n"])]
    tested = sig is not None
    delta, p = delta_cells(agg, keys, sig, digits), p_cells(agg, keys, sig, baseline)   # shown when tested
    shown = marks(agg, keys, sig)
    order, more = leading(agg, keys, metric, sig, baseline)
    header = [" / ".join(key_label(k) for k in keys) or "configuration", "mean ± sd (n)"]
    if tested:
        header += [HEADER["delta"] if any("[" in d for d in delta) else "Δ", HEADER["p"]]
    rows = [[names[i], stats[i]] + ([delta[i], f"{p[i]} {shown[i]}".rstrip()] if tested else []) for i in order]
    widths = [max(len(r[j]) for r in [header] + rows) for j in range(len(header))]
    widths[0] = max(8, min(widths[0], WIDTH - sum(widths[1:]) - 2 * (len(header) - 1)))
    lines = ["  ".join([abbreviate(r[0], widths[0]).ljust(widths[0])]
                       + [c.ljust(w) for c, w in zip(r[1:], widths[1:])]).rstrip()
             for r in [header] + rows]
    return lines + ([f"{more} more in table.md"] if more else [])
