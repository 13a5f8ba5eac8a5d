"""End-to-end: the training CLI, the run store, bad input, resumption, W&B offline."""

import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import CONFIGS, cli_in_process, files_config, run_cli
from lit_attention.lightning.run_store_callback import RunStoreCallback

SUMMARY_KEYS = {"run_id", "status", "task", "model", "seed", "params", "train_seconds",
                "tokens_per_second", "val_ppl", "val_bleu", "test_bleu", "test_chrf",
                "sacrebleu_signature", "git_commit", "versions", "machine_gflops"}

TINY = ["--data.n_train", "300", "--data.n_val", "40", "--data.n_test", "40",
        "--model.d_model", "32", "--model.ffn", "64", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false"]


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """The acceptance run: the shipped copy config, trained from the CLI, then tested (in this
    process: what is tested is what they write)."""
    root = tmp_path_factory.mktemp("runs")
    fit = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", root, "--run.id", "copy",
                  "--run.name", "acceptance", "--run.tags", "copy,cli", "--trainer.enable_progress_bar", "false",   # a logger of the user's, besides ours:
                  "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", root / "csv")
    assert fit.returncode == 0, fit.stderr[-3000:]
    run_dir = root / "default" / "copy"
    test = cli_in_process("test", "--config", CONFIGS / "copy.yaml", "--run.root", root,
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
    # the machine-speed probe: at the start and end of training, and after an epoch a minute or more
    # after the last probe (a probe after every epoch costs a visible share of a GPU run)
    probes = summary["machine_gflops_probes"]
    assert 2 <= len(probes) <= summary["epochs"] + 2 and min(probes) > 0, (probes, summary["epochs"])
    if summary["train_seconds"] < RunStoreCallback.probe_every:
        assert len(probes) == 2, (probes, summary["train_seconds"])
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
    # the attention kernels chosen on purpose, and how often each diagnostic was measured
    assert summary["attention_backends"]["device"] == "cpu"
    assert summary["attention_backends"]["allowed"] == ["FLASH_ATTENTION", "MATH"]
    assert summary["measured_every"] == {"grad_norm_total": 1, "clip_fraction": 1, "grad_norm_modules": 50,
                                         "gradflow": 100, "train_loss_logged": 50, "finite_loss_check": 1}


@pytest.mark.slow
def test_mismatched_parallel_files_fail_naming_both_files_and_counts(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val", "test"):
        (data / f"{split}.de").write_text("ein Hund\nzwei Katzen\ndrei Mäuse\n")
        (data / f"{split}.en").write_text("a dog\ntwo cats\nthree mice\n")
    (data / "train.en").write_text("a dog\ntwo cats\n")
    result = cli_in_process("fit", "--config", files_config(tmp_path), "--run.root", tmp_path / "runs",
                            "--data.task", "files", "--data.data_dir", data, "--data.src_lang", "de",
                            "--data.tgt_lang", "en", *TINY[6:])   # (TINY's generator sizes: not read here)
    assert result.returncode == 2   # a data error is a usage error, like a bad option
    message = (f"lit-attention fit: error: line counts differ: {data / 'train.de'} has 3 lines, "
               f"{data / 'train.en'} has 2 lines")
    assert message in result.stderr.splitlines(), result.stderr[-2000:]
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


def test_unknown_choice_fails_at_parse_time_listing_valid_ones(tmp_path):
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path,
                            "--model.positional", "wavelet")
    assert result.returncode == 2
    assert "wavelet" in result.stderr and "rotary" in result.stderr and "alibi" in result.stderr
    assert not tmp_path.joinpath("default").exists()


def documented_summary_keys() -> set[str]:
    """The keys of docs/ARCHITECTURE.md's summary.json table (`{split}` as val and test)."""
    from conftest import REPO
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text[text.index("`summary.json` keys"):].split("\n\n")[1]
    names = [n for row in table.splitlines()[2:] for n in re.findall(r"`([^`]+)`", row.split("|")[1])]
    return {n.replace("{split}", split) for n in names for split in ("val", "test")}


@pytest.mark.slow
def test_every_summary_key_a_real_run_writes_is_documented(copy_run):
    """A key added to (or renamed in) summary.json without docs/ARCHITECTURE.md fails here."""
    summary = json.loads((copy_run / "summary.json").read_text())
    documented = documented_summary_keys()
    assert {"run_id", "val_bleu", "test_decoding", "eval_protocol"} <= documented
    assert not summary.keys() - documented, (f"summary.json keys missing from docs/ARCHITECTURE.md's "
                                             f"table: {sorted(summary.keys() - documented)}")


@pytest.mark.slow
def test_run_name_tags_and_job_type_are_recorded_without_wandb(copy_run):
    """They went to W&B only: without it, --run.name and --run.tags did nothing."""
    summary = json.loads((copy_run / "summary.json").read_text())
    assert (summary["name"], summary["tags"], summary["job_type"]) == ("acceptance", ["copy", "cli"], "train")


def test_choices_json_lists_the_registry():
    result = run_cli("choices", "--json")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert set(data["scoring"]) == {"dot", "scaled_dot", "general", "low_rank", "additive", "concat"}
    assert set(data["positional"]) == {"none", "sinusoidal", "learned", "rotary", "alibi", "t5_bias", "shaw"}
    assert {"transformer", "rnn"} <= set(data["families"]) and "toy-mt" in data["tasks"]
    # the config keys every validator shares, and the tracking choices
    from lit_attention import registry
    assert data["config"] == {kind: {key: list(values) for key, values in keys.items()}
                              for kind, keys in registry.CONFIG_CHOICES.items()}
    assert data["config"]["seq2seq"]["model.enc_output"] == ["concat", "sum", "project"]
    assert data["tracking"] == ["none", "wandb"]


def test_an_unknown_tracking_or_data_choice_fails_at_parse_time_with_the_registry_list(tmp_path):
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--tracking", "mlflow")
    assert result.returncode == 2
    assert "invalid value for tracking: 'mlflow' is not one of: none, wandb" in result.stderr
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--data.tokenizer", "bytes")
    assert result.returncode == 2
    assert "'bytes' is not one of: word, char, sentencepiece" in result.stderr
    assert not tmp_path.joinpath("default").exists()


@pytest.mark.slow
def test_bf16_on_a_cpu_without_bf16_hardware_warns_and_still_trains(tmp_path):
    from lit_attention.tracking.machine_speed import cpu_has_native_bf16

    # In this process (what fit prints is the subject, not the process): no second ~4 s of imports.
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "bf16",
                            "--trainer.precision", "bf16-mixed", "--trainer.max_steps", "2",
                            "--trainer.limit_val_batches", "1", *TINY)
    assert result.returncode == 0, result.stderr[-2000:]
    warned = "bf16 is emulated on this CPU" in result.stderr
    assert warned != cpu_has_native_bf16()
    fp32 = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "fp32",
                          "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1", *TINY)
    assert fp32.returncode == 0 and "bf16 is emulated" not in fp32.stderr
    assert "precision: " not in result.stderr   # given: no automatic choice, no notice


def test_fit_without_a_precision_chooses_it_by_hardware_and_says_why(tmp_path):
    from lit_attention.tracking.machine_speed import cpu_flags, default_precision

    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "auto",
                            "--trainer.max_steps", "1", "--trainer.limit_val_batches", "1", *TINY)
    assert result.returncode == 0, result.stderr[-2000:]
    precision, why = default_precision(cpu_flags())
    notice = [line for line in result.stderr.splitlines() if line.startswith("precision: ")]
    assert notice == [f"precision: {precision}: {why}; --trainer.precision overrides"]
    config = yaml.safe_load((tmp_path / "default" / "auto" / "config.yaml").read_text())
    assert config["trainer"]["precision"] == precision   # the run records what it trained in
    summary = json.loads((tmp_path / "default" / "auto" / "summary.json").read_text())
    assert summary["attention_backends"]["precision"] == precision   # and the attention kernels it allowed
    assert summary["attention_backends"]["allowed"] == ["FLASH_ATTENTION", "MATH"]
    run_dir = tmp_path / "default" / "auto"   # said at the start and at the end
    assert f"run directory: {run_dir}\n" in result.stderr
    assert f"run directory: {run_dir} (finished)" in result.stderr


def test_a_fit_in_this_process_sees_the_test_environment(tmp_path):
    """cli_in_process runs with cli_env(), this process's environment (read before os.environ is
    cleared): with an empty one every in-process fit would ignore OMP_NUM_THREADS=1 and train on
    every core."""
    import torch

    from lit_attention.threads import allowed_cores
    if allowed_cores() < 2:
        pytest.skip("one core: a fit without OMP_NUM_THREADS would use one thread too")
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, "--run.id", "env",
                            "--trainer.max_steps", "1", "--trainer.limit_val_batches", "1", *TINY)
    assert result.returncode == 0, result.stderr[-2000:]
    assert torch.get_num_threads() == 1   # fit followed OMP_NUM_THREADS (pytest_configure's)


def test_fit_of_the_ngram_trains_in_fp32_without_a_precision_notice(tmp_path):
    """The n-gram has no precision to choose (counts, fp32 scores): no notice that bf16 was chosen."""
    config = yaml.safe_load((CONFIGS / "lm-toy.yaml").read_text())
    config["model"]["init_args"] = {"family": "ngram", "order": 2}
    config["data"]["init_args"]["n_sentences"] = 200
    path = tmp_path / "ngram.yaml"
    path.write_text(yaml.safe_dump(config))
    result = cli_in_process("fit", "--config", path, "--run.root", tmp_path, "--run.id", "n",
                            "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "precision: " not in result.stderr
    saved = yaml.safe_load((tmp_path / "default" / "n" / "config.yaml").read_text())
    assert saved["trainer"]["precision"] == "32-true"


@pytest.mark.slow
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
    import wandb
    assert f"W&B: offline (no API key for {wandb.Settings().base_url} (`wandb login` stores one)); " \
           f"upload it later with `wandb sync {run_dir / 'wandb'}/offline-run-*`" in result.stderr
    # the whole resolved config reaches the W&B run, not only the model's hyperparameters
    inspect = subprocess.run([Path(sys.executable).parent / "wandb", "leet", "inspect", "--summary", "--json",
                              offline[0]], capture_output=True, text=True, env=env, timeout=60)
    config = json.loads(inspect.stdout)["config"]["run_config"]
    assert config["trainer"]["max_epochs"] == 1 and config["seed_everything"] == 1
    assert config["budget"] == {"steps": None, "tokens": None, "flops": None}
    assert config["data"]["init_args"]["task"] == "copy" and config["tracking"] == "wandb"
    # and the run store itself, as the run's artifact logged it (from its W&B directory): what
    # `report --wandb` reads back
    from lit_attention.analysis.wandb_import import offline_stores
    (logged,), skipped = offline_stores(run_dir / "wandb")
    assert not skipped and logged.is_relative_to(offline[0])
    assert json.loads((logged / "summary.json").read_text()) == summary
    assert (logged / "metrics.csv").read_bytes() == (run_dir / "metrics.csv").read_bytes()


@pytest.mark.slow
def test_multi30k_training_starts_from_the_shipped_config(shared_data, tmp_path):
    result = cli_in_process("fit", "--config", CONFIGS / "multi30k-transformer.yaml", "--run.root", tmp_path,
                            "--run.id", "m30k", "--data.limit_train", "2000", "--data.vocab_size", "1000",
                            "--data.cache_dir", tmp_path / "cache", "--trainer.max_steps", "3",
                            "--trainer.val_check_interval", "3",
                            "--trainer.limit_val_batches", "2", "--trainer.num_sanity_val_steps", "0",
                            "--model.val_bleu", "false", "--diagnostics.heatmaps", "0",
                            "--trainer.enable_progress_bar", "false")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "default" / "m30k" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 3
    assert summary["val_ppl"] > 1 and "multi30k" in summary["task"]


@pytest.fixture(scope="module")
def one_epoch_run(tmp_path_factory):
    """Run "d": a TINY copy model trained for one epoch, alone in a run root; its beam settings
    matter only to `test` (validation decodes greedily). The tests below evaluate its checkpoint
    into runs of other ids, except `test`, which writes into "d"."""
    root = tmp_path_factory.mktemp("one-epoch")
    fit = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", root, "--run.id", "d",
                         "--trainer.max_epochs", "1", "--diagnostics.heatmaps", "0",
                         "--model.beam_size", "2", "--model.length_penalty", "0.5", *TINY)
    assert fit.returncode == 0, fit.stderr[-2000:]
    return root / "default" / "d"


@pytest.mark.slow
def test_ddp_validation_sums_exactly_over_two_gloo_ranks(one_epoch_run):
    """Perplexity and BLEU over 2 CPU ranks equal one process's (an odd number of batches, so one
    rank also gets a marked padding batch that must not count)."""
    root = one_epoch_run.parents[1]
    ckpt = one_epoch_run / "checkpoints" / "best.ckpt"
    results = {}
    for devices in (1, 2):
        run_id = f"v{devices}"
        args = ["validate", "--config", CONFIGS / "copy.yaml", "--run.root", root, "--run.id", run_id,
                *TINY, "--data.n_val", "45", "--data.max_tokens", "150", "--ckpt_path", ckpt,
                "--trainer.accelerator", "cpu", "--trainer.devices", devices]
        if devices > 1:   # a process of its own: Lightning relaunches its script for rank 1
            result = run_cli(*args, "--trainer.strategy", "ddp", timeout=300)
        else:
            result = cli_in_process(*args)
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads((root / "default" / run_id / "summary.json").read_text())
        assert summary["world_size"] == devices
        hyps = (root / "default" / run_id / "hyps" / "val.txt").read_text()
        results[devices] = (summary["val_ppl"], summary["val_bleu"], hyps)
    assert results[2][0] == pytest.approx(results[1][0], rel=1e-6)
    assert results[2][1] == pytest.approx(results[1][1], abs=1e-6)
    assert results[2][2] == results[1][2] and results[1][2].count("\n") == 45   # every line, in order


# -- nothing the user asks for is silently ignored -------------------------------------------

TYPOS = [
    (["--model.hiden_size", "512"], "unknown option model.hiden_size — did you mean model.d_model?"),
    (["--trainer.max_epoch", "3"], "unknown option trainer.max_epoch — did you mean trainer.max_epochs?"),
    (["--modle.d_model", "32"], "unknown option modle.d_model — did you mean model.d_model?"),
    (["--data.n_trian", "5"], "unknown option data.n_trian — did you mean data.n_train?"),
    (["--model.d_model", "abc"], "invalid value for model.d_model: expected int, got 'abc'"),
    (["--model.family", "transformer", "--model.scoring", "low_rank"],
     "invalid configuration: unknown transformer scoring 'low_rank'"),
]


@pytest.mark.parametrize("args,message", TYPOS, ids=[a[0] for a, _ in TYPOS])
def test_a_typo_or_bad_value_is_one_short_line_with_exit_2(tmp_path, args, message):
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path, *args)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if "Warning" not in line and line.strip()]
    assert len(lines) <= 5, result.stderr
    assert message in result.stderr
    assert not tmp_path.joinpath("default").exists()


def test_an_unknown_key_in_a_config_file_names_it(tmp_path):
    config = yaml.safe_load((CONFIGS / "copy.yaml").read_text())
    config["model"]["init_args"]["num_heads"] = 8
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    result = cli_in_process("fit", "--config", path, "--run.root", tmp_path)
    assert result.returncode == 2
    assert "unknown option model.num_heads — did you mean model.heads?" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 5, result.stderr


@pytest.mark.slow
def test_ctrl_c_stops_fit_cleanly_with_exit_130_and_a_resumable_checkpoint(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO, cli_env
    run_dir = tmp_path / "default" / "c"
    proc = subprocess.Popen([sys.executable, "-m", "lit_attention.cli", "fit", "--config", CONFIGS / "copy.yaml",
                             "--run.root", tmp_path, "--run.id", "c", "--trainer.max_epochs", "200",
                             "--diagnostics.heatmaps", "0", *TINY], cwd=REPO, env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        metrics = run_dir / "metrics.csv"
        if metrics.exists() and "val_loss" in metrics.read_text():   # inside fit, past a validation
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "resume with --run.id c --ckpt_path last" in stderr
    assert f"run directory: {run_dir} (interrupted)" in stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert (run_dir / "checkpoints" / "last.ckpt").exists()


@pytest.mark.slow
def test_test_and_validate_decode_with_the_flags_given_not_the_checkpoints(one_epoch_run):
    run_dir, root = one_epoch_run, one_epoch_run.parents[1]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["val_decoding"] == {"method": "greedy", "beam_size": 1, "length_penalty": None,
                                       "max_len_a": 1.5, "max_len_b": 10}
    assert summary["val_sacrebleu_signature"].startswith("nrefs:1|")
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    test = cli_in_process("test", "--config", CONFIGS / "copy.yaml", "--run.root", root, "--ckpt_path", ckpt,
                          "--model.beam_size", "3", "--model.length_penalty", "1.0", "--model.max_len_a", "1.2",
                          "--model.max_len_b", "4", *TINY)
    assert test.returncode == 0, test.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["test_decoding"] == {"method": "beam", "beam_size": 3, "length_penalty": 1.0,
                                        "max_len_a": 1.2, "max_len_b": 4}
    assert summary["test_sacrebleu_signature"].startswith("nrefs:1|") and "test_chrf_signature" in summary
    validate = cli_in_process("validate", "--config", CONFIGS / "copy.yaml", "--run.root", root, "--run.id", "v",
                              "--ckpt_path", ckpt, "--model.max_len_b", "3", *TINY)
    assert validate.returncode == 0, validate.stderr[-2000:]
    summary = json.loads((root / "default" / "v" / "summary.json").read_text())
    assert summary["val_decoding"]["max_len_b"] == 3


@pytest.mark.slow
def test_a_logger_given_with_trainer_logger_logs_besides_the_run_store(copy_run):
    metrics = list((copy_run.parent.parent / "csv").rglob("metrics.csv"))
    assert len(metrics) == 1
    header, *rows = metrics[0].read_text().splitlines()
    assert "train_loss" in header and "val_loss" in header and len(rows) > 1
    assert (copy_run / "metrics.csv").is_file()


@pytest.mark.parametrize("value", ["true", "false"])
def test_trainer_logger_true_or_false_is_refused_naming_what_to_use(tmp_path, value):
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path,
                            "--trainer.logger", value)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"--trainer.logger {value}: the run store is always written" in result.stderr
    assert "CSVLogger" in result.stderr and not any(tmp_path.iterdir())


def test_predict_is_refused_with_the_command_that_translates():
    result = cli_in_process("predict", "--config", CONFIGS / "copy.yaml")
    assert result.returncode == 2
    assert "there is no predict command" in result.stderr and "lit-attention translate" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_command_names_the_nearest_one():
    result = run_cli("swep", "sweeps/demo.yaml")
    assert result.returncode == 2
    assert "unknown command swep — did you mean sweep?" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 5
    result = run_cli("choices", "--jsn")
    assert result.returncode == 2 and "unknown option --jsn — did you mean --json?" in result.stderr


def test_choices_help_is_help_not_an_unknown_option():
    """`choices --help` was 'unknown option --help', exit 2."""
    result = cli_in_process("choices", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: lit-attention choices [--json]")


@pytest.mark.parametrize("config", sorted(CONFIGS.rglob("*.yaml")), ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_shipped_config_passes_the_model_checks(config):
    """Parsed and its LightningModule built (every option of the config's family, none of another),
    as `lit-attention fit --config X` does before training."""
    from lit_attention.lightning.cli import check_training_args
    check_training_args(["fit", "--config", str(config)])
