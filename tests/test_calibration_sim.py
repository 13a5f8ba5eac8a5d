"""analysis/calibration_sim.py and analysis/calibrate.py. The seed x sentence test is calibrated:
simulated experiments with known seed and sentence variance and no effect are rejected at
α = 0.05 between 3 % and 7 % of the time, for 2-10 seeds and seed/sentence variance ratios
0.1-10, and a planted effect is found; 4,000 experiments per cell: a true rate of 5 % lands in
[3 %, 7 %] with a margin of 5.8 standard errors. The test over token blocks is calibrated where
a bootstrap over single tokens is not. The calibration tables are committed results that the
simulation gives again, read back to the same numbers, and refused when malformed."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import replace

import numpy as np
import pytest

import calibration_sim
from conftest import REPO
from lit_attention.analysis import statistics


CELLS = [(n, ratio) for n in calibration_sim.SEEDS for ratio in calibration_sim.RATIOS]


def committed(name: str) -> dict[tuple[int, float], calibration_sim.Rates]:
    """The rates of every cell of a committed calibration table (results/calibration/NAME.csv,
    from which docs/REPORT.md's table is formatted): simulating its 80,000 experiments is
    analysis/calibrate.py --check's; test_the_smallest_cell_of_each_committed_file_is_what_the_simulation_gives_now simulates its
    smallest cell again."""
    rows = calibration_sim.read(REPO / "results" / "calibration" / f"{name}.csv")
    return {(r["seeds"], r["ratio"]): calibration_sim.rates_of(r) for r in rows}


@pytest.fixture(scope="module")
def welch():
    cells = committed("seeds")
    assert set(cells) == set(CELLS)
    return cells


def test_false_positive_rate_is_five_percent_for_any_seeds_and_variance_ratio(welch):
    outside = {cell: r.false_positive for cell, r in welch.items() if not 0.03 <= r.false_positive <= 0.07}
    assert not outside, outside
    assert abs(np.mean([r.false_positive for r in welch.values()]) - 0.05) < 0.005


def test_a_planted_effect_is_found_and_more_seeds_find_it_more_often(welch):
    """An effect of 3 true standard deviations of Δ: a z-test finds it 85 % of the time; with
    much sentence noise (large df) so does this test, and with 2 seeds and much seed noise the
    t on 1-2 df pays for what 2 seeds cannot say."""
    for n in calibration_sim.SEEDS:
        assert welch[n, 0.1].power > 0.8
    for ratio in calibration_sim.RATIOS:
        powers = [welch[n, ratio].power for n in calibration_sim.SEEDS]
        assert powers == sorted(powers) or max(powers) - min(powers) < 0.03, (ratio, powers)
    assert 0.3 < welch[2, 10.0].power < 0.6 and welch[10, 10.0].power > 0.8


@pytest.mark.parametrize("name", ["seeds", "seeds-pooled6", "blocks"])
def test_the_power_at_the_printed_mde_is_what_it_promises_in_every_cell(name):
    """With the true Δ fixed at a cell's median MDE, 4,000 experiments find it 75-85 % of the time
    (it promises 80 %): 2, 3, 5 and 10 seeds, seed/sentence variance ratios 0.1 to 10."""
    rows = calibration_sim.read(REPO / "results" / "calibration" / f"{name}.csv")
    assert {(r["seeds"], r["ratio"]) for r in rows} >= {(n, q) for n in (2, 3, 5, 10) for q in (0.1, 1.0, 10.0)}
    assert all(r["experiments"] >= 4000 for r in rows)
    outside = {(r["seeds"], r["ratio"]): r["achieved_power"] for r in rows if not 0.75 <= r["achieved_power"] <= 0.85}
    assert not outside, outside


def test_without_the_seed_correction_the_mde_over_promises_with_few_seeds():
    """The plain formula (seed_df infinite: no correction) read at its median falls below 75 % power
    with 2 seeds and much seed noise; the corrected one does not."""
    result, _ = calibration_sim.simulate(2, 10.0, experiments=2000)
    plain = replace(result, seed_df=math.inf)
    assert calibration_sim.power_at(result, float(np.median(plain.detectable()))) < 0.7
    assert 0.75 <= calibration_sim.power_at(result, float(np.median(result.detectable()))) <= 0.85


def test_pooling_the_seed_variance_over_six_arms_is_calibrated_too():
    cells = committed("seeds-pooled6")
    assert set(cells) == set(CELLS)
    outside = {cell: r.false_positive for cell, r in cells.items() if not 0.03 <= r.false_positive <= 0.07}
    assert not outside, outside


def test_pooling_two_arms_of_two_seeds_is_not_and_why_it_is_refused():
    """2 degrees of freedom mixed with sentence variance: Satterthwaite rejects too often."""
    assert calibration_sim.rates(2, 10.0, pooled_arms=2).false_positive > 0.07


@pytest.mark.slow   # thousands of simulated experiments
def test_corpus_bleu_through_the_bootstrap_is_calibrated_too():
    """What the report runs: corpus BLEU (not a mean of sentence scores) of runs assembled from
    five hypotheses per sentence (0-60 % of its words dropped), the variant chosen by a latent
    quality c_i + d_ai + g_ari + u_ar as in calibration_sim.py; the sentence part from a bootstrap draw
    of statistics.py. No effect: 3-7 % false positives for 2 and 5 seeds, seed noise from well
    below to far above the sentence part."""
    from analysis_stores import references


    from lit_attention.tracking import sentence_stats as ss
    n_sentences, experiments = 200, 3000
    refs = references(n_sentences, seed=9)
    rng = np.random.default_rng(5)

    def drop(sentence, p):
        kept = [w for w in sentence.split() if rng.random() >= p]
        return " ".join(kept or sentence.split()[:1])
    extractor = ss.Extractor()
    variants = np.stack([extractor.corpus([drop(r, p) for r in refs], refs, ["bleu"])["bleu"]
                         for p in (0.0, 0.15, 0.3, 0.45, 0.6)], axis=1)          # [N, 5, K]
    draw = statistics.draw("bootstrap", n_sentences, 500, 11)
    for n in (2, 5):
        for seed_sd in (0.01, 0.1, 0.5):
            shape = (experiments, 2, n, n_sentences)
            quality = (2 + rng.normal(0, 1, (experiments, 1, 1, n_sentences))
                       + rng.normal(0, 0.5, (experiments, 2, 1, n_sentences))
                       + rng.normal(0, 0.5, shape) + rng.normal(0, seed_sd, (experiments, 2, n, 1)))
            chosen = np.clip(np.rint(quality), 0, 4).astype(int)
            stats = variants[np.arange(n_sentences), chosen].reshape(experiments * 2 * n, n_sentences, -1)
            full = ss.SCORES["bleu"](stats.sum(axis=1)).reshape(experiments, 2 * n)
            resampled = statistics.resampled_scores("bleu", draw, stats).reshape(-1, experiments, 2 * n)
            part = statistics.sentence_variance(statistics.resampled_covariance(resampled), n)
            result = statistics.seed_test(full[:, :n], full[:, n:], part, n_sentences)
            rate = calibration_sim.rejected(result).mean()
            assert 0.03 <= rate <= 0.07, (n, seed_sd, rate, full[:, :n].var(axis=1, ddof=1).mean(), part.mean())


COMMITTED = sorted((REPO / "results" / "calibration").glob("*.csv"))


def _calibrate():
    spec = importlib.util.spec_from_file_location("calibrate", REPO / "analysis" / "calibrate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


calibrate = _calibrate()


def test_the_committed_files_are_the_three_tables_docs_show():
    assert [p.name for p in COMMITTED] == ["blocks.csv", "seeds-pooled6.csv", "seeds.csv"]
    text = (REPO / "docs" / "REPORT.md").read_text()
    for path in COMMITTED:
        assert f"<!-- calibration {path.relative_to(REPO)} -->" in text


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_the_smallest_cell_of_each_committed_file_is_what_the_simulation_gives_now(path):
    """Its 2 seeds go through every step of the others (0.2-1.6 CPU-s; all 60 cells: a few
    minutes, `analysis/calibrate.py --check`). Fails when a change to a simulation or to the test
    moves its numbers: simulate the files again (calibrate.py) and regenerate the docs."""
    rows = calibration_sim.read(path)
    assert len(rows) == 20 and min(r["seeds"] for r in rows) == rows[0]["seeds"] == 2
    assert calibrate.check(path, cells=1) == []


def test_a_written_file_reads_back_to_the_same_rows_and_table(tmp_path):
    rows = [calibration_sim.simulate_cell("blocks", n, ratio, experiments=40) for ratio in (0.5, 2.0) for n in (2, 3)]
    calibration_sim.write(tmp_path / "b.csv", rows)
    assert calibration_sim.read(tmp_path / "b.csv") == rows
    table = calibration_sim.markdown(rows).splitlines()
    assert table[0] == "| σ²_seed / σ²_text | 2 seeds | 3 seeds |" and [line.split()[1] for line in table[2:]] == ["0.5", "2"]
    assert calibrate.check(tmp_path / "b.csv") == []


def test_check_names_a_cell_whose_committed_number_is_not_the_simulations(tmp_path, capsys):
    path = tmp_path / "s.csv"
    assert calibrate.main([str(path), "seeds", "--seeds", "2,3", "--ratios", "1", "--experiments", "50"]) == 0
    lines = path.read_text().splitlines()
    fields = lines[2].split(",")
    fields[6] = "0.5"                     # the false-positive rate of 3 seeds at ratio 1
    path.write_text("\n".join([*lines[:2], ",".join(fields)]) + "\n")
    assert calibrate.main(["--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "3 seeds at ratio 1: committed -> now {'false_positive': (0.5," in out and "2 seeds" not in out


def test_the_mde_may_differ_in_its_last_bits_between_cpus_and_a_rate_may_not():
    row = calibration_sim.read(COMMITTED[0])[0]
    assert calibration_sim.differences(row, {**row, "detectable": row["detectable"] * (1 + 1e-12)}) == {}
    assert calibration_sim.differences(row, {**row, "detectable": row["detectable"] * 1.001})
    assert list(calibration_sim.differences(row, {**row, "power": row["power"] + 1 / 4000})) == ["power"]


@pytest.mark.parametrize("content, said", [
    ("", "no cells"),
    ("kind,seeds\nnope,2\n", "kind 'nope' is not one of seeds, blocks"),
    ("kind,seeds,ratio\nseeds,2,1\n", "columns kind, seeds, ratio; a seeds table has kind, seeds, ratio, experiments"),
    ("kind,seeds,ratio,experiments,pooled_arms,seed,false_positive,power,detectable,achieved_power\n"
     "seeds,two,1,50,,1,0.1,0.5,3,0.8\n", "line 2: invalid literal for int() with base 10: 'two'"),
])
def test_a_malformed_file_is_refused_with_its_name_and_what_is_wrong(tmp_path, content, said):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(calibration_sim.CalibrationFileError, match="bad.csv") as caught:
        calibration_sim.read(path)
    assert said in str(caught.value)


def test_a_table_with_a_missing_cell_is_refused(tmp_path):
    rows = [calibration_sim.simulate_cell("seeds", n, 1.0, experiments=20) for n in (2, 3)]
    rows.append(calibration_sim.simulate_cell("seeds", 2, 3.0, experiments=20))
    with pytest.raises(calibration_sim.CalibrationFileError, match="missing 3 seeds at ratio 3"):
        calibration_sim.markdown(rows)


@pytest.mark.parametrize("argv, said", [
    (["out.csv", "blocks", "--pooled-arms", "6"], "pooled_arms is an option of the seeds calibration only, not of blocks"),
    (["--check", "a.csv", "--experiments", "10"], "it takes no --experiments"),
    (["out.csv"], "give OUT and KIND"),
    (["out.csv", "seeds", "--seeds", "2,x"], "not a comma-separated list of int"),
    (["out.csv", "seeds", "--experiments", "0"], "not a positive integer: '0'"),
])
def test_calibrate_usage_errors_exit_2_and_write_nothing(tmp_path, monkeypatch, capsys, argv, said):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        calibrate.main(argv)
    assert done.value.code == 2 and said in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_single_tokens_as_blocks_reject_true_nulls_far_too_often_and_blocks_do_not():
    """The same test with an i.i.d. bootstrap over tokens sees about 1/Q of the text's variance."""
    rates = calibration_sim.block_rates(3, 0.3, experiments=1500)
    assert rates.token_false_positive > 0.2
    assert 0.025 <= rates.false_positive <= 0.08


def shown_block_calibration() -> dict[tuple[int, float], tuple[float, float]]:
    """{(seeds, variance ratio): (false positives, power)} of the committed block calibration,
    from which docs/REPORT.md's table is formatted: its 80,000 simulated experiments run in
    analysis/calibrate.py --check, and test_the_smallest_cell_of_each_committed_file_is_what_the_simulation_gives_now simulates its
    smallest cell again."""
    rows = calibration_sim.read(REPO / "results" / "calibration" / "blocks.csv")
    return {(r["seeds"], r["ratio"]): (r["false_positive"], r["power"]) for r in rows}


def test_the_block_test_is_calibrated_for_any_seeds_and_variance_ratio():
    shown = shown_block_calibration()
    assert set(shown) == {(n, r) for n in calibration_sim.SEEDS for r in calibration_sim.RATIOS}
    outside = {cell: rates for cell, rates in shown.items() if not 0.03 <= rates[0] <= 0.07}
    assert not outside, outside
    assert all(power > 0.8 for (n, ratio), (_, power) in shown.items() if ratio <= 0.3)


@pytest.mark.slow   # thousands of simulated experiments
def test_perplexity_through_a_block_draw_is_calibrated_too():
    """What the report runs: perplexities exp(mean NLL) of runs on one drifting text, the block
    part from a bootstrap draw over token blocks (statistics.resampled_blocks
    and unbiased, as significance.py calls them). No effect: 3-7 % false positives."""
    experiments, n_tokens, q = 2000, 1800, 5
    draw = statistics.draw("bootstrap", statistics.BLOCKS, 400, 3)
    rng = np.random.default_rng(11)
    for n in (2, 5):
        for seed_sd in (0.002, 0.02):
            p = []
            for _ in range(experiments):
                text = calibration_sim._smooth(rng, (3, n_tokens), q) * 0.3
                nll = (1.5 + text[0] + text[np.repeat([1, 2], n)] + rng.normal(0, 0.2, (2 * n, n_tokens))
                       + rng.normal(0, seed_sd, (2 * n, 1)))
                stats = np.stack([statistics.cut_blocks(x, statistics.BLOCKS) for x in nll])
                ppl = np.exp(nll.mean(axis=1))
                cov = statistics.resampled_covariance(statistics.resampled_blocks("ppl", draw.weights, stats))
                part = statistics.unbiased(statistics.sentence_variance(cov, n), statistics.BLOCKS)
                p.append(statistics.seed_test(ppl[:n], ppl[n:], part, statistics.BLOCKS))
            result = statistics.SeedTest(*(np.array([getattr(r, f) for r in p]) for f in
                                        ("delta", "se", "df", "seed_part", "sentence_part")))
            rate = calibration_sim.rejected(result).mean()
            assert 0.03 <= rate <= 0.07, (n, seed_sd, rate)
