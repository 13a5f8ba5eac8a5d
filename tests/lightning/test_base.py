"""lit_attention/lightning/base.py: the skeleton both task modules share, on a bigram model small
enough to check every number by hand."""

import csv
import math

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.loggers import CSVLogger
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader

from lit_attention.data.vocab import PAD
from lit_attention.lightning.base import SequenceModule
from lit_attention.lightning.budget import TrainingBudget
from lit_attention.lightning.diagnostics import DiagnosticsCallback
from lit_attention.lightning.steps import progress_bar
from lit_attention.tracking.run_store import RunDir, RunStoreLogger
from lit_attention.metrics import token_nll

V = 7


class Bigram(SequenceModule):
    """Each token's logits are a row of one table; ``blow_up_at`` makes that step's loss inf."""

    def __init__(self, blow_up_at: int | None = None):
        super().__init__()
        self.net = torch.nn.Embedding(V, V)
        self.blow_up_at = blow_up_at
        self.evaluations = []          # (hook, split) as the skeleton calls them

    def training_loss(self, batch):
        logits = self.net(batch["tokens"])
        loss = F.cross_entropy(logits.reshape(-1, V), batch["targets"].reshape(-1), ignore_index=PAD)
        if self.global_step == self.blow_up_at:
            loss = loss * float("inf")
        return loss, batch["targets"]

    def evaluate(self, split, batch):
        return token_nll(self.net(batch["tokens"]), batch["targets"])

    def evaluation_start(self, split):
        self.evaluations.append(("start", split))

    def evaluation_end(self, split):
        self.evaluations.append(("end", split))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def batch(rows, keep=None) -> dict:
    """rows: token lists, PAD-padded to one length; targets are the tokens shifted by one."""
    ids = torch.tensor(rows)
    targets = torch.cat([ids[:, 1:], torch.full((len(rows), 1), PAD)], dim=1)
    out = {"tokens": ids, "targets": targets}
    if keep is not None:
        out["keep"] = torch.tensor(keep)
    return out


TRAIN = [batch([[2, 3, 4, 5], [2, 6, PAD, PAD]]), batch([[2, 4, 4, PAD]]), batch([[3, 5, 6, 2, 1]])] * 2
# the last rows of the second batch and the whole third are padding repeats (keep False)
EVAL = [batch([[2, 3, 4, 5], [2, 6, PAD, PAD]], keep=[True, True]),
        batch([[4, 4, 1], [5, 6, 3]], keep=[True, False]),
        batch([[2, 3, 4, 5]], keep=[False])]


def loader(batches):
    return DataLoader(batches, batch_size=None)


def trainer(tmp_path, **kwargs) -> Trainer:
    return Trainer(**{**dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False), **kwargs})


def test_training_counts_target_tokens_and_logs_loss_and_rate_on_the_logged_steps(tmp_path):
    torch.manual_seed(0)
    module = Bigram()
    fit = trainer(tmp_path, max_steps=6, log_every_n_steps=2, logger=CSVLogger(tmp_path, name="csv"))
    fit.fit(module, loader(TRAIN))
    assert module.train_tokens == 2 * (3 + 1 + 2 + 4)         # non-PAD targets of the six batches
    with open(next(tmp_path.rglob("metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows if r.get("train_loss")] == [1, 3, 5]
    assert [float(r["lr"]) for r in rows if r.get("train_loss")] == pytest.approx([0.1] * 3)


def test_a_non_finite_loss_stops_training_naming_the_step(tmp_path):
    module = Bigram(blow_up_at=3)
    with pytest.raises(FloatingPointError, match=r"non-finite training loss \(inf\) at step 3"):
        trainer(tmp_path, max_steps=6).fit(module, loader(TRAIN))
    assert module.train_tokens == 3 + 1 + 2 + 4 + 0, "the bad step's tokens are not counted"


class BigramOnAnAccelerator(Bigram):
    """Checks its loss every ``every`` steps, as a module on a GPU does (a CPU checks every step)."""

    def __init__(self, blow_up_at: int, every: int):
        super().__init__(blow_up_at)
        self.every = every

    def finite_check_every(self) -> int:
        return self.every


def test_a_non_finite_loss_checked_every_few_steps_still_names_its_step(tmp_path):
    module = BigramOnAnAccelerator(blow_up_at=3, every=3)   # checks after steps 2 and 5
    with pytest.raises(FloatingPointError, match=r"non-finite training loss \(inf\) at step 3"):
        trainer(tmp_path, max_steps=6).fit(module, loader(TRAIN))
    assert module.global_step == 5, "found at the first check after it, not later"
    assert module.train_tokens == 4 + 2 + 4 + 4 + 2, "steps 0-4 counted, not the one that checked"


def test_a_non_finite_loss_after_the_last_check_is_found_when_training_ends(tmp_path):
    module = BigramOnAnAccelerator(blow_up_at=4, every=100)
    with pytest.raises(FloatingPointError, match=r"non-finite training loss \(inf\) at step 4"):
        trainer(tmp_path, max_steps=6).fit(module, loader(TRAIN))


def test_evaluation_reports_exact_perplexity_of_the_kept_rows_for_each_split(tmp_path):
    torch.manual_seed(0)
    module = Bigram()
    run = trainer(tmp_path)
    [val] = run.validate(module, loader(EVAL), verbose=False)
    [test] = run.test(module, loader(EVAL), verbose=False)
    # Independently: the kept rows alone, token by token.
    with torch.no_grad():
        kept = [batch([[2, 3, 4, 5], [2, 6, PAD, PAD]]), batch([[4, 4, 1]])]
        nll = sum(F.cross_entropy(module.net(b["tokens"]).reshape(-1, V), b["targets"].reshape(-1),
                                  ignore_index=PAD, reduction="sum").item() for b in kept)
    tokens = 3 + 1 + 2
    for split, result in (("val", val), ("test", test)):
        assert set(result) == {f"{split}_loss", f"{split}_ppl"}
        assert result[f"{split}_loss"] == pytest.approx(nll / tokens, rel=1e-6)
        assert result[f"{split}_ppl"] == pytest.approx(math.exp(nll / tokens), rel=1e-6)
    assert module.evaluations == [("start", "val"), ("end", "val"), ("start", "test"), ("end", "test")]


def test_the_sanity_check_and_validation_in_fit_are_the_val_split(tmp_path):
    module = Bigram()
    trainer(tmp_path, max_epochs=1, num_sanity_val_steps=1).fit(module, loader(TRAIN), loader(EVAL))
    assert module.evaluations == [("start", "val"), ("end", "val")] * 2


# -- no training step reads a value back from the device ----------------------------------------

READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__,
         torch.Tensor.__float__}


class HostReads(TorchFunctionMode):
    """Counts reads of tensor values into Python by training step (on a GPU each one waits for
    every kernel queued so far); reads of the CPU batch before it moves to the device are free."""

    def __init__(self):
        super().__init__()
        self.step: int | None = None
        self.by_step: dict[int, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READS and self.step is not None:
            self.by_step[self.step] = self.by_step.get(self.step, 0) + 1
        return func(*args, **(kwargs or {}))


class Watch(Callback):
    def __init__(self, reads: HostReads):
        self.reads = reads

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.reads.step = trainer.global_step

    def on_train_end(self, trainer, pl_module):
        self.reads.step = None


class WatchedBigram(BigramOnAnAccelerator):
    def __init__(self, reads: HostReads, every: int):
        super().__init__(blow_up_at=None, every=every)
        self.reads = reads

    target_key = "targets"

    def on_before_batch_transfer(self, batch, dataloader_idx):
        step, self.reads.step = self.reads.step, None     # the CPU batch: not a device read
        try:
            return super().on_before_batch_transfer(batch, dataloader_idx)
        finally:
            self.reads.step = step


def test_only_the_logged_steps_of_fit_read_values_back_from_the_device(tmp_path):
    """fit with the callbacks `lit-attention fit` adds (budget counting tokens and FLOPs, gradient
    diagnostics, run-store logger, progress bar): the steps between two logged ones read nothing
    back; the loss check, the gradient norms and the logger read all of theirs at a logged step, the
    per-module gradient norms at the steps they are measured."""
    every = 4
    reads = HostReads()
    module = WatchedBigram(reads, every=every)
    callbacks = [TrainingBudget(tokens=10 ** 6), DiagnosticsCallback(RunDir(tmp_path / "run"), gradflow_every=0,
                                                                      module_norm_every=6, heatmaps=0),
                 Watch(reads)]
    fit = trainer(tmp_path, max_steps=12, log_every_n_steps=every, logger=RunStoreLogger(RunDir(tmp_path / "run")),
                  callbacks=[*callbacks, progress_bar({"log_every_n_steps": every})], enable_progress_bar=True)
    with reads:
        fit.fit(module, loader(TRAIN * 2))
    logged = {step for step in range(12) if (step + 1) % every == 0} | {0, 6}
    assert {step: n for step, n in reads.by_step.items() if step not in logged} == {}
    assert set(reads.by_step) == logged                   # what is read is read at those steps
    assert module.train_tokens == 2 * 2 * (4 + 2 + 4)     # counted on the CPU batches, all of them
