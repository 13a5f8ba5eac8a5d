"""A language model's perplexity is tested over contiguous blocks of its test tokens
(token_blocks.py): the blocks are cut and rescored as defined, the report uses them when every
run recorded its token losses and says why when it cannot, and the test is calibrated where a
bootstrap over single tokens is not (block_calibration.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from analysis_stores import write_run
from conftest import REPO
from lit_attention.analysis import block_calibration, calibration, load, report, resampling, seeds_x_sentences
from lit_attention.analysis import calibration_results, captions, significance, token_blocks
from lit_attention.tracking.schema import token_nll_file

TOKENS = 3000


def smooth(rng, n: int, q: int = 50) -> np.ndarray:
    draws = rng.normal(0, 1, n + q)
    return np.convolve(draws, np.ones(q) / np.sqrt(q), "valid")[:n]


def lm_store(root, arms: dict[str, float], seeds: int = 3, seed_sd: float = 0.002, text=None):
    """Runs of `arms` (family -> mean token NLL) on one text of TOKENS tokens whose difficulty
    drifts (a moving average over 50 tokens) and suits each arm differently; each run's
    hyps/test.nll.npy and its summary's test_loss / test_ppl."""
    rng = np.random.default_rng(7)
    common = smooth(rng, TOKENS)
    dirs = {}
    for family, level in arms.items():
        own = 0.3 * smooth(rng, TOKENS) if text is None else text[family]
        for s in range(seeds):
            nll = np.clip(level + 0.3 * common + own + rng.normal(0, 0.2, TOKENS) + rng.normal(0, seed_sd),
                          0.01, None).astype(np.float32)
            run_dir = write_run(root, "lm", f"{family}-s{s}", seed=s, model=dict(family=family), task="files")
            np.save(run_dir / token_nll_file("test"), nll)
            summary = json.loads((run_dir / "summary.json").read_text())
            loss = float(nll.mean(dtype=np.float64))
            summary.update(test_loss=loss, test_ppl=math.exp(loss), val_bleu=None)
            (run_dir / "summary.json").write_text(json.dumps(summary))
            dirs.setdefault(family, []).append(run_dir)
    return root / "lm", dirs


def compared(store, column="test_ppl"):
    runs = load.load_runs(store)
    return significance.compare_to_baseline(runs, ["model.family"], {"model.family": "ngram"},
                                            column=column, higher_is_better=False, n_samples=4000)


def test_blocks_are_contiguous_and_rescored_as_defined():
    nll = np.arange(1, 11, dtype=np.float32)
    assert token_blocks.cut(nll, 3).tolist() == [[10, 4], [18, 3], [27, 3]]
    assert token_blocks.cut(nll[:1], 2).tolist() == [[1, 1], [0, 0]]    # one token: an empty block
    assert token_blocks.count(100_000) == token_blocks.BLOCKS
    assert token_blocks.count(100) == 5 and token_blocks.count(10) == 2   # ≥ 20 tokens, ≥ 2 blocks
    assert token_blocks.parse("test_ppl") == ("test", "ppl")
    assert token_blocks.parse("val_loss") == ("val", "loss") and token_blocks.parse("val_bleu") is None
    # a resample's perplexity is exp(Σ NLL / Σ tokens) over the drawn blocks, counted as drawn
    rng = np.random.default_rng(0)
    stats = np.stack([token_blocks.cut(rng.random(95), 4) for _ in range(3)])     # [R, K, 2]
    draw = resampling.draw("bootstrap", 4, 50, seed=1)
    got = token_blocks.resampled("ppl", draw.weights, stats)
    for b in (0, 17, 49):
        picked = np.repeat(np.arange(4), draw.weights[b].astype(int))
        for r in range(3):
            assert got[b, r] == pytest.approx(math.exp(stats[r, picked, 0].sum() / stats[r, picked, 1].sum()))
    assert token_blocks.unbiased(2.9, 30) == pytest.approx(3.0)


def test_the_test_adds_the_texts_variance_from_blocks_of_tokens(tmp_path):
    store, _ = lm_store(tmp_path, {"ngram": 1.8, "rnn": 1.75})
    result = compared(store)
    attrs = result.attrs
    assert attrs["blocks"] == dict(blocks=token_blocks.BLOCKS, tokens=TOKENS, split="test")
    row = result.iloc[0]
    runs = load.load_runs(store)
    ppl = {f: runs.loc[runs["model.family"] == f, "test_ppl"].to_numpy() for f in ("rnn", "ngram")}
    seeds_only = seeds_x_sentences.compare(ppl["rnn"], ppl["ngram"])
    assert row["se"] > 3 * float(seeds_only.se), "the text's variance dominates 3 seeds this close"
    assert row["df"] < 2 * token_blocks.BLOCKS
    text = captions.test_method_of(result)
    assert f"{TOKENS:,} tokens cut into {token_blocks.BLOCKS} contiguous blocks of ≈100" in text


def test_without_every_runs_token_losses_it_says_what_it_leaves_out(tmp_path):
    store, dirs = lm_store(tmp_path, {"ngram": 1.8, "rnn": 1.75})
    full = compared(store).iloc[0]
    (dirs["rnn"][1] / token_nll_file("test")).unlink()
    result = compared(store)
    assert result.attrs["blocks"] is None
    assert result.attrs["no_blocks"] == "1 of the 6 runs recorded no per-token losses of the test tokens"
    assert result.iloc[0]["se"] < full["se"]
    assert "the evaluated text's own variance is left out: 1 of the 6 runs" in captions.test_method_of(result)


def test_token_losses_that_do_not_give_the_summarys_value_are_not_used(tmp_path):
    store, dirs = lm_store(tmp_path, {"ngram": 1.8, "rnn": 1.75})
    summary = dirs["ngram"][0] / "summary.json"
    fields = json.loads(summary.read_text())
    summary.write_text(json.dumps({**fields, "test_ppl": fields["test_ppl"] * 1.01}))
    result = compared(store)
    assert result.attrs["no_blocks"] == "1 runs' per-token losses do not give their test_ppl"


def test_the_report_caption_names_the_blocks(tmp_path):
    store, _ = lm_store(tmp_path, {"ngram": 1.8, "rnn": 1.6, "transformer": 1.79})
    assert report.main([str(store), "--out", str(tmp_path / "out"), "--no-figures", "--metric",
                        "test_ppl", "--baseline", "family=ngram"]) == 0
    table = (tmp_path / "out" / "table.md").read_text()
    assert "contiguous blocks" in table and "▲" in table


def test_single_tokens_as_blocks_reject_true_nulls_far_too_often_and_blocks_do_not():
    """The same test with an i.i.d. bootstrap over tokens sees about 1/Q of the text's variance."""
    rates = block_calibration.rates(3, 0.3, experiments=1500)
    assert rates.token_false_positive > 0.2
    assert 0.025 <= rates.false_positive <= 0.08


def shown_block_calibration() -> dict[tuple[int, float], tuple[float, float]]:
    """{(seeds, variance ratio): (false positives, power)} of the committed block calibration,
    from which docs/ANALYSIS.md's table is formatted: its 80,000 simulated experiments run in
    analysis/calibrate.py --check, and tests/analysis/test_calibration_results.py simulates its
    smallest cell again."""
    rows = calibration_results.read(REPO / "results" / "calibration" / "blocks.csv")
    return {(r["seeds"], r["ratio"]): (r["false_positive"], r["power"]) for r in rows}


def test_the_block_test_is_calibrated_for_any_seeds_and_variance_ratio():
    shown = shown_block_calibration()
    assert set(shown) == {(n, r) for n in calibration.SEEDS for r in calibration.RATIOS}
    outside = {cell: rates for cell, rates in shown.items() if not 0.03 <= rates[0] <= 0.07}
    assert not outside, outside
    assert all(power > 0.8 for (n, ratio), (_, power) in shown.items() if ratio <= 0.3)


@pytest.mark.slow   # thousands of simulated experiments
def test_perplexity_through_a_block_draw_is_calibrated_too():
    """What the report runs: perplexities exp(mean NLL) of runs on one drifting text, the block
    part from a bootstrap draw of resampling.py over token_blocks' blocks (token_blocks.resampled
    and unbiased, as significance.py calls them). No effect: 3-7 % false positives."""
    experiments, n_tokens, q = 2000, 1800, 5
    draw = resampling.draw("bootstrap", token_blocks.BLOCKS, 400, 3)
    rng = np.random.default_rng(11)
    for n in (2, 5):
        for seed_sd in (0.002, 0.02):
            p = []
            for _ in range(experiments):
                text = block_calibration._smooth(rng, (3, n_tokens), q) * 0.3
                nll = (1.5 + text[0] + text[np.repeat([1, 2], n)] + rng.normal(0, 0.2, (2 * n, n_tokens))
                       + rng.normal(0, seed_sd, (2 * n, 1)))
                stats = np.stack([token_blocks.cut(x, token_blocks.BLOCKS) for x in nll])
                ppl = np.exp(nll.mean(axis=1))
                cov = seeds_x_sentences.resampled_covariance(token_blocks.resampled("ppl", draw.weights, stats))
                part = token_blocks.unbiased(seeds_x_sentences.sentence_variance(cov, n), token_blocks.BLOCKS)
                p.append(seeds_x_sentences.compare(ppl[:n], ppl[n:], part, token_blocks.BLOCKS))
            result = seeds_x_sentences.Result(*(np.array([getattr(r, f) for r in p]) for f in
                                        ("delta", "se", "df", "seed_part", "sentence_part")))
            rate = calibration.rejected(result).mean()
            assert 0.03 <= rate <= 0.07, (n, seed_sd, rate)
