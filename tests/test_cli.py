"""End-to-end: the training CLI, the run store, bad input, resumption, W&B offline."""

import json
import math
import statistics

import pytest
import yaml

from conftest import CONFIGS, run_cli

SUMMARY_KEYS = {"run_id", "status", "task", "model", "seed", "params", "train_seconds",
                "tokens_per_second", "val_ppl", "val_bleu", "test_bleu", "test_chrf",
                "sacrebleu_signature", "git_commit", "versions", "machine_gflops"}

TINY = ["--data.n_train", "300", "--data.n_val", "40", "--data.n_test", "40",
        "--model.d_model", "32", "--model.ffn", "64", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false"]


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """The acceptance run: the shipped copy config, trained from the CLI, then tested."""
    root = tmp_path_factory.mktemp("runs")
    fit = run_cli("fit", "--config", CONFIGS / "copy.yaml", "--run.root", root, "--run.id", "copy",
                  "--trainer.enable_progress_bar", "false", timeout=900)
    assert fit.returncode == 0, fit.stderr[-3000:]
    run_dir = root / "default" / "copy"
    test = run_cli("test", "--config", CONFIGS / "copy.yaml", "--run.root", root,
                   "--ckpt_path", run_dir / "checkpoints" / "best.ckpt",
                   "--trainer.enable_progress_bar", "false")
    assert test.returncode == 0, test.stderr[-3000:]
    return run_dir


@pytest.mark.slow
def test_copy_transformer_reaches_bleu_90_and_fills_the_run_store(copy_run):
    summary = json.loads((copy_run / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert summary["val_bleu"] >= 90, summary
    assert summary["test_bleu"] >= 90, summary
    assert SUMMARY_KEYS <= summary.keys(), SUMMARY_KEYS - summary.keys()
    assert summary["sacrebleu_signature"].startswith("nrefs:1|case:mixed")
    assert summary["model"]["family"] == "transformer" and summary["task"] == "copy"
    assert summary["seed"] == 1 and summary["params"] > 0
    # the machine-speed probe: once at the start of training and after every epoch
    probes = summary["machine_gflops_probes"]
    assert len(probes) == summary["epochs"] + 1 and min(probes) > 0, (probes, summary["epochs"])
    assert summary["machine_gflops"] == pytest.approx(statistics.median(probes), rel=0.01)
    assert math.isclose(summary["val_ppl"], math.exp(summary["val_loss"]), rel_tol=1e-6)

    config = yaml.safe_load((copy_run / "config.yaml").read_text())
    assert config["model"]["init_args"]["d_model"] == 64 and config["seed_everything"] == 1

    header = (copy_run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"step", "train_loss", "val_loss", "val_ppl", "val_bleu"} <= set(header)

    hyps = (copy_run / "hyps" / "test.txt").read_text().splitlines()
    refs = (copy_run / "hyps" / "test.ref.txt").read_text().splitlines()
    assert len(hyps) == len(refs) == 200
    assert sum(h == r for h, r in zip(hyps, refs)) > 150   # input order is kept
    assert (copy_run / "checkpoints" / "best.ckpt").exists()
    assert (copy_run / "checkpoints" / "last.ckpt").exists()

    buckets = summary["test_bleu_by_length"]
    # copy sources have 3-10 words: the empty longer buckets merge into the first one
    assert [(b["bucket"], b["n"], b["unit"]) for b in buckets] == [("1+", 200, "words")]
    assert summary["test_sentences_per_second"] > 0 and summary["test_decode_seconds"] > 0
    assert summary["grad_norm_median"] > 0 and 0 <= summary["clip_fraction"] <= 1
    gradflow = (copy_run / "gradflow.csv").read_text().splitlines()
    assert gradflow[0] == "step,direction,sentence,position,distance,norm" and len(gradflow) > 5
    assert len(list((copy_run / "attention").glob("val-*.png"))) == 4
    assert set(summary["attention_entropy"]) >= {"cross.0", "cross.1", "enc_self.0", "dec_self.1"}


def test_mismatched_parallel_files_fail_naming_both_files_and_counts(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val", "test"):
        (data / f"{split}.de").write_text("ein Hund\nzwei Katzen\ndrei Mäuse\n")
        (data / f"{split}.en").write_text("a dog\ntwo cats\nthree mice\n")
    (data / "train.en").write_text("a dog\ntwo cats\n")
    result = run_cli("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path / "runs",
                     "--data.task", "files", "--data.data_dir", data, "--data.src_lang", "de",
                     "--data.tgt_lang", "en", *TINY)
    assert result.returncode != 0
    assert "train.de" in result.stderr and "train.en" in result.stderr
    assert "3" in result.stderr and "2" in result.stderr
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


def test_unknown_choice_fails_at_parse_time_listing_valid_ones(tmp_path):
    result = run_cli("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path,
                     "--model.positional", "wavelet")
    assert result.returncode == 2
    assert "wavelet" in result.stderr and "rotary" in result.stderr and "alibi" in result.stderr
    assert not tmp_path.joinpath("default").exists()


def test_choices_json_lists_the_registry():
    result = run_cli("choices", "--json")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert set(data["scoring"]) == {"dot", "scaled_dot", "general", "low_rank", "additive", "concat"}
    assert set(data["positional"]) == {"none", "sinusoidal", "learned", "rotary", "alibi", "t5_bias", "shaw"}
    assert {"transformer", "rnn"} <= set(data["families"]) and "toy-mt" in data["tasks"]


def test_non_finite_loss_fails_the_run_with_the_reason(tmp_path):
    result = run_cli("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "nan",
                     "--model.lr", "1e30", "--model.warmup", "1", "--trainer.gradient_clip_val", "0",
                     "--trainer.max_epochs", "2", *TINY)
    assert result.returncode != 0
    summary = json.loads((tmp_path / "default" / "nan" / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "non-finite" in summary["error"]


def test_bf16_on_a_cpu_without_bf16_hardware_warns_and_still_trains(tmp_path):
    from lit_attention.tracking.machine_speed import cpu_has_native_bf16

    result = run_cli("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "bf16",
                     "--trainer.precision", "bf16-mixed", "--trainer.max_steps", "2",
                     "--trainer.limit_val_batches", "1", *TINY)
    assert result.returncode == 0, result.stderr[-2000:]
    warned = "bf16 is emulated on this CPU" in result.stderr
    assert warned != cpu_has_native_bf16()
    fp32 = run_cli("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "fp32",
                   "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1", *TINY)
    assert fp32.returncode == 0 and "bf16 is emulated" not in fp32.stderr


def test_wandb_offline_run_without_key(tmp_path):
    env_extra = {"WANDB_API_KEY": "", "WANDB_MODE": ""}
    from conftest import cli_env
    env = cli_env(**env_extra)
    env.pop("WANDB_API_KEY")
    env.pop("WANDB_MODE")
    env["HOME"] = str(tmp_path)   # no ~/.netrc with a key
    result = run_cli("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path / "runs",
                     "--run.id", "wb", "--tracking", "wandb", "--trainer.max_epochs", "1", *TINY,
                     env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "runs" / "default" / "wb"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["wandb_run_id"]
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and summary["wandb_run_id"] in offline[0].name


def test_multi30k_training_starts_from_the_shipped_config(shared_data, tmp_path):
    result = run_cli("fit", "--config", CONFIGS / "multi30k-transformer.yaml", "--run.root", tmp_path,
                     "--run.id", "m30k", "--data.limit_train", "2000", "--data.vocab_size", "1000",
                     "--data.cache_dir", tmp_path / "cache", "--trainer.max_steps", "3",
                     "--trainer.val_check_interval", "3",
                     "--trainer.limit_val_batches", "2", "--trainer.num_sanity_val_steps", "0",
                     "--model.val_bleu", "false", "--diagnostics.heatmaps", "0",
                     "--trainer.enable_progress_bar", "false", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "default" / "m30k" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 3
    assert summary["val_ppl"] > 1 and "multi30k" in summary["task"]


@pytest.mark.slow
def test_ddp_validation_sums_exactly_over_two_gloo_ranks(tmp_path):
    """Perplexity and BLEU over 2 CPU ranks equal one process's (an odd number of batches, so one
    rank also gets a marked padding batch that must not count)."""
    fit = run_cli("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "m",
                  *TINY, "--trainer.max_epochs", "1", "--diagnostics.heatmaps", "0")
    assert fit.returncode == 0, fit.stderr[-3000:]
    ckpt = tmp_path / "default" / "m" / "checkpoints" / "best.ckpt"
    results = {}
    for devices in (1, 2):
        run_id = f"v{devices}"
        args = ["validate", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", run_id,
                *TINY, "--data.n_val", "45", "--data.max_tokens", "150", "--ckpt_path", ckpt,
                "--trainer.accelerator", "cpu", "--trainer.devices", devices]
        if devices > 1:
            args += ["--trainer.strategy", "ddp"]   # a subprocess script: Lightning relaunches rank 1
        result = run_cli(*args, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads((tmp_path / "default" / run_id / "summary.json").read_text())
        assert summary["world_size"] == devices
        results[devices] = (summary["val_ppl"], summary["val_bleu"])
    assert results[2][0] == pytest.approx(results[1][0], rel=1e-6)
    assert results[2][1] == pytest.approx(results[1][1], abs=1e-6)
