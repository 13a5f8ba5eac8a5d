"""Per-configuration statistics over seeds: the 95% t-interval never leaves the metric's range."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lit_attention import metric_facts
from lit_attention.analysis import aggregate, captions, tables


def test_t_intervals_stay_inside_the_metric_range():
    # two seeds far apart: mean ± 12.7·s/√2 is [-135, 250] unclipped (the old demo bar chart axis)
    wide = aggregate.seed_stats([5.0, 95.0], metric_facts.metric_range("val_bleu"))
    assert (wide["ci_lo"], wide["ci_hi"]) == (0.0, 100.0) and wide["mean"] == 50.0
    rng = np.random.default_rng(0)
    for _ in range(200):
        values = rng.uniform(0, 100, size=rng.integers(2, 6))
        stats = aggregate.seed_stats(values, metric_facts.metric_range("test_chrf"))
        assert 0.0 <= stats["ci_lo"] <= stats["mean"] <= stats["ci_hi"] <= 100.0
    ppl = aggregate.seed_stats([1.1, 9.0], metric_facts.metric_range("val_ppl"))
    assert ppl["ci_lo"] == 1.0 and ppl["ci_hi"] > 9.0           # PPL >= 1, no upper bound
    assert aggregate.seed_stats([3.0, 4.0]) == aggregate.seed_stats([3.0, 4.0], (None, None))


def test_the_table_and_its_caption_show_the_clipped_interval():
    runs = pd.DataFrame({"k": ["a", "a"], "status": ["finished"] * 2, "val_bleu": [70.0, 99.0],
                         "run_id": ["r1", "r2"]})
    agg = aggregate.aggregate(runs, ["k"], "val_bleu")
    assert agg.loc[0, "ci_hi"] == 100.0 and agg.loc[0, "ci_lo"] == 0.0
    cells, _ = tables.summary_table(agg, ["k"], "val_bleu")
    assert cells.iloc[0]["95% CI"] == "[0.0, 100.0]"
    caption = captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)
    assert "Student-t interval over seeds" in caption and "clipped to [0, 100]" in caption
    assert "clipped to at least 1" in captions.caption_text("val_ppl", agg, captions.CI_METHOD, None)
    assert not math.isnan(agg.loc[0, "std"])


def _gradflow_rows(runs: dict[str, np.ndarray], sentences: int = 32, distances: int = 17, noise=0.02):
    """gradflow rows of runs whose log-norm profile is `runs[run]` [distances] plus a sentence's
    own level and a little noise; every run measures the same sentences."""
    rng = np.random.default_rng(1)
    level = rng.normal(0, 1, sentences)
    return pd.DataFrame([dict(run_dir=run, direction="forward", sentence=s, distance=d,
                              norm=float(np.exp(level[s] + profile[d] + rng.normal(0, noise))))
                         for run, profile in runs.items() for s in range(sentences) for d in range(distances)])


def test_the_gradient_decay_is_fitted_after_the_first_steps_transient():
    """A rise over distances 0-3 and flat beyond (the demo's Transformer-like profile): one
    exponential over all distances called it growth (1.04/step); from distance 4 it is flat."""
    profile = 0.4 * np.minimum(np.arange(17), 3)
    fit = aggregate.gradflow_decay(_gradflow_rows({"a": profile, "b": profile}), resamples=200).iloc[0]
    assert abs(fit["decay"] - 1) < 0.002
    assert fit["min_distance"] == aggregate.GRADFLOW_FIT_FROM and fit["max_distance"] == 16
    assert fit["ci_lo"] < 1 < fit["ci_hi"]
    assert "from distance 4" in captions.GRADFLOW_METHOD


def test_the_gradient_decay_interval_resamples_seeds_then_sentences():
    """Three seeds decaying by 0.765, 0.780 and 0.828 per step on the same 32 sentences (the
    reverse task's Elman): pooling (run, sentence) pairs gave an interval around their
    mean that held none of them; resampling the seeds first spans them."""
    decays = {"s0": 0.765, "s1": 0.780, "s2": 0.828}
    rows = _gradflow_rows({run: np.arange(17) * np.log(d) for run, d in decays.items()})
    fit = aggregate.gradflow_decay(rows).iloc[0]
    assert fit["decay"] == pytest.approx(np.exp(np.mean(np.log(list(decays.values())))), rel=2e-3)
    assert fit["ci_lo"] < 0.77 and fit["ci_hi"] > 0.82
    assert fit["sentences"] == 96
    one = aggregate.gradflow_decay(rows[rows["run_dir"] == "s2"]).iloc[0]     # one seed: sentences only
    assert one["decay"] == pytest.approx(0.828, rel=2e-3) and one["ci_hi"] - one["ci_lo"] < 0.005
