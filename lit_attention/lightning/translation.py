"""LightningModule for encoder-decoder translation: loss, optimiser, exact perplexity, BLEU/chrF.

The nn.Module is built in ``configure_model`` from registry names once the data module has
decided the vocabulary sizes, so one config line (``model.family``) swaps the whole architecture.
"""

from __future__ import annotations

import time
from typing import Literal, Optional

import torch

from lit_attention import registry
from lit_attention.data.vocab import PAD
from lit_attention.decoding import beam_search, greedy_decode
from lit_attention.decoding.greedy import check_length_budget
from lit_attention.diagnostics.bleu_by_length import bleu_by_length, bucket_bounds, source_words
from lit_attention.config_check import Inert
from lit_attention.lightning.base import Cell, Norm, Positional, SequenceModule, check_values
from lit_attention.lightning.optim import adam, inverse_sqrt_warmup, stepwise
from lit_attention.lightning.steps import attached_datamodule
from lit_attention.lightning.totals import Hypotheses
from lit_attention.metrics import bleu_chrf, token_nll
from lit_attention.models import build_seq2seq, count_parameters
from lit_attention.models.loss import decoder_loss

SEQ2SEQ = registry.SEQ2SEQ_MODELS
COMMON = registry.SEQ2SEQ_COMMON
DEFAULT = registry.CONFIG_DEFAULTS["seq2seq"]

Family = Literal[registry.FAMILIES]
Attention = Literal[tuple(registry.ATTENTION)]
Context = Literal[tuple(registry.CONTEXT)]
EncOutput = Literal[tuple(registry.ENC_OUTPUT)]
Scoring = Literal[tuple(registry.SCORING)]
# Hyperparameters of decoding, not of the trained model: `validate`/`test` take them from the
# command line and config of that invocation, never from the checkpoint (lit_attention/cli.py).
DECODING_HPARAMS = ("beam_size", "length_penalty", "max_len_a", "max_len_b")


def check_evaluation(beam_size: int, max_len_a: float, max_len_b: int, length_buckets, min_bucket_sentences: int):
    """ValueError at a decoding or BLEU-by-length value that would not act as given: a beam below 1
    (decoded greedily), a budget of no tokens, length buckets out of order (found at the first
    validation, after training)."""
    if beam_size < 1:
        raise ValueError(f"model.beam_size must be >= 1 (1: greedy decoding), got {beam_size}")
    check_length_budget(max_len_a, max_len_b)
    try:
        bucket_bounds(length_buckets)
    except ValueError as exc:
        raise ValueError(f"model.length_buckets: {exc}") from None
    if min_bucket_sentences < 0:
        raise ValueError(f"model.min_bucket_sentences must be >= 0 (0 keeps every length bucket), "
                         f"got {min_bucket_sentences}")


class TranslationModule(SequenceModule):
    """Train and evaluate any registered encoder-decoder on a TranslationDataModule.

    The options of one family (registry.SEQ2SEQ_MODELS) default to None: unset, the family's
    default applies; set for a family that does not use them, they are refused. hparams hold the
    resolved values, so a checkpoint rebuilds the same model.
    """

    target_key = "tgt_out"
    loss_inputs = ("src", "tgt_in", "tgt_out")

    def __init__(
        self,
        family: Family = DEFAULT["model.family"],
        cell: Optional[Cell] = None,
        attention: Optional[Attention] = None,
        scoring: Optional[Scoring] = None,
        positional: Optional[Positional] = None,
        context: Optional[Context] = None,
        d_model: int = COMMON["d_model"],
        emb_size: Optional[int] = None,
        heads: Optional[int] = None,
        enc_layers: int = COMMON["enc_layers"],
        dec_layers: int = COMMON["dec_layers"],
        ffn: Optional[int] = None,
        dropout: float = COMMON["dropout"],
        norm: Optional[Norm] = None,
        tie_embeddings: Optional[bool] = None,
        bidirectional: Optional[bool] = None,
        input_feeding: Optional[bool] = None,
        enc_output: Optional[EncOutput] = None,
        rank: Optional[int] = None,
        share_embeddings: Optional[bool] = None,
        rel_buckets: Optional[int] = None,
        rel_max_distance: Optional[int] = None,
        shaw_clip: Optional[int] = None,
        teacher_forcing: Optional[float] = None,
        match_params: Optional[int] = None,
        label_smoothing: float = COMMON["label_smoothing"],
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
        compile_step: bool = False,
        graph_step: bool = False,
        src_vocab_size: int = 0,
        tgt_vocab_size: int = 0,
    ):
        super().__init__()
        check_evaluation(beam_size, max_len_a, max_len_b, length_buckets, min_bucket_sentences)
        self.save_hyperparameters()
        h = self.hparams
        h.update(registry.resolve(SEQ2SEQ, family, {k: h[k] for k in registry.family_options(SEQ2SEQ)},
                                  {k: h[k] for k in registry.SEQ2SEQ_COMMON}))
        check_values(h)
        self.net = None
        self.hyps: dict[str, list[str]] = {}
        self.refs: dict[str, list[str]] = {}

    @classmethod
    def inert_settings(cls, init_args: dict) -> dict[str, Inert]:
        options = SEQ2SEQ[init_args.get("family", DEFAULT["model.family"])].options
        if "attention" in options and (init_args.get("attention") or options["attention"]) == registry.NO_ATTENTION:
            # 0, so a sweep's base may switch heatmaps off for every arm of an attention ablation
            return {"diagnostics.heatmaps": Inert("a model with attention none has no attention weights "
                                                  "to draw", harmless=(0,))}
        return {}

    # -- model construction ------------------------------------------------------------------

    def _arch_options(self) -> dict:
        """The model constructor's arguments: the shared options and the family's that act."""
        h = self.hparams
        names = (*registry.SEQ2SEQ_COMMON, *SEQ2SEQ[h.family].options)
        return {k: h[k] for k in names if k not in registry.TRAINING_OPTIONS and h[k] is not None}

    def configure_model(self) -> None:
        if self.net is not None:
            return
        h = self.hparams
        dm = attached_datamodule(self)
        if dm is not None:
            h.src_vocab_size, h.tgt_vocab_size = dm.src_vocab_size, dm.tgt_vocab_size
        if not (h.src_vocab_size and h.tgt_vocab_size):
            raise ValueError("vocabulary sizes are unknown: attach a data module or set model.src_vocab_size")
        self.build_net(lambda **o: build_seq2seq(h.family, h.src_vocab_size, h.tgt_vocab_size, **o))
        if dm is not None and self.net.max_positions is not None and hasattr(dm, "check_lengths"):
            dm.check_lengths(self.net.max_positions, f"the {h.family}'s {h.positional} position table")

    def describe(self) -> dict:
        h = self.hparams
        model = {k: h[k] for k in registry.variant_fields(h.family, h)}
        info = {"model": model, "params": count_parameters(self.net) if self.net is not None else None}
        if self._graphed_loss is not None:   # graph_step: the batch shapes whose step was replayed
            info["graphed_shapes"] = len(self._graphed_loss.graphs)
        return info

    # -- training ----------------------------------------------------------------------------

    def training_loss(self, batch):
        out = self.net(batch["src"], batch["tgt_in"], teacher_forcing=self.hparams.teacher_forcing)
        loss = decoder_loss(out, batch["tgt_out"], self.hparams.label_smoothing, ignore_index=PAD)
        return loss, batch["tgt_out"]

    def configure_optimizers(self):
        h = self.hparams
        return stepwise(adam(self, h.lr, h.betas, h.weight_decay), inverse_sqrt_warmup(h.warmup))

    # -- evaluation --------------------------------------------------------------------------

    def decode(self, src: torch.Tensor, beam_size: int = 1) -> torch.Tensor:
        h = self.hparams
        beam = beam_size > 1
        # what produced a split's hypotheses (recorded next to its BLEU in the summary)
        self.last_decoding = {"method": "beam" if beam else "greedy", "beam_size": beam_size,
                              "length_penalty": h.length_penalty if beam else None,
                              "max_len_a": h.max_len_a, "max_len_b": h.max_len_b}
        if beam:
            return beam_search(self.net, src, beam_size, h.length_penalty, h.max_len_a, h.max_len_b)
        return greedy_decode(self.net, src, h.max_len_a, h.max_len_b)

    def evaluation_start(self, split: str) -> None:
        # test decodes with beam search; validation greedily, if asked, and not in the sanity check
        if split == "test" or (self.hparams.val_bleu and not self.trainer.sanity_checking):
            self.eval_totals["hyps"] = Hypotheses().to(self.device)

    def evaluate(self, split: str, batch):
        out = self.net(batch["src"], batch["tgt_in"])
        if "hyps" in self.eval_totals:
            start = time.perf_counter()
            ids = self.decode(batch["src"], self.hparams.beam_size if split == "test" else 1)
            self.eval_totals["hyps"].update(batch["idx"], ids, time.perf_counter() - start)
        return token_nll(out.logits, batch["tgt_out"])

    def evaluation_end(self, split: str) -> None:
        if "hyps" not in self.eval_totals:
            return
        decoded, seconds = self.eval_totals["hyps"].compute()      # every rank's, by example index
        if not decoded:
            return
        tok = self.trainer.datamodule.tgt_tokenizer
        refs = self.trainer.datamodule.references(split)
        hyps = [tok.decode(decoded[i]) if i in decoded else "" for i in range(len(refs))]
        scores = bleu_chrf(hyps, refs)
        self.hyps[split] = hyps
        self.refs[split] = refs
        # Buckets count whitespace words of the raw source, whatever the model's tokenizer.
        lengths = source_words(self.trainer.datamodule.sources(split))
        self.eval_extras[split] = {
            f"{split}_bleu_by_length": bleu_by_length(lengths, hyps, refs, self.hparams.length_buckets,
                                                      self.hparams.min_bucket_sentences),
            f"{split}_decode_seconds": seconds,
            f"{split}_sentences_per_second": len(decoded) / seconds if seconds else None,
        }
        self.sacrebleu_signature = scores["bleu_signature"]
        self.chrf_signature = scores["chrf_signature"]
        self.log(f"{split}_bleu", scores["bleu"], batch_size=1, prog_bar=True)
        self.log(f"{split}_chrf", scores["chrf"], batch_size=1)
