"""Factor effects of a sweep: which swept keys move the objective, by how much, and together with what.

A factor is a configuration key that takes two or more values among the usable runs (finished,
finite metric). A conditional factor (model.heads only for Transformers, model.scoring only with
attention) is set on part of the runs, its domain; it is analysed there only, never averaged with
runs where it does not exist.

- importance: one least-squares model of the metric on every run (main effects, every estimable
  two-way interaction; seeds are no block), type-II sums of squares (anova.py); eta_sq = SS /
  total SS; F and p robust to configurations whose seeds spread unequally (anova.robust). A conditional factor is coded within its domain and tested after the
  factors it depends on. When runs/<study>/study.db exists, Optuna's PED-ANOVA importance of each
  swept parameter is added beside it (read-only).
- marginal means: per level, the mean of the per-configuration means (each over its seeds), over
  the combinations of the other factors present at every level (matched), with a Student-t 95% CI
  over those configuration means.
- interaction means: the same for each pair of levels of two factors.
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
from lit_attention.analysis import anova, load
from lit_attention.analysis.load import AnalysisError
from lit_attention.analysis.significance import holm
from lit_attention.metric_facts import metric_range
from lit_attention.analysis.tables import label

SEED_TERM = "seed (block)"
NOT_SET = "–"
# Metrics on a 0-100 scale: confidence limits are clipped to it.
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


def bounds(metric: str) -> tuple[float, float] | None:
    """The metric's range (metric_facts) when it is bounded on both sides, else None."""
    low, high = metric_range(metric)
    return None if low is None or high is None else (low, high)


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


def _labels(column: pd.Series) -> pd.Series:
    return column.map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else label(v))


def _where(data: pd.DataFrame, mask: np.ndarray, factors: list[Factor]) -> str:
    """The domain as KEY=VALUE conditions on the factors set around it, when they pin it down."""
    if mask.all():
        return "all runs"
    conditions = []
    for f in factors:
        if not (f.mask >= mask).all() or (f.mask == mask).all():
            continue
        inside = set(data.loc[mask, f.name])
        outside = set(data.loc[f.mask & ~mask, f.name])
        if not inside & outside:
            conditions.append((f.name, _order(inside)))
    selected = np.ones(len(data), dtype=bool)
    for name, values in conditions:
        selected &= data[name].isin(values).to_numpy()
    if conditions and (selected == mask).all():
        return ", ".join(f"{name}={'|'.join(values)}" for name, values in conditions)
    return f"{int(mask.sum())} of {len(mask)} runs where set"


def make_factors(data: pd.DataFrame, names: list[str]) -> list[Factor]:
    bare = [Factor(n, tuple(_order(data[n].dropna())), data[n].notna().to_numpy(), "") for n in names]
    return [Factor(f.name, f.levels, f.mask, _where(data, f.mask, bare)) for f in bare]


def _codes(data: pd.DataFrame, f: Factor) -> np.ndarray:
    """Indicator columns of a factor: treatment coding (first level left out) when it is set on every
    run; every level when conditional, so the contrast lives inside its domain."""
    levels = f.levels if f.conditional else f.levels[1:]
    return np.column_stack([(data[f.name] == level).to_numpy(float) for level in levels])


def _inside(inner: np.ndarray, outer: np.ndarray) -> bool:
    """inner is a strict subset of outer."""
    return bool((inner <= outer).all() and inner.sum() < outer.sum())


def _rank(*blocks) -> int:
    return int(np.linalg.matrix_rank(np.column_stack([np.ones(len(blocks[0]))] + list(blocks))))


def _interaction(data, a: Factor, b: Factor) -> np.ndarray | None:
    """Product columns of a x b, or None when they add nothing to a + b (nested or disjoint)."""
    ca, cb = _codes(data, a), _codes(data, b)
    products = np.column_stack([ca[:, i] * cb[:, j] for i in range(ca.shape[1]) for j in range(cb.shape[1])])
    products = products[:, products.any(axis=0)]
    if products.shape[1] == 0 or _rank(ca, cb, products) == _rank(ca, cb):
        return None
    return products


def pair_name(a: str, b: str) -> str:
    return f"{a} × {b}"


def design(data: pd.DataFrame, factors: list[Factor], interactions: bool,
           seed_block: bool) -> list[tuple[anova.Term, str, np.ndarray]]:
    """(term, kind, domain) of the model: factors, estimable two-way interactions, the seed block."""
    parts = [(f.name, "factor", (f.name,), f.mask, _codes(data, f)) for f in factors]
    if interactions:
        for a, b in itertools.combinations(factors, 2):
            columns = _interaction(data, a, b)
            if columns is not None:
                parts.append((pair_name(a.name, b.name), "interaction", (a.name, b.name),
                              a.mask & b.mask, columns))
    if seed_block:
        seed = Factor("seed", tuple(_order(data["seed"])), np.ones(len(data), dtype=bool), "all runs")
        parts.append((SEED_TERM, "block", (), seed.mask, _codes(data, seed)))
    terms = []
    for name, kind, members, mask, columns in parts:
        # Marginality: a term is tested after the terms below it, not after those containing it
        # (its interactions) or living inside its domain (conditional factors nested in it).
        above = frozenset(other for other, _, other_members, other_mask, _ in parts if other != name
                          and ((members and set(members) < set(other_members)) or _inside(other_mask, mask)))
        terms.append((anova.Term(name, columns, above), kind, mask))
    return terms


def importance(data: pd.DataFrame, factors: list[Factor], notes: list[str]) -> pd.DataFrame:
    """The type-II ANOVA table of the metric `y`, factors first, by eta_sq; appends design notes.

    SS and η² are type II (anova.type2); F, its denominator df (df_den) and p are the
    heteroscedasticity-robust test of the same hypothesis (anova.robust), each configuration's
    runs their own variance. Seeds are no block: seed 1 of one configuration shares nothing with
    seed 1 of another (as in the seed test)."""
    configs = data[[f.name for f in factors]].fillna(NOT_SET).astype(str).agg("|".join, axis=1)
    terms = design(data, factors, interactions=True, seed_block=False)
    table = anova.type2(data["y"], [t for t, _, _ in terms])
    residual_df = table.loc[table["term"] == "residual", "df"].iloc[0]
    if residual_df < 1 and any(kind == "interaction" for _, kind, _ in terms):
        terms = design(data, factors, interactions=False, seed_block=False)
        table = anova.type2(data["y"], [t for t, _, _ in terms])
        residual_df = table.loc[table["term"] == "residual", "df"].iloc[0]
        notes.append("Two-way interactions not fitted: with them no residual degrees of freedom "
                     "would remain (too few seeds per configuration).")
    if residual_df < 1:
        notes.append("No residual degrees of freedom (one run per configuration): no F-tests.")
    tests = anova.robust(data["y"], [t for t, _, _ in terms], configs).set_index("term")
    named = table["term"].isin(tests.index)
    for column in ("f", "p"):
        table.loc[named, column] = table.loc[named, "term"].map(tests[column])
    table.insert(table.columns.get_loc("f") + 1, "df_den", table["term"].map(tests["df_den"]))
    kinds = {t.name: kind for t, kind, _ in terms}
    table.insert(1, "kind", table["term"].map(kinds).fillna(table["term"]))
    wheres = {t.name: _where(data, mask, factors) for t, _, mask in terms}
    table.insert(2, "where", table["term"].map(wheres).fillna("all runs"))
    aliased = table.loc[(table["df"] == 0) & table["kind"].isin(["factor", "interaction"]), "term"]
    if len(aliased):
        notes.append(f"No degrees of freedom left (aliased with other terms): {', '.join(aliased)}.")
    tested = table["kind"].isin(["factor", "interaction"])
    table["p_holm"] = math.nan
    table.loc[tested, "p_holm"] = holm(table.loc[tested, "p"].tolist())
    order = {"factor": 0, "interaction": 1, "block": 2, "residual": 3, "total": 4}
    table = table.assign(_kind=table["kind"].map(order), _eta=-table["eta_sq"])
    table = table[(table["df"] > 0) | ~table["kind"].isin(["interaction"])]   # nested pairs vanish
    return table.sort_values(["_kind", "_eta"]).drop(columns=["_kind", "_eta"]).reset_index(drop=True)


def _context(factor_set: list[Factor], mask: np.ndarray, exclude: tuple[str, ...],
             data: pd.DataFrame) -> list[str]:
    """The factors set on the whole domain `mask` and varying inside it, other than `exclude`."""
    return [f.name for f in factor_set if f.name not in exclude and (f.mask >= mask).all()
            and data.loc[mask, f.name].nunique() > 1]


def cell_means(data: pd.DataFrame, factors: list[Factor], keys: tuple[str, ...],
               limits: tuple[float, float] | None = None) -> pd.DataFrame:
    """Mean and 95% CI of `y` per combination of the `keys` factors, over configurations matched on
    the other factors of their common domain (see captions.MARGINAL_METHOD); CIs clipped to `limits`."""
    mask = np.logical_and.reduce([next(f for f in factors if f.name == k).mask for k in keys])
    inside = data[mask]
    context = _context(factors, mask, keys, data)
    names = [f.name for f in factors]
    configs = (inside.fillna({n: NOT_SET for n in names})
               .groupby(names, dropna=False)["y"].agg(["mean", list]).reset_index())
    context_of = [tuple(r) for r in configs[context].itertuples(index=False)] if context else [()] * len(configs)
    configs = configs.assign(_context=context_of)
    groups = configs.groupby(list(keys), sort=False)
    support = [set(g["_context"]) for _, g in groups]
    common, union = set.intersection(*support), set.union(*support)
    if not common:
        matched = "unmatched"
    elif common == union:
        matched = "all"
    else:
        matched = f"{len(common)} of {len(union)}"
    rows = []
    for values, group in groups:
        values = values if isinstance(values, tuple) else (values,)
        chosen = group[group["_context"].isin(common)] if common else group
        if len(chosen) >= 2:
            stats, over = agg_mod.seed_stats(chosen["mean"]), f"{len(chosen)} configurations"
        else:
            seeds = chosen["list"].iloc[0]
            stats, over = agg_mod.seed_stats(seeds), f"{len(seeds)} seed{'s' * (len(seeds) != 1)}"
        if limits:
            stats["ci_lo"], stats["ci_hi"] = np.clip([stats["ci_lo"], stats["ci_hi"]], *limits)
        rows.append({**dict(zip(keys, values)), "mean": stats["mean"], "ci_lo": stats["ci_lo"],
                     "ci_hi": stats["ci_hi"], "configs": len(chosen),
                     "runs": int(sum(len(x) for x in chosen["list"])), "ci_over": over,
                     "matched": matched, "matched_on": ", ".join(context) or "–"})
    frame = pd.DataFrame(rows)
    for key in keys:
        order = next(f for f in factors if f.name == key).levels
        frame[key] = pd.Categorical(frame[key], categories=order, ordered=True)
    return frame.sort_values(list(keys)).reset_index(drop=True)


def marginal_means(data: pd.DataFrame, factors: list[Factor], limits=None) -> pd.DataFrame:
    frames = []
    for f in factors:
        means = cell_means(data, factors, (f.name,), limits)
        frames.append(means.rename(columns={f.name: "level"}).assign(level=lambda m: m["level"].astype(str)))
        frames[-1].insert(0, "factor", f.name)
    return pd.concat(frames, ignore_index=True)


def design_notes(runs: pd.DataFrame, data: pd.DataFrame, metric: str, factors: list[Factor]) -> list[str]:
    """What makes the design unbalanced: excluded runs, missing configurations, uneven seeds."""
    notes = [f"{len(data)} usable runs (finished, finite {metric}) of {len(runs)}."]
    bad = runs[~agg_mod.usable(runs, metric)]
    if len(bad):
        counts = bad["status"].where(bad["status"] != load.FINISHED, f"finished without a finite {metric}")
        notes.append("Excluded: " + ", ".join(f"{n} {s}" for s, n in counts.value_counts().items()) + ".")
    names = [f.name for f in factors]
    def keys(frame):
        return set(frame[names].map(lambda v: None if pd.isna(v) else label(v))
                   .fillna(NOT_SET).itertuples(index=False, name=None))
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
    dirs = {Path(d).parent for d in data.get("run_dir", [])}
    if len(groups) != 1 or len(dirs) != 1 or not (next(iter(dirs)) / "study.db").is_file():
        return {}, None
    import optuna
    import sqlalchemy.exc
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
    from optuna.trial import TrialState

    from lit_attention.tracking.schema import config_name

    path = (next(iter(dirs)) / "study.db").resolve()
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
    data = usable[keep].assign(y=pd.to_numeric(usable[metric]).astype(float))
    for name in names:
        data[name] = _labels(usable[name])
    data = data.reset_index(drop=True)
    factors = make_factors(data, names)
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
    for f in (fa, fb):
        if effects.data.loc[both, f.name].nunique() < 2:
            other = fb if f is fa else fa
            return f"{f.name} takes one value wherever {other.name} is set ({other.where}): nested, not crossed"
    return None


def interaction_means(effects: Effects, a: str, b: str) -> pd.DataFrame:
    """Matched mean and CI of the metric for every observed (level of a, level of b)."""
    return cell_means(effects.data, effects.factors, (a, b), bounds(effects.metric))
