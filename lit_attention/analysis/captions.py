"""Every sentence of the report's captions. A summary or pivot table: what the numbers are
(metric, split, decoding, n, the interval and its method, exclusions, budgets), the test against
the baseline (how its p-values were obtained: test_method) and its columns, what the test left
out, what the rows also differ in, and how the gradient flow was measured; the table's columns
are tables.COLUMNS' rows, their headers named from there. The captions of --effects are in
effects.py.
"""

from __future__ import annotations

import pandas as pd

from lit_attention import registry
from lit_attention.analysis import load, significance
from lit_attention.analysis.aggregate import GRADFLOW_FIT_FROM, GRADFLOW_RESAMPLES
from lit_attention.metric_facts import SPLITS, metric_label, metric_name, metric_range, split_of
from lit_attention.analysis.tables import BETTER, EQUIVALENT, HEADER, WORSE, gradflow_cells, key_label, label

CI_METHOD = "95% CI: Student-t interval over seeds, mean ± t(0.975, n-1)·s/√n; s with ddof=1"
GRADFLOW_METHOD = ("‖∂L/∂h_t‖ decay/step: exp of the least-squares slope of the mean log ‖∂L/∂h_t‖ "
                   "(the total derivative of the loss w.r.t. the encoder state h_t; mean over seeds of "
                   f"each seed's mean over sentences) on the distance to the loss, from distance "
                   f"{GRADFLOW_FIT_FROM} (the first steps are a transient) to the largest every "
                   "sentence reaches, at each run's last measured step, on the same fixed sample of "
                   "validation sentences, per direction (forward: distance m-1-t to the end of the "
                   "source; backward: distance t; undirected: a Transformer's first encoder layer "
                   "input, distance m-1-t); [ ]: 95% percentile bootstrap resampling seeds, then "
                   f"sentences, {GRADFLOW_RESAMPLES:,} resamples (with 2-3 seeds it is too narrow: "
                   "a bootstrap sees only the seeds there are)")
P_COLUMN, DELTA_COLUMN, MDE_COLUMN, GRADFLOW_COLUMN = (HEADER[n] for n in ("p", "delta", "mde", "gradflow"))


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
    low, high = metric_range(metric)    # what the CIs are clipped to
    clipped = ("" if low is None and high is None else
               f", clipped to at least {label(low)}" if high is None else
               f", clipped to [{'-inf' if low is None else label(low)}, {label(high)}]")
    what = "; ".join(filter(None, [f"{split} split" if split else None, decoding]))
    parts = [f"{metric_label(metric)} ({metric}{': ' + what if what else ''}): mean ± standard deviation (ddof=1) over n = {n_text} seed{'s' * (n_text != '1')} per "
             f"configuration{'; ' + ci_method + clipped if has(HEADER['ci']) else ''}. Best value per "
             "column in bold."]
    failed, pruned, other, invalid, missing, under = (
        int(agg[c].sum()) if c in agg else 0
        for c in ("n_failed", "n_pruned", "n_other", "n_invalid", "n_missing", "n_under_budget"))
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


def test_method(n_samples: int = significance.N_SAMPLES, seed: int = significance.SEED,
                test: str = significance.DEFAULT_TEST, comparisons: int | None = None,
                values: str | None = None, metric: str = "bleu", split: str = "test",
                pooled: dict | None = None, blocks: dict | None = None, no_blocks: str | None = None) -> str:
    """How the p-values were obtained, for the table caption: test, resamples, correction."""
    tested = "" if comparisons is None else f" over {comparisons} comparison{'s' * (comparisons != 1)}"
    if test != significance.DEFAULT_TEST:
        return (f"{significance.TESTS[test]} of one run against the baseline's run, two-sided, {n_samples:,} "
                f"resamples, seed {seed}, Holm-corrected{tested}; it sees test-set variance only, "
                "not training randomness")
    name = metric_name(metric)
    family = ("" if comparisons is None else " of the comparisons tested (none here)" if not comparisons
              else f" of {comparisons} comparison{'s' * (comparisons != 1)} ({significance.hypotheses(test, comparisons)} hypotheses)")
    seeds = (f"one seed standard deviation pooled over the {pooled['arms']} arms tested "
             f"({pooled['sd']:.2f}, {pooled['df']} df; the arms' own {pooled['low']:.2f}–"
             f"{pooled['high']:.2f})" if pooled else "each arm's own seed variance, as in Welch's test")
    if values and blocks:
        text = SPLITS.get(blocks["split"], blocks["split"])
        variance = (f"from the seeds ({seeds}, from the runs' {values}) plus the {text} text (the "
                    f"covariance of distinct runs' {values} over {n_samples:,} bootstrap draws of "
                    f"its {blocks['tokens']:,} tokens cut into {blocks['blocks']} contiguous blocks "
                    f"of ≈{blocks['tokens'] / blocks['blocks']:,.0f}, seed {seed}, one draw for every "
                    f"run: paired; neighbouring tokens are not independent)")
    elif values:
        variance = f"from the seeds only: the spread of the {values} values, {seeds}"
        if no_blocks:
            variance += (f" (the evaluated text's own variance is left out: {no_blocks}; a "
                         f"difference may hold for this text only)")
    else:
        variance = (f"from the seeds ({seeds}, from the runs' corpus {name}) plus the "
                    f"{SPLITS.get(split, split)} sentences (the covariance of distinct runs' "
                    f"corpus {name} over {n_samples:,} bootstrap draws of the sentences, seed {seed}, "
                    f"one draw for every run: paired; recomputed from cached sentence statistics)")
    title = "test over seeds × token blocks" if blocks else "test over seeds" if values else significance.TESTS[test]
    return (f"{title}: the difference of the seed means "
            f"over its standard error, the variance {variance}, against Student's t with "
            f"Satterthwaite's degrees of freedom (calibrated: docs/REPORT.md); p is one-sided "
            f"in the direction of Δ, Holm-corrected over both directions{family}")


def test_method_of(result: pd.DataFrame) -> str:
    """test_method() of a significance.compare_to_baseline result."""
    return test_method(**{k: result.attrs[k] for k in ("n_samples", "seed", "test", "comparisons",
                                                         "values", "metric", "split", "pooled", "blocks",
                                                         "no_blocks")})
