"""The run-store format: what a run directory holds, how its summary.json reads, which statuses a
run can have, what names a run may take. Training writes it; the sweep driver and the analysis
read it; nothing else spells these names or reads summary.json itself.

    <root>/<group>/<run_id>/
      config.yaml     CONFIG     the fully resolved training config
      metrics.csv     METRICS    one row per logged step: METRICS_COLUMNS, then the metrics
      summary.json    SUMMARY    an object of fields (FIELDS), with `version` and `status`
      hyps/           HYPS       hyps_file(split), refs_file(split): one sentence per line;
                                 stats_cache_file(split, metric): the analysis' cache;
                                 token_nll_file(split): a language model's per-token NLL
      gradflow.csv    GRADFLOW   GRADFLOW_COLUMNS
      attention/      ATTENTION  heatmaps of a few validation sentences (png + json)
      checkpoints/    CHECKPOINTS  best.ckpt, last.ckpt (LAST_CHECKPOINT)
      trial.log       TRIAL_LOG  a sweep trial's output
      STOP            STOP       ask the run to stop at its next validation end (request_stop)
      CLAIM           CLAIM      who writes the run now (tracking/identity.py)

summary.json carries `version` (VERSION). A summary written before versions (no `version`
field, e.g. the stores in results/) is read as version 0 and migrated in memory; one written by
a newer lit-attention, one with an unknown status or a field of the wrong type is refused with a
SummaryError naming the file and what is wrong.
"""

from __future__ import annotations

import enum
import json
import math
import re
import secrets
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lit_attention.files import atomic_write

VERSION = 1

CONFIG = "config.yaml"
METRICS = "metrics.csv"
SUMMARY = "summary.json"
HYPS = "hyps"
GRADFLOW = "gradflow.csv"
ATTENTION = "attention"
CHECKPOINTS = "checkpoints"
BEST_CHECKPOINT = "best"          # ModelCheckpoint's filename (it adds .ckpt)
LAST_CHECKPOINT = "last.ckpt"
TRIAL_LOG = "trial.log"
STOP = "STOP"
CLAIM = "CLAIM"

METRICS_COLUMNS = ("step", "epoch", "time")     # then every logged metric, as it first appears
GRADFLOW_COLUMNS = ("step", "direction", "sentence", "position", "distance", "norm")

RUN_ID_ENV = "LIT_ATTENTION_RUN_ID"    # how Lightning's relaunched DDP ranks learn their run id


def hyps_file(split: str) -> str:
    """hyps/<split>.txt, relative to the run directory: the detokenized hypotheses."""
    return f"{HYPS}/{split}.txt"


def hyps_splits(run_dir) -> set[str]:
    """The splits whose hypotheses ``run_dir`` stores (hyps_file; not the references beside them)."""
    return {f.stem for f in (Path(run_dir) / HYPS).glob("*.txt") if f.is_file() and "." not in f.stem}


def refs_file(split: str) -> str:
    """hyps/<split>.ref.txt: the references, line i for line i of the hypotheses."""
    return f"{HYPS}/{split}.ref.txt"


def token_nll_file(split: str) -> str:
    """hyps/<split>.nll.npy: a language model's NLL (nats, float32) of every scored target token
    of the split, in stream order; their mean is <split>_loss."""
    return f"{HYPS}/{split}.nll.npy"


# Every character str.splitlines() ends a line at (\r\n counts as one, like \n alone).
LINE_BREAKS = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def as_line(sentence: str) -> str:
    """A sentence as one line of a hyps file: each line break in it (\n, but also U+2028,
    U+0085, \x0c, ...) becomes a space, so that the file has exactly one line per sentence."""
    return LINE_BREAKS.sub(" ", sentence)


def split_lines(text: str) -> list[str]:
    """The sentences of a hyps file's text: split at \n only (not str.splitlines(), which also
    splits at U+2028, U+0085, ... that a file written before ``as_line`` may hold)."""
    return text.removesuffix("\n").split("\n") if text else []


def stats_cache_file(split: str, metric: str) -> str:
    """hyps/<split>.<metric>.stats.npz: the analysis' cache of per-sentence metric statistics
    (derived data: analysis/export.py leaves it out of results/)."""
    return f"{HYPS}/{split}.{metric}.stats.npz"


# -- run ids and groups ------------------------------------------------------------------------

# Run ids and groups become directory names under the runs root: no separators, no '.'/'..'.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_name(option: str, value: str) -> str:
    """``value`` if it is a safe run id / group name, else ValueError naming ``option``."""
    if not SAFE_NAME.fullmatch(value):
        raise ValueError(f"{option} {value!r} is not a safe name: use 1-128 letters, digits, '.', "
                         f"'_' or '-', starting with a letter or digit (no '/', no '..')")
    return value


def run_path(root: Path | str, group: str, run_id: str) -> Path:
    """root/group/run_id, resolved, after checking both names; never a path outside root."""
    root = Path(root).resolve()
    path = (root / check_name("--run.group", group) / check_name("--run.id", run_id)).resolve()
    if root not in path.parents:
        raise ValueError(f"run directory {path} is outside the runs root {root}")
    return path


def now_iso() -> str:
    """A run-store timestamp (started_at, heartbeat_at, finished_at): UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    """A fresh run id: the local time and 6 random hex digits."""
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def trial_run_id(number: int, seed: int) -> str:
    """The run id of sweep trial `number` with `seed`: t0007-s1."""
    return f"t{number:04d}-s{seed}"


def config_name(name: str) -> str:
    """The config key of a sweep parameter (in a study.db beside the runs): `model.scoring@transformer` declares a second, differently
    conditioned `model.scoring` (Optuna needs distinct names for distinct choice lists)."""
    return name.partition("@")[0]


# -- statuses ----------------------------------------------------------------------------------

class Status(enum.StrEnum):
    """What summary.json says about a run. Compares equal to, prints and formats as its text
    ("finished")."""

    RUNNING = "running"          # training; `heartbeat_at` says when it last validated
    FINISHED = "finished"        # ended normally; `stopped_by` says what ended training
    PRUNED = "pruned"            # stopped early through its STOP file; `stopped_by`
    FAILED = "failed"            # an exception or a failed process; `error`
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM, resumable from last.ckpt; `error`
    KILLED = "killed"            # the process died without recording an end (SIGKILL, OOM); `error`

    @property
    def reason_field(self) -> str | None:
        """The summary field that says why a run has this status (None for a running run): what
        ended training for the statuses a STOP file may ask for, else the error."""
        return None if self is Status.RUNNING else "stopped_by" if self in STOP_STATUSES else "error"

    @classmethod
    def parse(cls, text: Any, where: str = "status") -> Status:
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(s.value for s in cls)
            raise SummaryError(f"{where}: unknown status {text!r} (known: {known})") from None


STOP_STATUSES = (Status.PRUNED, Status.FINISHED)   # what a STOP file may ask a run to end as


# -- summary.json fields -----------------------------------------------------------------------

class SummaryError(ValueError):
    """A summary.json that cannot be read or written as the format says; the message names the
    file and what is wrong (one line)."""


NUMBER = (int, float)
# The JSON type of every field whose type the format fixes (null is always allowed). Other fields
# (the model's metrics, per-split extras) are free.
FIELDS: dict[str, type | tuple] = {
    "version": int, "run_id": str, "group": str, "run_dir": str, "task": str,
    # identity (tracking/identity.py): written at the claim; `evaluated` by validate and test
    "uuid": str, "takeovers": list, "overwritten": dict, "untrained": bool, "evaluated": dict,
    "seed": (int, bool),   # LightningCLI's seed_everything: a seed, or true (a random one)
    "status": str, "error": str, "started_at": str, "finished_at": str, "heartbeat_at": str,
    "process": dict, "world_size": int, "git_commit": str, "versions": dict, "wandb_run_id": str,
    "code_fingerprint": str, "machine": str,   # tracking/provenance.py
    "name": str, "tags": list, "job_type": str,   # --run.name, --run.tags, --run.job_type
    "model": dict, "params": int, "data_dropped": dict, "data_text": dict, "eval_protocol": str,
    "tokenizer_digest": dict,   # side -> {"path", "sha256"} of each tokenizer file fit trained with
    "train_seconds": NUMBER, "train_tokens": NUMBER, "train_flops": NUMBER, "tokens_per_second": NUMBER,
    "budget_steps": NUMBER, "budget_tokens": NUMBER, "budget_flops": NUMBER, "budget_reached": bool,
    "stopped_by": str, "steps": int, "epochs": int, "best_val_loss": NUMBER,
    "machine_gflops": NUMBER, "machine_gflops_probes": list, "grad_norm_median": NUMBER,
    "clip_fraction": NUMBER, "measured_every": dict, "attention_backends": dict,
    "attention_entropy": dict, "sacrebleu_signature": str,
    "chrf_signature": str,
    **{f"{split}_{name}": kind for split in ("val", "test")
       for name, kind in (("loss", NUMBER), ("ppl", NUMBER), ("bleu", NUMBER), ("chrf", NUMBER),
                          ("decoding", dict), ("sacrebleu_signature", str), ("chrf_signature", str),
                          ("bleu_by_length", list),
                          # a `validate`/`test` of a trained run: its code, and why it failed
                          ("git_commit", str), ("error", str))},
}
BUCKETS = ("val_bleu_by_length", "test_bleu_by_length")   # arrays of objects
# What a reader refuses a summary for: the shape readers rely on (objects, arrays, the strings
# runs are grouped and labelled by). A number field holding text or NaN is read as it is: the
# analysis reports it as an invalid value of that run instead of dropping the run. Writers are
# held to every type in FIELDS.
READ_CHECKED = tuple(k for k, kind in FIELDS.items() if kind in (dict, list)) + (
    "version", "run_id", "group", "task", "status")
# The values a number field can hold (both ends included): a reader takes one outside its range,
# like one that is no number at all (text, true) or not finite, for no value of the run.
RANGES = {**{f"{split}_{name}": (0, 100) for split in ("val", "test") for name in ("bleu", "chrf")},
          "val_ppl": (1, math.inf), "test_ppl": (1, math.inf), "clip_fraction": (0, 1),
          **dict.fromkeys(("val_loss", "test_loss", "best_val_loss", "params", "steps", "epochs",
                           "train_seconds", "train_tokens", "train_flops", "tokens_per_second"),
                          (0, math.inf))}


def invalid_number(key: str, value: Any) -> str | None:
    """Why ``value`` is no valid value of the number field ``key`` ("not a finite number",
    "outside its range [0, 100]"); None if it is one, is null, or ``key`` is no number field."""
    if value is None or FIELDS.get(key) not in (NUMBER, int):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "not a finite number"
    low, high = RANGES.get(key, (-math.inf, math.inf))
    return None if low <= value <= high else f"outside its range [{low:g}, {high:g}]"


JSON_TYPE = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}


def _check(fields: Mapping, where: str, keys=tuple(FIELDS)) -> None:
    for key in keys:
        kind, value = FIELDS[key], fields.get(key)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # (JSON's types, as read or as written: a bool is no number in a summary, 3.0 no int)
        if value is not None and type(value) not in kinds:
            raise SummaryError(f"{where}: field {key!r} is {JSON_TYPE.get(type(value), 'a value')}, "
                               f"not {JSON_TYPE[kinds[0]]}")
    for key in BUCKETS:
        if not all(isinstance(bucket, dict) for bucket in fields.get(key) or []):
            raise SummaryError(f"{where}: field {key!r} is not an array of objects")
    if fields.get("status") is not None:
        Status.parse(fields["status"], where)


# -- migrations: version N -> N + 1, on the parsed object, in memory ------------------------------

def _from_version_0(fields: dict) -> dict:
    # Before version 1, a bucket of BLEU by length without `unit` counted the model's source
    # tokens (later: whitespace words of the raw source).
    for key in BUCKETS:
        if isinstance(fields.get(key), list):
            fields[key] = [{"unit": "tokens", **b} if isinstance(b, dict) else b for b in fields[key]]
    return fields


MIGRATIONS = {0: _from_version_0}


def migrate(fields: dict, where: str) -> dict:
    """A summary of any version this code knows, as the current VERSION; SummaryError for a
    version it does not know."""
    version = fields.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise SummaryError(f"{where}: field 'version' is {version!r}, not a format version (0..{VERSION})")
    if version > VERSION:
        raise SummaryError(f"{where}: written in run-store format version {version}, newer than this "
                           f"lit-attention reads ({VERSION}): upgrade lit-attention to read it")
    for v in range(version, VERSION):   # (in place: its one caller's freshly parsed object)
        fields = MIGRATIONS[v](fields)
    fields["version"] = VERSION
    return fields


# -- reading and writing -----------------------------------------------------------------------

class Summary(dict):
    """One run's summary.json at the current VERSION: its fields (as JSON: the status as its
    text), with the typed ones as attributes. A summary is changed by writing a new one
    (write_summary, update_summary), never in place."""

    def __init__(self, fields: Mapping | None = None, path: Path | None = None):
        super().__init__(fields or {})
        self.path = path

    @property
    def status(self) -> Status | None:
        """None: no status recorded yet (a run directory only evaluated, or being set up)."""
        return None if self.get("status") is None else Status(self["status"])

    @property
    def error(self) -> str | None:
        return self.get("error")

    @property
    def reason(self) -> str | None:
        """Why the run has its status (its status's reason field), if recorded."""
        return self.get(self.status.reason_field) if self.status else None


def summary_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / SUMMARY


def read_summary(run_dir: Path | str, missing_ok: bool = False) -> Summary:
    """The summary.json of `run_dir`, migrated to the current VERSION. SummaryError naming the
    file and what is wrong (missing, unreadable, not JSON, not an object, a field of the wrong
    type, an unknown status or version); an empty Summary for a missing file if `missing_ok`."""
    path = summary_path(run_dir)
    try:   # NaN and Infinity are kept: the analysis names them
        fields = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if missing_ok:
            return Summary({}, path)
        raise SummaryError(f"{path}: does not exist") from None
    except UnicodeDecodeError as exc:
        raise SummaryError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise SummaryError(f"{path}: cannot be read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise SummaryError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise SummaryError(f"{path}: holds {JSON_TYPE.get(type(fields), 'a value')}, not a JSON object")
    fields = migrate(fields, str(path))
    _check(fields, str(path), READ_CHECKED)
    return Summary(fields, path)


def write_summary(run_dir: Path | str, fields: Mapping) -> Summary:
    """Write `fields` as the whole summary.json of `run_dir` (atomically, at the current VERSION;
    non-finite numbers become null). SummaryError for a field of the wrong type or an unknown
    status: the writer's bug, caught before the file changes."""
    path = summary_path(run_dir)
    # as JSON reads it back: a status as its text, tuples as arrays, NaN and infinities null
    fields = json.loads(json.dumps({"version": VERSION, **fields}), parse_constant=lambda _: None)
    fields["version"] = VERSION
    _check(fields, str(path))
    atomic_write(path, json.dumps(fields, indent=2) + "\n")
    return Summary(fields, path)


def update_summary(run_dir: Path | str, /, **fields: Any) -> Summary:
    """summary.json of `run_dir` with `fields` set (created if missing); returns the new summary."""
    return write_summary(run_dir, {**read_summary(run_dir, missing_ok=True), **fields})


# -- the STOP file -----------------------------------------------------------------------------

def request_stop(run_dir: Path | str, status: Status = Status.PRUNED) -> None:
    """Ask the run in `run_dir` to stop at its next validation end and end as `status`."""
    if status not in STOP_STATUSES:
        raise ValueError(f"a STOP file asks for one of {', '.join(map(str, STOP_STATUSES))}, not {status}")
    (Path(run_dir) / STOP).write_text(f"{status.value}\n")


def stop_request(run_dir: Path | str) -> tuple[Status, str] | None:
    """(status to end as, reason) if `run_dir` has a STOP file, else None. The file's first line
    names the status (`pruned` or `finished`); any other text, or none (a STOP made by hand),
    ends the run `finished` with that text as the reason."""
    try:
        text = (Path(run_dir) / STOP).read_text(encoding="utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None
    first = text.splitlines()[0].strip() if text else ""
    return Status(first) if first in STOP_STATUSES else Status.FINISHED, text or "stopped"
