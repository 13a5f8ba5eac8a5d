"""Budgets in the report: costs (steps, wall time, FLOPs) are columns; the budget is the caption."""

import json

from analysis_stores import write_run
from lit_attention.analysis import aggregate, captions, columns, load


def with_counts(run_dir, **fields):
    path = run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def runs_under(tmp_path, budgets):
    """Two configurations x two seeds; `budgets[(family, seed)]` = (budget_flops, reached)."""
    for family in ("rnn", "transformer"):
        for seed in (1, 2):
            flops, reached = budgets[(family, seed)]
            run_dir = write_run(tmp_path, "g", f"{family}-{seed}", seed=seed, model={"family": family},
                                val_bleu=20.0 + seed)
            with_counts(run_dir, steps=1000 + seed, train_flops=1.8e14 + seed * 1e12,
                        budget_flops=flops, budget_tokens=None, budget_steps=None,
                        budget_reached=reached, stopped_by="budget.flops" if reached else "max_epochs")
    return load.load_runs(tmp_path)


def test_costs_are_columns_and_one_shared_budget_is_stated_in_the_caption(tmp_path):
    runs = runs_under(tmp_path, {(f, s): (1.8e14, True) for f in ("rnn", "transformer") for s in (1, 2)})
    agg = aggregate.aggregate(runs, ["model.family"], "val_bleu")
    assert agg["train_flops"].tolist() == [1.815e14, 1.815e14] and agg["steps"].tolist() == [1001.5] * 2
    cells, _ = columns.summary_table(agg, ["model.family"], "val_bleu")
    assert cells["train FLOPs"].tolist() == ["182T", "182T"] and cells["steps"].tolist() == ["1002"] * 2
    assert "train s" in cells and "budget" not in cells and "under budget" not in cells
    caption = captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)
    assert "Every run trained to the same budget, 1.8e+14 FLOPs" in caption
    assert "Not compute-matched" not in caption


def test_a_run_that_fell_short_of_its_budget_is_flagged(tmp_path):
    budgets = {(f, s): (1.8e14, True) for f in ("rnn", "transformer") for s in (1, 2)}
    budgets[("rnn", 2)] = (1.8e14, False)
    runs = runs_under(tmp_path, budgets)
    agg = aggregate.aggregate(runs, ["model.family"], "val_bleu")
    assert agg["n_under_budget"].tolist() == [1, 0]
    cells, _ = columns.summary_table(agg, ["model.family"], "val_bleu")
    assert cells["under budget"].tolist() == ["1", "0"]
    assert "Not compute-matched: 1 averaged run(s)" in captions.caption_text(
        "val_bleu", agg, captions.CI_METHOD, None)


def test_different_budgets_get_a_column_and_seeds_that_differ_are_a_hidden_difference(tmp_path):
    budgets = {(f, s): (1.8e14 if f == "rnn" else 9e13, True) for f in ("rnn", "transformer") for s in (1, 2)}
    runs = runs_under(tmp_path, budgets)
    agg = aggregate.aggregate(runs, ["model.family"], "val_bleu")
    cells, _ = columns.summary_table(agg, ["model.family"], "val_bleu")
    assert cells["budget"].tolist() == ["1.8e+14 FLOPs", "9e+13 FLOPs"]
    assert "budgets differ between rows" in captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)
    # A budget given on the command line lands in config.yaml; seeds with different ones are not one cell.
    for seed, flops in ((1, 1e14), (2, 2e14)):
        config = tmp_path / "g" / f"rnn-{seed}" / "config.yaml"
        config.write_text(config.read_text() + f"budget:\n  flops: {flops}\n")
    assert aggregate.hidden_differences(load.load_runs(tmp_path), ["model.family"]) == ["config.budget.flops"]


def test_a_configuration_with_no_finished_run_yet_does_not_make_the_budgets_differ(tmp_path):
    """A sweep's table while it runs: a row whose only run is still training has no budget to
    compare, which is not the same as a run trained without one."""
    runs = runs_under(tmp_path, {(f, s): (1.8e14, True) for f in ("rnn", "transformer") for s in (1, 2)})
    write_run(tmp_path, "g", "lstm-1", seed=1, model={"family": "lstm"}, status="running", val_bleu=None)
    agg = aggregate.aggregate(load.load_runs(tmp_path), ["model.family"], "val_bleu")
    assert agg["n"].tolist() == [0, 2, 2]
    cells, _ = columns.summary_table(agg, ["model.family"], "val_bleu")
    assert "budget" not in cells
    caption = captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)
    assert "Every run trained to the same budget, 1.8e+14 FLOPs" in caption
    assert "differ" not in caption
    # ...while a finished run without a budget beside budgeted ones does make them differ
    write_run(tmp_path, "g", "lstm-2", seed=2, model={"family": "lstm"}, val_bleu=20.0)
    agg = aggregate.aggregate(load.load_runs(tmp_path), ["model.family"], "val_bleu")
    assert "budgets differ between rows" in captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)
