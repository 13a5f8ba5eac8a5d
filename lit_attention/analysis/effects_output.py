"""Factor effects (effects.py) -> tables (LaTeX, Markdown, CSV) and figures (PNG + PDF).

Files, in the report directory: effects_importance.*, effects_marginal.*, effects_interactions.*
(tables) and effects_marginal.{png,pdf}, effects_interaction_<A>_x_<B>.{png,pdf} (figures).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lit_attention.analysis import tables  # noqa: E402
from lit_attention.analysis.effects import (MARGINAL_METHOD, Effects, bounds, interaction_means,  # noqa: E402
                                            pair_name)
from lit_attention.analysis.plots import paper_style, save  # noqa: E402
from lit_attention.files import atomic_write  # noqa: E402

ETA = "η²"
NU = "ν"        # the robust F's denominator degrees of freedom
ANOVA_METHOD = ("type-II sums of squares (Langsrud 2003) of one least-squares model of every usable run "
                "(main effects, every estimable two-way interaction; seeds are no block: seed numbers are "
                "not paired across configurations); η² = SS / total SS; F: the Wald test of the term's "
                "type-II hypothesis with each configuration's own variance (HC2: robust to seeds that "
                "spread unequally, which the pooled residual mean square is not), against F(df, ν) with "
                "Satterthwaite's ν over the configurations (Welch-type; calibrated: docs/ANALYSIS.md), "
                "Holm-adjusted over all factor and interaction terms. A conditional factor is coded only "
                "where it is set (column 'where', if any) and tested after the factors it depends on")


def p_text(p) -> str:
    """A Holm-adjusted p of the F-test (tables.p_text: from F, no resampling floor); '' for none."""
    return "" if p is None or pd.isna(p) else tables.p_text(p, p, math.inf)


def ss_text(x) -> str:
    """Sums of squares span orders of magnitude: 1668, 227, 19.1, 0.00209."""
    return "" if pd.isna(x) else f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _ci(lo, hi, digits: int) -> str:
    return "" if pd.isna(lo) else f"[{tables.number(lo, digits)}, {tables.number(hi, digits)}]"


def importance_table(effects: Effects, digits: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per term: where, df, SS, η², F, p (and PED-ANOVA); the top factor and pair in bold."""
    t = effects.importance
    columns = {"where": t["where"].tolist()} if (t["where"] != "all runs").any() else {}
    columns.update({"df": t["df"].astype(int).astype(str).tolist(),
                    "SS": [ss_text(x) for x in t["ss"]],
                    ETA: [tables.number(x, 3) for x in t["eta_sq"]],
                    "F": [tables.number(x, 2) for x in t["f"]],
                    NU: [tables.number(x, 1) for x in t["df_den"]],
                    "p (Holm)": [p_text(x) for x in t["p_holm"]]})
    if "ped_anova" in t:
        columns["PED-ANOVA"] = [tables.number(x, 3) for x in t["ped_anova"]]
    cells = pd.DataFrame(columns, index=pd.Index(t["term"].tolist(), name="term"))
    best = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    for kind in ("factor", "interaction"):
        rows = t.index[t["kind"] == kind]
        if len(rows):
            best.iloc[t.loc[rows, "eta_sq"].idxmax(), list(cells.columns).index(ETA)] = True
    return cells, best


def marginal_table(effects: Effects, higher_is_better: bool, digits: int = 1) -> tuple:
    """One row per (factor, level): mean, 95% CI, configurations, runs; best level in bold."""
    m = effects.marginal
    cells = pd.DataFrame({effects.metric: [tables.number(x, digits) for x in m["mean"]],
                          "95% CI": [_ci(lo, hi, digits) for lo, hi in zip(m["ci_lo"], m["ci_hi"])],
                          "CI over": m["ci_over"].tolist(), "runs": m["runs"].astype(str).tolist(),
                          "matched": m["matched"].tolist()},
                         index=pd.MultiIndex.from_frame(m[["factor", "level"]]))
    best = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    shown = m["mean"].round(digits)
    target = shown.groupby(m["factor"]).transform("max" if higher_is_better else "min")
    best[effects.metric] = (shown == target).to_numpy()
    return cells, best


def interaction_table(means: dict, metric: str, digits: int = 1) -> tuple:
    """One row per (pair, level of A, level of B): mean, 95% CI, configurations, runs."""
    frames = []
    for (a, b), frame in means.items():
        frames.append(frame.assign(interaction=pair_name(a, b),
                                   levels=[pair_name(x, y) for x, y in zip(frame[a], frame[b])]))
    m = pd.concat(frames, ignore_index=True)
    cells = pd.DataFrame({metric: [tables.number(x, digits) for x in m["mean"]],
                          "95% CI": [_ci(lo, hi, digits) for lo, hi in zip(m["ci_lo"], m["ci_hi"])],
                          "CI over": m["ci_over"].tolist(), "matched": m["matched"].tolist()},
                         index=pd.MultiIndex.from_frame(m[["interaction", "levels"]]))
    return cells, pd.DataFrame(False, index=cells.index, columns=cells.columns)


def _term(effects: Effects, name: str) -> pd.Series | None:
    """The ANOVA row of a term; an interaction A × B is found under either order of its factors
    (the model names it in factor order, a pair from --interactions or the ranking may be B × A)."""
    first, sep, second = name.partition(" × ")
    names = {name, pair_name(second, first)} if sep else {name}
    rows = effects.importance[effects.importance["term"].isin(names)]
    return rows.iloc[0] if len(rows) else None


def term_text(effects: Effects, name: str) -> str:
    """'η² = 0.41, F(2, 17.3) = 12.3, p (Holm) <0.001' for a term of the ANOVA (or why there is none)."""
    row = _term(effects, name)
    if row is None:
        return "no interaction term (nested or not estimable)"
    if pd.isna(row["f"]):
        return f"{ETA} = {row['eta_sq']:.3f} (no F-test)"
    p = p_text(row["p_holm"])
    return (f"{ETA} = {row['eta_sq']:.3f}, F({int(row['df'])}, {row['df_den']:.1f}) = {row['f']:.2f}, "
            f"p (Holm) {p if p.startswith('<') else '= ' + p}")


def captions(effects: Effects, pairs: list[tuple[str, str]]) -> dict[str, str]:
    metric = effects.metric
    design = " ".join(effects.notes)
    limits = bounds(metric)
    clipped = f" CIs clipped to the metric's range [{limits[0]:g}, {limits[1]:g}]." if limits else ""
    importance = f"Importance of each factor for {metric}: {ANOVA_METHOD}. {design}"
    if effects.ped_note:
        importance += " " + effects.ped_note
    marginal = (f"Marginal means of {metric}: per level, the {MARGINAL_METHOD}. Matched: only the "
                "combinations of the other factors present at every level of the factor are averaged "
                "('all': every combination; 'k of K': K-k left out for missing cells; 'unmatched': the "
                "levels share no combination, e.g. nested factors, so plain means). Best level per "
                f"factor in bold.{clipped} {design}")
    tests = "; ".join(f"{pair_name(a, b)}: {term_text(effects, pair_name(a, b))}" for a, b in pairs)
    interactions = (f"Two-way interaction means of {metric}: per pair of levels, the {MARGINAL_METHOD}, "
                    f"matched over the other factors as in the marginal means.{clipped} Interaction terms of the "
                    f"type-II ANOVA of the importance table: {tests}.")
    return {"importance": importance, "marginal": marginal, "interactions": interactions}


def latex(cells, best, caption: str, label: str) -> str:
    return tables.to_latex(cells, best, caption, label=label).replace(ETA, r"$\eta^2$").replace(NU, r"$\nu$")


def stem_name(key: str) -> str:
    """A file-name-safe short form of a key: model.enc_layers -> enc_layers."""
    return key.removeprefix("model.").replace(".", "_").replace("/", "_")


def numeric(levels) -> bool:
    try:
        [float(level) for level in levels]
    except ValueError:
        return False
    return True


@paper_style
def plot_marginal_means(effects: Effects, stem) -> list[Path]:
    """One panel per factor: the marginal mean at each level with its 95% CI."""
    factors = effects.factors
    n_cols = min(4, len(factors))
    n_rows = math.ceil(len(factors) / n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.2 * n_cols, 2.8 * n_rows), squeeze=False)
    for ax, f in zip(axes.flat, factors):
        m = effects.marginal[effects.marginal["factor"] == f.name]
        x = np.arange(len(m))
        low = (m["mean"] - m["ci_lo"]).fillna(0).clip(lower=0)
        high = (m["ci_hi"] - m["mean"]).fillna(0).clip(lower=0)
        ax.errorbar(x, m["mean"], yerr=[low, high], marker="o", capsize=4, color="C0",
                    linestyle="-" if numeric(f.levels) else "none")   # no line between categories
        ax.set_xticks(x, m["level"], rotation=30 if max(map(len, m["level"])) > 6 else 0)
        ax.set_xlim(-0.5, len(m) - 0.5)
        row = _term(effects, f.name)
        eta = f"{ETA} = {row['eta_sq']:.2f}" if row is not None else ""
        ax.set_title(f"{f.name}\n{eta}" + ("" if not f.conditional else f" ({f.where})"), fontsize="small")
        ax.grid(alpha=0.3, axis="y")
    for ax in axes.flat[len(factors):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{effects.metric} (mean, 95% CI)")
    return save(fig, stem)


@paper_style
def plot_interaction(effects: Effects, a: str, b: str, means: pd.DataFrame, stem) -> list[Path]:
    """Levels of `a` on the x axis, one line per level of `b`: matched means with 95% CIs."""
    levels_a = list(effects.factor(a).levels)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    n_lines = means[b].nunique()
    for i, (level, line) in enumerate(means.groupby(b, observed=True, sort=True)):
        x = np.array([levels_a.index(v) for v in line[a].astype(str)]) + 0.06 * (i - (n_lines - 1) / 2)
        low = (line["mean"] - line["ci_lo"]).fillna(0).clip(lower=0)
        high = (line["ci_hi"] - line["mean"]).fillna(0).clip(lower=0)
        ax.errorbar(x, line["mean"], yerr=[low, high], marker="o", capsize=3, label=str(level))
    ax.set_xticks(np.arange(len(levels_a)), levels_a)
    ax.set_xlabel(a)
    ax.set_ylabel(f"{effects.metric} (mean, 95% CI)")
    ax.set_title(f"{pair_name(a, b)}\n{term_text(effects, pair_name(a, b))}", fontsize="small")
    ax.legend(title=b, fontsize="small")
    ax.grid(alpha=0.3)
    return save(fig, stem)


def write_effects(effects: Effects, out: Path, pairs: list[tuple[str, str]], higher_is_better: bool,
                  digits: int = 1, figures: bool = True) -> tuple[list[str], list[Path]]:
    """Every effects table and figure; returns (Markdown tables to print, figure files)."""
    text = captions(effects, pairs)
    atomic_write(out / "effects_importance.csv", effects.importance.to_csv(index=False))
    atomic_write(out / "effects_marginal.csv", effects.marginal.to_csv(index=False))
    means = {(a, b): interaction_means(effects, a, b) for a, b in pairs}
    layouts = [("effects_importance", "tab:importance", importance_table(effects, digits)),
               ("effects_marginal", "tab:marginal", marginal_table(effects, higher_is_better, digits))]
    if means:
        atomic_write(out / "effects_interactions.csv",
                     pd.concat([m.rename(columns={a: "first", b: "second"}).assign(interaction=pair_name(a, b))
                                for (a, b), m in means.items()]).to_csv(index=False))
        layouts.append(("effects_interactions", "tab:interactions",
                        interaction_table(means, effects.metric, digits)))
    printed = []
    for name, tex_label, (cells, best) in layouts:
        caption = text[name.removeprefix("effects_")]
        atomic_write(out / f"{name}.tex", latex(cells, best, caption, tex_label))
        markdown = tables.to_markdown(cells, best, caption)
        atomic_write(out / f"{name}.md", markdown)
        printed.append(markdown)
    if not means:
        printed.append("No interaction table or plot: no two factors are crossed (every pair is nested, "
                       "aliased or never set in the same run).\n")
    files: list[Path] = []
    if figures:
        files += plot_marginal_means(effects, out / "effects_marginal")
        for (a, b), m in means.items():
            files += plot_interaction(effects, a, b, m, out / f"effects_interaction_{stem_name(a)}_x_{stem_name(b)}")
    return printed, files
