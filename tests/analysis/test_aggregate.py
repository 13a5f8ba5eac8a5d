"""Per-configuration statistics over seeds: the 95% t-interval never leaves the metric's range."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lit_attention.analysis import aggregate, tables


def test_t_intervals_stay_inside_the_metric_range():
    # two seeds far apart: mean ± 12.7·s/√2 is [-135, 250] unclipped (the old demo bar chart axis)
    wide = aggregate.seed_stats([5.0, 95.0], aggregate.metric_range("val_bleu"))
    assert (wide["ci_lo"], wide["ci_hi"]) == (0.0, 100.0) and wide["mean"] == 50.0
    rng = np.random.default_rng(0)
    for _ in range(200):
        values = rng.uniform(0, 100, size=rng.integers(2, 6))
        stats = aggregate.seed_stats(values, aggregate.metric_range("test_chrf"))
        assert 0.0 <= stats["ci_lo"] <= stats["mean"] <= stats["ci_hi"] <= 100.0
    ppl = aggregate.seed_stats([1.1, 9.0], aggregate.metric_range("val_ppl"))
    assert ppl["ci_lo"] == 1.0 and ppl["ci_hi"] > 9.0           # PPL >= 1, no upper bound
    assert aggregate.seed_stats([3.0, 4.0]) == aggregate.seed_stats([3.0, 4.0], (None, None))


def test_the_table_and_its_caption_show_the_clipped_interval():
    runs = pd.DataFrame({"k": ["a", "a"], "status": ["finished"] * 2, "val_bleu": [70.0, 99.0],
                         "run_id": ["r1", "r2"]})
    agg = aggregate.aggregate(runs, ["k"], "val_bleu")
    assert agg.loc[0, "ci_hi"] == 100.0 and agg.loc[0, "ci_lo"] == 0.0
    cells, _ = tables.summary_table(agg, ["k"], "val_bleu")
    assert cells.iloc[0]["95% CI"] == "[0.0, 100.0]"
    caption = tables.caption_text("val_bleu", agg, aggregate.CI_METHOD, None)
    assert "Student-t interval over seeds" in caption and "clipped to [0, 100]" in caption
    assert "clipped to at least 1" in tables.caption_text("val_ppl", agg, aggregate.CI_METHOD, None)
    assert not math.isnan(agg.loc[0, "std"])
