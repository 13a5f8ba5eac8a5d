"""Paired tests against a baseline (sacreBLEU PairedTest's statistics) with Holm correction.

Each system is compared with the baseline seed by seed on the same test hypotheses (runs paired
by seed). A configuration's p-value is the largest over its seeds (an intersection-union test:
"better or worse than the baseline in every seed"), then Holm's step-down correction is applied
across all configurations compared.

The tests run on cached sentence statistics (sentence_stats.py) with one seeded draw of
resampled test sets shared by every comparison (resampling.py), so p-values are those of
sacreBLEU's PairedTest (bootstrap: `bs`, permutation: approximate randomization `ar`) at a
fraction of the cost.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from lit_attention.analysis import resampling
from lit_attention.analysis import sentence_stats as ss
from lit_attention.analysis.load import AnalysisError

N_SAMPLES = 10_000          # at least; more when many comparisons (default_samples)
MAX_DEFAULT_SAMPLES = 50_000   # the draw alone is 4 bytes x resamples x sentences
SEED = 12345                # sacreBLEU's default seed
ALPHA = 0.05
RESOLVE = 0.01              # Holm-adjusted p-values the default number of resamples can go below
TESTS = {"bootstrap": "paired bootstrap resampling (sacreBLEU PairedTest bs)",
         "permutation": "paired approximate randomization (sacreBLEU PairedTest ar)"}


def default_samples(n_comparisons: int) -> int:
    """Enough resamples that Holm over `n_comparisons` can go below 0.01 (up to 499 comparisons;
    MAX_DEFAULT_SAMPLES beyond): the smallest p a test can give is 1/(B+1), and Holm multiplies
    the smallest by the number of comparisons."""
    return min(max(N_SAMPLES, resolving_samples(n_comparisons)), MAX_DEFAULT_SAMPLES)


def resolving_samples(n_comparisons: int) -> int:
    """The fewest resamples (a multiple of 1,000) with holm_floor below RESOLVE."""
    return (math.floor(n_comparisons / RESOLVE) // 1000 + 1) * 1000


def holm_floor(n_comparisons: int, n_samples: int) -> float:
    """The smallest Holm-adjusted p-value `n_samples` resamples can give."""
    return min(1.0, n_comparisons / (n_samples + 1))


def method(n_samples: int = N_SAMPLES, seed: int = SEED, test: str = "bootstrap") -> str:
    """How the p-values were obtained, for the table caption."""
    return (f"{TESTS[test]}, {n_samples} resamples, seed {seed}, per seed vs the baseline, "
            "largest p over seeds, Holm-corrected across comparisons")


# ---- p-values from resampled scores -----------------------------------------------------------

def bootstrap_pvalues(base: np.ndarray, system: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """sacreBLEU's paired bootstrap p-value for each of R comparisons.

    base, system: [B, R] scores on the same resampled test sets; observed: [R] system - baseline
    on the full test set. Two-sided: the resampled |differences|, shifted to mean 0 (the null),
    that exceed the observed |difference|, (count + 1) / (B + 1)."""
    diffs = np.abs(system - base)
    null = diffs - diffs.mean(axis=0)
    return ((null > np.abs(observed)).sum(axis=0) + 1) / (len(diffs) + 1)


def permutation_pvalues(swapped_a: np.ndarray, swapped_b: np.ndarray,
                        observed: np.ndarray) -> np.ndarray:
    """sacreBLEU's approximate randomization p-value for each of R comparisons: how often
    swapping sentences between the two systems gives a |difference| above the observed one."""
    return ((np.abs(swapped_a - swapped_b) > np.abs(observed)).sum(axis=0) + 1) / (len(swapped_a) + 1)


def observed_differences(metric: str, base: np.ndarray, systems: np.ndarray) -> np.ndarray:
    """Exact corpus score differences system - baseline of R pairs of statistics [R, N, K]."""
    return np.array([ss.corpus_score(metric, s) - ss.corpus_score(metric, b)
                     for b, s in zip(base, systems)])


def pvalues(metric: str, draw: resampling.Draw, base: np.ndarray, systems: np.ndarray,
            base_scores: np.ndarray | None = None) -> np.ndarray:
    """p-values of R paired comparisons: base and systems are sentence statistics [R, N, K]
    (row r of `base` is the baseline that system r is compared with). A bootstrap may be given
    the baselines' resampled scores [B, R] (computed once for many systems)."""
    observed = observed_differences(metric, base, systems)
    if draw.kind == "bootstrap":
        if base_scores is None:
            base_scores = resampling.resampled_scores(metric, draw, base)
        return bootstrap_pvalues(base_scores, resampling.resampled_scores(metric, draw, systems),
                                 observed)
    return permutation_pvalues(*resampling.swapped_scores(metric, draw, base, systems), observed)


def paired_bootstrap(baseline: list[str], system: list[str], refs: list[str], metric: str = "bleu",
                     n_samples: int = N_SAMPLES, seed: int = SEED, test: str = "bootstrap") -> dict:
    """Baseline score, system score and the p-value of their difference, from hypotheses."""
    if not (len(baseline) == len(system) == len(refs)):
        raise AnalysisError(f"paired test needs equal lengths: baseline {len(baseline)}, "
                            f"system {len(system)}, references {len(refs)}")
    extractor = ss.Extractor()
    base_stats = extractor.corpus(baseline, refs, [metric])[metric]
    sys_stats = extractor.corpus(system, refs, [metric])[metric]
    base_score, sys_score = ss.corpus_score(metric, base_stats), ss.corpus_score(metric, sys_stats)
    if list(system) == list(baseline):
        return dict(baseline=base_score, system=sys_score, p=1.0)   # see _identical
    draw = resampling.draw(test, len(refs), n_samples, seed)
    p = pvalues(metric, draw, base_stats[None], sys_stats[None])[0]
    return dict(baseline=base_score, system=sys_score, p=float(p))


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


# ---- the table's comparisons ------------------------------------------------------------------

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


class RunStats:
    """Sentence statistics of the runs of one split, loaded (or computed and cached) on demand."""

    def __init__(self, split: str, metric: str):
        self.split, self.metric = split, metric
        self.extractor = ss.Extractor()

    def hyps(self, run_dir: str) -> Path:
        return Path(run_dir) / "hyps" / f"{self.split}.txt"

    def refs(self, run_dir: str) -> Path:
        return Path(run_dir) / "hyps" / f"{self.split}.ref.txt"

    def refs_from(self, run_dir: str, other: str) -> str:
        """The run whose reference file `run_dir` is scored against: its own, else `other`'s."""
        return run_dir if self.refs(run_dir).is_file() else other

    def get(self, run_dir: str, refs_from: str) -> ss.SentenceStats:
        """A run's statistics against the references stored in run `refs_from`."""
        try:
            return ss.load_or_compute(run_dir, self.split, self.refs(refs_from).read_bytes(),
                                      self.extractor, metrics=(self.metric,))
        except ValueError as exc:    # unequal lengths, undecodable text
            raise AnalysisError(f"{self.hyps(run_dir)} against {self.refs(refs_from)}: {exc}") from exc


def compare_to_baseline(runs: pd.DataFrame, keys: list[str], baseline: dict[str, str],
                        split: str = "test", metric: str = "bleu", n_samples: int | None = None,
                        seed: int = SEED, test: str = "bootstrap") -> pd.DataFrame:
    """One row per non-baseline configuration of the finished `runs` (grouped by `keys`).

    Columns: keys, seeds_compared, p_max (largest per-seed p), p_holm, significant (p_holm < ALPHA),
    delta (mean system - baseline score over paired seeds), per_seed ("seed:p" list).
    Configurations without stored hypotheses/references or without a seed shared with the
    baseline get NaN p-values and are left out of the correction. `n_samples` defaults to
    default_samples(number of configurations compared). The frame's attrs hold n_samples, seed
    and test, for method().
    """
    if test not in TESTS:
        raise AnalysisError(f"unknown test {test!r}; one of {', '.join(TESTS)}")
    needed = dict.fromkeys([*keys, *baseline, "seed", "run_dir"])   # itertuples on wide frames is slow
    runs = runs.loc[runs["status"] == "finished", list(needed)]
    is_base = matches(runs, baseline)
    if not is_base.any():
        raise AnalysisError(f"no finished run matches the baseline {baseline}")
    if runs[is_base].groupby(keys, dropna=False).ngroups > 1:
        raise AnalysisError(f"the baseline {baseline} matches more than one configuration: "
                            "give more KEY=VALUE pairs")
    base_by_seed = {r.seed: r.run_dir for r in runs[is_base].itertuples()}
    store = RunStats(split, metric)
    configs, pairs = [], []   # (config index, seed, run_dir, baseline run_dir, references' run)
    for values, group in runs[~is_base].groupby(keys, dropna=False, sort=True):
        configs.append(values if isinstance(values, tuple) else (values,))
        for run in group.itertuples():
            base_dir = base_by_seed.get(run.seed)
            # runs without stored hypotheses or references (e.g. read from W&B) are not tested
            if (base_dir is not None and store.hyps(run.run_dir).is_file()
                    and store.hyps(base_dir).is_file()
                    and (store.refs(run.run_dir).is_file() or store.refs(base_dir).is_file())):
                pairs.append((len(configs) - 1, run.seed, run.run_dir, base_dir,
                              store.refs_from(run.run_dir, base_dir)))
    _fill_caches(store, pairs)
    n_samples = n_samples or default_samples(len({c for c, *_ in pairs}))
    tester = _Tester(store, metric, test, n_samples, seed)
    per_config = defaultdict(list)
    for start in range(0, len(pairs), CHUNK):     # bounds the statistics held at once
        chunk = pairs[start:start + CHUNK]
        for (config, seed_, *_), (p, delta) in zip(chunk, tester(chunk)):
            per_config[config].append((seed_, p, delta))
    rows = []
    for i, values in enumerate(configs):
        found = per_config[i]
        row = dict(zip(keys, values))
        row["seeds_compared"] = len(found)
        row["p_max"] = max((p for _, p, _ in found), default=math.nan)
        row["delta"] = sum(d for *_, d in found) / len(found) if found else math.nan
        row["per_seed"] = ";".join(f"{s}:{p:.4f}" for s, p, _ in found)
        rows.append(row)
    result = pd.DataFrame(rows, columns=[*keys, "seeds_compared", "p_max", "delta", "per_seed"])
    result["p_holm"] = holm(result["p_max"].tolist()) if len(result) else []
    result["significant"] = result["p_holm"] < ALPHA
    result.attrs.update(n_samples=n_samples, seed=seed, test=test)
    compared = int(result["p_max"].notna().sum())
    if holm_floor(compared, n_samples) >= RESOLVE:
        print(f"warning: with {compared} comparisons and {n_samples} resamples no Holm-adjusted "
              f"p-value can be below {holm_floor(compared, n_samples):.3g}; --samples "
              f"{resolving_samples(compared)} resolves p < {RESOLVE}", file=sys.stderr)
    return result


CHUNK = 256    # pairs whose statistics are loaded and tested together


def _fill_caches(store: RunStats, pairs: list) -> None:
    """Compute missing statistics of every run of the family on all CPUs before testing."""
    jobs, metrics = {}, (store.metric,)
    for _, _, run_dir, base_dir, refs_from in pairs:
        jobs[run_dir] = (run_dir, store.split, str(store.refs(refs_from)), metrics)
        base_refs = store.refs(store.refs_from(base_dir, refs_from))
        jobs.setdefault(base_dir, (base_dir, store.split, str(base_refs), metrics))
    ss.fill_caches(list(jobs.values()))


class _Tester:
    """Tests chunks of (system, baseline) pairs; one draw per test-set length for the whole
    family, and each baseline's resampled scores computed once."""

    def __init__(self, store: RunStats, metric: str, test: str, n_samples: int, seed: int):
        self.store, self.metric, self.test, self.n_samples, self.seed = store, metric, test, n_samples, seed
        self.draws: dict[int, resampling.Draw] = {}
        self.baselines: dict[tuple[str, str], tuple[ss.SentenceStats, np.ndarray | None]] = {}

    def _draw(self, n_sentences: int) -> resampling.Draw:
        if n_sentences not in self.draws:
            self.draws[n_sentences] = resampling.draw(self.test, n_sentences, self.n_samples, self.seed)
        return self.draws[n_sentences]

    def _baseline(self, base_dir: str, refs_from: str) -> tuple[ss.SentenceStats, np.ndarray | None]:
        """The baseline's statistics and (bootstrap) its resampled scores [B]."""
        key = (base_dir, self.store.refs_from(base_dir, refs_from))
        if key not in self.baselines:
            stats = self.store.get(base_dir, key[1])
            scores = None
            if self.test == "bootstrap" and len(stats):
                scores = resampling.resampled_scores(self.metric, self._draw(len(stats)),
                                                     stats.of(self.metric)[None])[:, 0]
            self.baselines[key] = (stats, scores)
        return self.baselines[key]

    def __call__(self, pairs: list) -> list[tuple[float, float]]:
        """(p, system - baseline score) of every pair."""
        metric, loaded = self.metric, []
        for _, _, run_dir, base_dir, refs_from in pairs:
            base, base_scores = self._baseline(base_dir, refs_from)
            system = self.store.get(run_dir, refs_from)
            if base.refs_hash != system.refs_hash:
                raise AnalysisError(f"{run_dir} and its baseline {base_dir} were scored against "
                                    f"different references ({self.store.split}); a paired test "
                                    "needs the same sentences")
            if len(base) != len(system):
                raise AnalysisError(f"paired test needs equal lengths: baseline {len(base)}, "
                                    f"system {len(system)} ({run_dir})")
            loaded.append((base, base_scores, system))
        p = [1.0] * len(loaded)
        by_length = defaultdict(list)
        for i, (base, _, system) in enumerate(loaded):
            if len(system) and not _identical(base, system):
                by_length[len(system)].append(i)
        for n_sentences, members in by_length.items():
            base = np.stack([loaded[i][0].of(metric) for i in members])
            systems = np.stack([loaded[i][2].of(metric) for i in members])
            base_scores = (np.stack([loaded[i][1] for i in members], axis=1)
                           if self.test == "bootstrap" else None)
            for i, value in zip(members, pvalues(metric, self._draw(n_sentences), base, systems,
                                                 base_scores)):
                p[i] = float(value)
        return [(p_value, ss.corpus_score(metric, system.of(metric))
                 - ss.corpus_score(metric, base.of(metric)))
                for p_value, (base, _, system) in zip(p, loaded)]


def _identical(base: ss.SentenceStats, system: ss.SentenceStats) -> bool:
    # sacreBLEU counts resampled statistics strictly greater than the observed difference, so
    # two identical systems (difference 0, every resample 0) would get p = 1/(n+1). No test
    # is needed to know they do not differ.
    return base.hyps_hash == system.hyps_hash and base.refs_hash == system.refs_hash
