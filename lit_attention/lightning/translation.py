"""LightningModule for encoder-decoder translation: loss, optimiser, exact perplexity, BLEU/chrF.

The nn.Module is built in ``configure_model`` from registry names once the data module has
decided the vocabulary sizes, so one config line (``model.family``) swaps the whole architecture.
"""

from __future__ import annotations

import math
import time
from typing import Literal, Optional

import torch
import torch.distributed as dist
from lightning.pytorch import LightningModule

from lit_attention import registry
from lit_attention.data.vocab import PAD
from lit_attention.decoding import beam_search, greedy_decode
from lit_attention.diagnostics.bleu_by_length import bleu_by_length, source_words
from lit_attention.lightning.optim import adam
from lit_attention.lightning.steps import attached_datamodule, logs_this_step
from lit_attention.metrics import bleu_chrf, perplexity, token_nll
from lit_attention.models import build_seq2seq, count_parameters, match_width
from lit_attention.models.loss import smoothed_cross_entropy

Family = Literal[registry.FAMILIES]
Cell = Literal[registry.CELLS]
Attention = Literal[registry.ATTENTION]
Context = Literal[registry.CONTEXT]
EncOutput = Literal[tuple(registry.ENC_OUTPUT)]
Scoring = Literal[tuple(registry.SCORING)]
Positional = Literal[tuple(registry.POSITIONAL)]
Norm = Literal[registry.NORM]
# Hyperparameters of decoding, not of the trained model: `validate`/`test` take them from the
# command line and config of that invocation, never from the checkpoint (lit_attention/cli.py).
DECODING_HPARAMS = ("beam_size", "length_penalty", "max_len_a", "max_len_b")

def inverse_sqrt_warmup(warmup: int):
    """Linear warm-up to the base rate, then decay with 1/sqrt(step)."""
    def factor(step: int) -> float:
        step = step + 1
        return min(step / max(warmup, 1), math.sqrt(max(warmup, 1) / step))
    return factor


class TranslationModule(LightningModule):
    """Train and evaluate any registered encoder-decoder on a TranslationDataModule."""

    def __init__(
        self,
        family: Family = "transformer",
        cell: Cell = "lstm",
        attention: Attention = "bahdanau",
        scoring: Optional[Scoring] = None,
        positional: Positional = "sinusoidal",
        context: Context = "init",
        d_model: int = 256,
        emb_size: Optional[int] = None,
        heads: int = 4,
        enc_layers: int = 3,
        dec_layers: int = 3,
        ffn: int = 1024,
        dropout: float = 0.1,
        norm: Norm = "pre",
        tie_embeddings: bool = True,
        bidirectional: bool = True,
        input_feeding: bool = False,
        enc_output: EncOutput = "concat",
        rank: int = 32,
        teacher_forcing: float = 1.0,
        match_params: Optional[int] = None,
        label_smoothing: float = 0.1,
        lr: float = 5e-4,
        warmup: int = 400,
        betas: tuple[float, float] = (0.9, 0.98),
        weight_decay: float = 0.0,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        val_bleu: bool = True,
        beam_size: int = 5,
        length_penalty: float = 1.0,
        length_buckets: tuple[int, ...] = (10, 20, 30),
        min_bucket_sentences: int = 50,
        src_vocab_size: int = 0,
        tgt_vocab_size: int = 0,
    ):
        super().__init__()
        if scoring is None:
            scoring = "scaled_dot" if family == "transformer" else "additive"
        registry.check_seq2seq(family, cell, attention, scoring, positional, context,
                               input_feeding, bidirectional, enc_output)
        if min_bucket_sentences < 0:
            raise ValueError(f"min_bucket_sentences must be >= 0 (0 keeps every length bucket), "
                             f"got {min_bucket_sentences}")
        self.save_hyperparameters()
        self.hparams.scoring = scoring
        self.net = None
        self._eval: dict[str, dict] = {}
        self.hyps: dict[str, list[str]] = {}
        self.refs: dict[str, list[str]] = {}
        self.eval_extras: dict[str, dict] = {}
        self.train_tokens = 0

    # -- model construction ------------------------------------------------------------------

    def _arch_options(self) -> dict:
        h = self.hparams
        return dict(cell=h.cell, attention=h.attention, scoring=h.scoring, positional=h.positional,
                    context=h.context, d_model=h.d_model, hidden_size=h.d_model,
                    emb_size=h.emb_size or h.d_model, heads=h.heads, enc_layers=h.enc_layers,
                    dec_layers=h.dec_layers, ffn=h.ffn, dropout=h.dropout, norm=h.norm,
                    tie_embeddings=h.tie_embeddings, bidirectional=h.bidirectional,
                    input_feeding=h.input_feeding, enc_output=h.enc_output, rank=h.rank)

    def configure_model(self) -> None:
        if self.net is not None:
            return
        h = self.hparams
        dm = attached_datamodule(self)
        if dm is not None:
            h.src_vocab_size, h.tgt_vocab_size = dm.src_vocab_size, dm.tgt_vocab_size
        if not (h.src_vocab_size and h.tgt_vocab_size):
            raise ValueError("vocabulary sizes are unknown: attach a data module or set model.src_vocab_size")
        options = self._arch_options()
        if h.match_params:
            width = match_width(h.family, h.match_params, h.src_vocab_size, h.tgt_vocab_size,
                                multiple=max(8, h.heads) if h.family == "transformer" else 8,
                                ffn_ratio=h.ffn / h.d_model, **options)
            h.d_model, h.emb_size, h.ffn = width, width, int(round(width * h.ffn / h.d_model))
            h.match_params = None  # the checkpoint records the chosen width, not the search
            options = self._arch_options()
        self.net = build_seq2seq(h.family, h.src_vocab_size, h.tgt_vocab_size, **options)

    def describe(self) -> dict:
        h = self.hparams
        model = {k: h[k] for k in registry.variant_fields(h.family, h.attention, h.scoring)}
        return {"model": model, "params": count_parameters(self.net) if self.net is not None else None}

    # -- training ----------------------------------------------------------------------------

    def training_step(self, batch, batch_idx):
        out = self.net(batch["src"], batch["tgt_in"], teacher_forcing=self.hparams.teacher_forcing)
        logits = out.logits
        loss = smoothed_cross_entropy(logits.reshape(-1, logits.size(-1)), batch["tgt_out"].reshape(-1),
                                      ignore_index=PAD, label_smoothing=self.hparams.label_smoothing)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite training loss ({loss.item()}) at step {self.global_step}")
        self.train_tokens += int((batch["tgt_out"] != PAD).sum())
        if logs_this_step(self):
            self.log("train_loss", loss, prog_bar=True, batch_size=batch["src"].size(0))
            self.log("lr", self.optimizers().param_groups[0]["lr"], batch_size=1)
        return loss

    def configure_optimizers(self):
        h = self.hparams
        opt = adam(self, h.lr, h.betas, h.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, inverse_sqrt_warmup(h.warmup))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # -- evaluation --------------------------------------------------------------------------

    def _eval_start(self, split: str) -> None:
        self._eval[split] = {"nll": 0.0, "tokens": 0, "hyps": {}, "seconds": 0.0}

    def decoding_settings(self, beam_size: int = 1) -> dict:
        """What produced a split's hypotheses (recorded next to its BLEU in the summary)."""
        h = self.hparams
        beam = beam_size > 1
        return {"method": "beam" if beam else "greedy", "beam_size": beam_size,
                "length_penalty": h.length_penalty if beam else None,
                "max_len_a": h.max_len_a, "max_len_b": h.max_len_b}

    def decode(self, src: torch.Tensor, beam_size: int = 1) -> torch.Tensor:
        h = self.hparams
        self.last_decoding = self.decoding_settings(beam_size)
        if beam_size > 1:
            return beam_search(self.net, src, beam_size, h.length_penalty, h.max_len_a, h.max_len_b)
        return greedy_decode(self.net, src, h.max_len_a, h.max_len_b)

    def _eval_step(self, split: str, batch, decode: bool, beam_size: int = 1) -> None:
        if "keep" in batch and not batch["keep"].all():
            # padding repeats that give every DDP rank a batch: not part of the metrics
            batch = {k: v[batch["keep"]] for k, v in batch.items()}
            if batch["src"].size(0) == 0:
                return
        out = self.net(batch["src"], batch["tgt_in"])
        nll, n = token_nll(out.logits, batch["tgt_out"])
        acc = self._eval[split]
        acc["nll"] += float(nll)
        acc["tokens"] += int(n)
        if decode:
            start = time.perf_counter()
            ids = self.decode(batch["src"], beam_size)
            acc["seconds"] += time.perf_counter() - start
            tok = self.trainer.datamodule.tgt_tokenizer
            for i, row in zip(batch["idx"].tolist(), ids.tolist()):
                acc["hyps"][i] = tok.decode(row)

    def _eval_end(self, split: str, prefix: str, decode: bool) -> None:
        acc = self._eval.pop(split)
        totals = torch.tensor([acc["nll"], acc["tokens"]], dtype=torch.float64)
        hyps, seconds = acc["hyps"], acc["seconds"]
        if dist.is_available() and dist.is_initialized() and self.trainer.world_size > 1:
            totals = totals.to(self.device)
            dist.all_reduce(totals)
            gathered = [None] * self.trainer.world_size
            dist.all_gather_object(gathered, (hyps, seconds))
            hyps = {k: v for part in gathered for k, v in part[0].items()}
            seconds = max(part[1] for part in gathered)
        nll, tokens = totals.tolist()
        self.log(f"{prefix}_loss", nll / max(tokens, 1), batch_size=1)
        self.log(f"{prefix}_ppl", perplexity(nll, tokens), batch_size=1, prog_bar=True)
        if decode and hyps:
            refs = self.trainer.datamodule.references(split)
            ordered = [hyps.get(i, "") for i in range(len(refs))]
            scores = bleu_chrf(ordered, refs)
            self.hyps[split] = ordered
            self.refs[split] = refs
            # Buckets count whitespace words of the raw source, whatever the model's tokenizer.
            lengths = source_words(self.trainer.datamodule.sources(split))
            self.eval_extras[split] = {
                f"{prefix}_bleu_by_length": bleu_by_length(lengths, ordered, refs, self.hparams.length_buckets,
                                                           self.hparams.min_bucket_sentences),
                f"{prefix}_decode_seconds": seconds,
                f"{prefix}_sentences_per_second": len(hyps) / seconds if seconds else None,
            }
            self.sacrebleu_signature = scores["bleu_signature"]
            self.chrf_signature = scores["chrf_signature"]
            self.log(f"{prefix}_bleu", scores["bleu"], batch_size=1, prog_bar=True)
            self.log(f"{prefix}_chrf", scores["chrf"], batch_size=1)

    def on_validation_epoch_start(self):
        self._eval_start("val")

    def validation_step(self, batch, batch_idx):
        self._eval_step("val", batch, decode=self.hparams.val_bleu and not self.trainer.sanity_checking)

    def on_validation_epoch_end(self):
        self._eval_end("val", "val", decode=self.hparams.val_bleu and not self.trainer.sanity_checking)

    def on_test_epoch_start(self):
        self._eval_start("test")

    def test_step(self, batch, batch_idx):
        self._eval_step("test", batch, decode=True, beam_size=self.hparams.beam_size)

    def on_test_epoch_end(self):
        self._eval_end("test", "test", decode=True)
