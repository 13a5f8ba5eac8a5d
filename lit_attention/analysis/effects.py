"""Factor effects of a sweep (--effects): which swept keys move the objective, by how much, and
together with what; their tables (LaTeX, Markdown, CSV), captions and figures (PNG + PDF).

A factor is a configuration key that takes two or more values among the usable runs (finished,
finite metric). A conditional factor (model.heads only for Transformers, model.scoring only with
attention) is set on part of the runs, its domain; it is analysed there only, never averaged with
runs where it does not exist.

- importance: one least-squares model of the metric on every run (main effects, every estimable
  two-way interaction; seeds are no block), type-II sums of squares; eta_sq = SS / total SS; F
  and p robust to configurations whose seeds spread unequally (`robust`). A conditional factor
  is coded within its domain and tested after the factors it depends on. When
  runs/<study>/study.db exists, Optuna's PED-ANOVA importance of each swept parameter is added
  beside it (read-only).
- marginal means: per level, the mean of the per-configuration means (each over its seeds), over
  the combinations of the other factors present at every level (matched), with a Student-t 95% CI
  over those configuration means.
- interaction means: the same for each pair of levels of two factors.

**Analysis of variance by least squares** (numpy only). A model is a list of terms; a term is a
name and its design columns ([n, k] float). The sum of squares of a term is type II (Langsrud
2003): the drop in residual sum of squares when the term is added to the model of every term not
*above* it (terms the caller marks as containing it, e.g. its interactions). Degrees of freedom
are rank differences, so aliased or rank-deficient designs (missing cells, conditional factors)
give the df they really have, never a made-up one.

`type2` tests with the pooled residual variance, which assumes every configuration's runs spread
alike; seeds of sweeps do not (one cell's SD 0.8, another's 10.2), and then it rejects true
nulls far too often. `robust` tests the same type-II hypotheses without that assumption: with Q an
orthonormal basis of the term's columns after the terms below it, the type-II SS is |Q'y|², and
Q'y has covariance Q' diag(σ²_i) Q, estimated from the full model's residuals e_i as
e_i² / (1 - h_ii) (HC2, unbiased for cell-means designs: it is Welch's per-cell variance; MacKinnon
& White 1985, *J. Econometrics* 29:305). The Wald statistic (Q'y)' V⁻¹ (Q'y) is referred to F(df, ν)
after Johansen's Welch-James correction (Johansen 1980, *Biometrika* 67:85), each cell
(configuration) holding a variance estimate on n_c - 1 df: for a 1-df term Welch's t² against
Satterthwaite's df (Welch 1947).

Files, in the report directory: effects_importance.*, effects_marginal.*, effects_interactions.*
(tables) and effects_marginal.{png,pdf}, effects_interaction_<A>_x_<B>.{png,pdf} (figures).
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from lit_attention.analysis import aggregate as agg_mod
from lit_attention.analysis import load
from lit_attention.analysis.load import AnalysisError
from lit_attention.analysis.plots import paper_style, plt, save, whiskers
from lit_attention.analysis.statistics import f_sf, holm
from lit_attention.analysis.tables import ci_text, label, number, p_text, to_latex, to_markdown
from lit_attention.files import atomic_write
from lit_attention.metric_facts import metric_range

@dataclass(frozen=True)
class Term:
    name: str
    columns: np.ndarray            # [n, k] design columns of this term
    above: frozenset = frozenset()  # names of terms that contain this one (left out of its base)


def type2(y, terms: list[Term]) -> pd.DataFrame:
    """One row per term (then 'residual' and 'total'): df, ss, eta_sq, f, p.

    ss = |Q'y|² with Q the term's columns after the terms below it (_bases); eta_sq = ss / total ss;
    f = (ss/df) / (residual ss / residual df); p from F(df, residual df). A term that adds no rank
    (aliased with terms below it) gets df 0 and no test.
    """
    y = np.asarray(y, dtype=float)
    total = float(((y - y.mean()) ** 2).sum())
    full, bases = _bases(terms, len(y))
    residual = y - full @ (full.T @ y)
    df_res = len(y) - full.shape[1]
    rss_full = float(residual @ residual) if df_res > 0 else 0.0   # a saturated model fits exactly
    ms_res = rss_full / df_res if df_res > 0 else math.nan
    rows = []
    for term, q in zip(terms, bases):
        df, ss = q.shape[1], float(((q.T @ y) ** 2).sum())
        f = (ss / df) / ms_res if df and ms_res > 0 else math.nan
        rows.append(dict(term=term.name, df=df, ss=ss, f=f, p=f_sf(f, df, df_res)))
    rows.append(dict(term="residual", df=df_res, ss=rss_full, f=math.nan, p=math.nan))
    rows.append(dict(term="total", df=len(y) - 1, ss=total, f=math.nan, p=math.nan))
    table = pd.DataFrame(rows)
    table.insert(3, "eta_sq", table["ss"] / total if total > 0 else math.nan)
    return table


def _basis(columns: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """An orthonormal basis [n, rank] of the column space of `columns` (one or more)."""
    u, sv, _ = np.linalg.svd(columns, full_matrices=False)
    return u[:, sv > tol * max(sv.max(), 1.0)]


def _bases(terms: list[Term], n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """(orthonormal basis [n, rank] of the full model, per term Q [n, df]: an orthonormal basis of
    its columns after the terms below it)."""
    ones = np.ones((n, 1))
    full = _basis(np.column_stack([ones] + [t.columns for t in terms]))
    bases = []
    for term in terms:
        base = _basis(np.column_stack([ones] + [t.columns for t in terms
                                                if t.name != term.name and t.name not in term.above]))
        bases.append(_basis(term.columns - base @ (base.T @ term.columns)))
    return full, bases


@dataclass(frozen=True)
class RobustDesign:
    """What the robust test of a model needs that does not depend on the response (built once
    for many responses of one design, as a calibration simulates)."""
    names: list[str]
    full: np.ndarray        # [n, rank] orthonormal basis of the full model
    leverage: np.ndarray    # [n] h_ii
    cell_df: np.ndarray     # [cells] n_c - 1, at least 1
    bases: list[np.ndarray]  # per term, Q [n, df]: its columns after the terms below it
    cell_onehot: np.ndarray  # [cells, n] 1 where the run is of the cell


def robust_design(terms: list[Term], cells) -> RobustDesign:
    """The response-free part of `robust` for these terms and cells."""
    full, bases = _bases(terms, len(cells))
    codes = pd.factorize(pd.Series(list(cells)).astype(str))[0]
    cell_df = np.maximum(np.bincount(codes) - 1, 1)
    return RobustDesign([t.name for t in terms], full, (full ** 2).sum(axis=1), cell_df, bases,
                        (codes == np.arange(len(cell_df))[:, None]) * 1.0)


def robust_on(design: RobustDesign, y) -> pd.DataFrame:
    """One row per term: f, df_den, p of the heteroscedasticity-robust test of its type-II
    hypothesis (module docstring) on a design built once (robust_design: `cells` labels the
    configuration of each run, its variance estimated from its own runs). A run the model fits
    exactly (leverage 1: a configuration of one run in a saturated model) carries no residual; it
    gets the mean variance of the others. A term without df or a model without residual df gets
    no test."""
    y = np.asarray(y, dtype=float)
    residual = y - design.full @ (design.full.T @ y)
    rounding = 1e-12 * max(1.0, float(np.abs(y).max(initial=0)))
    residual[np.abs(residual) < rounding] = 0.0
    exact = design.leverage > 1 - 1e-9
    omega = np.where(exact, 0.0, residual ** 2 / np.maximum(1 - design.leverage, 1e-12))
    if exact.any() and (~exact).any():
        omega[exact] = omega[~exact].mean()
    df_res = len(y) - design.full.shape[1]
    rows = []
    for name, q in zip(design.names, design.bases):
        row = dict(term=name, f=math.nan, df_den=math.nan, p=math.nan)
        rows.append(row)
        df = q.shape[1]
        if not df or df_res < 1:
            continue
        z, variance = q.T @ y, (q * omega[:, None]).T @ q
        if not variance.any():     # no spread at all: any difference is exact
            moved = bool((np.abs(z) > rounding).any())
            row.update(f=math.inf if moved else math.nan, df_den=df_res, p=0.0 if moved else math.nan)
            continue
        inverse = np.linalg.pinv(variance)
        # Johansen's (1980) Welch-James approximation: each cell's share of V̂ is a variance
        # estimate on n_c - 1 df; wald / c ~ F(df, ν) (for df 1: Welch's t², Satterthwaite's ν)
        per_cell = np.einsum("cn,ni,nj->cij", design.cell_onehot, q * omega[:, None], q)   # [cells, df, df]
        shares = inverse @ per_cell
        a = float(((np.einsum("cij,cji->c", shares, shares) + np.einsum("cii->c", shares) ** 2)
                   / (2 * design.cell_df)).sum())
        nu = min(df * (df + 2) / (3 * a), df_res) if a > 0 else df_res
        f = float(z @ inverse @ z) / (df + 2 * a - 6 * a / (df + 2))
        row.update(f=f, df_den=nu, p=f_sf(f, df, nu))
    return pd.DataFrame(rows)


NOT_SET = "–"
PED_QUANTILE = 0.1        # PED-ANOVA: importance of reaching the top 10 % of trials (Optuna's default)


@dataclass(frozen=True)
class Factor:
    name: str
    levels: tuple[str, ...]    # display labels, in order
    mask: np.ndarray           # [n_runs] bool: where the factor is set (its domain)
    where: str                 # the domain in words: "all runs", "model.family=transformer"

    @property
    def conditional(self) -> bool:
        return not self.mask.all()


@dataclass
class Effects:
    metric: str
    data: pd.DataFrame          # usable runs: run_id, seed, y and one label column per factor
    factors: list[Factor]
    importance: pd.DataFrame    # term, kind, where, df, ss, eta_sq, f, p, p_holm[, ped_anova]
    marginal: pd.DataFrame      # factor, level, mean, ci_lo, ci_hi, configs, runs, ci_over, matched
    notes: list[str] = field(default_factory=list)   # design facts, for captions
    ped_note: str | None = None

    def factor(self, name: str) -> Factor:
        return next(f for f in self.factors if f.name == name)


def term_row(effects: Effects, name: str) -> pd.Series | None:
    """The ANOVA row of a term; an interaction A × B is found under either order of its factors
    (the model names it in factor order, a pair from --interactions or the ranking may be B × A)."""
    first, sep, second = name.partition(" × ")
    names = {name, pair_name(second, first)} if sep else {name}
    rows = effects.importance[effects.importance["term"].isin(names)]
    return rows.iloc[0] if len(rows) else None


def bounds(metric: str) -> tuple[float | None, float | None]:
    """The metric's range (metric_facts) when it is bounded on both sides, else no bound."""
    low, high = metric_range(metric)
    return (None, None) if low is None or high is None else (low, high)


def _order(values) -> list[str]:
    """Level labels sorted by number when all are numbers, else alphabetically."""
    labels = sorted(set(values))
    try:
        return sorted(labels, key=float)
    except ValueError:
        return labels


def factor_names(usable: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(factors, notes): task, model.* keys and other swept config keys (config.model.lr, ...)
    with two or more values, family first; a key the factors before it determine (model.scoring
    when every RNN is additive and every Transformer scaled_dot) is aliased, not a factor."""
    named = [c for c in load.config_columns(usable) if usable[c].dropna().astype(str).nunique() >= 2]
    named.sort(key=lambda c: c != "model.family")
    # swept keys outside the summary's model dict show up as config fields that differ within them
    extra = agg_mod.hidden_differences(usable.assign(_all=0), named or ["_all"])
    candidates = named + [c for c in extra if usable[c].dropna().astype(str).nunique() >= 2]
    kept = load.distinguishing(usable, candidates)
    notes = [f"{c} is determined by {', '.join(k for k in kept if candidates.index(k) < candidates.index(c))} "
             "in these runs (aliased): not a separate factor." for c in candidates if c not in kept]
    return kept, notes


def _labels(values: pd.DataFrame) -> pd.DataFrame:
    """Display labels of configuration values; None where a key is not set."""
    return values.map(lambda v: None if pd.isna(v) else label(v))


def _where(data: pd.DataFrame, mask: np.ndarray, factors: list[Factor]) -> str:
    """The domain as KEY=VALUE conditions on the factors set around it, when they pin it down."""
    if mask.all():
        return "all runs"
    conditions = {}
    for f in factors:
        if not (f.mask >= mask).all() or (f.mask == mask).all():
            continue
        inside = set(data.loc[mask, f.name])
        outside = set(data.loc[f.mask & ~mask, f.name])
        if not inside & outside:
            conditions[f.name] = _order(inside)
    if conditions and (data[list(conditions)].isin(conditions).all(axis=1) == mask).all():
        return ", ".join(f"{name}={'|'.join(values)}" for name, values in conditions.items())
    return f"{int(mask.sum())} of {len(mask)} runs where set"


def _codes(data: pd.DataFrame, f: Factor) -> np.ndarray:
    """Indicator columns of a factor: treatment coding (first level left out) when it is set on every
    run; every level when conditional, so the contrast lives inside its domain."""
    levels = f.levels if f.conditional else f.levels[1:]
    return np.column_stack([(data[f.name] == level).to_numpy(float) for level in levels])


def _interaction(data, a: Factor, b: Factor) -> np.ndarray | None:
    """Product columns of a x b, or None when they add nothing to a + b (nested or disjoint)."""
    ca, cb = _codes(data, a), _codes(data, b)
    products = np.column_stack([ca[:, i] * cb[:, j] for i in range(ca.shape[1]) for j in range(cb.shape[1])])
    products = products[:, products.any(axis=0)]
    base = np.column_stack([np.ones(len(ca)), ca, cb])
    rank = np.linalg.matrix_rank
    if products.shape[1] == 0 or rank(np.column_stack([base, products])) == rank(base):
        return None
    return products


def pair_name(a: str, b: str) -> str:
    return f"{a} × {b}"


def design(data: pd.DataFrame, factors: list[Factor], interactions: bool) -> list[tuple[Term, str, np.ndarray]]:
    """(term, kind, domain) of the model: factors and estimable two-way interactions."""
    parts = [(f.name, "factor", (f.name,), f.mask, _codes(data, f)) for f in factors]
    if interactions:
        for a, b in itertools.combinations(factors, 2):
            columns = _interaction(data, a, b)
            if columns is not None:
                parts.append((pair_name(a.name, b.name), "interaction", (a.name, b.name),
                              a.mask & b.mask, columns))
    terms = []
    for name, kind, members, mask, columns in parts:
        # Marginality: a term is tested after the terms below it, not after those containing it
        # (its interactions) or living inside its domain (conditional factors nested in it: a
        # strict subset of its runs).
        above = frozenset(other for other, _, wider, inner, _ in parts if other != name and (
            set(members) < set(wider) or ((inner <= mask).all() and inner.sum() < mask.sum())))
        terms.append((Term(name, columns, above), kind, mask))
    return terms


def importance(data: pd.DataFrame, factors: list[Factor], notes: list[str]) -> pd.DataFrame:
    """The type-II ANOVA table of the metric `y`, factors first, by eta_sq; appends design notes.

    SS and η² are type II (type2); F, its denominator df (df_den) and p are the
    heteroscedasticity-robust test of the same hypothesis (robust), each configuration's
    runs their own variance. Seeds are no block: seed 1 of one configuration shares nothing with
    seed 1 of another (as in the seed test)."""
    configs = data[[f.name for f in factors]].fillna(NOT_SET).astype(str).agg("|".join, axis=1)
    for interactions in (True, False):
        terms = design(data, factors, interactions)
        table = type2(data["y"], [t for t, _, _ in terms])
        residual_df = table["df"].iloc[-2]      # the rows end with residual, total
        if residual_df >= 1 or all(kind != "interaction" for _, kind, _ in terms):
            break
        notes.append("Two-way interactions not fitted: with them no residual degrees of freedom "
                     "would remain (too few seeds per configuration).")
    if residual_df < 1:
        notes.append("No residual degrees of freedom (one run per configuration): no F-tests.")
    tests = robust_on(robust_design([t for t, _, _ in terms], configs), data["y"]).set_index("term")
    named = table["term"].isin(tests.index)
    table.loc[named, ["f", "p"]] = tests.loc[table.loc[named, "term"], ["f", "p"]].to_numpy()
    table.insert(table.columns.get_loc("f") + 1, "df_den", table["term"].map(tests["df_den"]))
    table.insert(1, "kind", table["term"].map({t.name: k for t, k, _ in terms}).fillna(table["term"]))
    wheres = {t.name: _where(data, mask, factors) for t, _, mask in terms}
    table.insert(2, "where", table["term"].map(wheres).fillna("all runs"))
    tested = table["kind"].isin(["factor", "interaction"])
    aliased = table.loc[tested & (table["df"] == 0), "term"]
    if len(aliased):
        notes.append(f"No degrees of freedom left (aliased with other terms): {', '.join(aliased)}.")
    table["p_holm"] = math.nan
    table.loc[tested, "p_holm"] = holm(table.loc[tested, "p"].tolist())
    table = table[(table["df"] > 0) | (table["kind"] != "interaction")]   # nested pairs vanish
    order = {"factor": 0, "interaction": 1, "residual": 2, "total": 3}
    return table.sort_values(["kind", "eta_sq"], key=lambda c: c.map(order) if c.name == "kind"
                             else -c).reset_index(drop=True)


def cell_means(data: pd.DataFrame, factors: list[Factor], keys: tuple[str, ...],
               limits: tuple[float | None, float | None] = (None, None)) -> pd.DataFrame:
    """Mean and 95% CI of `y` per combination of the `keys` factors, over configurations matched on
    the other factors of their common domain (see MARGINAL_METHOD); CIs clipped to `limits`."""
    by_name = {f.name: f for f in factors}
    mask = np.logical_and.reduce([by_name[k].mask for k in keys])
    inside = data[mask]
    # what the configurations are matched on: the other factors set on the whole domain and
    # varying inside it
    context = [f.name for f in factors if f.name not in keys and (f.mask >= mask).all()
               and inside[f.name].nunique() > 1]
    names = [f.name for f in factors]
    configs = (inside.fillna({n: NOT_SET for n in names})
               .groupby(names, dropna=False)["y"].agg(["mean", list]).reset_index())
    context_of = [tuple(r) for r in configs[context].itertuples(index=False)] if context else [()] * len(configs)
    configs = configs.assign(_context=context_of)
    groups = configs.groupby(list(keys), sort=False)
    support = [set(g["_context"]) for _, g in groups]
    common, union = set.intersection(*support), set.union(*support)
    matched = ("unmatched" if not common else "all" if common == union
               else f"{len(common)} of {len(union)}")
    rows = []
    for values, group in groups:
        chosen = group[group["_context"].isin(common)] if common else group
        if len(chosen) >= 2:
            scores, over = chosen["mean"], f"{len(chosen)} configurations"
        else:
            scores = chosen["list"].iloc[0]
            over = f"{len(scores)} seed{'s' * (len(scores) != 1)}"
        stats = agg_mod.seed_stats(scores, limits)
        rows.append({**dict(zip(keys, values)), **{k: stats[k] for k in ("mean", "ci_lo", "ci_hi")},
                     "configs": len(chosen), "runs": int(sum(len(x) for x in chosen["list"])),
                     "ci_over": over,
                     "matched": matched, "matched_on": ", ".join(context) or "–"})
    dtypes = {key: pd.CategoricalDtype(by_name[key].levels, ordered=True) for key in keys}
    return pd.DataFrame(rows).astype(dtypes).sort_values(list(keys)).reset_index(drop=True)


def marginal_means(data: pd.DataFrame, factors: list[Factor], limits=(None, None)) -> pd.DataFrame:
    frames = {f.name: cell_means(data, factors, (f.name,), limits).rename(columns={f.name: "level"})
              for f in factors}
    means = pd.concat(frames, names=["factor", None]).reset_index(0).reset_index(drop=True)
    return means.astype({"level": str})


def design_notes(runs: pd.DataFrame, data: pd.DataFrame, metric: str, factors: list[Factor]) -> list[str]:
    """What makes the design unbalanced: excluded runs, missing configurations, uneven seeds."""
    notes = [f"{len(data)} usable runs (finished, finite {metric}) of {len(runs)}."]
    bad = runs[~agg_mod.usable(runs, metric)]
    if len(bad):
        counts = bad["status"].where(bad["status"] != load.FINISHED, f"finished without a finite {metric}")
        notes.append("Excluded: " + ", ".join(f"{n} {s}" for s, n in counts.value_counts().items()) + ".")
    names = [f.name for f in factors]
    def keys(frame):
        return set(_labels(frame[names]).fillna(NOT_SET).itertuples(index=False, name=None))
    lost = sorted(c for c in keys(runs) - keys(data) if set(c) != {NOT_SET})   # runs without a model
    if lost:
        shown = "; ".join(", ".join(f"{n}={v}" for n, v in zip(names, c) if v != NOT_SET) for c in lost[:3])
        notes.append(f"{len(lost)} configuration{'s' * (len(lost) != 1)} without a usable run "
                     f"(missing cells): {shown}{' ...' if len(lost) > 3 else ''}.")
    per_config = data.fillna({n: NOT_SET for n in names}).groupby(names, dropna=False).size()
    if per_config.nunique() > 1:
        notes.append(f"Seeds per configuration: {per_config.min()}–{per_config.max()} (unbalanced).")
    crossed = [f for f in factors if not f.conditional]
    if len(crossed) >= 2:
        full = math.prod(len(f.levels) for f in crossed)
        seen = data.groupby([f.name for f in crossed]).ngroups
        if seen < full:
            notes.append(f"The unconditional factors are not fully crossed: {seen} of {full} combinations.")
    conditional = [f"{f.name} ({f.where})" for f in factors if f.conditional]
    if conditional:
        notes.append("Conditional factors, analysed only where set: " + "; ".join(conditional) + ".")
    notes.append("Unbalanced cells are handled by type-II sums of squares and matched marginal means, "
                 "never by averaging unlike configurations.")
    return notes


def ped_anova(data: pd.DataFrame, factors: list[str], metric: str,
              higher_is_better: bool) -> tuple[dict, str | None]:
    """({factor: PED-ANOVA importance}, caption note) from runs/<study>/study.db, opened read-only.
    A parameter with one value in the study is no factor and gets importance 0 from PED-ANOVA."""
    groups = sorted(set(data["group"])) if "group" in data else []
    dbs = {Path(d).parent / "study.db" for d in data.get("run_dir", [])}
    if len(groups) != 1 or len(dbs) != 1 or not (path := next(iter(dbs)).resolve()).is_file():
        return {}, None
    import optuna
    import sqlalchemy.exc
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
    from optuna.trial import TrialState

    from lit_attention.tracking.schema import config_name

    try:
        study = optuna.load_study(study_name=groups[0], storage=f"sqlite:///file:{path}?mode=ro&uri=true")
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    except (KeyError, sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.OptunaError) as exc:
        load.warn(f"{path}: not read for PED-ANOVA ({' '.join(str(exc).split())})")
        return {}, f"PED-ANOVA not computed: {path.name} could not be read."
    value = dict(zip(data["run_id"], data["y"]))
    sign = -1.0 if higher_is_better else 1.0     # PED-ANOVA ranks lower targets as better

    def target(trial) -> float:
        return sign * value.get(trial.user_attrs.get("run_id"), math.nan)

    used = [t for t in trials if math.isfinite(target(t))]
    params = sorted({p for t in used for p in t.params if p != "seed"})
    if len(used) < 2 or not params:
        return {}, f"PED-ANOVA not computed: {len(used)} complete trial(s) of study {groups[0]} match a usable run."
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # Optuna warns that a target is given: it is on purpose
        found = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(
            target_quantile=PED_QUANTILE), params=params, target=target)
    by_factor: dict[str, float] = {}
    for param, score in found.items():
        key = config_name(param)
        column = next((c for c in (key, f"model.{key}", f"config.{key}") if c in factors), None)
        if column is not None:
            by_factor[column] = by_factor.get(column, 0.0) + score
    top = math.ceil(PED_QUANTILE * len(used))
    note = (f"PED-ANOVA: Optuna's PedAnovaImportanceEvaluator (Watanabe et al. 2023) on study "
            f"{groups[0]} (its study.db, read-only), {len(used)} complete trials matched to usable runs; "
            f"importance of a parameter for reaching the top {PED_QUANTILE:.0%} ({top} trials) of "
            f"{metric}, normalized to sum to 1 over the swept parameters.")
    if top < 5:
        note += " Fewer than 5 trials in that top group: Optuna calls such values unstable."
    return by_factor, note


def analyse(runs: pd.DataFrame, metric: str, higher_is_better: bool = True) -> Effects:
    """Every factor's importance and marginal means of `metric` over the usable `runs`."""
    usable = runs[agg_mod.usable(runs, metric)]
    names, aliased = factor_names(usable)
    if not names:
        raise AnalysisError(f"--effects: no configuration key takes two values among the {len(usable)} "
                            f"usable runs (finished, finite {metric}); there is nothing to compare")
    keep = [c for c in ("group", "run_id", "run_dir", "seed") if c in usable]
    data = pd.concat([usable[keep].assign(y=pd.to_numeric(usable[metric]).astype(float)),
                      _labels(usable[names])], axis=1).reset_index(drop=True)
    bare = [Factor(n, tuple(_order(data[n].dropna())), data[n].notna().to_numpy(), "") for n in names]
    factors = [Factor(f.name, f.levels, f.mask, _where(data, f.mask, bare)) for f in bare]
    notes = aliased + design_notes(runs, data, metric, factors)
    table = importance(data, factors, notes)
    ped, ped_note = ped_anova(data, names, metric, higher_is_better)
    if ped:
        table["ped_anova"] = table["term"].map(ped)
    return Effects(metric, data, factors, table, marginal_means(data, factors, bounds(metric)), notes,
                   ped_note)


def resolve_pairs(effects: Effects, runs: pd.DataFrame, pairs: list[str] | None) -> list[tuple[str, str]]:
    """`--interactions A:B ...` as factor pairs; default: the two most important factors."""
    names = [f.name for f in effects.factors]
    if pairs is None:
        ranked = effects.importance.loc[effects.importance["kind"] == "factor", "term"].tolist()
        crossed = [(a, b) for a, b in itertools.combinations(ranked, 2) if _crossed(effects, a, b) is None]
        return crossed[:1]
    found = []
    for pair in pairs:
        if pair.count(":") != 1:
            raise AnalysisError(f"--interactions: expected FACTOR:FACTOR, got {pair!r}")
        try:
            a, b = (load.resolve_key(runs, k) for k in pair.split(":"))
        except AnalysisError as exc:
            raise AnalysisError(f"--interactions {pair}: {exc}") from None
        for key in (a, b):
            if key not in names:
                raise AnalysisError(f"--interactions {pair}: {key} is not a factor of these runs (it does "
                                    f"not take two values among the usable runs); factors: {', '.join(names)}")
        if a == b:
            raise AnalysisError(f"--interactions {pair}: a factor cannot interact with itself")
        problem = _crossed(effects, a, b)
        if problem:
            raise AnalysisError(f"--interactions {pair}: {problem}; there is no interaction to show")
        found.append((a, b))
    return found


def _crossed(effects: Effects, a: str, b: str) -> str | None:
    """None when both factors take two or more values in the runs where both are set, else why not."""
    fa, fb = effects.factor(a), effects.factor(b)
    both = fa.mask & fb.mask
    if not both.any():
        return f"{a} ({fa.where}) and {b} ({fb.where}) are never set in the same run"
    for f, other in ((fa, fb), (fb, fa)):
        if effects.data.loc[both, f.name].nunique() < 2:
            return f"{f.name} takes one value wherever {other.name} is set ({other.where}): nested, not crossed"
    return None


def interaction_means(effects: Effects, a: str, b: str) -> pd.DataFrame:
    """Matched mean and CI of the metric for every observed (level of a, level of b)."""
    return cell_means(effects.data, effects.factors, (a, b), bounds(effects.metric))


# -- captions ----------------------------------------------------------------------------------

ETA = "η²"
NU = "ν"        # the robust F's denominator degrees of freedom
MARGINAL_METHOD = ("mean of the per-configuration means (each over its seeds); 95% CI: Student-t "
                   "over those configuration means, mean ± t(0.975, k-1)·s/√k, so it covers seed "
                   "noise and the spread over the other factors (over the seeds of the one "
                   "configuration when a level has only one)")
ANOVA_METHOD = ("type-II sums of squares (Langsrud 2003) of one least-squares model of every usable run "
                "(main effects, every estimable two-way interaction; seeds are no block: seed numbers are "
                "not paired across configurations); η² = SS / total SS; F: the Wald test of the term's "
                "type-II hypothesis with each configuration's own variance (HC2: robust to seeds that "
                "spread unequally, which the pooled residual mean square is not), against F(df, ν) with "
                "Satterthwaite's ν over the configurations (Welch-type; calibrated: docs/REPORT.md), "
                "Holm-adjusted over all factor and interaction terms. A conditional factor is coded only "
                "where it is set (column 'where', if any) and tested after the factors it depends on")


def anova_p_text(p) -> str:
    """A Holm-adjusted p of the F-test (p_text: from F, no resampling floor); '' for none."""
    return "" if p is None or pd.isna(p) else p_text(p, p, math.inf)


def term_text(effects: Effects, name: str) -> str:
    """'η² = 0.41, F(2, 17.3) = 12.3, p (Holm) <0.001' for a term of the ANOVA (or why there is none)."""
    row = term_row(effects, name)
    if row is None:
        return "no interaction term (nested or not estimable)"
    if pd.isna(row["f"]):
        return f"{ETA} = {row['eta_sq']:.3f} (no F-test)"
    p = anova_p_text(row["p_holm"])
    return (f"{ETA} = {row['eta_sq']:.3f}, F({int(row['df'])}, {row['df_den']:.1f}) = {row['f']:.2f}, "
            f"p (Holm) {p if p.startswith('<') else '= ' + p}")


def effects_captions(effects: Effects, pairs: list[tuple[str, str]]) -> dict[str, str]:
    metric = effects.metric
    design = " ".join(effects.notes)
    low, high = bounds(metric)
    clipped = f" CIs clipped to the metric's range [{low:g}, {high:g}]." if low is not None else ""
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


# -- tables and figures ------------------------------------------------------------------------

def importance_table(effects: Effects) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per term: where, df, SS, η², F, p (and PED-ANOVA); the top factor and pair in bold."""
    t = effects.importance
    columns = {"where": t["where"].tolist()} if (t["where"] != "all runs").any() else {}
    columns.update({"df": t["df"].astype(int).astype(str).tolist(),
                    # sums of squares span orders of magnitude: 1668, 227, 19.1, 0.00209
                    "SS": ["" if pd.isna(x) else f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"
                           for x in t["ss"]],
                    ETA: [number(x, 3) for x in t["eta_sq"]],
                    "F": [number(x, 2) for x in t["f"]],
                    NU: [number(x, 1) for x in t["df_den"]],
                    "p (Holm)": [anova_p_text(x) for x in t["p_holm"]]})
    if "ped_anova" in t:
        columns["PED-ANOVA"] = [number(x, 3) for x in t["ped_anova"]]
    cells = pd.DataFrame(columns, index=pd.Index(t["term"].tolist(), name="term"))
    best = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    ranked = t[t["kind"].isin(["factor", "interaction"])].dropna(subset="eta_sq")   # NaN: no spread
    top = ranked.groupby("kind")["eta_sq"].idxmax()
    best.iloc[top.to_numpy(), cells.columns.get_loc(ETA)] = True
    return cells, best


def means_cells(m: pd.DataFrame, metric: str, digits: int, index: list[str]) -> pd.DataFrame:
    """The cells of matched means `m` (cell_means), indexed by its `index` columns: mean, 95% CI,
    what the CI is over, runs, matched."""
    ci = [ci_text(lo, hi, digits) for lo, hi in zip(m["ci_lo"], m["ci_hi"])]
    return pd.DataFrame({metric: [number(x, digits) for x in m["mean"]], "95% CI": ci,
                         "CI over": m["ci_over"].tolist(), "runs": m["runs"].astype(str).tolist(),
                         "matched": m["matched"].tolist()},
                        index=pd.MultiIndex.from_frame(m[index]))


def marginal_table(effects: Effects, higher_is_better: bool, digits: int = 1) -> tuple:
    """One row per (factor, level): mean, 95% CI, configurations, runs; best level in bold."""
    m = effects.marginal
    cells = means_cells(m, effects.metric, digits, ["factor", "level"])
    best = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    shown = m["mean"].round(digits)
    target = shown.groupby(m["factor"]).transform("max" if higher_is_better else "min")
    best[effects.metric] = (shown == target).to_numpy()
    return cells, best


def interaction_table(means: dict, metric: str, digits: int = 1) -> tuple:
    """One row per (pair, level of A, level of B): mean, 95% CI, what the CI is over, matched."""
    m = pd.concat([frame.assign(interaction=pair_name(a, b),
                                levels=[pair_name(x, y) for x, y in zip(frame[a], frame[b])])
                   for (a, b), frame in means.items()], ignore_index=True)
    cells = means_cells(m, metric, digits, ["interaction", "levels"]).drop(columns="runs")
    return cells, pd.DataFrame(False, index=cells.index, columns=cells.columns)


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
        ax.errorbar(x, m["mean"], yerr=whiskers(m["mean"], m["ci_lo"], m["ci_hi"]), marker="o", capsize=4, color="C0",
                    # no line between categories
                    linestyle="-" if pd.to_numeric(pd.Series(f.levels), errors="coerce").notna().all()
                    else "none")
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
        ax.errorbar(x, line["mean"], yerr=whiskers(line["mean"], line["ci_lo"], line["ci_hi"]), marker="o",
                    capsize=3, label=str(level))
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
    layouts = [("effects_importance", "tab:importance", importance_table(effects)),
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
        atomic_write(out / f"{name}.tex", to_latex(cells, best, caption, label=tex_label)
                     .replace(ETA, r"$\eta^2$").replace(NU, r"$\nu$"))
        printed.append(to_markdown(cells, best, caption))
        atomic_write(out / f"{name}.md", printed[-1])
    if not means:
        printed.append("No interaction table or plot: no two factors are crossed (every pair is nested, "
                       "aliased or never set in the same run).\n")
    files: list[Path] = []
    if figures:
        files += plot_marginal_means(effects, out / "effects_marginal")
        for (a, b), m in means.items():
            # file-name-safe short forms of the keys: model.enc_layers -> enc_layers
            stem = "_x_".join(k.removeprefix("model.").replace(".", "_").replace("/", "_")
                              for k in (a, b))
            files += plot_interaction(effects, a, b, m, out / f"effects_interaction_{stem}")
    return printed, files
