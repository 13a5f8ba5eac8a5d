"""`lit-attention translate RUN_DIR|CKPT [--input FILE] [--output FILE] [--beam K] [--accelerator A]`:
new text through a trained translation run.

Only hypotheses are written (stdout, or --output once every line is translated): one line per
input line, in order, detokenized by the run's target tokenizer; an empty input line is decoded
as evaluation decodes one. The model decodes as the run's `test` does: its config's beam size,
length penalty and output budget, its trainer precision, in batches of at most its data.max_tokens
padded tokens formed as evaluation forms them; ``--beam 1`` decodes greedily, as validation does.
The tokenizers are the files summary.json's ``tokenizer_digest`` names, read only when their
bytes still have the recorded sha256.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import pickle
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import yaml

from lit_attention.config_check import ConfigError
from lit_attention.data.batching import TokenBatchSampler, collate, padded_length
from lit_attention.data.text import DataError, read_lines
from lit_attention.data.tokenizers import recorded_tokenizers
from lit_attention.data.translation import TranslationDataModule
from lit_attention.files import atomic_write, check_writable
from lit_attention.lightning.checksum import ChecksumError, verify
from lit_attention.lightning.cli import accelerator_unusable, check_checkpoint_file
from lit_attention.lightning.parse_errors import class_at, first_lines
from lit_attention.lightning.translation import DECODING_HPARAMS, TranslationModule
from lit_attention.models.sdpa_backends import attention_backends
from lit_attention.tracking.schema import (BEST_CHECKPOINT, CHECKPOINTS, CONFIG, SummaryError, as_line,
                                           read_summary)

PROG = "lit-attention translate"


class TranslateError(ValueError):
    """A request translate cannot honour (exit 2): the message is one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, not argparse's usage block
        raise TranslateError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Translate text with a trained run: hypotheses only, one per input line.")
    p.add_argument("run", metavar="RUN_DIR|CKPT", help="a run directory (its checkpoints/best.ckpt, which "
                   "`test` decodes) or a checkpoint in a run directory's checkpoints/")
    p.add_argument("--input", help="source sentences, one a line, UTF-8 (FILE.gz: gzipped; default: stdin)")
    p.add_argument("--output", help="file for the hypotheses, written once all are decoded (default: stdout)")
    p.add_argument("--beam", type=int, help="beam size (default: the run's, as `test`; 1: greedy, as validation)")
    p.add_argument("--accelerator", default="auto", help="auto (a GPU if there is one), cpu, gpu, ...")
    return p


class Translator:
    """A translation module with its tokenizers, decoding lines as the run's evaluation does."""

    def __init__(self, module: TranslationModule, src_tokenizer, tgt_tokenizer, max_tokens: int,
                 precision: str = "32-true", accelerator: str = "auto", name: str = "the model"):
        from lightning.fabric import Fabric

        self.module, self.src, self.tgt, self.max_tokens = module, src_tokenizer, tgt_tokenizer, max_tokens
        self.precision, self.name = str(precision), name
        with warnings.catch_warnings():   # Fabric's notes on SLURM and AMP: not the user's question
            warnings.filterwarnings("ignore", message=".*`srun` command is available")
            logging.disable(logging.INFO)
            try:
                self.fabric = Fabric(accelerator=accelerator, devices=1, precision=self.precision)
            except (ValueError, RuntimeError) as exc:
                raise TranslateError(f"trainer.precision {self.precision} on accelerator {accelerator}: "
                                     f"{first_lines(str(exc), 1)}") from None
            finally:
                logging.disable(logging.NOTSET)
        self.fabric.setup_module(module)   # on its device, converted as the precision asks
        module.eval()

    def __call__(self, lines: list[str], beam_size: int | None = None, where: str = "input") -> list[str]:
        """The detokenized hypothesis of each line, by beam search of ``beam_size`` (default: the
        run's) or greedily (1); TranslateError naming a line longer than the model's position table."""
        examples = [{"idx": i, "src": self.src.encode(line), "tgt": []} for i, line in enumerate(lines)]
        most = self.module.net.max_positions
        for ex in examples:
            if most is not None and len(ex["src"]) + 1 > most:
                raise TranslateError(f"{where}, line {ex['idx'] + 1}: {len(ex['src']) + 1} tokens (with EOS), more "
                                     f"than the {most} positions of the model: shorten or split that line")
        hyps = [""] * len(lines)
        device = self.fabric.device
        with torch.inference_mode(), self.fabric.autocast(), attention_backends(device.type, self.precision):
            for ids in TokenBatchSampler([padded_length(ex["src"], []) for ex in examples], self.max_tokens,
                                         shuffle=False):
                src = collate([examples[i] for i in ids])["src"].to(device)
                for i, row in zip(ids, self.module.decode(src, beam_size or self.module.hparams.beam_size).tolist()):
                    hyps[i] = self.tgt.decode(row)
        return hyps


def locate(target: str) -> tuple[Path, Path]:
    """(run directory, checkpoint) of RUN_DIR (its best checkpoint) or of CKPT (the run directory
    above its checkpoints/)."""
    path = Path(target)
    if path.is_dir():
        return path, path / CHECKPOINTS / f"{BEST_CHECKPOINT}.ckpt"
    if not path.exists():
        raise TranslateError(f"{target}: no such run directory or checkpoint")
    if path.parent.name != CHECKPOINTS:
        raise TranslateError(f"{target}: not a checkpoint in a run directory's {CHECKPOINTS}/ (translate reads "
                             f"the run's {CONFIG} and summary.json)")
    return path.parent.parent, path


def load(target: str, accelerator: str = "auto") -> Translator:
    """The Translator of a run (RUN_DIR or CKPT); TranslateError, DataError, SummaryError or
    ChecksumError (one line each) for what cannot be translated with."""
    run_dir, ckpt = locate(target)
    try:
        config = yaml.safe_load((run_dir / CONFIG).read_text(encoding="utf-8"))
        model, data = config["model"], config["data"].get("init_args") or {}
        cls = class_at(model["class_path"])
    except (OSError, ValueError, yaml.YAMLError, TypeError, KeyError, AttributeError, ImportError) as exc:
        raise TranslateError(f"{run_dir / CONFIG}: not a run's config ({first_lines(str(exc), 1)})") from None
    if not (isinstance(cls, type) and issubclass(cls, TranslationModule)):
        raise TranslateError(f"{run_dir} is a {getattr(cls, '__name__', cls)} run, not an encoder-decoder "
                             "translation run (a language model has no source to translate)")
    try:
        check_checkpoint_file(ckpt)
    except ConfigError as exc:
        raise TranslateError(str(exc).replace("--ckpt_path ", "", 1)) from None
    record = read_summary(run_dir).get("tokenizer_digest")
    if record is None:
        raise TranslateError(f"{run_dir}/summary.json records no tokenizer_digest (a run trained before runs "
                             "recorded their tokenizer files): translate cannot check that a tokenizer is the model's")
    defaults = inspect.signature(TranslationDataModule).parameters
    try:
        loaded = recorded_tokenizers(data.get("tokenizer", defaults["tokenizer"].default), record)
        tokenizers = {side: loaded[side] for side in ("src", "tgt")}
    except (KeyError, TypeError, AttributeError):
        raise TranslateError(f"{run_dir}/summary.json: tokenizer_digest is not src and tgt, each a path and a "
                             "sha256") from None
    try:
        checkpoint = torch.load(ckpt, map_location="cpu", weights_only=True)   # a crafted file runs no code
    except (pickle.UnpicklingError, RuntimeError) as exc:
        raise TranslateError(f"{ckpt}: refused to load: {first_lines(str(exc), 1)}") from None
    verify(checkpoint, ckpt)
    try:
        module = cls(**{k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")})
        module.configure_model()
        module.load_state_dict(checkpoint["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise TranslateError(f"{ckpt}: not a checkpoint of a {cls.__name__} ({first_lines(str(exc), 1)})") from None
    # the run's config decides decoding, as it does for `test --config <run>/config.yaml`
    module.hparams.update({k: v for k, v in (model.get("init_args") or {}).items() if k in DECODING_HPARAMS})
    for side in ("src", "tgt"):
        if tokenizers[side].vocab_size != module.hparams[f"{side}_vocab_size"]:
            raise TranslateError(f"the run's {side} tokenizer has {tokenizers[side].vocab_size} tokens, the model "
                                 f"{module.hparams[f'{side}_vocab_size']}: not the tokenizer {ckpt} learned with")
    precision = (config.get("trainer") or {}).get("precision") or "32-true"
    max_tokens = data.get("max_tokens", defaults["max_tokens"].default)
    return Translator(module, tokenizers["src"], tokenizers["tgt"], max_tokens, precision, accelerator, str(ckpt))


def read_input(path: str | None) -> tuple[list[str], str]:
    """The input's lines, read as data files are (UTF-8, BOM removed, a NUL byte refused), and the
    name messages give it."""
    if path is not None:
        return read_lines(path), path
    with tempfile.TemporaryDirectory() as tmp:   # the reader takes a file: stdin is spooled to one
        spool = os.path.join(tmp, "stdin")
        with open(spool, "wb") as f:
            f.write(sys.stdin.buffer.read())
        try:
            return read_lines(spool), "<stdin>"
        except DataError as exc:
            raise DataError(str(exc).replace(spool, "<stdin>")) from None


def main(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
        if args.beam is not None and args.beam < 1:
            raise TranslateError(f"--beam must be >= 1 (1: greedy decoding), got {args.beam}")
        if accelerator_unusable(args.accelerator):
            raise TranslateError(f"--accelerator {args.accelerator}: {accelerator_unusable(args.accelerator)}")
        if args.output is not None:   # before any work: a refused output loses no translation
            try:
                check_writable(Path(args.output).parent)
            except OSError as exc:
                print(f"{PROG}: error: cannot write {exc.filename or args.output}: {exc.strerror}", file=sys.stderr)
                return 1
        translator = load(args.run, args.accelerator)
        lines, where = read_input(args.input)
        beam = args.beam or translator.module.hparams.beam_size
        start = time.perf_counter()
        hyps = translator(lines, beam, where)
        seconds = time.perf_counter() - start
    except (TranslateError, DataError, SummaryError, ChecksumError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    text = "".join(as_line(h) + "\n" for h in hyps)
    try:
        if args.output is not None:
            atomic_write(args.output, text)
        else:   # UTF-8 whatever the locale
            sys.stdout.flush()
            getattr(sys.stdout, "buffer", sys.stdout).write(text.encode() if hasattr(sys.stdout, "buffer") else text)
            sys.stdout.flush()
    except OSError as exc:
        print(f"{PROG}: error: cannot write {exc.filename or args.output or 'stdout'}: {exc.strerror}", file=sys.stderr)
        return 1
    rate = f", {len(hyps) / seconds:.1f} sentences/s" if hyps and seconds else ""
    print(f"{PROG}: {len(hyps)} lines with {translator.name}, {f'beam {beam}' if beam > 1 else 'greedy'}: "
          f"{seconds:.2f} s of decoding{rate}", file=sys.stderr)
    return 0
