"""Aggregated results -> paper tables: LaTeX (booktabs), Markdown, CSV, and a trace CSV.

A table is a pair of DataFrames with the same shape: `cells` (display strings, unescaped) and
`best` (True where the value is the best of its column, set in bold). Two layouts: the summary
table (columns.py: one row per configuration, one column per statistic) and `pivot_table` (rows
x columns of configuration keys, each cell "mean ± std"). Here: the formats of labels, numbers
and p-values (`p_text`, the one p-value formatter), `labelled` (the registry's human headers),
the width of a table and `to_latex` (booktabs at 9 pt) and `to_markdown`."""

from __future__ import annotations

import math

import pandas as pd

from lit_attention import registry
from lit_attention.analysis import latex_width
from lit_attention.analysis.aggregate import usable
from lit_attention.metric_facts import higher_is_better, metric_label
from lit_attention.analysis.load import AnalysisError

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
    """A configuration value as a table label: 4.0 -> '4', NaN -> '–'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
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
    labels = [tuple(label(v) for v in row) for row in agg[keys].itertuples(index=False)]
    if len(keys) == 1:
        return pd.Index([t[0] for t in labels], name=keys[0])
    return pd.MultiIndex.from_tuples(labels, names=keys)


def with_keys(cells: pd.DataFrame, best: pd.DataFrame, agg: pd.DataFrame, keys: list[str],
              also: list[str]) -> tuple:
    """A summary table (rows in `agg`'s order) with the fields `also` as key columns after `keys`."""
    index = _index(agg, keys + also)
    index = index.set_names([key_label(n) for n in index.names])
    return cells.set_axis(index), best.set_axis(index)


def _by_config(agg: pd.DataFrame, keys: list[str], sig: pd.DataFrame | None) -> list[dict | None]:
    """The significance row of each configuration of `agg` (None: the baseline, or no test)."""
    if sig is None or sig.empty:
        return [None] * len(agg)
    found = {tuple(label(v) for v in row[keys]): row.to_dict() for _, row in sig.iterrows()}
    return [found.get(tuple(label(v) for v in r)) for r in agg[keys].itertuples(index=False)]


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
    text = number(mean, digits) + (f" ± {number(std, digits)}" if not pd.isna(std) else "")
    return text + mark


def pivot_table(agg: pd.DataFrame, rows: list[str], cols: list[str], metric: str,
                sig: pd.DataFrame | None = None, digits: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """rows x cols grid of "mean ± std" (▲/▼ where significantly better/worse than the baseline,
    "(n=1)" after a single seed's value); best per column in bold."""
    keys = rows + cols
    if agg.duplicated(keys).any():
        raise AnalysisError(f"rows {rows} x cols {cols} do not identify a configuration: "
                         "add the varying keys to --rows or --cols")
    frame = agg.assign(_cell=[mean_std(m, s, digits, k) + (" (n=1)" if n == 1 else "") for m, s, k, n in
                              zip(agg["mean"], agg["std"], marks(agg, keys, sig), agg["n"])],
                       _mean=agg["mean"].round(digits))
    for key in keys:
        frame[key] = frame[key].map(label)
    cells = frame.pivot(index=rows, columns=cols, values="_cell").fillna("")
    means = frame.pivot(index=rows, columns=cols, values="_mean").reindex_like(cells)
    target = means.max() if higher_is_better(metric) else means.min()
    best = means.eq(target, axis=1)
    return cells, best


def latex_text(text) -> str:
    """Escape LaTeX specials and replace the unicode symbols the tables use; a number's sign is
    a minus, not a hyphen ("[-1.6, 32.7]", not "1-10")."""
    out = "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(text))
    for symbol, tex in {**LATEX_UNICODE, **ARROWS}.items():
        out = out.replace(symbol, tex)
    return latex_width.NEGATIVE.sub("$-$", out)


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
    width = latex_width.table_width(key_columns + data_columns)
    if cells.columns.names[0] is not None:           # a pivot's title spanning its columns
        title = latex_width.text_width(" / ".join(map(str, cells.columns.names)))
        width += max(0.0, title + 2 * latex_width.TABCOLSEP - latex_width.table_width(data_columns))
    return width


def width_limit(wide: bool = False) -> float:
    """What a table may take (pt): a column of a two-column paper, or its text width."""
    return latex_width.TEXT_WIDTH if wide else latex_width.COLUMN_WIDTH


def _span_row(values: list, first: int) -> tuple[str, str]:
    """One header row of a pivot's column level: equal neighbours merged, with their cmidrules."""
    cells, rules, j = [], [], 0
    while j < len(values):
        k = j
        while k + 1 < len(values) and values[k + 1] == values[j]:
            k += 1
        text = latex_text(label(values[j]))
        cells.append(text if k == j else rf"\multicolumn{{{k - j + 1}}}{{c}}{{{text}}}")
        if k > j:
            rules.append(rf"\cmidrule(lr){{{first + j}-{first + k}}}")
        j = k + 1
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
        values = list(cells.columns.get_level_values(level))
        row, rules = _span_row(values, n_keys + 1)
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
    lines += [r"\small", rf"\setlength{{\tabcolsep}}{{{latex_width.TABCOLSEP:g}pt}}",
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
