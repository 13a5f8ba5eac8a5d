"""Paired bootstrap resampling against a baseline (sacreBLEU's PairedTest) with Holm correction.

Each system is compared with the baseline seed by seed on the same test hypotheses (runs paired
by seed). A configuration's p-value is the largest over its seeds (an intersection-union test:
"better or worse than the baseline in every seed"), then Holm's step-down correction is applied
across all configurations compared.
"""

from __future__ import annotations

import math

import pandas as pd
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from lit_attention.analysis.load import AnalysisError, read_hyps

N_SAMPLES = 1000
ALPHA = 0.05


def method(n_samples: int = N_SAMPLES) -> str:
    """How the p-values were obtained, for the table caption."""
    return (f"paired bootstrap resampling (sacreBLEU PairedTest, {n_samples} resamples) per seed "
            "vs the baseline, largest p over seeds, Holm-corrected across comparisons")


def paired_bootstrap(baseline: list[str], system: list[str], refs: list[str], metric: str = "bleu",
                     n_samples: int = N_SAMPLES) -> dict:
    """Baseline score, system score and the p-value of their difference (sacreBLEU's test)."""
    if not (len(baseline) == len(system) == len(refs)):
        raise AnalysisError(f"paired test needs equal lengths: baseline {len(baseline)}, "
                         f"system {len(system)}, references {len(refs)}")
    scorer = {"bleu": BLEU, "chrf": CHRF}[metric]()
    if list(system) == list(baseline):
        # sacreBLEU counts resampled statistics strictly greater than the observed difference, so
        # two identical systems (difference 0, every resample 0) would get p = 1/(n+1). No test
        # is needed to know they do not differ.
        score = scorer.corpus_score(system, [refs]).score
        return dict(baseline=score, system=score, p=1.0)
    test = PairedTest([("baseline", baseline), ("system", system)], {metric: scorer},
                      references=[refs], test_type="bs", n_samples=n_samples)
    _, scores = test()
    name = next(k for k in scores if k != "System")
    base, sys_ = scores[name]
    return dict(baseline=base.score, system=sys_.score, p=sys_.p_value)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order (NaN entries are left out)."""
    present = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m = len(present)
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def matches(runs: pd.DataFrame, selector: dict[str, str]) -> pd.Series:
    """Rows whose columns equal every value of `selector` (compared as text, so 4 == '4')."""
    mask = pd.Series(True, index=runs.index)
    for col, value in selector.items():
        mask &= runs[col].map(_text) == str(value)
    return mask


def _text(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def compare_to_baseline(runs: pd.DataFrame, keys: list[str], baseline: dict[str, str],
                        split: str = "test", metric: str = "bleu",
                        n_samples: int = N_SAMPLES) -> pd.DataFrame:
    """One row per non-baseline configuration of the finished `runs` (grouped by `keys`).

    Columns: keys, seeds_compared, p_max (largest per-seed p), p_holm, significant (p_holm < ALPHA),
    delta (mean system - baseline score over paired seeds), per_seed ("seed:p" list).
    Configurations without stored hypotheses/references or without a seed shared with the
    baseline get NaN p-values and are left out of the correction.
    """
    runs = runs[runs["status"] == "finished"]
    is_base = matches(runs, baseline)
    if not is_base.any():
        raise AnalysisError(f"no finished run matches the baseline {baseline}")
    if runs[is_base].groupby(keys, dropna=False).ngroups > 1:
        raise AnalysisError(f"the baseline {baseline} matches more than one configuration: "
                         "give more KEY=VALUE pairs")
    base_by_seed = {r.seed: r.run_dir for r in runs[is_base].itertuples()}
    rows = []
    for values, group in runs[~is_base].groupby(keys, dropna=False, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        per_seed, deltas = [], []
        for run in group.itertuples():
            if run.seed not in base_by_seed:
                continue
            try:
                hyps, refs = read_hyps(run.run_dir, split)
                base_hyps, base_refs = read_hyps(base_by_seed[run.seed], split)
            except FileNotFoundError:  # no stored hypotheses (e.g. runs read from W&B)
                continue
            refs = refs or base_refs
            if refs is None:
                continue
            result = paired_bootstrap(base_hyps, hyps, refs, metric, n_samples)
            per_seed.append((run.seed, result["p"]))
            deltas.append(result["system"] - result["baseline"])
        row = dict(zip(keys, values))
        row["seeds_compared"] = len(per_seed)
        row["p_max"] = max((p for _, p in per_seed), default=math.nan)
        row["delta"] = sum(deltas) / len(deltas) if deltas else math.nan
        row["per_seed"] = ";".join(f"{s}:{p:.4f}" for s, p in per_seed)
        rows.append(row)
    result = pd.DataFrame(rows, columns=[*keys, "seeds_compared", "p_max", "delta", "per_seed"])
    result["p_holm"] = holm(result["p_max"].tolist()) if len(result) else []
    result["significant"] = result["p_holm"] < ALPHA
    return result
