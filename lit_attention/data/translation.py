"""The translation DataModule: synthetic tasks or parallel text files, tokenized and token-batched.

Splits are addressed by role (``"train"``, ``"val"``, ``"test"``) or by their split name (e.g.
``"test_2016_flickr"``). Example ``idx`` values index ``sources(role)``/``references(role)``.
Evaluation splits keep every line of their files (empty ones too), so ``idx`` is the line number
less one and hypotheses stay aligned with the reference file. The training split drops pairs with
an empty side, a line that is not valid UTF-8 or more than ``max_len`` tokens, counts them per
reason in ``dropped`` (recorded in summary.json as ``data_dropped``) and fails with a DataError when
no pair is left.
"""

from __future__ import annotations

import functools
import os
from typing import Literal

import lightning.pytorch as L
import torch.distributed as dist
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.utils.data import DataLoader

from lit_attention.data.batching import (MarkedExamples, ResumableDataLoader, SplitLoaders,
                                         TokenBatchSampler, collate, fit_length, loader_workers,
                                         padded_length, pin_memory)
from lit_attention.data.synthetic import generate, split_seed
from lit_attention.data.text import DataError, no_drops, read_parallel, resolve
from lit_attention.config_check import Inert
from lit_attention.data.tokenizers import build_tokenizers, check_vocab_size, inert_tokenizer_settings
from lit_attention.registry import CONFIG_CHOICES, CONFIG_DEFAULTS, FILES_TASK, TASKS, check_config

Task = Literal[CONFIG_CHOICES["seq2seq"]["data.task"]]
Tokenizer = Literal[CONFIG_CHOICES["seq2seq"]["data.tokenizer"]]
SpmModel = Literal[CONFIG_CHOICES["seq2seq"]["data.spm_model"]]
DEFAULT = CONFIG_DEFAULTS["seq2seq"]
ROLES = ("train", "val", "test")
STAGE_ROLES = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",),
               "predict": ("test",), None: ROLES}


class TranslationDataModule(SplitLoaders, L.LightningDataModule):
    """Parallel data for encoder-decoder models (synthetic ``task`` or ``task="files"``).

    ``n_train``/``n_val``/``n_test``, ``min_len``, ``max_len_words`` and ``n_symbols`` shape the
    synthetic tasks; ``data_dir``, the languages and split names locate files
    ``{data_dir}/{split}.{lang}[.gz]``. ``limit_train`` keeps only the first training pairs (any
    task). ``max_len`` drops training pairs with more tokens than that on either side.
    ``num_workers``: DataLoader worker processes; null chooses by device (batching.loader_workers:
    none on a CPU, 2 for a CUDA device).

    ``pad_to_lengths`` (increasing lengths, the largest at least ``max_len + 1``) pads every
    training batch's source and target to the smallest listed length that holds both, so that
    training sees few batch shapes (a compiled step builds a graph per shape); ``max_tokens``
    bounds the padded batch. Evaluation batches are never padded beyond their longest sentence.
    """

    def __init__(self, task: Task = DEFAULT["data.task"], data_dir: str | None = None, src_lang: str = "src",
                 tgt_lang: str = "tgt", train_split: str = "train", val_split: str = "val",
                 test_split: str = "test", n_train: int = 10000, n_val: int = 500,
                 n_test: int = 500, min_len: int = 3, max_len_words: int = 40,
                 n_symbols: int = 20, data_seed: int = 1234, tokenizer: Tokenizer = DEFAULT["data.tokenizer"],
                 spm_model: SpmModel = DEFAULT["data.spm_model"], vocab_size: int = 8000, joint_vocab: bool = True,
                 cache_dir: str = ".cache/lit_attention", max_tokens: int = 4096,
                 max_len: int = 128, num_workers: int | None = None, limit_train: int | None = None,
                 pad_to_lengths: list[int] | None = None):
        super().__init__()
        check_config("seq2seq", "data", task=task, tokenizer=tokenizer, spm_model=spm_model)
        if pad_to_lengths is not None:
            check_pad_to_lengths(pad_to_lengths, max_len)
        if task == FILES_TASK and not data_dir:
            raise ValueError(f"task {task!r} needs data.data_dir (the directory holding {{split}}.{{lang}})")
        check_vocab_size(vocab_size)
        for key, value, least, meaning in (
                ("num_workers", num_workers, 0, "or null: chosen by device"),
                ("max_tokens", max_tokens, 1, "the padded tokens a batch holds"),
                ("max_len", max_len, 1, "the tokens a kept sentence may have"),
                ("data_seed", data_seed, 0, "it seeds the batch order"),
                ("limit_train", limit_train, 1, "or null: every training pair")):
            if value is not None and value < least:
                raise ValueError(f"data.{key} must be >= {least} ({meaning}), got {value}")
        if task != FILES_TASK:   # the generator's own checks, on one pair (before a run is started)
            try:
                generate(task, 1, data_seed, min_len, max_len_words, n_symbols)
            except ValueError as exc:
                raise ValueError(f"data.min_len {min_len}, data.max_len_words {max_len_words}, data.n_symbols "
                                 f"{n_symbols}: task {task!r} cannot generate pairs with them: {exc}") from None
        self.save_hyperparameters()
        self.task, self.data_dir = task, data_dir
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.split_names = {"train": train_split, "val": val_split, "test": test_split}
        self.max_tokens, self.max_len = max_tokens, max_len
        self.pad_to_lengths = tuple(pad_to_lengths) if pad_to_lengths is not None else None
        self.stats: dict[str, dict[str, int]] = {}          # role -> {"lines": read, "pairs": kept}
        self.dropped: dict[str, dict[str, int]] = {}        # encoded role -> {reason: pairs dropped}
        self.data_text: dict[str, dict[str, int]] = {}      # file -> what reading it found (text.read_lines)
        self._dropped_reading: dict[str, dict[str, int]] = {}
        self.datasets: dict[str, list[dict]] = {}
        self._loaders: dict[str, tuple] = {}    # role -> (trainer, loader) with worker processes
        self._raw: dict[str, tuple[list[str], list[str]]] = {}

    # The options that locate files, and those that shape generated pairs: each acts with its kind of task.
    FILE_OPTIONS = ("data_dir", "src_lang", "tgt_lang")
    GENERATOR_OPTIONS = ("n_train", "n_val", "n_test", "min_len", "max_len_words", "n_symbols")

    @classmethod
    def inert_settings(cls, init_args: dict) -> dict[str, Inert]:
        """The data.<key> settings the data module built from ``init_args`` would not read (`fit`
        refuses one set to another value than its default: cli.refuse_inert_settings)."""
        task = init_args.get("task", DEFAULT["data.task"])
        if task == FILES_TASK:
            inert = dict.fromkeys((f"data.{k}" for k in cls.GENERATOR_OPTIONS),
                                  Inert(f"task {task!r} reads its pairs from data.data_dir; this shapes generated pairs"))
        else:
            inert = dict.fromkeys((f"data.{k}" for k in cls.FILE_OPTIONS),
                                  Inert(f"synthetic task {task!r} generates its pairs; this locates files"))
            if not TASKS[task].symbols:
                inert["data.n_symbols"] = Inert(f"task {task!r} draws no symbols")
        return {**inert, **inert_tokenizer_settings(init_args.get("tokenizer", DEFAULT["data.tokenizer"]))}

    # ---- raw text -------------------------------------------------------------------------

    def _role(self, split: str) -> str:
        roles = {**{name: role for role, name in self.split_names.items()},
                 **dict(zip(ROLES, ROLES))}
        if split in roles:
            return roles[split]
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(ROLES)} or "
                         f"{', '.join(self.split_names.values())}")

    def _load_raw(self, role: str) -> tuple[list[str], list[str]]:
        if role in self._raw:
            return self._raw[role]
        split, h = self.split_names[role], self.hparams
        if self.task == FILES_TASK:
            src, tgt, dropped = read_parallel(resolve(self.data_dir, split, self.src_lang),
                                              resolve(self.data_dir, split, self.tgt_lang),
                                              train=role == "train", counts=self.data_text)
        else:
            src, tgt = generate(self.task, h[f"n_{role}"], split_seed(h.data_seed, split),
                                h.min_len, h.max_len_words, h.n_symbols)
            dropped = no_drops()
        self.stats[role] = {"lines": len(src) + sum(dropped.values())}
        self._dropped_reading[role] = dropped
        if role == "train" and h.limit_train is not None:
            src, tgt = src[:h.limit_train], tgt[:h.limit_train]
        self._raw[role] = (src, tgt)
        return src, tgt

    def sources(self, split: str) -> list[str]:
        """Raw source sentences, in split order (example ``idx`` values index them)."""
        return self._load_raw(self._role(split))[0]

    def references(self, split: str) -> list[str]:
        """Raw target sentences (detokenized references for BLEU), in split order."""
        return self._load_raw(self._role(split))[1]

    # ---- tokenizers -----------------------------------------------------------------------

    @functools.cached_property
    def _tokenizer_pair(self):
        h = self.hparams
        return build_tokenizers(h.tokenizer, *self._load_raw("train"), vocab_size=h.vocab_size,
                                model_type=h.spm_model, joint=h.joint_vocab,
                                cache_dir=os.path.join(h.cache_dir, "tokenizers"))

    @property
    def src_tokenizer(self):
        return self._tokenizer_pair[0]

    @property
    def tgt_tokenizer(self):
        return self._tokenizer_pair[1]

    @property
    def src_vocab_size(self) -> int:
        return self.src_tokenizer.vocab_size

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt_tokenizer.vocab_size

    # ---- encoded splits -------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        for role in STAGE_ROLES[stage]:
            self.dataset(role)

    def dataset(self, split: str) -> list[dict]:
        """Encoded examples ``{"idx", "src", "tgt"}`` of a split (encoded on first use)."""
        role = self._role(split)
        if role in self.datasets:
            return self.datasets[role]
        src_lines, tgt_lines = self._load_raw(role)
        src_tok, tgt_tok = self._tokenizer_pair
        examples, too_long = [], 0
        for i, (s, t) in enumerate(zip(src_lines, tgt_lines)):
            x, y = src_tok.encode(s), tgt_tok.encode(t)
            if role == "train" and max(len(x), len(y)) > self.max_len:
                too_long += 1
                continue
            examples.append({"idx": i, "src": x, "tgt": y})
        self.stats[role]["pairs"] = len(examples)
        self.dropped[role] = {**self._dropped_reading[role], "too_long": too_long}
        rank_zero_info(self._split_line(role))
        if role == "train" and not examples:
            raise DataError(f"no usable training pair: {self._split_line(role)}; raise "
                            "--data.max_len or check the data")
        if not examples:     # an evaluation of nothing would end "successfully" with no metric
            raise DataError(f"nothing to evaluate: {self._split_line(role)}")
        self.datasets[role] = examples
        return examples

    def _split_line(self, role: str) -> str:
        """One line saying what a split holds and what was dropped (the log line per split)."""
        stats, dropped, split = self.stats[role], self.dropped[role], self.split_names[role]
        where = (os.path.join(self.data_dir, f"{split}.{{{self.src_lang},{self.tgt_lang}}}")
                 if self.task == FILES_TASK else f"task {self.task}")
        if role != "train":
            empty = sum(not (s.strip() and t.strip()) for s, t in zip(*self._load_raw(role)))
            return (f"{role} split {split!r} ({where}): {stats['pairs']} pairs, all kept "
                    f"(evaluation drops nothing; {empty} with an empty side)")
        limit_train = self.hparams.limit_train
        limit = f", limit_train={limit_train}" if limit_train is not None else ""
        return (f"{role} split {split!r} ({where}): {stats['pairs']} of {stats['lines']} pairs "
                f"used{limit}; dropped {dropped['empty']} with an empty side, {dropped['too_long']} "
                f"longer than max_len={self.max_len} tokens, {dropped['invalid_utf8']} not valid UTF-8")

    def check_lengths(self, most: int, why: str) -> None:
        """DataError naming the first sentence of a loaded split that takes more than ``most``
        positions (``x EOS`` or ``BOS y``): a model's limit, ``why`` says whose."""
        for role, examples in self.datasets.items():
            for ex in examples:
                side = "src" if len(ex["src"]) >= len(ex["tgt"]) else "tgt"
                n = len(ex[side]) + 1
                if n <= most:
                    continue
                split = self.split_names[role]
                lang = self.src_lang if side == "src" else self.tgt_lang
                if role == "train":   # a kept pair's index is no line number: the filter that let it in
                    raise DataError(f"training split {split!r}: a pair of {n} tokens, more than the {most} "
                                    f"positions of {why}: give --data.max_len {most - 1} or less")
                where = (f"{resolve(self.data_dir, split, lang)}, line {ex['idx'] + 1}" if self.task == FILES_TASK
                         else f"task {self.task}, split {split!r}, sentence {ex['idx'] + 1}")
                raise DataError(f"{where}: {n} tokens (with EOS), more than the {most} positions of {why}: "
                                f"shorten or split that line")
        if self.pad_to_lengths is not None and "train" in self.datasets:
            longest = fit_length(max(padded_length(ex["src"], ex["tgt"]) for ex in self.datasets["train"]),
                                 self.pad_to_lengths)
            if longest > most:
                raise DataError(f"data.pad_to_lengths pads training batches to {longest} positions, more than "
                                f"the {most} positions of {why}: list lengths of {most} or less (and lower "
                                f"data.max_len to fit)")

    # ---- loaders --------------------------------------------------------------------------

    def batch_sampler(self, role: str, train: bool) -> TokenBatchSampler:
        # the replicas: the trainer's, else torch.distributed's, else one process
        if self.trainer is not None:
            world_size, rank = self.trainer.world_size, self.trainer.global_rank
        elif dist.is_available() and dist.is_initialized():
            world_size, rank = dist.get_world_size(), dist.get_rank()
        else:
            world_size, rank = 1, 0
        lengths = [padded_length(ex["src"], ex["tgt"]) for ex in self.dataset(role)]
        one_length = train and self.pad_to_lengths is not None
        if one_length:   # each example counted at the length its batch will have (collate's pad_to)
            lengths = [fit_length(n, self.pad_to_lengths) for n in lengths]
        sampler = TokenBatchSampler(lengths, self.max_tokens, shuffle=train,
                                    seed=self.hparams.data_seed, num_replicas=world_size, rank=rank,
                                    mark_padding=not train, one_length=one_length)
        if self.trainer is not None:
            # The batch count varies a little between epochs and Lightning reads len() only when
            # it (re)loads the loader: with reload_dataloaders_every_n_epochs=1 it stays exact.
            sampler.set_epoch(self.trainer.current_epoch)
        return sampler

    def _loader(self, role: str) -> DataLoader:
        """The loader of ``role``. With worker processes, the same loader again for as long as the
        trainer is the same, its workers kept (``persistent_workers``): Lightning asks for the
        training loader every epoch, and starting workers anew costs a process start each, at
        every epoch and validation."""
        workers = loader_workers(self.hparams.num_workers, self.trainer)
        kept = self._loaders.get(role)
        if workers and kept is not None and kept[0] is self.trainer:
            if self.trainer is not None:
                kept[1].batch_sampler.set_epoch(self.trainer.current_epoch)
            return kept[1]
        train = role == "train"
        loader = (ResumableDataLoader if train else DataLoader)(
            self.dataset(role) if train else MarkedExamples(self.datasets[role]),
            batch_sampler=self.batch_sampler(role, train=train),
            collate_fn=functools.partial(collate, pad_to=self.pad_to_lengths if train else None),
            num_workers=workers, persistent_workers=workers > 0,
            pin_memory=pin_memory(self.trainer))
        if workers:
            self._loaders[role] = (self.trainer, loader)
        return loader


def check_pad_to_lengths(lengths: list[int], max_len: int) -> None:
    """ValueError naming data.pad_to_lengths unless its lengths are positive, increasing and hold
    every training pair ``max_len`` lets in (``max_len`` tokens and EOS)."""
    if not lengths:
        raise ValueError("data.pad_to_lengths is an empty list: give increasing lengths (e.g. [16, 32, 64, "
                         f"{max_len + 1}]), or null to pad each batch to its longest sentence")
    if lengths[0] < 1 or any(b <= a for a, b in zip(lengths, lengths[1:])):
        raise ValueError(f"data.pad_to_lengths {list(lengths)}: the lengths must be positive and increasing")
    if lengths[-1] < max_len + 1:
        raise ValueError(f"data.pad_to_lengths {list(lengths)}: the largest length, {lengths[-1]}, cannot hold "
                         f"a training pair of data.max_len {max_len} tokens and EOS ({max_len + 1}): list a "
                         f"length of {max_len + 1} or more, or give --data.max_len {lengths[-1] - 1}")
