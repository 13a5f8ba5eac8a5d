"""Tests of every configuration of a table against a baseline, with Holm's correction.

The default test treats seeds as the random factor (statistics.seed_test): the difference of seed
means, its variance from the seeds (the spread of the runs' corpus scores, per arm or pooled over
the arms of the table) plus the test sentences (the bootstrap covariance of distinct runs'
scores, paired), referred to Student's t with Satterthwaite's degrees of freedom; one-sided in
the direction of the observed difference, with its 95 % interval and the minimum difference it
detects with 80 % power; with an equivalence margin, two one-sided tests (TOST) as well. Both
directions of every comparison are hypotheses of one Holm family, so choosing the direction after
seeing the data costs what it should. A configuration (or baseline) with one seed is not tested:
its row says n=1.

For comparisons of single runs, sacreBLEU PairedTest's sentence-level tests stay available
(`bootstrap`: paired bootstrap `bs`, `permutation`: approximate randomization `ar`; two-sided, as
sacreBLEU's), Holm-corrected over the comparisons. They see test-set variance only.

All tests run on cached sentence statistics (tracking/sentence_stats.py) with one seeded draw of
resampled test sets shared by every comparison (statistics.draw). A language model's perplexity or
loss is tested the same way with contiguous blocks of its test tokens in place of sentences
(statistics.py's token blocks), when every run recorded its per-token losses; another metric, or runs without
them, is tested on the per-run values of the summaries: seeds are then the only resampled factor
(the caption says why).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from lit_attention import metric_facts
from lit_attention.analysis import statistics as st
from lit_attention.analysis.aggregate import clip
from lit_attention.analysis.load import AnalysisError
from lit_attention.metric_facts import SPLITS, metric_range
from lit_attention.tracking import sentence_stats as ss
from lit_attention.tracking.schema import Status, hyps_file, refs_file, token_nll_file

N_SAMPLES = 10_000          # the seed test's; sentence tests: at least, more for many comparisons
MAX_DEFAULT_SAMPLES = 50_000   # the draw alone is 4 bytes x resamples x sentences
SEED = 12345                # sacreBLEU's default seed
RESOLVE = 0.01              # Holm-adjusted p-values the default number of resamples can go below
DEFAULT_TEST = "seeds"
SENTENCE_TESTS = {"bootstrap": "paired bootstrap resampling (sacreBLEU PairedTest bs)",
                  "permutation": "paired approximate randomization (sacreBLEU PairedTest ar)"}
TESTS = {DEFAULT_TEST: "test over seeds × sentences", **SENTENCE_TESTS}
ONE_SEED = "n=1"            # the note of a comparison a seed-aware test cannot make
NO_DATA = "untested"        # ... of one without hypotheses (or values) to test
MIN_POOLED_DF = 3           # fewer: the Satterthwaite mix rejects too often (analysis/calibration_sim.py: 7.9 %
                            # of true nulls with 2 arms of 2 seeds pooled)


def default_samples(n_hypotheses: int) -> int:
    """Enough resamples that Holm over `n_hypotheses` can go below 0.01 (up to 499 hypotheses;
    MAX_DEFAULT_SAMPLES beyond): the smallest p a test can give is 1/(B+1), and Holm multiplies
    the smallest by the number of hypotheses."""
    return min(max(N_SAMPLES, resolving_samples(n_hypotheses)), MAX_DEFAULT_SAMPLES)


def resolving_samples(n_hypotheses: int) -> int:
    """The fewest resamples (a multiple of 1,000) with holm_floor below RESOLVE."""
    return (math.floor(n_hypotheses / RESOLVE) // 1000 + 1) * 1000


def holm_floor(n_hypotheses: int, n_samples: int) -> float:
    """The smallest Holm-adjusted p-value `n_samples` resamples can give."""
    return min(1.0, n_hypotheses / (n_samples + 1))


def hypotheses(test: str, n_comparisons: int) -> int:
    """Holm's family size: both directions of each comparison for the one-sided seed test."""
    return 2 * n_comparisons if test == DEFAULT_TEST else n_comparisons


# ---- p-values from resampled scores -----------------------------------------------------------

def pvalues(metric: str, draw: st.Draw, base: np.ndarray, systems: np.ndarray,
            base_scores: np.ndarray | None = None) -> np.ndarray:
    """sacreBLEU's p-values of R paired comparisons: base and systems are sentence statistics
    [R, N, K] (row r of `base` is the baseline that system r is compared with). A bootstrap may
    be given the baselines' resampled scores [B, R] (computed once for many systems).

    Two-sided, (count + 1) / (B + 1): the paired bootstrap counts the resampled |differences|,
    shifted to mean 0 (the null), that exceed the observed |difference| (system - baseline on the
    full test set); approximate randomization counts how often swapping sentences between the two
    systems gives a |difference| above the observed one."""
    observed = np.abs([ss.corpus_score(metric, s) - ss.corpus_score(metric, b)
                       for b, s in zip(base, systems)])
    if draw.kind == "bootstrap":
        if base_scores is None:
            base_scores = st.resampled_scores(metric, draw, base)
        diffs = np.abs(st.resampled_scores(metric, draw, systems) - base_scores)
        null = diffs - diffs.mean(axis=0)
    else:
        swapped_a, swapped_b = st.swapped_scores(metric, draw, base, systems)
        null = np.abs(swapped_a - swapped_b)
    return ((null > observed).sum(axis=0) + 1) / (len(null) + 1)


# ---- the table's comparisons ------------------------------------------------------------------

def matches(runs: pd.DataFrame, selector: dict[str, str]) -> pd.Series:
    """Rows whose columns equal every value of `selector` (compared as text, so 4 == '4')."""
    wanted = pd.Series(selector, dtype=object).map(str)
    return runs[list(selector)].map(_text).eq(wanted).all(axis=1)


def _text(value) -> str:
    return str(int(value) if isinstance(value, float) and value.is_integer() else value)


COLUMNS = ["n_tested", "n_untested", "n_baseline", "n_unmatched", "delta", "delta_lo", "delta_hi", "direction",
           "p", "p_holm", "significant", "se", "df", "mde", "p_equivalent", "p_equivalent_holm",
           "equivalent", "note"]


def compare_to_baseline(runs: pd.DataFrame, keys: list[str], baseline: dict[str, str],
                        split: str = "test", metric: str = "bleu", n_samples: int | None = None,
                        seed: int = SEED, test: str = DEFAULT_TEST, column: str | None = None,
                        higher_is_better: bool = True, pool_seeds: bool = False,
                        equivalence: float | None = None) -> pd.DataFrame:
    """One row per non-baseline configuration of the finished `runs` (grouped by `keys`).

    Columns: keys, then n_tested and n_baseline (runs of the configuration and of the baseline
    the test used: those with hypotheses and references on `split`, or with a finite `column`
    value), n_untested (the configuration's other finished runs), n_unmatched (tested seed
    numbers of the configuration or the baseline that the other lacks; counted, not dropped), delta (difference of the seed
    means of the corpus score, configuration - baseline), delta_lo/delta_hi (its 95% interval;
    seed test only), direction (better | worse | "", by `higher_is_better`), p (seed test:
    one-sided in that direction; sentence tests: two-sided), p_holm, significant (p_holm <
    ALPHA), se, df and mde (the test's standard error, Satterthwaite df and the difference it
    detects with 80 % power; seed test only), p_equivalent / p_equivalent_holm / equivalent (TOST
    of |delta| < `equivalence`, Holm over the comparisons) and note (n=1: one seed on either side,
    no seed-aware test; untested: nothing to test with). Seeds are never paired by number: every
    tested run of a configuration counts. `pool_seeds`: one seed variance pooled over the tested
    arms (it needs MIN_POOLED_DF degrees of freedom).

    `metric` (bleu | chrf) is resampled over the sentences of `split`; with `column` (a summary
    metric such as val_ppl) the test resamples the runs' values over seeds only. The sentence
    tests (`bootstrap`, `permutation`) compare one run with one run and refuse a configuration
    with more. `n_samples` defaults to N_SAMPLES for the seed test (its resamples estimate a
    variance; p comes from the t distribution) and to default_samples(number of Holm hypotheses)
    for the sentence tests. The frame's attrs hold what method() needs for the caption. `test` is
    one of TESTS and `equivalence` positive (report.parse_args refuses other values).
    """
    if test != DEFAULT_TEST and (pool_seeds or equivalence is not None):
        raise AnalysisError(f"pooling seeds and --equivalence belong to the test over seeds; --test "
                            f"{test} compares single runs")
    if column is not None and test != DEFAULT_TEST:
        raise AnalysisError(f"--test {test} resamples test sentences, and {column} has no sentence "
                            f"statistics: use --test {DEFAULT_TEST}")
    needed = dict.fromkeys([*keys, *baseline, "seed", "run_dir", *([column] if column else [])])
    runs = runs.loc[runs["status"] == Status.FINISHED, list(needed)]
    is_base = matches(runs, baseline)
    if not is_base.any():
        raise AnalysisError(f"no finished run matches the baseline {baseline}")
    if runs[is_base].groupby(keys, dropna=False).ngroups > 1:
        raise AnalysisError(f"the baseline {baseline} matches more than one configuration: "
                            "give more KEY=VALUE pairs")
    source = _Source(split, metric, runs, column, is_base)
    base = source.testable(runs[is_base])
    # (key values, tested run dirs, finished runs)
    configs = [(values, source.testable(group), len(group))
               for values, group in runs[~is_base].groupby(keys, dropna=False, sort=True)]
    if test == DEFAULT_TEST:
        testable = [c for c in configs if len(c[1]) >= 2] if len(base) >= 2 else []
    else:
        _single_runs(keys, base, configs, test)
        testable = [c for c in configs if c[1]] if base else []
    n_hypotheses = hypotheses(test, len(testable))
    n_samples = n_samples or (N_SAMPLES if test == DEFAULT_TEST else default_samples(n_hypotheses))
    source.prepare([*base, *(d for _, dirs, _ in configs for d in dirs)], n_samples, seed)
    if test == DEFAULT_TEST:
        low, high = metric_range(column or metric)     # a difference is at most their distance
        bounds = (low - high, high - low) if low is not None and high is not None else (None, None)
        rows, pooled = _seed_test(source, base, configs, bounds, pool_seeds, equivalence)
    else:
        rows = _run_test(source, base, configs, test, n_samples, seed)
    seed_of = dict(zip(runs["run_dir"], runs["seed"].map(_text)))
    base_seeds = {seed_of[d] for d in base}
    for (_, dirs, finished), row in zip(configs, rows):
        row.update(n_tested=len(dirs), n_untested=finished - len(dirs), n_baseline=len(base))
        row["n_unmatched"] = len({seed_of[d] for d in dirs} ^ base_seeds) if not row["note"] else 0
    result = pd.DataFrame([{**dict(zip(keys, values)), **row} for (values, _, _), row in zip(configs, rows)],
                          columns=[*keys, *COLUMNS])
    result["direction"] = ["" if not delta or math.isnan(delta) else
                           "better" if (delta > 0) == higher_is_better else "worse"
                           for delta in result["delta"]]
    result["significant"] = result["p_holm"] < st.ALPHA
    result["equivalent"] = result["p_equivalent_holm"] < st.ALPHA
    result.attrs.update(n_samples=n_samples, seed=seed, test=test, comparisons=len(testable),
                        values=column, metric=metric, split=split,
                        blocks=source.block_info, no_blocks=source.no_blocks,
                        baseline_untested=int(is_base.sum()) - len(base),
                        pooled=pooled if test == DEFAULT_TEST else None, equivalence=equivalence)
    if testable and test != DEFAULT_TEST and holm_floor(n_hypotheses, n_samples) >= RESOLVE:
        print(f"warning: with {n_hypotheses} Holm hypotheses and {n_samples} resamples no adjusted "
              f"p-value can be below {holm_floor(n_hypotheses, n_samples):.3g}; --samples "
              f"{resolving_samples(n_hypotheses)} resolves p < {RESOLVE}", file=sys.stderr)
    return result


def _single_runs(keys: list[str], base: list[str], configs: list, test: str) -> None:
    """A sentence-level test compares one run with one run: refuse configurations with more."""
    named = [(", ".join(f"{k}={v}" for k, v in zip(keys, values)), dirs)
             for values, dirs, _ in configs]
    for name, dirs in [("the baseline", base), *named]:
        if len(dirs) > 1:
            raise AnalysisError(f"--test {test} compares one run with one run (test-set "
                                f"variance only), but {name} has {len(dirs)} runs: use --test "
                                f"{DEFAULT_TEST}, which treats the seeds as the random factor they are")


def _seed_test(source: "_Source", base: list[str], configs: list, bounds: tuple, pool_seeds: bool,
               margin: float | None) -> tuple[list[dict], dict | None]:
    """The seeds x sentences test (statistics.seed_test) of every configuration against the baseline;
    Holm over both one-sided directions of every comparison made (and over the equivalence tests).
    Intervals are clipped to `bounds` (the largest differences the metric allows). Returns the rows
    and what was pooled (None: each arm its own seed variance)."""
    base_scores, base_observed = (source.scores(base) if len(base) >= 2
                                  else (None, source.observed(base)))
    # the configurations with two or more seeds (when the baseline has two) are resampled whole
    # configurations of up to CHUNK runs to a matrix product
    resampled, batch = {}, []
    todo = [i for i, (_, dirs, _) in enumerate(configs) if min(len(dirs), len(base)) >= 2]
    for k, i in enumerate(todo):
        batch.append(i)
        sizes = [len(configs[j][1]) for j in batch]
        if i == todo[-1] or sum(sizes) + len(configs[todo[k + 1]][1]) > CHUNK:
            scores, observed = source.scores([d for j in batch for d in configs[j][1]])
            for j, end, n in zip(batch, np.cumsum(sizes), sizes):
                resampled[j] = scores[:, end - n:end], observed[end - n:end]
            batch = []
    rows, tested = [], []      # tested: (row index, observed scores, sentence part of Var Δ)
    for i, (_, dirs, _) in enumerate(configs):
        row = dict(note=NO_DATA if not dirs or not base else "")
        rows.append(row)
        if row["note"]:
            continue
        if i in resampled:
            scores, observed = resampled[i]
            tested.append((i, observed, source.sentence_part(scores, base_scores)))
        else:
            observed, row["note"] = source.observed(dirs), ONE_SEED
        row["delta"] = float(observed.mean() - base_observed.mean())
    pooled = _pooled([base_observed] + [observed for _, observed, _ in tested]) if pool_seeds and tested else None
    family = []                # (row index, p up, p down)
    # the sentences (or token blocks) the sentence part was estimated from (none: values)
    n_sentences = math.inf if source.draw is None else source.draw.n_sentences
    for i, observed, part in tested:
        result = st.seed_test(observed, base_observed, part, n_sentences,
                            pooled=pooled and (pooled["variance"], pooled["df"]))
        low, high = result.interval()
        rows[i].update(delta_lo=clip(float(low), bounds), delta_hi=clip(float(high), bounds),
                       se=float(result.se), df=float(result.df), mde=float(result.detectable()))
        if margin is not None:
            rows[i]["p_equivalent"] = float(result.equivalence_p(margin))
        family.append((i, float(result.p_up()), float(result.p_down())))
    adjusted = st.holm([up for _, up, _ in family] + [down for _, _, down in family])
    for k, (i, up, down) in enumerate(family):
        delta = rows[i]["delta"]
        pick = (k,) if delta > 0 else (k + len(family),) if delta < 0 else (k, k + len(family))
        rows[i]["p"] = max((up, down)[j // len(family)] for j in pick)
        rows[i]["p_holm"] = max(adjusted[j] for j in pick)
    if margin is not None:
        for (i, *_), p in zip(family, st.holm([rows[i]["p_equivalent"] for i, *_ in family])):
            rows[i]["p_equivalent_holm"] = p
    return rows, pooled


def _pooled(groups: list[np.ndarray]) -> dict:
    """The seed variance pooled over the arms with two or more runs, for compare() and the caption."""
    variance, df = st.pooled_variance(groups)
    if df < MIN_POOLED_DF:
        raise AnalysisError(f"pooling the seed variance needs at least {MIN_POOLED_DF} degrees of "
                            f"freedom (runs minus arms); these arms give {df}: test without pooling")
    sds = [float(np.std(g, ddof=1)) for g in groups if len(g) >= 2]
    return dict(variance=variance, df=df, sd=math.sqrt(variance), arms=len(sds), low=min(sds),
                high=max(sds))


def _run_test(source: "_Source", base: list[str], configs: list, test: str, n_samples: int,
              seed: int) -> list[dict]:
    """sacreBLEU's sentence-level test of each configuration's one run against the baseline's
    run, on the same sentences (_Source.loaded) and one draw for the family; Holm over the
    comparisons."""
    metric, found, draw = source.metric, {}, None
    tested = [i for i, (_, dirs, _) in enumerate(configs) if dirs and base]
    for start in range(0, len(tested), CHUNK):     # bounds the statistics held at once
        chunk = tested[start:start + CHUNK]
        base_stats, *systems = source.loaded(base + [configs[i][1][0] for i in chunk])
        for i, system in zip(chunk, systems):
            found[i] = 1.0, (ss.corpus_score(metric, system.of(metric))
                             - ss.corpus_score(metric, base_stats.of(metric)))
        # sacreBLEU counts resampled statistics strictly greater than the observed difference, so
        # two identical systems (difference 0, every resample 0) would get p = 1/(n+1). No test
        # is needed to know they do not differ.
        differ = [(i, s) for i, s in zip(chunk, systems) if len(s) and (
            s.hyps_hash, s.refs_hash) != (base_stats.hyps_hash, base_stats.refs_hash)]
        if not differ:
            continue
        draw = draw or st.draw(test, len(base_stats), n_samples, seed)
        base_rows = np.repeat(base_stats.of(metric)[None], len(differ), axis=0)
        base_scores = (np.repeat(st.resampled_scores(metric, draw, base_rows[:1]), len(differ),
                                 axis=1) if test == "bootstrap" else None)   # resampled once
        systems = np.stack([s.of(metric) for _, s in differ])
        for (i, _), value in zip(differ, pvalues(metric, draw, base_rows, systems, base_scores)):
            found[i] = float(value), found[i][1]
    adjusted = dict(zip(found, st.holm([p for p, _ in found.values()])))
    return [dict(zip(("p", "delta"), found.get(i, (math.nan, math.nan))),
                 p_holm=adjusted.get(i, math.nan), note="" if i in found else NO_DATA)
            for i in range(len(configs))]


TOKENS_AGREE = 1e-4    # relative: a token file whose mean is not the summary's value is stale


def _token_level(column: str) -> tuple[str, str] | None:
    """(split, kind) of a summary column `<split>_ppl` / `<split>_loss`, else None."""
    split, kind = metric_facts.parse(column)
    return (split, kind) if split and kind in metric_facts.TOKEN_LEVEL else None


class _Source:
    """What a family of comparisons resamples: every tested run's corpus scores on one shared
    draw of the split's sentences (its sentence statistics loaded, or computed and cached, on
    demand), or (with a summary `column`) the runs' values."""

    def __init__(self, split: str, metric: str, runs: pd.DataFrame, column: str | None,
                 is_base: pd.Series):
        self.split, self.metric, self.column = split, metric, column
        self.extractor = ss.Extractor()
        self.values = pd.to_numeric(runs.set_index("run_dir")[column], errors="coerce") if column else None
        # a language model's loss or perplexity: resampled over contiguous blocks of its tokens
        # when every tested run recorded them (statistics.py); else over seeds only, and why
        self.lm = _token_level(column) if column else None
        self.blocks: dict[str, np.ndarray] = {}
        self.no_blocks: str | None = None
        self.block_info: dict | None = None   # for the caption: blocks, tokens, split
        ordered = [*runs.loc[is_base, "run_dir"], *runs.loc[~is_base, "run_dir"]]   # baseline first
        self.refs_run = next((d for d in ordered if self.refs(d).is_file()), None)
        self.draw: st.Draw | None = None
        self.refs_hash: str | None = None

    def testable(self, group: pd.DataFrame) -> list[str]:
        """The run dirs of `group` that can be tested: hypotheses and references, or a value."""
        if self.column:
            return [d for d in group["run_dir"] if math.isfinite(self.values.get(d, math.nan))]
        return [d for d in group["run_dir"] if self.hyps(d).is_file() and self.refs_run]

    def hyps(self, run_dir: str) -> Path:
        return Path(run_dir) / hyps_file(self.split)

    def refs(self, run_dir: str) -> Path:
        return Path(run_dir) / refs_file(self.split)

    def refs_from(self, run_dir: str) -> str:
        """The run whose reference file `run_dir` is scored against: its own, else the family's."""
        return run_dir if self.refs(run_dir).is_file() else self.refs_run

    def prepare(self, run_dirs: list[str], n_samples: int, seed: int) -> None:
        """Fill the statistics caches of every run on all CPUs; the sentence draw of the family."""
        self.n_samples, self.seed = n_samples, seed
        if not self.column:
            ss.fill_caches([(d, self.split, str(self.refs(self.refs_from(d))), (self.metric,))
                            for d in run_dirs])
        elif self.lm and run_dirs:
            self._load_blocks(run_dirs)

    def _load_blocks(self, run_dirs: list[str]) -> None:
        """Every run's block statistics and the family's draw of blocks, or `no_blocks` saying
        why the test falls back to the seeds alone."""
        split, kind = self.lm
        files = {d: Path(d) / token_nll_file(split) for d in run_dirs}   # [T] float32, stream order
        losses = {d: np.load(f, allow_pickle=False) if f.is_file() else None
                  for d, f in files.items()}
        missing = [d for d, nll in losses.items() if nll is None]
        lengths = {len(nll) for nll in losses.values() if nll is not None}
        stale = [d for d, nll in losses.items() if nll is not None and len(nll) and not math.isclose(
            float(st.block_score(kind, np.array([nll.sum(dtype=np.float64), len(nll)]))),
            self.values[d], rel_tol=TOKENS_AGREE)]
        if missing:
            self.no_blocks = (f"{len(missing)} of the {len(run_dirs)} runs recorded no per-token "
                              f"losses of the {SPLITS.get(split, split)} tokens")
        elif len(lengths) > 1:
            self.no_blocks = (f"the runs scored different numbers of {SPLITS.get(split, split)} "
                              f"tokens ({', '.join(map(str, sorted(lengths)))}): not one text")
        elif stale:
            self.no_blocks = f"{len(stale)} runs' per-token losses do not give their {self.column}"
        if self.no_blocks:
            return
        tokens = lengths.pop()
        n_blocks = st.block_count(tokens)
        self.block_info = dict(blocks=n_blocks, tokens=tokens, split=split)
        self.blocks = {d: st.cut_blocks(nll, n_blocks) for d, nll in losses.items()}
        self.draw = st.draw("bootstrap", n_blocks, self.n_samples, self.seed)

    def loaded(self, run_dirs: list[str]) -> list[ss.SentenceStats]:
        """The runs' statistics, all against one set of references (AnalysisError otherwise): the
        same sentences, the baseline's when it is loaded first (the statistics of a run hold one
        row per sentence of its references, sentence_stats.load_or_compute)."""
        found = []
        for run_dir in run_dirs:
            refs = self.refs(self.refs_from(run_dir))
            try:
                stats = ss.load_or_compute(run_dir, self.split, refs.read_bytes(), self.extractor,
                                           metrics=(self.metric,))
            except ValueError as exc:    # unequal lengths, undecodable text
                raise AnalysisError(f"{self.hyps(run_dir)} against {refs}: {exc}") from exc
            self.refs_hash = self.refs_hash or stats.refs_hash
            if stats.refs_hash != self.refs_hash:
                raise AnalysisError(f"{run_dir} was scored against other references ({self.split}) "
                                    f"than the baseline; a paired test needs the same sentences")
            found.append(stats)
        return found

    def observed(self, run_dirs: list[str]) -> np.ndarray:
        """[n] each run's score: its corpus score on the whole split, or its value."""
        if self.column:
            return self.values[run_dirs].to_numpy(float)
        return np.array([ss.corpus_score(self.metric, s.of(self.metric))
                         for s in self.loaded(run_dirs)])

    def sentence_part(self, scores: np.ndarray, base_scores: np.ndarray) -> float:
        """The sentence part of Var(Δ) of scores [B, n_A] against base_scores [B, n_B]: the
        resampled covariance of distinct runs (statistics.sentence_variance); 0 for values
        without token blocks."""
        if self.column and not self.blocks:
            return 0.0
        covariance = st.resampled_covariance(np.hstack([scores, base_scores]))
        part = float(st.sentence_variance(covariance, scores.shape[1]))
        return st.unbiased(part, self.draw.n_sentences) if self.blocks else part

    def scores(self, run_dirs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """([B, n] each run's score on each resample (a value: the same on every resample),
        [n] the observed scores)."""
        if self.column:
            observed = self.observed(run_dirs)
            if self.blocks:
                stats = np.stack([self.blocks[d] for d in run_dirs])
                return st.resampled_blocks(self.lm[1], self.draw.weights, stats), observed
            return np.broadcast_to(observed, (self.n_samples, len(run_dirs))), observed
        stats = np.stack([s.of(self.metric) for s in self.loaded(run_dirs)])
        if self.draw is None:     # every run has the same sentences (loaded)
            self.draw = st.draw("bootstrap", stats.shape[1], self.n_samples, self.seed)
        observed = np.array([ss.corpus_score(self.metric, s) for s in stats])
        return st.resampled_scores(self.metric, self.draw, stats), observed


CHUNK = 256    # runs (or pairs) whose statistics are loaded and tested together
