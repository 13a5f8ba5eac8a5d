"""BLEU by source length in the report: loaded with unit and sentence counts, plotted with both
(FIXTURE run stores from tests/analysis_stores.py)."""

from __future__ import annotations

import pytest

from analysis_stores import write_run
from lit_attention.analysis import load, plots

MODEL = dict(family="rnn", cell="lstm", attention="luong", scoring="dot", d_model=32)


def buckets(bleu: float, unit: str | None = "words", n=(528, 472)) -> list[dict]:
    rows = [dict(bucket="1-10", lo=1, hi=10, n=n[0], bleu=bleu + 5, chrf=50.0),
            dict(bucket="11+", lo=11, hi=None, n=n[1], bleu=bleu - 5, chrf=40.0)]
    return [{**r, "unit": unit} if unit else r for r in rows]


@pytest.fixture
def figure_text(monkeypatch):
    """The x labels and tick labels of every figure `plots` saves (the real files are written too)."""
    seen = []
    save = plots.save

    def recording_save(fig, stem):
        ax = fig.axes[0]
        seen.append((ax.get_xlabel(), [t.get_text() for t in ax.get_xticklabels()]))
        return save(fig, stem)

    monkeypatch.setattr(plots, "save", recording_save)
    return seen


def test_axis_says_words_and_ticks_give_sentences_per_bucket(tmp_path, figure_text):
    for seed in (1, 2):
        write_run(tmp_path, "g", f"s{seed}", seed=seed, model=MODEL, val_bleu=30.0 + seed,
                  buckets=buckets(30.0 + seed))
    runs = load.load_runs(tmp_path / "g")
    frame = load.load_length_buckets(runs)
    assert set(frame["unit"]) == {"words"} and sorted(set(frame["n"])) == [472, 528]
    paths = plots.plot_bleu_by_length(frame, runs, ["model.attention"], tmp_path / "len")
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    [(xlabel, ticks)] = figure_text
    assert xlabel.startswith("source length (words)")
    assert ticks == ["1-10\nn=528", "11+\nn=472"]


def test_old_stores_without_a_unit_are_not_drawn_beside_word_buckets(tmp_path, figure_text, capsys):
    write_run(tmp_path, "g", "old", seed=1, model=MODEL, val_bleu=30.0,
              buckets=buckets(30.0, unit=None, n=(400, 27)))
    write_run(tmp_path, "g", "new", seed=2, model=MODEL, val_bleu=31.0, buckets=buckets(31.0))
    runs = load.load_runs(tmp_path / "g")
    frame = load.load_length_buckets(runs)
    assert frame.set_index("run_id")["unit"].to_dict() == {"old": "tokens", "new": "words"}
    plots.plot_bleu_by_length(frame, runs, ["model.attention"], tmp_path / "len")
    assert "different units (tokens, words)" in capsys.readouterr().err
    [(xlabel, ticks)] = figure_text
    assert xlabel.startswith("source length (words)") and ticks == ["1-10\nn=528", "11+\nn=472"]
