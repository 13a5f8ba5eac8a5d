"""The translation DataModule under a real Lightning Trainer: epochs reshuffle, mid-epoch resume."""

import lightning.pytorch as L
from lightning.pytorch.callbacks import ModelCheckpoint
import torch
from torch import nn

from lit_attention.data.translation import TranslationDataModule


class RecordBatches(L.LightningModule):
    """Smallest trainable module; remembers which examples every training step saw."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, 4)
        self.out = nn.Linear(4, vocab_size)
        self.seen: dict[int, list[list[int]]] = {}

    def training_step(self, batch, batch_idx):
        self.seen.setdefault(self.current_epoch, []).append(batch["idx"].tolist())
        logits = self.out(self.embed(batch["tgt_in"]))
        return nn.functional.cross_entropy(logits.flatten(0, 1), batch["tgt_out"].flatten())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def trainer(**kwargs):
    kwargs.setdefault("enable_checkpointing", False)
    return L.Trainer(accelerator="cpu", devices=1, logger=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     use_distributed_sampler=False, limit_val_batches=0,
                     num_sanity_val_steps=0, **kwargs)


def datamodule(tmp_path):
    return TranslationDataModule(task="copy", n_train=300, n_val=20, n_test=20, max_tokens=200,
                                 cache_dir=str(tmp_path))


def test_every_epoch_covers_the_data_in_a_new_order(tmp_path):
    torch.manual_seed(0)
    dm = datamodule(tmp_path)
    model = RecordBatches(dm.tgt_vocab_size)
    trainer(max_epochs=3).fit(model, datamodule=dm)
    orders = [[i for batch in model.seen[e] for i in batch] for e in range(3)]
    for order in orders:
        assert sorted(order) == list(range(300))
    assert orders[0] != orders[1] != orders[2]


def test_resume_mid_epoch_skips_consumed_batches(tmp_path):
    torch.manual_seed(0)
    dm = datamodule(tmp_path)
    reference = RecordBatches(dm.tgt_vocab_size)
    trainer(max_epochs=2).fit(reference, datamodule=dm)
    n_batches = len(reference.seen[1])
    stop = n_batches + 3                                    # 3 batches into the second epoch

    # a checkpoint written by ModelCheckpoint in the middle of the second epoch
    first = RecordBatches(dm.tgt_vocab_size)
    save = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=stop, save_top_k=-1)
    run = trainer(max_epochs=2, callbacks=[save], enable_checkpointing=True)
    run.fit(first, datamodule=datamodule(tmp_path))
    assert first.seen == reference.seen                     # same seed, same batches
    ckpt = str(tmp_path / "ckpt" / f"epoch=1-step={stop}.ckpt")

    second = RecordBatches(dm.tgt_vocab_size)
    trainer(max_epochs=2).fit(second, datamodule=datamodule(tmp_path), ckpt_path=ckpt)
    assert list(second.seen) == [1]
    assert reference.seen[1][:3] + second.seen[1] == reference.seen[1]


class RecordLoaders(L.Callback):
    def __init__(self):
        self.loaders = []

    def on_train_epoch_start(self, trainer, module):
        self.loaders.append(trainer.train_dataloader)


def test_loader_workers_persist_across_epochs_and_give_the_batches_of_one_process(tmp_path):
    # Lightning asks for the training loader every epoch; workers started anew each time cost
    # ~50 ms per start here, at every epoch and validation.
    seen, loaders = {}, {}
    for workers in (0, 1):
        torch.manual_seed(0)
        dm = TranslationDataModule(task="copy", n_train=300, n_val=20, n_test=20, max_tokens=200,
                                   cache_dir=str(tmp_path), num_workers=workers)
        model, record = RecordBatches(dm.tgt_vocab_size), RecordLoaders()
        trainer(max_epochs=3, callbacks=[record], reload_dataloaders_every_n_epochs=1).fit(model, datamodule=dm)
        seen[workers], loaders[workers] = model.seen, record.loaders
    assert seen[1] == seen[0]                                   # every epoch's batches, in order
    assert len({id(loader) for loader in loaders[1]}) == 1 and loaders[1][0].persistent_workers
    assert len({id(loader) for loader in loaders[0]}) == 3     # without workers: a loader an epoch
