"""Language-model data: one contiguous token stream per split; truncated-BPTT batches for
training, sliding windows for evaluation.

Every line becomes ``encode(line) + [EOS]``, so EOS marks line ends (the newline of a character
model).

Training: the stream is laid out as B parallel streams (classic batchify): batch i holds columns
``[i*bptt, (i+1)*bptt)`` of every stream and its targets are the same window shifted by one, so
a hidden state carried from batch i to batch i+1 continues exactly where it left off. Under DDP
the stream is cut into ``world_size * B`` parallel streams and each rank reads its own B of them.

Evaluation (validation and test), the same protocol for every model family: windows of
``eval_window`` (W) input tokens every ``eval_stride`` (S) tokens of the one stream. Each target
token is scored exactly once, in the first window that scores it: window 0 scores all its W
targets, every later window only its last S. So every scored token is predicted from the tokens
of its own window only - at most W of them, at least W - S + 1 after the first window - and a
model keeps no state from one window to the next (an RNN starts from zero, an n-gram sees its
last order - 1 tokens inside the window, a Transformer attends within the window). Targets that
are context only, or lie past the stream's end, are PAD and do not count. The result does not
depend on the batch size or the number of devices: ranks read disjoint runs of windows, padded
with all-PAD windows to the same number of batches.

Empty lines are kept (an EOS each: paragraph breaks). A training line that is not valid UTF-8 is
dropped and counted in ``dropped`` (summary.json ``data_dropped``); in val/test it is a DataError,
as is a split without any text and a binary file.
"""

from __future__ import annotations

import math
import os
from typing import Literal

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from lit_attention.data.batching import SplitLoaders
from lit_attention.data.synthetic import generate, split_seed
from lit_attention.data.text import DataError, read_lines
from lit_attention.config_check import Inert
from lit_attention.data.tokenizers import build_tokenizers, check_vocab_size, inert_tokenizer_settings
from lit_attention.data.vocab import EOS, PAD
from lit_attention.registry import CONFIG_CHOICES, CONFIG_DEFAULTS, FILES_TASK, check_config

Task = Literal[CONFIG_CHOICES["lm"]["data.task"]]
Tokenizer = Literal[CONFIG_CHOICES["lm"]["data.tokenizer"]]
SpmModel = Literal[CONFIG_CHOICES["lm"]["data.spm_model"]]
DEFAULT = CONFIG_DEFAULTS["lm"]


def encode_stream(tokenizer, lines: list[str]) -> torch.Tensor:
    return torch.tensor([i for line in lines for i in (*tokenizer.encode(line), EOS)],
                        dtype=torch.long)


def batchify(stream: torch.Tensor, n_streams: int) -> torch.Tensor:
    """[n_streams, L]: the stream cut into n_streams contiguous pieces (the tail is dropped)."""
    length = stream.numel() // n_streams
    if length < 2:
        raise DataError(f"a stream of {stream.numel()} tokens is too short for {n_streams} parallel "
                        f"streams; lower batch_size")
    return stream[: n_streams * length].view(n_streams, length)


def this_workers_share(n: int) -> range:
    """The batch numbers (of ``n``) this DataLoader worker yields: every ``workers``-th from its own
    id, which the loader reads back from its workers in turn, so the order stays that of one
    process. (Each worker process iterates its own copy of the dataset: unsharded, every batch
    came once per worker.)"""
    info = get_worker_info()
    return range(n) if info is None else range(info.id, n, info.num_workers)


class StreamBatches(IterableDataset):
    """Consecutive ``{"tokens": [B, T], "targets": [B, T]}`` windows of batchified streams."""

    def __init__(self, data: torch.Tensor, bptt: int):
        self.data, self.bptt = data, bptt

    def __len__(self) -> int:
        return math.ceil((self.data.shape[1] - 1) / self.bptt)

    def __iter__(self):
        for k in this_workers_share(len(self)):
            start = k * self.bptt
            end = min(start + self.bptt, self.data.shape[1] - 1)
            yield {"tokens": self.data[:, start:end], "targets": self.data[:, start + 1:end + 1]}


def sliding_windows(stream: torch.Tensor, window: int, stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, targets), each [K, window]: window k reads ``stream[k*stride : k*stride + window]``
    and predicts the next token at each position; targets already scored by window k - 1 (all but
    the last ``stride`` of every window after the first) and positions past the end are PAD.
    1 <= stride <= window (LMDataModule refuses other values)."""
    n = stream.numel()
    n_windows = 1 + max(0, math.ceil((n - 1 - window) / stride))
    padded = torch.full(((n_windows - 1) * stride + window + 1,), PAD, dtype=stream.dtype)
    padded[:n] = stream
    rows = padded.unfold(0, window + 1, stride)                     # [K, window + 1]
    targets = rows[:, 1:].clone()
    targets[1:, :window - stride] = PAD                             # context only
    return rows[:, :-1].contiguous(), targets


class WindowBatches(IterableDataset):
    """``{"tokens": [B, W], "targets": [B, W], "window_index": [B]}`` batches of evaluation windows, in
    stream order; ``window_index`` is each row's index among all the split's windows (``first`` is the
    index of this rank's first), so per-token losses gathered from every rank can be put back in
    stream order."""

    def __init__(self, tokens: torch.Tensor, targets: torch.Tensor, batch_size: int, first: int = 0):
        self.tokens, self.targets, self.batch_size, self.first = tokens, targets, batch_size, first

    def __len__(self) -> int:
        return math.ceil(self.tokens.shape[0] / self.batch_size)

    def __iter__(self):
        for k in this_workers_share(len(self)):
            start, end = k * self.batch_size, (k + 1) * self.batch_size
            yield {"tokens": self.tokens[start:end], "targets": self.targets[start:end],
                   "window_index": torch.arange(self.first + start, self.first + min(end, len(self.tokens)))}


class LMDataModule(SplitLoaders, LightningDataModule):
    """Monolingual text files (plain or .gz) or a synthetic task's target side, as token streams.

    ``task="files"``: ``path`` is the training file; ``val_path``/``test_path`` give the other
    splits, else the file's lines are split contiguously into train / val / test by
    ``val_fraction`` and ``test_fraction`` (the last lines are test). A synthetic task uses the
    target side of ``n_sentences`` generated pairs (val and test get a tenth each).

    ``eval_window`` and ``eval_stride`` set the evaluation protocol (module docstring); they
    default to ``bptt`` (the context the models train with) and half of it.
    """

    def __init__(
        self,
        task: Task = DEFAULT["data.task"],
        path: str | None = None,
        val_path: str | None = None,
        test_path: str | None = None,
        tokenizer: Tokenizer = DEFAULT["data.tokenizer"],
        vocab_size: int = 8000,
        spm_model: SpmModel = DEFAULT["data.spm_model"],
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        bptt: int = 64,
        eval_window: int | None = None,
        eval_stride: int | None = None,
        val_fraction: float = 0.05,
        test_fraction: float = 0.05,
        n_sentences: int = 2000,
        seed: int = 0,
        cache_dir: str = ".cache/lit_attention",
        num_workers: int = 0,
    ):
        super().__init__()
        check_config("lm", "data", task=task, tokenizer=tokenizer, spm_model=spm_model)
        if task == FILES_TASK and not path:
            raise ValueError(f"task {task!r} needs data.path (a monolingual text file)")
        if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
            raise ValueError("val_fraction and test_fraction must be in (0, 1) and sum to less than 1")
        if batch_size < 1 or (eval_batch_size is not None and eval_batch_size < 1):
            raise ValueError(f"data.batch_size and data.eval_batch_size must be >= 1 (eval_batch_size null: "
                             f"batch_size), got {batch_size} and {eval_batch_size}")
        if num_workers < 0:
            raise ValueError(f"data.num_workers must be >= 0, got {num_workers}")
        check_vocab_size(vocab_size)
        window = bptt if eval_window is None else eval_window
        if window < 1 or bptt < 1:
            raise ValueError(f"data.bptt and data.eval_window must be positive, got {bptt} and {eval_window}")
        if eval_stride is not None and not 1 <= eval_stride <= window:
            raise ValueError(f"data.eval_stride must be between 1 and the evaluation window ({window}), "
                             f"got {eval_stride}")
        self.save_hyperparameters()
        self.eval_window = window
        self.eval_stride = max(window // 2, 1) if eval_stride is None else eval_stride
        self.tokenizer = None
        self.streams: dict[str, torch.Tensor] = {}
        self.data_text: dict[str, dict[str, int]] = {}   # file -> what reading it found (text.read_lines)
        self.dropped: dict[str, dict[str, int]] = {}     # split -> {reason: lines dropped}

    @classmethod
    def inert_settings(cls, init_args: dict) -> dict[str, Inert]:
        """The data.<key> settings the data module built from ``init_args`` would not read (`fit`
        refuses one set to another value than its default: cli.refuse_inert_settings)."""
        task = init_args.get("task", DEFAULT["data.task"])
        if task == FILES_TASK:
            inert = dict.fromkeys(("data.n_sentences", "data.seed"),
                                  Inert(f"task {task!r} reads data.path; this shapes generated sentences"))
            if init_args.get("val_path"):
                inert.update(dict.fromkeys(("data.val_fraction", "data.test_fraction"), Inert(
                    "data.val_path and data.test_path give the evaluation splits; this cuts them from data.path")))
        else:
            inert = dict.fromkeys(("data.path", "data.val_path", "data.test_path", "data.val_fraction",
                                   "data.test_fraction"),
                                  Inert(f"synthetic task {task!r} generates its sentences; this reads or cuts files"))
        return {**inert, **inert_tokenizer_settings(init_args.get("tokenizer", DEFAULT["data.tokenizer"]))}

    # -- text and tokens ---------------------------------------------------------------------

    def split_lines(self) -> dict[str, list[str]]:
        """Lines of train/val/test; sets ``dropped`` (training lines that are not valid UTF-8)."""
        h = self.hparams
        self.dropped = {split: {"invalid_utf8": 0} for split in ("train", "val", "test")}
        if h.task != FILES_TASK:
            n = {"train": h.n_sentences, "val": max(h.n_sentences // 10, 1),
                 "test": max(h.n_sentences // 10, 1)}
            return {split: generate(h.task, n[split], split_seed(h.seed, split))[1] for split in n}
        if bool(h.val_path) != bool(h.test_path):
            raise ValueError("give both data.val_path and data.test_path, or neither")
        lines = read_lines(h.path, mark_invalid=True, counts=self.data_text)
        if not lines:
            raise DataError(f"{h.path} is an empty file")
        if h.val_path:
            split = {"train": (h.path, 0, lines), "val": (h.val_path, 0, read_lines(h.val_path, counts=self.data_text)),
                     "test": (h.test_path, 0, read_lines(h.test_path, counts=self.data_text))}
        else:
            n_val, n_test = round(len(lines) * h.val_fraction), round(len(lines) * h.test_fraction)
            n_train = len(lines) - n_val - n_test
            if min(n_train, n_val, n_test) < 1:
                raise DataError(f"{h.path}: {len(lines)} lines are too few to split into train/val/test")
            split = {"train": (h.path, 0, lines[:n_train]),
                     "val": (h.path, n_train, lines[n_train:n_train + n_val]),
                     "test": (h.path, n_train + n_val, lines[n_train + n_val:])}
        out = {}
        for name, (path, first, part) in split.items():
            where = f"{path} lines {first + 1}-{first + len(part)}" if not h.val_path else path
            bad = [first + i + 1 for i, line in enumerate(part) if line is None]
            if bad and name != "train":
                raise DataError(f"{path}, line {bad[0]}: not valid UTF-8 (in the {name} split, "
                                "which is scored as it is: fix the file)")
            out[name] = [line for line in part if line is not None]
            self.dropped[name]["invalid_utf8"] = len(bad)
            if not any(line.strip() for line in out[name]):
                raise DataError(f"no usable {name} text in {where}: {len(part)} lines, {len(bad)} "
                                "not valid UTF-8, no other line holds text")
        return out

    def prepare(self) -> None:
        """Build the tokenizer on the training lines and encode every split (once)."""
        if self.streams:
            return
        lines = self.split_lines()
        h = self.hparams
        # One (joint) model trained on the training lines only; the second side is empty.
        self.tokenizer, _ = build_tokenizers(
            h.tokenizer, lines["train"], [], vocab_size=h.vocab_size, model_type=h.spm_model,
            joint=True, cache_dir=os.path.join(h.cache_dir, "tokenizers"))
        self.streams = {split: encode_stream(self.tokenizer, split_lines)
                        for split, split_lines in lines.items()}
        for split, split_lines in lines.items():
            where = f"task {h.task}" if h.task != FILES_TASK else (h.get(f"{split}_path") or h.path)
            rank_zero_info(f"{split} split ({where}): {len(split_lines)} lines, "
                           f"{self.streams[split].numel()} tokens; dropped "
                           f"{self.dropped[split]['invalid_utf8']} lines that are not valid UTF-8")

    @property
    def vocab_size_actual(self) -> int:
        self.prepare()
        return self.tokenizer.vocab_size

    def n_tokens(self, split: str) -> int:
        self.prepare()
        return int(self.streams[split].numel())

    # -- Lightning hooks ---------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        self.prepare()

    @property
    def eval_protocol(self) -> str:
        """How validation and test score every family (recorded in summary.json)."""
        return f"sliding window {self.eval_window}, stride {self.eval_stride}"

    def batches(self, split: str, rank: int | None = None, world: int | None = None):
        """One rank's batches of a split (rank and world size default to the trainer's):
        ``StreamBatches`` for training, ``WindowBatches`` for evaluation."""
        self.prepare()
        h = self.hparams
        if rank is None or world is None:
            trainer = self.trainer
            rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        if split == "train":
            data = batchify(self.streams[split], h.batch_size * world)
            return StreamBatches(data[rank * h.batch_size:(rank + 1) * h.batch_size], h.bptt)
        # evaluation: one rank's contiguous run of the split's windows, eval_batch_size a batch
        if self.streams[split].numel() < 2:
            raise DataError(f"the {split} split has {self.streams[split].numel()} token(s): nothing to score")
        B = h.batch_size if h.eval_batch_size is None else h.eval_batch_size
        tokens, targets = sliding_windows(self.streams[split], self.eval_window, self.eval_stride)
        per_rank = math.ceil(tokens.shape[0] / (B * world)) * B
        extra = per_rank * world - tokens.shape[0]             # all-PAD windows: nothing scored
        tokens = torch.cat([tokens, tokens.new_full((extra, tokens.shape[1]), PAD)])
        targets = torch.cat([targets, targets.new_full((extra, targets.shape[1]), PAD)])
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        return WindowBatches(tokens[mine], targets[mine], B, first=mine.start)

    def _loader(self, split: str) -> DataLoader:
        return DataLoader(self.batches(split), batch_size=None, num_workers=self.hparams.num_workers)
