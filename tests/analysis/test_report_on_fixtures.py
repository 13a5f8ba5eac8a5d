"""Analysis on FIXTURE run stores (tests/analysis_stores.py): aggregation, exclusion of failed and
pruned runs, significance, LaTeX/Markdown tables, plots, W&B conversion, the report command.
Real training runs feeding the report are tested in analysis/test_report_on_real_runs.py."""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess

import pandas as pd
import pytest

from analysis_stores import SIGNATURE, corrupt, demo_study, paired_bootstrap, references, write_run
from lit_attention.analysis import aggregate, captions, load, plots, report, significance, tables
from lit_attention.analysis.statistics import t_quantile
from lit_attention.analysis.statistics import holm

# Two-sided 95% Student-t critical values from printed tables (not computed by the code under test).
T_TABLE = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 9: 2.2622, 30: 2.0423}


def rnn(attention: str, scoring: str) -> dict:
    return dict(family="rnn", cell="lstm", attention=attention, scoring=scoring, d_model=32)


BLEU = {("none", "dot"): [10.0, 11.0, 12.5], ("luong", "dot"): [20.0, 22.0, 25.0],
        ("luong", "low_rank"): [15.0, 15.5, 16.5]}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """3 configurations x 3 seeds, plus one failed and one pruned run (FIXTURE)."""
    root = tmp_path_factory.mktemp("runs")
    refs = references()
    for (attention, scoring), scores in BLEU.items():
        for seed, bleu in zip((1, 2, 3), scores):
            if attention == "none":
                hyps = corrupt(refs, 0.8, seed)        # the baseline: most sentences damaged
            elif scoring == "dot":
                hyps = refs                            # every sentence fixed
            else:
                hyps = corrupt(refs, 0.8, seed)        # the same output as the baseline
            write_run(root, "study", f"{attention}-{scoring}-s{seed}", seed=seed,
                      model=rnn(attention, scoring), val_bleu=bleu, hyps=hyps, refs=refs,
                      gradflow_decay=0.5 if attention == "none" else 0.9,
                      buckets=[dict(bucket="1-10", lo=1, hi=10, n=60, bleu=bleu + 5, chrf=50.0),
                               dict(bucket="11+", lo=11, hi=None, n=60, bleu=bleu - 5, chrf=40.0)],
                      attention=attention != "none" and seed == 1, curve=[9.0 - seed, 6.0, 4.0])
    write_run(root, "study", "luong-dot-s4", seed=4, model=rnn("luong", "dot"), status="failed")
    write_run(root, "study", "luong-low_rank-s5", seed=5, model=rnn("luong", "low_rank"),
              status="pruned", val_bleu=3.0)
    return root / "study"


@pytest.fixture(scope="module")
def runs(study):
    return aggregate.add_gradient_stats(load.load_runs(study))


KEYS = ["model.attention", "model.scoring"]


def _row(agg, attention, scoring):
    hit = agg[(agg["model.attention"] == attention) & (agg["model.scoring"] == scoring)]
    assert len(hit) == 1
    return hit.iloc[0]


def test_load_runs_one_row_per_run_with_flattened_model_and_config(runs):
    assert len(runs) == 11
    assert set(runs["status"]) == {"finished", "failed", "pruned"}
    assert set(runs["model.scoring"]) == {"dot", "low_rank"}
    assert (runs["config.trainer.gradient_clip_val"] == 1.0).all()
    assert "config.model.attention" in runs  # LightningCLI's init_args level is dropped
    assert load.config_columns(runs)[0] == "task" and "seed" not in load.config_columns(runs)
    assert load.varying(runs, load.config_columns(runs)) == KEYS
    assert load.resolve_key(runs, "scoring") == "model.scoring"
    with pytest.raises(load.AnalysisError, match="configuration keys"):
        load.resolve_key(runs, "nonsense")


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_t_quantile_matches_printed_tables(df):
    assert t_quantile(0.975, df) == pytest.approx(T_TABLE[df], abs=1e-4)


def test_aggregate_means_stds_cis_over_finished_runs_only(runs):
    agg = aggregate.aggregate(runs, KEYS, "val_bleu")
    assert len(agg) == 3
    for (attention, scoring), scores in BLEU.items():
        row = _row(agg, attention, scoring)
        mean, sd = statistics.mean(scores), statistics.stdev(scores)   # stdev is ddof=1
        half = T_TABLE[2] * sd / math.sqrt(3)
        assert row["n"] == 3
        assert row["mean"] == pytest.approx(mean)
        assert row["std"] == pytest.approx(sd)
        assert row["ci_lo"] == pytest.approx(mean - half, abs=1e-3)
        assert row["ci_hi"] == pytest.approx(mean + half, abs=1e-3)
    # the pruned run's BLEU of 3.0 and the failed run are counted, listed and never averaged in
    pruned = _row(agg, "luong", "low_rank")
    assert (pruned["n_pruned"], pruned["n_failed"]) == (1, 0)
    assert "luong-low_rank-s5:pruned" in pruned["excluded_ids"]
    assert "luong-low_rank-s5" not in pruned["run_ids"].split(";")
    failed = _row(agg, "luong", "dot")
    assert (failed["n_failed"], failed["n_pruned"]) == (1, 0)
    excluded = aggregate.excluded_runs(runs, "val_bleu")
    assert set(excluded["run_id"]) == {"luong-dot-s4", "luong-low_rank-s5"}
    assert excluded.set_index("run_id").loc["luong-dot-s4", "error"].startswith("FloatingPointError")


def test_hidden_differences_between_averaged_runs_are_found(runs):
    assert aggregate.hidden_differences(runs, KEYS) == []
    swept = runs.assign(**{"config.model.lr": [0.001] * 10 + [0.003]})
    assert aggregate.hidden_differences(swept, KEYS) == ["config.model.lr"]
    assert aggregate.hidden_differences(swept, KEYS + ["config.model.lr"]) == []


def test_single_seed_has_no_std_or_ci():
    stats = aggregate.seed_stats([3.0])
    assert stats["n"] == 1 and stats["mean"] == 3.0
    assert math.isnan(stats["std"]) and math.isnan(stats["ci_lo"])


def test_gradient_stats_from_metrics_and_gradflow(runs):
    base = runs[runs["model.attention"] == "none"].iloc[0]
    # metrics.csv grad_norm/total = 0.5, 1.0, 1.5; clip value 1.0 (config.yaml)
    assert base["grad_norm_median"] == pytest.approx(1.0)
    assert base["clip_fraction"] == pytest.approx(1 / 3)
    # gradflow.csv at the last step: norm = scale * decay ** distance for every sentence, so the
    # decay per step is exact and the bootstrap over sentences cannot move it
    agg = aggregate.aggregate(runs, KEYS, "val_bleu")
    for (attention, scoring), decay in {("none", "dot"): 0.5, ("luong", "dot"): 0.9,
                                        ("luong", "low_rank"): 0.9}.items():
        row = _row(agg, attention, scoring)
        for direction in ("forward", "backward"):
            name = f"gradflow_decay_{direction}"
            for column in (name, f"{name}_lo", f"{name}_hi"):
                assert row[column] == pytest.approx(decay)
            assert row[f"gradflow_sentences_{direction}"] == 12     # 4 sentences x 3 finished seeds
    cells, _ = tables.summary_table(agg, KEYS, "val_bleu")
    assert cells[captions.GRADFLOW_COLUMN].tolist()[0] == (
        "forward 0.900 [0.900, 0.900]; backward 0.900 [0.900, 0.900]")
    caption = captions.caption_text("val_bleu", agg, captions.CI_METHOD, None)
    assert "‖∂L/∂h_t‖ decay/step" in caption and "resampling seeds, then sentences" in caption


def test_gradflow_decay_fits_log_norm_on_distance_with_a_bootstrap_over_sentences():
    import numpy as np
    rng = np.random.default_rng(0)
    slopes, scales = rng.normal(np.log(0.8), 0.05, size=40), rng.normal(size=40)
    rows = [dict(direction="forward", sentence=s, distance=d, norm=float(np.exp(scales[s] + slopes[s] * d)))
            for s in range(40) for d in range(21)]
    # a sentence without a path to the loss (log undefined) and a distance only one sentence has
    rows += [dict(direction="forward", sentence=99, distance=d, norm=0.0) for d in range(21)]
    rows.append(dict(direction="forward", sentence=0, distance=21, norm=1.0))
    fit = aggregate.gradflow_decay(pd.DataFrame(rows)).iloc[0]
    assert fit["decay"] == pytest.approx(float(np.exp(slopes.mean())), rel=1e-9)   # balanced design
    assert fit["sentences"] == 40 and fit["max_distance"] == 20
    assert fit["ci_lo"] < fit["decay"] < fit["ci_hi"]
    # the interval is that of a mean of 40 slopes with sd 0.05: half-width about 1.96 * 0.05 / sqrt(40)
    half = np.log(fit["ci_hi"] / fit["ci_lo"]) / 2
    assert 0.6 * 1.96 * 0.05 / 40 ** 0.5 < half < 1.4 * 1.96 * 0.05 / 40 ** 0.5
    again = aggregate.gradflow_decay(pd.DataFrame(rows)).iloc[0]
    assert (again["ci_lo"], again["ci_hi"]) == (fit["ci_lo"], fit["ci_hi"])          # fixed seed


def test_gradflow_of_the_old_format_is_not_the_same_quantity_and_is_left_out():
    old = pd.DataFrame(dict(run_dir="r", step=[10, 10], position=[1, 0], distance=[0, 1],
                            norm=[1.0, 0.5]))
    assert aggregate.last_gradflow(old).empty
    assert aggregate.gradflow_columns(aggregate.last_gradflow(old)) == {}


def test_holm_against_hand_computed_example():
    # sorted: .005*4=.02, .01*3=.03, .03*2=.06, .04*1=.04 -> max with previous: .06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    adjusted = holm([0.02, math.nan])
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1])


def test_paired_bootstrap_identical_and_fixed_systems():
    refs = references(150, seed=3)
    base = corrupt(refs, 0.6, seed=1)
    same = paired_bootstrap(base, list(base), refs)
    assert same["p"] == pytest.approx(1.0) and same["system"] == same["baseline"]
    fixed = paired_bootstrap(base, refs, refs)
    assert fixed["p"] < 0.05 and fixed["system"] == pytest.approx(100.0)
    # as good but different (other sentences damaged at the same rate): not significant
    other = paired_bootstrap(base, corrupt(refs, 0.6, seed=4), refs, n_samples=300)
    assert other["p"] > 0.05 and other["system"] != other["baseline"]


def test_compare_to_baseline_with_holm(runs):
    sig = significance.compare_to_baseline(runs, KEYS, {"model.attention": "none",
                                                        "model.scoring": "dot"}, n_samples=200)
    assert len(sig) == 2
    fixed, same = _row(sig, "luong", "dot"), _row(sig, "luong", "low_rank")
    assert fixed["n_tested"] == 3 and same["n_tested"] == 3 and fixed["n_baseline"] == 3
    assert fixed["significant"] and fixed["direction"] == "better" and fixed["delta_lo"] > 0
    # the baseline's hypotheses seed for seed: no difference, never significant
    assert not same["significant"] and same["delta"] == 0 and same["direction"] == ""
    assert fixed["p_holm"] >= fixed["p"] and sig.attrs["comparisons"] == 2
    with pytest.raises(ValueError, match="no finished run matches"):
        significance.compare_to_baseline(runs, KEYS, {"model.attention": "bahdanau"})
    with pytest.raises(ValueError, match="more than one configuration"):
        significance.compare_to_baseline(runs, KEYS, {"model.scoring": "dot"})


def _labelled_table():
    agg = pd.DataFrame({"model.drop_rate %": ["0_1", "50%"], "mean": [27.31, 30.04],
                        "std": [0.5, 0.25], "ci_lo": [26.0, 29.0], "ci_hi": [28.6, 31.0],
                        "n": [3, 3], "n_failed": [1, 0], "n_pruned": [0, 2], "n_other": [0, 0]})
    cells, best = tables.summary_table(agg, ["model.drop_rate %"], "val_bleu")
    caption = captions.caption_text("val_bleu", agg, captions.CI_METHOD, SIGNATURE)
    return agg, cells, best, caption


def test_latex_booktabs_escaped_bold_and_caption():
    _, cells, best, caption = _labelled_table()
    latex = tables.to_latex(cells, best, caption, label="tab:x")
    for rule in (r"\toprule", r"\midrule", r"\bottomrule"):
        assert rule in latex
    assert r"model.drop\_rate \%" in latex              # the index name, escaped
    assert r"0\_1" in latex and r"50\%" in latex        # index labels
    assert r"95\% CI" in latex and r"val\_bleu" in latex  # column labels
    assert r"\textbf{30.0 $\pm$ 0.2}" in latex          # the best mean, in bold
    assert r"\textbf{27.3" not in latex
    assert "n = 3 seeds" in latex and r"Student-t" in latex and "ddof=1" in latex
    assert r"nrefs:1\textbar{}\allowbreak{}case:mixed" in latex  # signature escaped, may wrap
    assert "1 failed, 2 pruned" in latex
    body = latex.replace(r"\_", "").replace(r"\%", "")
    assert "_" not in body.replace("tab:x", "") and "%" not in body


@pytest.mark.slow   # pdflatex, 1.7 CPU-s
def test_latex_compiles_with_pdflatex(study, tmp_path):
    """Every table compiles, and the default table of a realistic store (sweeps/demo.yaml: three
    configuration keys, every cost and gradient column) fits one column of a two-column paper,
    and its --wide table the text width: pdflatex reports no overfull box."""
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not installed (apt-get install --no-install-recommends "
                    "texlive-latex-base texlive-latex-recommended)")
    _, cells, best, caption = _labelled_table()
    report.main([str(study), "--out", str(tmp_path / "r"), "--baseline", "attention=none",
                 "scoring=dot", "--samples", "50", "--rows", "model.scoring", "--cols", "model.attention",
                 "--no-figures", "--equivalence", "1"])
    demo = demo_study(tmp_path / "runs")
    assert report.main([str(demo), "--out", str(tmp_path / "demo"), "--samples", "50", "--no-figures"]) == 0
    assert report.main([str(demo), "--out", str(tmp_path / "wide"), "--samples", "50", "--no-figures",
                        "--wide"]) == 0
    written = [(tmp_path / "r" / "table.tex").read_text(), (tmp_path / "r" / "pivot.tex").read_text(),
               (tmp_path / "demo" / "table.tex").read_text(), (tmp_path / "wide" / "table.tex").read_text()]
    assert "Family & Attention & Scoring & BLEU $\\uparrow$" in written[2]
    assert "\\begin{table*}" in written[3] and "95\\% CI" in written[3]
    # every column of a table, flat and two-level index, a pivot grid; what the report wrote
    for name, options, tables_tex in (("all", "", [tables.to_latex(cells, best, caption)] + written),
                                      ("paper", "[twocolumn]", written)):
        doc = (f"\\documentclass{options}{{article}}\n\\usepackage{{booktabs}}\n\\begin{{document}}\n"
               + "\n".join(tables_tex) + "\\end{document}\n")
        (tmp_path / f"{name}.tex").write_text(doc)
        done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{name}.tex"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:]
        assert (tmp_path / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
    log = (tmp_path / "paper.log").read_text(errors="replace")
    assert "Overfull \\hbox" not in log, log[log.index("Overfull"):][:600]


def test_markdown_has_bold_best_and_caption():
    _, cells, best, caption = _labelled_table()
    md = tables.to_markdown(cells, best, caption)
    assert "| model.drop_rate %" in md
    assert "**30.0 ± 0.2**" in md and "**27.3" not in md
    assert md.strip().endswith(f"sacreBLEU signature: {SIGNATURE}.")


def test_pivot_table_best_per_column(runs):
    agg = aggregate.aggregate(runs, KEYS, "val_bleu")
    cells, best = tables.pivot_table(agg, ["model.scoring"], ["model.attention"], "val_bleu")
    assert list(cells.columns) == ["luong", "none"] and list(cells.index) == ["dot", "low_rank"]
    assert cells.loc["dot", "luong"] == f"{statistics.mean(BLEU['luong', 'dot']):.1f} ± " \
                                        f"{statistics.stdev(BLEU['luong', 'dot']):.1f}"
    assert cells.loc["low_rank", "none"] == ""
    assert best.loc["dot", "luong"] and not best.loc["low_rank", "luong"] and best.loc["dot", "none"]
    with pytest.raises(ValueError, match="do not identify a configuration"):
        tables.pivot_table(agg, ["model.scoring"], [], "val_bleu")


def test_trace_maps_every_run_to_its_cell(runs):
    trace = tables.trace_table(runs, KEYS, "val_bleu")
    assert len(trace) == len(runs)
    cell = trace[trace["cell"] == "luong / low_rank"]
    assert set(cell.loc[cell["included"], "run_id"]) == {f"luong-low_rank-s{s}" for s in (1, 2, 3)}
    assert list(cell.loc[~cell["included"], "status"]) == ["pruned"]


def _is_png(path):
    import matplotlib.image as mpimg
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and mpimg.imread(path).size > 0


@pytest.mark.slow   # over 2 CPU seconds (2.2-4.3 s alone on 2 cores)
def test_plots_are_valid_nonempty_images(runs, tmp_path):
    agg = aggregate.aggregate(runs, KEYS, "val_bleu")
    metrics = load.load_metrics(runs)
    written = {
        "bars": plots.plot_ablation_bars(agg, KEYS, "val_bleu", tmp_path / "bars"),
        "curves": plots.plot_learning_curves(metrics, runs, KEYS, tmp_path / "curves", y="val_ppl"),
        "length": plots.plot_bleu_by_length(load.load_length_buckets(runs), runs, KEYS, tmp_path / "len"),
        "gradflow": plots.plot_gradflow(load.load_gradflow(runs), runs, KEYS, tmp_path / "gflow"),
        "attention": plots.plot_attention_grid(runs, KEYS, tmp_path / "attn"),
    }
    for name, paths in written.items():
        assert [p.suffix for p in paths] == [".png", ".pdf"], name
        png, pdf = paths
        assert _is_png(png) and png.stat().st_size > 2000, name
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000, name
    # no data -> no figure, no error
    assert plots.plot_gradflow(pd.DataFrame(), runs, KEYS, tmp_path / "none") == []


@pytest.mark.slow   # over 2 CPU seconds (2.2-4.3 s alone on 2 cores)
def test_report_main_writes_everything_and_prints_the_answer_first(study, tmp_path, capsys):
    out = tmp_path / "report"
    code = report.main([str(study), "--out", str(out), "--baseline", "attention=none", "scoring=dot",
                        "--samples", "200", "--cols", "model.attention", "--rows", "model.scoring"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "▲" in printed and "pivot.md/.tex" in printed.splitlines()[-1]
    assert "| Scoring \\ Attention" in (out / "pivot.md").read_text() and "ddof=1" in (out / "table.md").read_text()
    for name in ("table.tex", "table.md", "table.csv", "table_trace.csv", "excluded.csv",
                 "significance.csv", "runs.csv", "pivot.tex", "pivot.md", "ablation_bars.png",
                 "ablation_bars.pdf", "learning_curves_ppl.png", "bleu_by_length.pdf",
                 "gradflow.png", "attention_grid.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    table = pd.read_csv(out / "table.csv")
    assert table["n"].tolist() == [3, 3, 3]
    table = table.set_index(["model.scoring", "model.attention"])
    assert table.loc[("dot", "luong"), "significant"] and table.loc[("dot", "none"), "baseline"]
    assert table.loc[("low_rank", "luong"), "significant"] == False  # noqa: E712 (numpy bool)
    assert table.loc[("low_rank", "luong"), "n_pruned"] == 1
    latex = (out / "table.tex").read_text()
    assert r"low\_rank" in latex and r"$^{\bigtriangleup}$" in latex and "baseline" in latex
    md = (out / "table.md").read_text()
    assert "22.3 ± 2.5▲" in md


def test_report_defaults_to_the_no_attention_baseline(study, tmp_path, capsys):
    out = tmp_path / "auto"
    assert report.main([str(study), "--out", str(out), "--samples", "50", "--no-figures"]) == 0
    assert "model.attention=none" in capsys.readouterr().err
    assert (out / "significance.csv").is_file()
    assert report.main([str(study), "--out", str(tmp_path / "off"), "--baseline", "off", "--no-figures"]) == 0
    assert not (tmp_path / "off" / "significance.csv").exists()
    assert not list((tmp_path / "off").glob("*.png"))


def test_report_refuses_to_average_over_a_hidden_varying_key(study, tmp_path, capsys):
    assert report.main([str(study), "--out", str(tmp_path), "--rows", "model.scoring"]) == 2
    assert "vary across the runs" in capsys.readouterr().err
    assert report.main([str(study), "--out", str(tmp_path), "--metric", "bleu_typo"]) == 2
    assert "bleu_typo" in capsys.readouterr().err
    assert report.main([str(tmp_path / "nothing"), "--out", str(tmp_path)]) == 2
    assert "no run stores" in capsys.readouterr().err
    assert report.main([str(study), "--out", str(tmp_path), "--where", "nonsense=1"]) == 2
    assert "unknown key 'nonsense'" in capsys.readouterr().err
    # filtering the other key away makes it valid
    assert report.main([str(study), "--out", str(tmp_path), "--rows", "model.scoring",
                        "--where", "attention=luong", "--no-figures"]) == 0


def test_report_writes_beside_the_runs_by_default(study, tmp_path, capsys):
    copy = tmp_path / "study"
    shutil.copytree(study, copy)
    assert report.main([str(copy), "--baseline", "off", "--no-figures"]) == 0
    assert (copy / "report" / "table.md").is_file()
    # the report directory is not a run: a second report sees the same runs
    assert report.main([str(copy), "--baseline", "off", "--no-figures"]) == 0
    assert f"{len(load.find_run_dirs(study))} runs" in capsys.readouterr().out


def test_wandb_runs_convert_to_the_run_store_shape():
    from wandb.apis.public import Run

    from lit_attention.analysis.wandb_import import history_frame, run_row

    def wandb_run(run_id, state, summary):
        config = {"seed_everything": {"value": 1, "desc": None},
                  "model": {"value": {"class_path": "x.Y", "init_args": {"scoring": "dot"}}, "desc": None}}
        attrs = {"name": run_id, "displayName": run_id, "state": state, "group": "study",
                 "config": json.dumps(config), "summaryMetrics": json.dumps(summary)}
        return Run(None, "ent", "proj", run_id, attrs=attrs, lazy=False)  # no network: attrs given

    done = run_row(wandb_run("a1", "finished", {"val_bleu": 12.5, "task": "copy", "seed": 1,
                                                "model": {"family": "rnn", "scoring": "dot"},
                                                "_runtime": 3}))
    assert done["status"] == "finished" and done["val_bleu"] == 12.5 and done["group"] == "study"
    assert done["model.family"] == "rnn" and done["config.model.scoring"] == "dot"
    assert done["run_dir"] == "wandb:ent/proj/a1" and "_runtime" not in done
    crashed = run_row(wandb_run("a2", "crashed", {"val_bleu": 1.0}))
    assert crashed["status"] == "failed" and crashed["model.scoring"] == "dot"
    runs = pd.DataFrame([done, crashed])
    assert aggregate.aggregate(runs, ["model.scoring"], "val_bleu")["n_failed"].tolist() == [1]

    history = history_frame("a1", "wandb:ent/proj/a1", [
        {"trainer/global_step": 10, "val_ppl": 5.0, "_step": 3},
        {"trainer/global_step": 20, "val_ppl": 4.0, "_step": 7}])
    assert list(history.columns) == ["run_id", "run_dir", "step", "val_ppl"]
    assert history["step"].tolist() == [10, 20]
