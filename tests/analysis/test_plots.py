"""The report's figures (lit_attention/analysis/plots.py) as a reader of the paper sees them: learning
curves against the step, one line per configuration, averaged over seeds without zigzags; bars
inside the metric's range; attention maps with their tokens; one style (FIXTURE run stores from
tests/analysis_stores.py; the figures are written as usual and inspected before they are closed)."""

from __future__ import annotations

import json

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest

from analysis_stores import demo_study, write_run
from lit_attention.analysis import aggregate, load, plots

KEYS = ["model.family", "model.attention", "model.scoring"]


@pytest.fixture
def figures(monkeypatch):
    """Every Figure `plots` saves (the real files are written too)."""
    seen = []
    save = plots.save

    def recording_save(fig, stem):
        seen.append(fig)
        return save(fig, stem)

    monkeypatch.setattr(plots, "save", recording_save)
    return seen


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_study(tmp_path_factory.mktemp("runs"))


def _curve_store(root, steps_by_seed: dict[int, tuple[list[int], list[float]]], attention="luong"):
    for seed, (steps, ppl) in steps_by_seed.items():
        run = write_run(root, "g", f"{attention}-s{seed}", seed=seed, val_bleu=20.0 + seed,
                        model=dict(family="rnn", attention=attention))
        lines = ["step,epoch,time,val_ppl"] + [f"{s},{i},{s * seed},{p}" for i, (s, p) in enumerate(zip(steps, ppl))]
        (run / "metrics.csv").write_text("\n".join(lines) + "\n")
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "steps": steps[-1], "train_tokens": 500 * steps[-1]}))


def test_learning_curves_average_seeds_logged_at_different_steps_without_zigzag(tmp_path, figures):
    # token-based batching: the seeds validate at different steps; each curve falls steadily
    _curve_store(tmp_path, {1: ([10, 20, 30], [40.0, 20.0, 10.0]), 2: ([11, 21, 31], [90.0, 80.0, 70.0])})
    _curve_store(tmp_path, {1: ([10, 20, 30], [50.0, 45.0, 40.0])}, attention="none")
    runs = load.load_runs(tmp_path / "g")
    paths = plots.plot_learning_curves(load.load_metrics(runs), runs, ["model.attention"],
                                       tmp_path / "curves", y="val_ppl")
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    [fig] = figures
    ax = fig.axes[0]
    assert ax.get_xlabel() == "training step" and ax.get_ylabel() == "Validation PPL"
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert sorted(lines) == ["luong", "none"]                       # one line per configuration
    x, y = lines["luong"].get_data()
    # the steps both seeds cover, each seed interpolated there: at step 20, seed 2 is 81
    assert list(x) == [11, 20, 21, 30] and y[1] == pytest.approx((20.0 + 81.0) / 2)
    assert np.all(np.diff(y) < 0)                                     # falls like each seed
    assert fig.legends[0].get_title().get_text() == "Attention"
    assert "mean over 1–2 seeds; band: min–max" == ax.get_title(loc="right")


def test_learning_curves_on_the_token_axis_scale_steps_by_tokens_per_step(tmp_path, figures):
    _curve_store(tmp_path, {1: ([10, 20, 30], [40.0, 20.0, 10.0])})
    runs = load.load_runs(tmp_path / "g")
    plots.plot_learning_curves(load.load_metrics(runs), runs, ["model.attention"], tmp_path / "c",
                               y="val_ppl", x="tokens")
    ax = figures[0].axes[0]
    assert list(ax.get_lines()[0].get_xdata()) == [5000, 10000, 15000]
    assert ax.get_xlabel().startswith("target tokens seen")
    # a run without train_tokens in its summary: no token axis at all, never a mislabelled one
    assert plots.plot_learning_curves(load.load_metrics(runs), runs.drop(columns="train_tokens"),
                                      ["model.attention"], tmp_path / "d", y="val_ppl", x="tokens") == []


def test_bars_and_their_whiskers_stay_inside_the_metric_range(tmp_path, figures):
    # two seeds far apart: the 95 % t-interval is mean ± 12.7·s/√2, about -78..193 BLEU
    agg = pd.DataFrame({"model.attention": ["none", "luong"], "mean": [57.5, 90.0], "std": [15.0, 9.0]})
    agg = agg.assign(ci_lo=agg["mean"] - 12.706 * agg["std"] / 2 ** 0.5,
                     ci_hi=agg["mean"] + 12.706 * agg["std"] / 2 ** 0.5)
    plots.plot_ablation_bars(agg, ["model.attention"], "val_bleu", tmp_path / "bars")
    ax = figures[0].axes[0]
    low, high = ax.get_ylim()
    assert low == 0.0 and high == 100.0
    whiskers = [seg for coll in ax.collections for seg in coll.get_segments()]
    assert whiskers and all(0.0 <= y <= 100.0 for seg in whiskers for _, y in seg)
    assert ax.get_ylabel() == "Validation BLEU" and ax.get_xlabel() == "Attention"
    assert ax.get_title(loc="right") == "bars: mean, whiskers: 95% CI"
    # an unbounded metric: from 0 to just above the highest interval
    plots.plot_ablation_bars(agg.assign(ci_hi=[60.0, 95.0]), ["model.attention"], "val_ppl", tmp_path / "p")
    low, high = figures[1].axes[0].get_ylim()
    assert low == 1.0 and 95.0 < high < 100.0


@pytest.mark.slow   # 1.6-2.1 CPU-s (the fast set's 2-minute target)
def test_attention_maps_show_one_sentence_per_configuration_with_its_tokens(demo, tmp_path, figures):
    runs = load.load_runs(demo)
    plots.plot_attention_grid(runs, KEYS, tmp_path / "attention")
    [fig] = figures
    panels = [ax for ax in fig.axes if ax.get_images() and ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["rnn / bahdanau / additive", "rnn / bahdanau / dot",
                                                 "transformer / – / scaled_dot"]
    shortest = json.loads((demo / "gru-dot-s1" / "attention" / "val-0.json").read_text())
    for ax in panels:
        assert [t.get_text() for t in ax.get_xticklabels()] == shortest["source"]
        assert [t.get_text() for t in ax.get_yticklabels()] == shortest["target"]
        assert min(t.get_fontsize() for t in ax.get_xticklabels()) >= 5
    assert fig.get_figwidth() == plots.TEXT_IN


@pytest.mark.slow   # every figure drawn, 2 CPU-s
def test_figures_share_the_paper_style(demo, tmp_path, figures):
    runs = aggregate.add_gradient_stats(load.load_runs(demo))
    agg = aggregate.aggregate(runs, KEYS, "val_bleu")
    plots.plot_learning_curves(load.load_metrics(runs), runs, KEYS, tmp_path / "c", y="val_bleu")
    plots.plot_ablation_bars(agg, KEYS, "val_bleu", tmp_path / "b")
    plots.plot_bleu_by_length(load.load_length_buckets(runs), runs, KEYS, tmp_path / "l")
    palette = [c.lower() for c in plots.OKABE_ITO]
    for fig in figures:
        ax = fig.axes[0]
        assert ax.yaxis.label.get_fontsize() == 8
        handles = [h[0] if isinstance(h, tuple) else h for h in ax.get_legend_handles_labels()[0]]
        colours = [mcolors.to_hex(h.get_color()) for h in handles]      # lines, error bars
        colours += [mcolors.to_hex(p.get_facecolor()) for p in ax.patches]   # bars
        assert colours and set(colours) <= set(palette)
    assert figures[0].get_figwidth() == figures[1].get_figwidth() == plots.COLUMN_IN


def test_seed_band_pairs_single_validations_that_share_no_range():
    band = plots.seed_band([pd.Series([30.0], index=[47]), pd.Series([34.0], index=[48])])
    assert list(band.index) == [47.5] and band.iloc[0].tolist() == [32.0, 30.0, 34.0]


def test_bars_show_every_seed_and_the_tables_marks(demo, tmp_path, figures):
    runs = load.load_runs(demo)
    agg = aggregate.aggregate(runs, KEYS, "val_bleu")
    marks = ["▲" if i == 1 else "" for i in range(len(agg))]
    plots.plot_ablation_bars(agg, KEYS, "val_bleu", tmp_path / "bars", runs, marks)
    ax = figures[0].axes[0]
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    # one dot per averaged run, at its value, over its own bar
    seen = sorted(y for line in dots for y in line.get_ydata())
    assert seen == sorted(runs.loc[aggregate.usable(runs, "val_bleu"), "val_bleu"])
    assert all(abs(x - round(float(np.mean(line.get_xdata())))) <= 0.15 + 1e-9 for line in dots for x in line.get_xdata())
    assert [t.get_text() for t in ax.texts] == ["▲"]
    assert ax.texts[0].xy[0] == 1 and ax.texts[0].xy[1] >= agg["ci_hi"].iloc[1]
    assert "dots: seeds" in ax.get_title(loc="right") and "▲/▼" in ax.get_title(loc="right")


def test_gradflow_legend_sits_below_the_axes_and_h_t_is_typeset(demo, tmp_path, figures):
    runs = load.load_runs(demo)
    assert plots.plot_gradflow(load.load_gradflow(runs), runs, KEYS, tmp_path / "g")
    fig = figures[0]
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1
    fig.canvas.draw()
    legend, axes = fig.legends[0].get_window_extent(), ax.get_window_extent()
    assert legend.y1 <= axes.y0            # below the plotting area: it covers no line
    assert ax.get_title() == r"$\Vert\partial L / \partial h_t\Vert$ by distance to the loss"
    assert "h_t" not in ax.get_ylabel().split("$")[0]   # subscripts only inside mathtext


def test_bleu_by_length_points_are_not_joined_and_the_bars_say_what_they_are(demo, tmp_path, figures):
    runs = load.load_runs(demo)
    assert plots.plot_bleu_by_length(load.load_length_buckets(runs), runs, KEYS, tmp_path / "len")
    ax = figures[0].axes[0]
    data_lines = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert data_lines and all(line.get_linestyle() == "None" for line in data_lines)
    assert ax.get_ylabel() == "BLEU (mean over 2 seeds; bars: ±1 std over seeds)"
    assert ax.get_legend() is None and len(figures[0].legends) == 1


def test_an_undrawn_figure_is_made_and_named_but_written_empty(tmp_path, figures):
    agg = pd.DataFrame({"model.attention": ["none", "luong"], "mean": [57.5, 90.0], "std": [15.0, 9.0],
                        "ci_lo": [40.0, 80.0], "ci_hi": [70.0, 99.0]})
    drawn = plots.plot_ablation_bars(agg, ["model.attention"], "val_bleu", tmp_path / "drawn" / "bars")
    with plots.undrawn():
        undrawn = plots.plot_ablation_bars(agg, ["model.attention"], "val_bleu", tmp_path / "undrawn" / "bars")
    assert [p.name for p in undrawn] == [p.name for p in drawn] == ["bars.png", "bars.pdf"]
    assert all(p.stat().st_size == 0 for p in undrawn) and all(p.stat().st_size > 0 for p in drawn)
    assert len(figures) == 2 and figures[1].axes[0].get_ylabel() == "Validation BLEU"   # made all the same
    assert plots.plot_ablation_bars(agg, ["model.attention"], "val_bleu", tmp_path / "after")[0].stat().st_size > 0


def test_a_sweep_draws_the_baseline_and_the_leading_configurations(tmp_path, figures, capsys):
    """At sweep scale a figure shows what a reader can tell apart; every row stays in table.csv."""
    from lit_attention.analysis import report
    for config in range(12):
        for seed in (1, 2):
            write_run(tmp_path, "g", f"c{config}-s{seed}", seed=seed, val_bleu=20.0 + config + seed / 10,
                      model=dict(family="rnn", attention="none" if config == 0 else f"a{config}"))
    assert report.main([str(tmp_path / "g"), "--out", str(tmp_path / "report"), "--baseline", "attention=none",
                        "--samples", "100"]) == 0
    assert f"figures: the baseline and the {plots.SHOWN} configurations of largest |Δ|; 8 more in " \
           "table.csv" in capsys.readouterr().err
    bars = next(fig for fig in figures if "whiskers" in fig.axes[0].get_title(loc="right")).axes[0]
    assert [t.get_text() for t in bars.get_xticklabels()] == ["none", "a11", "a10", "a9"]
    curves = next(fig for fig in figures if fig.axes[0].get_xlabel() == "training step")
    assert len(curves.axes[0].get_lines()) == 1 + plots.SHOWN
    assert len(pd.read_csv(tmp_path / "report" / "table.csv")) == 12
