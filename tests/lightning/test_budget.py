"""Training budgets: where training stops, what summary.json records, resume, DDP, real data."""

import csv
import json

import pytest
import torch
import torch.nn.functional as F
import yaml
from lightning.pytorch import Callback, Trainer
from torch.utils.flop_counter import FlopCounterMode

from conftest import CONFIGS, REPO, cli_env, cli_in_process, run_cli
from lit_attention.data.batching import TokenBatchSampler, padded_length
from lit_attention.data.translation import TranslationDataModule
from lit_attention.data.vocab import PAD
from lit_attention.lightning.budget import TrainingBudget
from lit_attention.lightning.translation import TranslationModule
from lit_attention.models.flops import ATTENTION_FORMULAS

# torch.backends.mkldnn.flags() warns about Intel-GPU TF32 on every use
pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")

# The copy task cut small: 300 examples in batches of <= 128 tokens, ~20 steps an epoch.
DATA = dict(task="copy", n_train=300, n_val=20, n_test=20, min_len=3, max_len_words=10,
            n_symbols=20, tokenizer="word", max_tokens=128)
SMALL = ["--config", CONFIGS / "copy.yaml", "--model.d_model", "32", "--model.ffn", "64",
         "--model.enc_layers", "1", "--model.dec_layers", "1", "--model.val_bleu", "false",
         "--diagnostics.heatmaps", "0", "--trainer.enable_progress_bar", "false",
         *[arg for key, value in DATA.items() if key != "task" for arg in (f"--data.{key}", value)]]


class Recorder(Callback):
    """Every training batch and the budget's counts after it; the steps validation ran at."""

    def __init__(self, budget: TrainingBudget):
        self.budget, self.batches, self.used, self.validated = budget, [], [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches.append({k: v.clone() for k, v in batch.items()})
        self.used.append(dict(self.budget.used))

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.validated.append(trainer.global_step)


def fit(module, budget, **trainer_args):
    recorder = Recorder(budget)
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      use_distributed_sampler=False, reload_dataloaders_every_n_epochs=1,
                      callbacks=[budget, recorder], **trainer_args)
    trainer.fit(module, TranslationDataModule(**DATA))
    return trainer, recorder


def tokens_of(batch) -> int:
    return int((batch["tgt_out"] != PAD).sum())


def test_token_budget_stops_at_the_first_step_that_reaches_it_and_validates_it():
    torch.manual_seed(0)
    module = TranslationModule(family="transformer", d_model=16, heads=2, enc_layers=1, dec_layers=1,
                               ffn=32, dropout=0.0, val_bleu=False)
    # A budget that the 7th batch of the first epoch crosses: find it from the data itself.
    dm = TranslationDataModule(**DATA)
    dm.setup("fit")
    sizes = [tokens_of(b) for b in dm.train_dataloader()]
    assert len(sizes) > 10
    budget = TrainingBudget(tokens=sum(sizes[:6]) + 1)
    trainer, recorder = fit(module, budget, max_epochs=5)
    assert [tokens_of(b) for b in recorder.batches] == sizes[:7]
    assert trainer.global_step == 7 and recorder.validated == [7]
    assert budget.used["tokens"] == sum(sizes[:7]) == module.train_tokens
    summary = budget.summary(trainer)
    assert summary["train_tokens"] == sum(sizes[:7]) and summary["train_flops"] > 0
    assert summary["stopped_by"] == "budget.tokens" and summary["budget_reached"] is True
    assert (summary["budget_steps"], summary["budget_tokens"], summary["budget_flops"]) == (
        None, sum(sizes[:6]) + 1, None)


def test_flop_budget_counts_every_step_of_an_lstm_exactly():
    """An LSTM decoder runs on oneDNN's fused kernel, which FlopCounterMode does not see: the
    count must still equal FlopCounterMode's full count of the same batches, recounted unrolled."""
    torch.manual_seed(0)
    module = TranslationModule(family="rnn", cell="lstm", attention="luong", scoring="general",
                               d_model=16, enc_layers=1, dec_layers=1, dropout=0.0, val_bleu=False)
    budget = TrainingBudget(flops=5e7)
    trainer, recorder = fit(module, budget, max_epochs=5)
    flops = [u["flops"] for u in recorder.used]
    assert flops[-2] < 5e7 <= flops[-1] and budget.stopped_by == "budget.flops"
    assert recorder.validated[-1] == trainer.global_step == len(flops)

    def count(batch) -> int:
        counter = FlopCounterMode(display=False, custom_mapping=ATTENTION_FORMULAS)
        with torch.backends.mkldnn.flags(enabled=False), counter:
            logits = module.net(batch["src"], batch["tgt_in"]).logits
            F.cross_entropy(logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=PAD).backward()
        return counter.get_total_flops()

    assert budget.used["flops"] == sum(count(b) for b in recorder.batches)


@pytest.mark.slow
def test_summary_says_when_another_limit_came_before_the_budget(tmp_path):
    result = cli_in_process("fit", *SMALL, "--run.root", tmp_path, "--run.id", "short",
                            "--trainer.max_epochs", "1", "--budget.tokens", "1000000")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ended by max_epochs before its budget was used up" in result.stderr
    summary = json.loads((tmp_path / "default" / "short" / "summary.json").read_text())
    assert summary["stopped_by"] == "max_epochs" and summary["budget_reached"] is False
    assert summary["budget_tokens"] == 1000000 and 0 < summary["train_tokens"] < 1000000
    assert summary["train_flops"] > 0


@pytest.mark.slow
def test_step_budget_is_max_steps_and_validates_its_last_step(tmp_path):
    result = cli_in_process("fit", *SMALL, "--run.root", tmp_path, "--run.id", "steps", "--budget.steps", "5")
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "default" / "steps"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["stopped_by"] == "budget.steps"
    assert summary["budget_reached"] is True and summary["budget_steps"] == 5
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["budget"] == {
        "steps": 5, "tokens": None, "flops": None}
    with open(run_dir / "metrics.csv") as f:   # Lightning logs what follows step n at step n - 1
        assert [r["step"] for r in csv.DictReader(f) if r["val_loss"]] == ["4"]


@pytest.mark.parametrize("args,message", [
    (["--budget.tokens", "0"], "budget.tokens"),
    (["--budget.flops", "-1e9"], "budget.flops"),
    (["--budget.steps", "5", "--trainer.max_steps", "3"], "--budget.steps 5 and --trainer.max_steps 3"),
])
def test_bad_budgets_are_config_errors(tmp_path, args, message):
    result = cli_in_process("fit", *SMALL, "--run.root", tmp_path, *args)
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.slow
def test_budget_carries_across_an_interrupted_and_resumed_run(tmp_path):
    budget = ["--budget.tokens", "9000", "--trainer.max_epochs", "20"]
    # Only the cut run needs a process of its own (a real SIGTERM); the others run in this one.
    full = cli_in_process("fit", *SMALL, *budget, "--run.root", tmp_path, "--run.id", "full")
    assert full.returncode == 0, full.stderr[-3000:]
    cut = run_cli("fit", *SMALL, *budget, "--run.root", tmp_path, "--run.id", "cut",
                  "--trainer.callbacks+=interrupt.SignalAfterSteps", "--trainer.callbacks.steps", "30",
                  env=cli_env(PYTHONPATH=str(REPO / "tests")))
    assert cut.returncode == 143, cut.stderr[-3000:]
    resumed = cli_in_process("fit", *SMALL, *budget, "--run.root", tmp_path, "--run.id", "cut",
                             "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summaries = [json.loads((tmp_path / "default" / run / "summary.json").read_text())
                 for run in ("full", "cut")]
    keys = ("steps", "train_tokens", "train_flops", "stopped_by", "budget_reached")
    assert [s[k] for k in keys for s in summaries[:1]] == [s[k] for k in keys for s in summaries[1:]]
    assert summaries[0]["steps"] > 30 and summaries[0]["stopped_by"] == "budget.tokens"
    assert summaries[1]["val_loss"] == pytest.approx(summaries[0]["val_loss"], abs=1e-6)


@pytest.mark.slow
def test_ddp_ranks_sum_their_tokens_and_stop_together(tmp_path):
    """Two gloo ranks: the count is the sum of both ranks' batches, and both stop at the first
    step where that sum reaches the budget (a rank that did not stop would hang the run)."""
    result = run_cli("fit", *SMALL, "--run.root", tmp_path, "--run.id", "ddp", "--budget.tokens", "1500",
                     "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
                     timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "default" / "ddp" / "summary.json").read_text())
    # one run, claimed once by global rank 0 for both ranks (a second claim would have stopped rank 1)
    assert len(summary["uuid"]) == 32 and not (tmp_path / "default" / "ddp" / "CLAIM").exists()
    # Each rank's epoch-0 batches, as its sampler gives them.
    dm = TranslationDataModule(**DATA)
    dm.setup("fit")
    examples = dm.dataset("train")
    lengths = [padded_length(ex["src"], ex["tgt"]) for ex in examples]
    per_step = [0] * 100
    for rank in (0, 1):
        sampler = TokenBatchSampler(lengths, DATA["max_tokens"], shuffle=True, seed=dm.hparams.data_seed,
                                    num_replicas=2, rank=rank, pad_to_equal=True)
        for step, batch in enumerate(sampler):
            per_step[step] += sum(len(examples[i]["tgt"]) + 1 for i in batch)
    steps = summary["steps"]
    assert summary["stopped_by"] == "budget.tokens" and summary["world_size"] == 2
    assert steps < sum(1 for tokens in per_step if tokens)   # within the first epoch
    assert summary["train_tokens"] == sum(per_step[:steps])
    assert sum(per_step[:steps - 1]) < 1500 <= sum(per_step[:steps])


@pytest.mark.slow
def test_a_reference_config_trains_on_multi30k_to_a_tiny_flop_budget(shared_data, tmp_path):
    result = run_cli("fit", "--config", CONFIGS / "reference" / "multi30k-lstm-general.yaml",
                     "--run.root", tmp_path, "--run.id", "m30k", "--data.limit_train", "2000",
                     "--data.vocab_size", "1000", "--data.cache_dir", tmp_path / "cache",
                     "--budget.flops", "1e11", "--trainer.limit_val_batches", "2",
                     "--trainer.num_sanity_val_steps", "0", "--model.val_bleu", "false",
                     "--diagnostics.heatmaps", "0", "--trainer.enable_progress_bar", "false")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "default" / "m30k" / "summary.json").read_text())
    # ~5e10 FLOPs a step (4,096-token batches, 1,000-piece vocabulary)
    assert summary["stopped_by"] == "budget.flops" and summary["budget_flops"] == 1e11
    assert summary["train_flops"] >= 1e11 and summary["steps"] >= 2
    assert summary["train_seconds"] > 0 and summary["val_loss"] > 0


def test_reference_configs_share_one_compute_budget_and_no_wall_clock_limit():
    configs = sorted((CONFIGS / "reference").glob("multi30k-*.yaml"))
    assert len(configs) >= 7
    loaded = [yaml.safe_load(path.read_text()) for path in configs]
    assert {float(c["budget"]["flops"]) for c in loaded} == {float(loaded[0]["budget"]["flops"])}
    assert all("max_time" not in c["trainer"] for c in loaded)
