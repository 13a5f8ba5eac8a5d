"""Gradient and attention diagnostics during training, written to the run store (and any logger).

- global gradient norm every step (before clipping: the module's ``grad_norm()``, the same tensor
  clipping scales by, computed once) and the fraction of steps that were clipped (each step's norm
  stays on the device until the next logged step, when they are read together: no step waits for
  the accelerator);
- per-module gradient norms every ``module_norm_every`` steps (`grad_norm/encoder.layers.0`);
- gradient flow through time every ``gradflow_every`` steps: ‖∂L/∂h_t‖ of every encoder state by
  distance to the loss and direction, on a fixed-seed sample of ``gradflow_sentences`` validation
  sentences long enough to reach every distance up to ``gradflow_distance``
  (`gradflow.csv`: step, direction, sentence, position, distance, norm; see diagnostics/gradflow.py);
- at the end of fit: attention entropy per layer/head and heatmaps for a few validation sentences
  (`attention/*.png`, also W&B images).

summary.json's ``measured_every`` says how many steps lie between two measurements of each.
"""

from __future__ import annotations

import contextlib
import csv
import io
import statistics

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger

from lit_attention.data.vocab import PAD
from lit_attention.diagnostics import (entropy_by_name, global_grad_norm, gradient_flow, last_layer,
                                       long_sentence_sample, per_module_grad_norms, save_heatmap)
from lit_attention.lightning.steps import logs_this_step
from lit_attention.tracking.run_store import RunDir, atomic_write
from lit_attention.tracking.schema import ATTENTION, GRADFLOW, GRADFLOW_COLUMNS


# Options that measure an encoder-decoder only (gradient flow reaching the encoder states, cross-
# attention heatmaps and entropy): a model without ``encode`` (a language model) has nothing to measure.
ENCODER_DECODER_OPTIONS = ("gradflow_every", "gradflow_sentences", "gradflow_distance", "heatmaps")


class DiagnosticsCallback(Callback):
    def __init__(self, run_dir: RunDir, module_norm_every: int = 50, module_depth: int = 2,
                 gradflow_every: int = 100, gradflow_sentences: int | None = None,
                 gradflow_distance: int | None = None, heatmaps: int = 4):
        self.run_dir, self.heatmaps = run_dir, heatmaps
        self.module_norm_every, self.module_depth = module_norm_every, module_depth
        self.gradflow_every = gradflow_every
        self.gradflow_sentences, self.gradflow_distance = gradflow_sentences, gradflow_distance
        self.norms: list[float] = []
        self.clipped = 0
        self._unread: list[torch.Tensor] = []     # norms of the steps since the last read, on the device
        self._clip: float | None = None
        self.gradflow_rows: list[dict] = []
        self._gradflow_sample: tuple[dict, int] | None = None

    # A run resumed from a checkpoint keeps the norms and gradient-flow rows measured before it.
    def state_dict(self) -> dict:
        self._read_norms()
        return {"norms": self.norms, "clipped": self.clipped, "gradflow_rows": self.gradflow_rows}

    def load_state_dict(self, state: dict) -> None:
        self.norms = list(state.get("norms", []))
        self.clipped = state.get("clipped", 0)
        self.gradflow_rows = list(state.get("gradflow_rows", []))

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Chosen on every rank, so that a gradflow_distance no sample reaches stops all of them.
        net = getattr(pl_module, "net", None)
        if self.gradflow_every and net is not None and hasattr(net, "encode"):
            self._gradflow_sample = long_sentence_sample(
                trainer.datamodule.dataset("val"), self.gradflow_sentences, self.gradflow_distance)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:   # drops rows a killed run wrote after its checkpoint
            if self.gradflow_rows:
                atomic_write(self.run_dir.path / GRADFLOW, _csv(self.gradflow_rows, header=True))
            else:
                (self.run_dir.path / GRADFLOW).unlink(missing_ok=True)

    def _read_norms(self) -> None:
        """Move the norms measured since the last read to ``norms`` (one read for all of them)."""
        if not self._unread:
            return
        read = torch.stack(self._unread).tolist()
        self._unread = []
        self.norms.extend(read)
        self.clipped += sum(bool(self._clip) and norm > self._clip for norm in read)

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer) -> None:
        net = getattr(pl_module, "net", None)
        if net is None:
            return
        self._clip = trainer.gradient_clip_val
        shared = getattr(pl_module, "grad_norm", None)    # the one clipping uses (base.py)
        self._unread.append(shared() if shared is not None else global_grad_norm(net.parameters()))
        if logs_this_step(pl_module):
            self._read_norms()
            pl_module.log("grad_norm/total", self.norms[-1], batch_size=1)
            pl_module.log("clip_fraction", self.clipped / len(self.norms), batch_size=1)
        step = trainer.global_step
        if self.module_norm_every and step % self.module_norm_every == 0 and trainer.is_global_zero:
            norms = {f"grad_norm/{name}": value for name, value in per_module_grad_norms(net, self.module_depth).items()}
            # straight to the loggers, at this step only: through pl_module.log the values of the
            # measured step were written again at every later logged step, as if measured there
            for logger in trainer.loggers:
                logger.log_metrics(norms, step=step)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        step = trainer.global_step   # a sample is chosen for an encoder-decoder with gradflow_every
        if self._gradflow_sample is None or step % self.gradflow_every != 0 or not trainer.is_global_zero:
            return
        batch, max_distance = self._gradflow_sample
        batch = {k: v.to(pl_module.device) for k, v in batch.items()}
        with self._attention_backends(pl_module):
            rows = gradient_flow(pl_module.net, batch, max_distance)
        self.add_gradflow_rows([{**row, "step": step, "norm": float(f"{row['norm']:.6g}")} for row in rows])

    @staticmethod
    def _attention_backends(pl_module: LightningModule):
        """The module's choice of attention kernels (models/sdpa_backends.py), if it makes one."""
        choose = getattr(pl_module, "attention_backends", None)
        return choose() if choose is not None else contextlib.nullcontext()

    def measured_every(self, trainer: Trainer, pl_module: LightningModule) -> dict:
        """Steps between two measurements of each diagnostic (None: not measured)."""
        check = getattr(pl_module, "finite_check_every", None)
        return {"grad_norm_total": 1, "clip_fraction": 1,
                "grad_norm_modules": self.module_norm_every or None,
                "gradflow": self.gradflow_every or None,
                "train_loss_logged": trainer.log_every_n_steps or None,
                "finite_loss_check": check() if check is not None else None}

    def add_gradflow_rows(self, rows: list[dict]) -> None:
        """Keep a measurement's rows and append them to gradflow.csv. (Rewriting the whole file at
        every measurement cost time in proportion to all rows so far: quadratic over a run.)"""
        path = self.run_dir.path / GRADFLOW
        text = _csv(rows, header=not path.exists())
        self.gradflow_rows.extend(rows)
        with open(path, "a", encoding="utf-8", newline="") as f:
            f.write(text)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        net = getattr(pl_module, "net", None)
        self._read_norms()
        if trainer.is_global_zero:
            self.run_dir.update_summary(measured_every=self.measured_every(trainer, pl_module))
        if not trainer.is_global_zero or net is None or not hasattr(net, "encode"):
            return
        fields = {}
        if self.norms:
            fields.update(grad_norm_median=statistics.median(self.norms),
                          clip_fraction=self.clipped / len(self.norms))
        if self.heatmaps:
            fields["attention_entropy"] = self._attention(trainer, pl_module, net)
        self.run_dir.update_summary(**fields)

    @torch.no_grad()
    def _attention(self, trainer: Trainer, pl_module: LightningModule, net) -> dict:
        loader = trainer.datamodule.val_dataloader()
        batch = {k: v.to(pl_module.device) for k, v in next(iter(loader)).items()}
        was_training = net.training
        net.eval()
        with self._attention_backends(pl_module):
            out = net(batch["src"], batch["tgt_in"], need_weights=True)
        net.train(was_training)
        if not out.attention:
            return {}
        entropy = entropy_by_name(out.attention, batch["src"] == PAD, batch["tgt_in"] == PAD)
        cross = last_layer(out.attention, "cross")
        if cross is None:
            return entropy
        weights = out.attention[cross].mean(dim=1)                 # last cross-attention, head mean
        dm = trainer.datamodule
        paths = []
        for i in range(min(self.heatmaps, batch["src"].size(0))):
            src = [t for t in batch["src"][i].tolist() if t != PAD]
            tgt = [t for t in batch["tgt_out"][i].tolist() if t != PAD]
            path = self.run_dir.path / ATTENTION / f"val-{i}.png"
            save_heatmap(weights[i, :len(tgt), :len(src)], dm.src_tokenizer.pieces(src),
                         dm.tgt_tokenizer.pieces(tgt), path, title=f"{cross} (mean over heads)")
            paths.append(str(path))
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_image("attention", paths, step=trainer.global_step)
        return entropy


def _csv(rows: list[dict], header: bool) -> str:
    """gradflow.csv lines of ``rows`` (with the header line first if asked)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=GRADFLOW_COLUMNS, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
