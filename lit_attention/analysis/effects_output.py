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
from lit_attention.analysis.captions import ETA, NU, anova_p_text, effects_captions, term_text  # noqa: E402
from lit_attention.analysis.effects import Effects, interaction_means, pair_name, term_row  # noqa: E402
from lit_attention.analysis.plots import paper_style, save  # noqa: E402
from lit_attention.files import atomic_write  # noqa: E402

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
                    "p (Holm)": [anova_p_text(x) for x in t["p_holm"]]})
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
        row = term_row(effects, f.name)
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
    text = effects_captions(effects, pairs)
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
