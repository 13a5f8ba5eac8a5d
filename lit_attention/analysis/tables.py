"""Aggregated results -> paper tables: LaTeX (booktabs), Markdown, CSV, and a trace CSV.

A table is a pair of DataFrames with the same shape: `cells` (display strings, unescaped) and
`best` (True where the value is the best of its column, set in bold). Two layouts:
`summary_table` (one row per configuration, one column per statistic) and `pivot_table`
(rows x columns of configuration keys, each cell "mean ± std"). `labelled` gives either the
registry's human headers, `choose_columns` keeps the columns asked for or those that fit a column
of a two-column paper, and `to_latex` sets it in booktabs at 9 pt.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from lit_attention import registry
from lit_attention.analysis import latex_width, load
from lit_attention.analysis.aggregate import GRADFLOW_METHOD, usable
from lit_attention.analysis.metric_facts import SPLITS, higher_is_better, metric_label, metric_range, split_of
from lit_attention.analysis.load import AnalysisError

BETTER, WORSE = "▲", "▼"      # significantly better / worse than the baseline
MARKS = {"better": BETTER, "worse": WORSE}
DELTA_COLUMN = "Δ [95% CI]"
P_COLUMN = "p (Holm)"
MDE_COLUMN = "MDE"              # the difference the test detects with 80 % power
EQUIVALENT = "≈"
GRADFLOW_COLUMN = "‖∂L/∂h_t‖ decay/step [95% CI]"
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


def differences_note(agg: pd.DataFrame, keys: list[str], also: list[str]) -> str | None:
    """The caption's legend of the fields `also`, outside the row keys, that differ between rows:
    the rows (by their labels) with their values; a field is not listed where it does not act."""
    if not also:
        return None
    entries: dict[str, list[str]] = {}
    for _, row in agg.iterrows():
        values = ", ".join(f"{key_label(c)} {label(row[c])}" for c in also if label(row[c]) != "–")
        if values:
            entries.setdefault(values, []).append(" / ".join(label(row[k]) for k in keys))
    listed = "; ".join(f"{' and '.join(rows)}: {values}" for values, rows in entries.items())
    return (f"Rows also differ in {', '.join(key_label(c) for c in also)} (not listed where it does "
            f"not act): {listed}.")


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


def mde_cells(agg: pd.DataFrame, keys: list[str], sig: pd.DataFrame, digits: int) -> list[str]:
    """The smallest difference the row's test detects with 80 % power ('' where untested)."""
    return ["" if row is None or pd.isna(row.get("mde", math.nan)) else number(row["mde"], digits)
            for row in _by_config(agg, keys, sig)]


def equivalence_cells(agg: pd.DataFrame, keys: list[str], sig: pd.DataFrame) -> list[str]:
    """'≈ 0.012' where TOST finds the row equivalent to the baseline (Holm-adjusted p), else p."""
    cells = []
    for row in _by_config(agg, keys, sig):
        if row is None or pd.isna(row["p_equivalent_holm"]):
            cells.append("")
        else:
            p = p_text(row["p_equivalent_holm"], row["p_equivalent"], math.inf)
            cells.append(f"{EQUIVALENT} {p}" if row["equivalent"] else p)
    return cells


def equivalence_column(margin: float) -> str:
    return f"{EQUIVALENT} ±{margin:g} (TOST, Holm)"


def _best(values: pd.Series, metric: str, digits: int) -> pd.Series:
    # Compare at the displayed precision, so values that print the same are bolded together.
    shown = values.round(digits)
    target = shown.max() if higher_is_better(metric) else shown.min()
    return shown == target


def mean_std(mean, std, digits: int, mark: str = "") -> str:
    if pd.isna(mean):
        return "–"
    text = number(mean, digits) + (f" ± {number(std, digits)}" if not pd.isna(std) else "")
    return text + mark


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


def summary_table(agg: pd.DataFrame, keys: list[str], metric: str, sig: pd.DataFrame | None = None,
                  baseline: pd.Series | None = None, digits: int = 1) -> tuple:
    """One row per configuration: metric mean ± std (with ▲/▼ where significantly better/worse
    than the baseline), 95% CI, n, excluded runs, costs, gradients, p and Δ."""
    shown = marks(agg, keys, sig)
    columns = {
        metric: [mean_std(m, s, digits, k) for m, s, k in zip(agg["mean"], agg["std"], shown)],
        "95% CI": ["" if pd.isna(lo) else f"[{number(lo, digits)}, {number(hi, digits)}]"
                   for lo, hi in zip(agg["ci_lo"], agg["ci_hi"])],
        "n": agg["n"].astype(int).astype(str).tolist(),
        "failed/pruned": [f"{f}/{p}" + (f" (+{i} invalid)" if i else "") + (f" (+{m} no metric)" if m else "")
                          + (f" (+{o} other)" if o else "")
                          for f, p, i, m, o in zip(agg["n_failed"], agg["n_pruned"],
                                                   agg.get("n_invalid", [0] * len(agg)),
                                                   agg.get("n_missing", [0] * len(agg)), agg["n_other"])],
    }
    optional = {"params": ("params", count), "steps": ("steps", lambda x: number(x, 0)),
                "train s": ("train_seconds", lambda x: number(x, 0)),
                "train FLOPs": ("train_flops", count), "tok/s": ("tokens_per_second", count),
                "machine GFLOP/s": ("machine_gflops", lambda x: number(x, 0)),
                "grad norm": ("grad_norm_median", lambda x: number(x, 2)),
                "clip %": ("clip_fraction", lambda x: number(100 * x, 0))}
    for name, (col, fmt) in optional.items():
        if col in agg and agg[col].notna().any():
            columns[name] = [fmt(x) for x in agg[col]]
    decays = gradflow_cells(agg)
    if any(decays):
        columns[GRADFLOW_COLUMN] = decays
    if "budget" in agg and agg["budget"].nunique() > 1:
        columns["budget"] = agg["budget"].fillna("").tolist()
    if "n_under_budget" in agg and agg["n_under_budget"].any():
        columns["under budget"] = agg["n_under_budget"].astype(int).astype(str).tolist()
    if sig is not None:
        columns[P_COLUMN] = p_cells(agg, keys, sig, baseline)
        columns[DELTA_COLUMN] = delta_cells(agg, keys, sig, digits)
        if "mde" in sig and sig["mde"].notna().any():
            columns[MDE_COLUMN] = mde_cells(agg, keys, sig, digits)
        if sig.attrs.get("equivalence") is not None:
            columns[equivalence_column(sig.attrs["equivalence"])] = equivalence_cells(agg, keys, sig)
    cells = pd.DataFrame(columns, index=_index(agg, keys))
    best = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    best[metric] = _best(agg["mean"], metric, digits).to_numpy()
    return cells, best


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


# --columns names of summary_table's statistic columns; a column not listed here is named by its
# header in lower case with "_" for every run of other characters ("grad norm" -> grad_norm).
COLUMN_NAMES = {"ci": "95% CI", "n": "n", "excluded": "failed/pruned", "params": "params",
                "time": "train s", "speed": "tok/s", "gflops": "machine GFLOP/s", "p": P_COLUMN,
                "delta": DELTA_COLUMN, "mde": MDE_COLUMN,
                "gradflow": GRADFLOW_COLUMN}
# The columns shown, in this order, as long as the table fits (after the keys and the metric).
PRIORITY = ("ci", "n", "budget", "under_budget", "p", "delta", "mde", "excluded", "params")


def _slug(header) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(header).lower()).strip("_")


def column_names(cells: pd.DataFrame, metric_header: str) -> dict[str, str]:
    """{--columns name: header} of a summary table's columns ('mean' is the metric's column)."""
    aliases = {header: name for name, header in COLUMN_NAMES.items()}
    aliases.update({c: "equivalent" for c in cells.columns if str(c).startswith(EQUIVALENT)})
    return {("mean" if c == metric_header else aliases.get(c, _slug(c))): c for c in cells.columns}


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


def choose_columns(cells: pd.DataFrame, best: pd.DataFrame, metric_header: str,
                   wanted: list[str] | None = None, limit: float = latex_width.COLUMN_WIDTH) -> tuple:
    """(cells, best, left out): the columns named in `wanted` (--columns), in that order, or by
    default the metric and then PRIORITY and the rest, each while the table fits `limit` pt."""
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
    excluded = names.get("excluded")
    if excluded is not None and not cells[excluded].ne("0/0").any():
        names.pop("excluded")                        # nothing excluded: nothing to show
    order = ["mean"] + [n for n in PRIORITY if n in names] + [n for n in names if n not in PRIORITY]
    chosen = []
    for name in dict.fromkeys(order):
        if name not in names:
            continue
        trial = chosen + [names[name]]
        if name == "mean" or tabular_width(cells[trial], best[trial]) <= limit:
            chosen = trial
    return cells[chosen], best[chosen], [c for c in names.values() if c not in chosen]


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


def test_notes(sig: pd.DataFrame | None, keys: list[str]) -> str | None:
    """What the test against the baseline left out (runs without hypotheses) and what it did not
    pair (seed numbers one side lacks): counted in the caption, never dropped silently."""
    if sig is None:
        return None
    parts = []
    split = SPLITS.get(sig.attrs.get("split"), sig.attrs.get("split"))
    untested = [f"{r['n_untested']} of {r['n_untested'] + r['n_tested']} of "
                + " / ".join(label(r[k]) for k in keys) for _, r in sig.iterrows() if r["n_untested"]]
    if sig.attrs.get("baseline_untested"):
        untested.insert(0, f"{sig.attrs['baseline_untested']} of the baseline")
    if untested:
        why = f"without a {sig.attrs['values']} value" if sig.attrs.get("values") else \
            f"without stored {split} hypotheses"
        parts.append(f"Runs averaged but not tested ({why}): {'; '.join(untested)}.")
    unmatched = sig[sig["n_unmatched"] > 0]
    unpaired = int(unmatched["n_unmatched"].sum())
    if len(unmatched):
        parts.append(f"Seed numbers differ from the baseline's in {len(unmatched)} configuration"
                     f"{'s' * (len(unmatched) != 1)} ({unpaired} seed{'s' * (unpaired != 1)} "
                     "without a partner): the test does not pair runs by seed number, so all count.")
    return " ".join(parts) or None


def scoring_note(runs: pd.DataFrame) -> str | None:
    """What the recurrent scoring arms of a table share (the encoder output they attend over) and
    in what else they differ: the configuration keys that vary between them, from the runs."""
    if "model.scoring" not in runs or "model.enc_output" not in runs:
        return None
    arms = runs[runs["model.enc_output"].notna() & runs["model.scoring"].notna()]
    if "model.attention" in arms:
        arms = arms[arms["model.attention"] != registry.NO_ATTENTION]
    if arms["model.scoring"].nunique() < 2:
        return None
    outputs = sorted(arms["model.enc_output"].unique())
    varying = [c for c in load.varying(arms, load.config_columns(arms))
               if c not in ("model.scoring", "model.enc_output")]
    # a key set only for some scorings and fixed by the scoring (low_rank's rank) belongs to it
    splits = load.distinguishing(arms, varying, given=["model.scoring"])
    others = [c for c in varying if arms[c].notna().all() or c in splits]
    differ = ("differ in the scoring function only" if not others else
              f"differ in the scoring function and also in {', '.join(others)}")
    free = sorted(set(registry.PARAMETER_FREE_SCORING) & set(arms["model.scoring"]))
    owns = f"; {' and '.join(free)} own{'s' * (len(free) == 1)} no parameters" if free else ""
    return ("Recurrent scoring arms attend over the same encoder output (model.enc_output = "
            f"{' / '.join(outputs)}; {'one value' if len(outputs) == 1 else 'several values: compare within one'}) "
            f"and {differ}{owns}.")


def range_text(metric: str) -> str:
    """', clipped to [0, 100]' for a metric with a known range (what its CIs are clipped to)."""
    low, high = metric_range(metric)
    if high is not None:
        return f", clipped to [{label(low) if low is not None else '-inf'}, {label(high)}]"
    return f", clipped to at least {label(low)}" if low is not None else ""


def caption_text(metric: str, agg: pd.DataFrame, ci_method: str, signature: str | None,
                 significance: str | None = None, baseline: str | None = None,
                 eval_protocols: list[str] = (), unreadable: int = 0,
                 notes: tuple[str, ...] = (), decoding: str | None = None,
                 test_split: str | None = None, shown=None, marked: bool = True) -> str:
    """Caption stating what the numbers are: metric, split and decoding, n, std, CI method,
    exclusions, the test against the baseline (on the `test_split` hypotheses; `marked`: a test
    whose result the ▲/▼ marks show), signature, the
    language-model evaluation protocol(s) of the runs, and any ``notes``. ``shown``: the columns
    of the table when not all of summary_table's (an explanation leaves with its column)."""
    def has(column: str) -> bool:
        return shown is None or column in shown
    ns = sorted(set(agg["n"].astype(int)))
    n_text = str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    split = SPLITS.get(split_of(metric))
    what = "; ".join(filter(None, [f"{split} split" if split else None, decoding]))
    parts = [f"{metric_label(metric)} ({metric}{': ' + what if what else ''}): mean ± standard deviation (ddof=1) over n = {n_text} seed{'s' * (n_text != '1')} per "
             f"configuration{'; ' + ci_method + range_text(metric) if has('95% CI') else ''}. Best value per "
             "column in bold."]
    failed, pruned, other = (int(agg[c].sum()) for c in ("n_failed", "n_pruned", "n_other"))
    invalid = int(agg["n_invalid"].sum()) if "n_invalid" in agg else 0
    missing = int(agg["n_missing"].sum()) if "n_missing" in agg else 0
    if failed or pruned or invalid or missing or other:
        invalid_text = f", {invalid} with an invalid {metric} (inf, NaN or not a number)" if invalid else ""
        missing_text = f", {missing} finished without {metric}" if missing else ""
        parts.append(f"Excluded from every mean: {failed} failed, {pruned} pruned{invalid_text}"
                     f"{missing_text} and {other} other (interrupted, killed or running) runs.")
    if unreadable:
        parts.append(f"{unreadable} run{'s' * (unreadable != 1)} skipped as unreadable (malformed "
                     "summary.json or config.yaml; listed in excluded.csv).")
    budgets = set(agg["budget"].dropna()) if "budget" in agg else set()   # rows without runs: none
    if len(budgets) == 1 and budgets != {""}:
        parts.append(f"Every run trained to the same budget, {budgets.pop()}; steps, train s (wall "
                     "time) and train FLOPs are what training used.")
    elif len(budgets) > 1:
        parts.append("Training budgets differ between rows.")
    under = int(agg["n_under_budget"].sum()) if "n_under_budget" in agg else 0
    if under:
        parts.append(f"Not compute-matched: {under} averaged run(s) stopped before the budget was "
                     "used up; another limit (e.g. max_epochs) came first.")
    if significance:
        on = f" on the {SPLITS.get(test_split, test_split)} hypotheses" if test_split else ""
        legend = (f"{BETTER}/{WORSE}: better/worse than the baseline ({baseline}){on}, Holm-adjusted "
                  f"p < 0.05" if marked else f"Against the baseline ({baseline}){on}")
        parts.append(f"{legend}; {P_COLUMN if has(P_COLUMN) else 'test'}: {significance}.")
        if has(DELTA_COLUMN):
            parts.append(f"{DELTA_COLUMN}: difference of the seed means from the baseline's"
                         + (", with its 95% t-interval." if marked else "."))
        if shown is not None and MDE_COLUMN in shown:
            parts.append(f"{MDE_COLUMN}: the difference the test finds with 80 % power at α = 0.05 "
                         "(before Holm).")
        for column in [c for c in shown or () if str(c).startswith(EQUIVALENT)]:
            parts.append(f"{column}: two one-sided tests that |Δ| is below the margin, Holm-corrected "
                         f"over the comparisons; {EQUIVALENT} marks a row shown equivalent to the baseline.")
        if has(P_COLUMN):
            parts.append("n=1: one seed (here or in the baseline), so no test over seeds and no mark."
                         if marked else "No marks: one run per configuration says nothing about "
                         "training randomness.")
    parts += [note for note in notes if note]
    if signature:
        parts.append(f"sacreBLEU signature: {signature}.")
    if len(eval_protocols) == 1:
        parts.append(f"Language models evaluated under one protocol: {eval_protocols[0]} (every "
                     "token scored once, from the tokens of its window only; no state carried).")
    elif eval_protocols:
        parts.append(f"The runs were evaluated under different protocols ({'; '.join(eval_protocols)}): "
                     "their numbers are not comparable.")
    if any(gradflow_cells(agg)) and (shown is None or GRADFLOW_COLUMN in shown):
        parts.append(GRADFLOW_METHOD + ".")
    return " ".join(parts)


def trace_table(runs: pd.DataFrame, keys: list[str], metric: str) -> pd.DataFrame:
    """One row per run: the configuration (cell) it belongs to, whether it is averaged, its value."""
    frame = runs[keys].map(label)
    frame.insert(0, "cell", [" / ".join(r) for r in frame.itertuples(index=False)])
    extra = [c for c in ("group", "run_id", "seed", "status", metric, "run_dir") if c in runs]
    frame = frame.join(runs[extra])
    frame.insert(len(keys) + 1, "included", usable(runs, metric))
    return frame.sort_values(["cell", "included", "run_id"], ascending=[True, False, True])
