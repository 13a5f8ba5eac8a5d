"""A run's identity, and the claim every `fit`, `validate` and `test` takes on its directory.

`resolve` names the run directory an invocation writes. Before the first write, the global rank 0
process of the invocation takes the directory's CLAIM (`Claim.acquire`): created with O_EXCL under
an exclusive lock of the directory, so that of two processes with one run id one holds it and the
other stops, naming the holder. A claim whose holder is dead is taken over (and the takeover
recorded): on this host, its process (pid and start time) has ended; a SLURM job's earlier attempt
(the same job id, requeued); on another host, its heartbeat (the holder touches CLAIM every
HEARTBEAT_SECONDS) is older than STALE_SECONDS. Under the claim it decides whether the invocation
may write the run at all: a trained run is continued (--ckpt_path) or replaced (--run.overwrite)
only when asked, and a run's scores come from one model.

A run's identity is the uuid written at its first claim (summary field `uuid`); a run from before
uuids is known by its group, run id, start time and commit (`run_identity`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import threading
import time
import uuid as uuids
import zipfile
from collections.abc import Mapping
from pathlib import Path

from lit_attention.files import atomic_write
from lit_attention.tracking import schema
from lit_attention.tracking.liveness import gone, process_identity
from lit_attention.tracking.schema import CHECKPOINTS, LAST_CHECKPOINT, RUN_ID_ENV, Status

HEARTBEAT_SECONDS = 30.0   # how often a holder touches its CLAIM
STALE_SECONDS = 600.0      # a CLAIM on another host untouched this long has a dead holder


class RunRefused(ValueError):
    """Why this invocation may not write the run it names (one line; exit 2)."""


def run_identity(summary: Mapping) -> str:
    """A run's identity: its uuid, or for a run from before uuids group/run_id/started_at/git_commit
    (those it records)."""
    return summary.get("uuid") or "/".join(
        str(summary[k]) for k in ("group", "run_id", "started_at", "git_commit") if summary.get(k))


def checkpoint_problem(path: Path | str) -> str | None:
    """Why ``path`` cannot be a checkpoint (missing, or no zip archive: cut short by a kill or a full
    disk, or another kind of file), or None; a zip archive is loaded later, by torch.load."""
    if not Path(path).is_file():
        return "no such file"
    # torch.save writes a zip whose directory comes last
    return None if zipfile.is_zipfile(path) else ("not a checkpoint: torch.save writes a zip archive and this "
                                                   "file is none (cut short, or another kind of file)")


def _continuable(last: Path, subcommand: str) -> None:
    why = checkpoint_problem(last)
    if why == "no such file":
        raise RunRefused(f"--ckpt_path last: nothing to {'resume' if subcommand == 'fit' else 'evaluate'}: "
                         f"{last} does not exist (the run stopped before its first checkpoint)"
                         + ("; start it afresh without --ckpt_path" if subcommand == "fit" else ""))
    if why:
        raise RunRefused(f"--ckpt_path last: {last}: {why}; give another checkpoint of the run "
                         f"(--ckpt_path {last.parent}/best.ckpt)"
                         + (" or start it afresh without --ckpt_path" if subcommand == "fit" else ""))


def check_options(subcommand: str, ckpt_path, overwrite: bool, untrained: bool) -> None:
    """RunRefused for run options that contradict each other or the subcommand."""
    if subcommand == "fit" and untrained:
        raise RunRefused("--run.untrained is for validate and test (evaluating untrained weights); fit trains them")
    if subcommand == "fit" and overwrite and ckpt_path:
        raise RunRefused("--run.overwrite starts the run afresh and --ckpt_path continues it: give one of them")
    if overwrite and subcommand != "fit":
        raise RunRefused(f"--run.overwrite is for fit (training a run afresh over a trained one); {subcommand} "
                         f"records its scores beside the run's training")
    if untrained and ckpt_path:   # (fit refuses --run.untrained above)
        raise RunRefused("--run.untrained evaluates untrained weights and --ckpt_path a checkpoint's: give one of them")
    if subcommand != "fit" and not ckpt_path and not untrained:
        raise RunRefused(f"{subcommand} without --ckpt_path evaluates untrained (random) weights: give the "
                         f"checkpoint to evaluate (--ckpt_path RUN/checkpoints/best.ckpt), or --run.untrained "
                         f"true to evaluate untrained weights (recorded in the summary)")


def latest_run(root: Path | str, group: str) -> Path | None:
    """The newest run of a group with a checkpoints/last.ckpt (by directory mtime)."""
    group_dir = Path(root) / schema.check_name("--run.group", group)
    runs = [p for p in group_dir.iterdir() if (p / CHECKPOINTS / LAST_CHECKPOINT).exists()] if group_dir.is_dir() else []
    return max(runs, key=lambda p: p.stat().st_mtime, default=None)


def resolve(run, subcommand: str, ckpt_path) -> Path:
    """The directory (<run.root>/<run.group>/<id>) an invocation with run options ``run`` writes:
    --run.id; with --ckpt_path last and no id, the newest run of the group with a last.ckpt; with a
    --ckpt_path in a run's checkpoints/, that run; else a new id. A DDP rank Lightning relaunched
    takes its launcher's (RUN_ID_ENV). RunRefused (ValueError for an unsafe name) if it cannot be."""
    check_options(subcommand, ckpt_path, run.overwrite, run.untrained)
    if os.environ.get("LOCAL_RANK", "0") != "0" and os.environ.get(RUN_ID_ENV):
        run_id = os.environ[RUN_ID_ENV]
    elif run.id:
        run_id = run.id
        if ckpt_path == "last":
            _continuable(schema.run_path(run.root, run.group, run_id) / CHECKPOINTS / LAST_CHECKPOINT, subcommand)
    elif ckpt_path == "last":
        latest = latest_run(run.root, run.group)
        if latest is None:
            raise RunRefused(f"--ckpt_path last: no run with checkpoints/last.ckpt in {Path(run.root) / run.group}")
        _continuable(latest / CHECKPOINTS / LAST_CHECKPOINT, subcommand)
        run_id = latest.name
    elif ckpt_path and Path(ckpt_path).parent.name == CHECKPOINTS:
        return Path(ckpt_path).resolve().parent.parent
    else:
        run_id = schema.new_run_id()
    os.environ[RUN_ID_ENV] = run_id
    return schema.run_path(run.root, run.group, run_id)


@contextlib.contextmanager
def _locked(directory: Path):
    """An exclusive lock of ``directory`` while its CLAIM is read, judged and written: two
    processes must not both judge a dead holder's claim dead and both take it over."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):   # a file system without locks: O_EXCL still decides a fresh claim
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _slurm() -> dict:
    job = os.environ.get("SLURM_JOB_ID")
    return {"slurm_job": job, "slurm_restart": int(os.environ.get("SLURM_RESTART_COUNT") or 0)} if job else {}


def _read_holder(file: Path) -> dict | None:
    """The claim in ``file`` ({} if unreadable), None if there is none."""
    try:
        holder = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def why_dead(holder: dict, file: Path) -> str | None:
    """Why the holder of the claim ``holder`` (read from ``file``) is known dead, or None."""
    if not isinstance(holder.get("pid"), int) or not isinstance(holder.get("host"), str):
        return "its claim file is unreadable (its holder stopped while writing it)"
    if gone(holder):
        return f"process {holder['pid']} on {holder['host']} is gone"
    job = _slurm()
    if job and holder.get("slurm_job") == job["slurm_job"] and job["slurm_restart"] > (holder.get("slurm_restart") or 0):
        return f"SLURM job {job['slurm_job']} was requeued"
    age = time.time() - file.stat().st_mtime
    if holder["host"] != socket.gethostname() and age > STALE_SECONDS:
        return f"no heartbeat from {holder['host']} for {age:.0f} s"
    return None


class Claim:
    """The right of one invocation to write one run directory; ``record`` holds the summary fields
    it adds (uuid, takeovers, overwritten, untrained)."""

    def __init__(self, run_dir: Path, subcommand: str, ckpt_path=None, overwrite: bool = False,
                 untrained: bool = False):
        self.path, self.subcommand, self.ckpt_path = Path(run_dir), subcommand, ckpt_path
        self.file = self.path / schema.CLAIM
        self.overwrite, self.untrained = overwrite, untrained
        self.record: dict = {}
        self.created: Path | None = None   # the highest directory acquire made
        self._stop: threading.Event | None = None

    def acquire(self) -> None:
        """Take the run directory (creating it): RunRefused, with nothing written, if another
        process holds it or the invocation may not write this run."""
        new = [d for d in (self.path, *self.path.parents) if not d.exists()]
        self.path.mkdir(parents=True, exist_ok=True)
        with _locked(self.path):
            holder = _read_holder(self.file)
            dead = None if holder is None else why_dead(holder, self.file)
            if holder is not None and dead is None:
                raise RunRefused(f"run {self.path.name} ({self.path}) is in use: {holder.get('command')} by process "
                                 f"{holder['pid']} on {holder['host']} since {holder.get('claimed_at')} (heartbeat "
                                 f"{time.time() - self.file.stat().st_mtime:.0f} s ago); wait for it to end or give "
                                 f"another --run.id")
            try:
                summary = schema.read_summary(self.path, missing_ok=True)
            except schema.SummaryError as exc:
                if not self.overwrite:
                    raise RunRefused(f"{exc}; replace the run with --run.overwrite true or give another --run.id") from None
                summary = schema.Summary()
            record = self._admit(summary)
            if holder is not None:
                was = {k: holder.get(k) for k in ("command", "host", "pid", "claimed_at")}
                record["takeovers"] = [*(summary.get("takeovers") or []), {**was, "why": dead, "at": schema.now_iso()}]
            mine = json.dumps({**process_identity(), "command": self.subcommand, "uuid": record["uuid"],
                               "claimed_at": schema.now_iso(), **_slurm()}) + "\n"
            if holder is None:
                try:
                    with open(self.file, "x", encoding="utf-8") as f:   # O_CREAT | O_EXCL
                        f.write(mine)
                except FileExistsError:   # taken between our look and our write (no lock here)
                    raise RunRefused(f"run {self.path.name} ({self.path}) is in use: claimed by another "
                                     f"process just now ({self.file})") from None
            else:
                atomic_write(self.file, mine)
        self.record.update(record)   # (the dict the run store's callback was given)
        self.created = new[-1] if new else None
        self._stop = threading.Event()
        threading.Thread(target=_heartbeat, args=(self.file, self._stop), daemon=True).start()

    def _admit(self, summary: schema.Summary) -> dict:
        """The summary fields this invocation's claim adds; RunRefused if it may not write the run."""
        status, name = summary.status, f"run {self.path.name} ({self.path})"
        record = {"uuid": summary.get("uuid") or uuids.uuid4().hex}
        if self.subcommand == "fit":
            if self.ckpt_path:   # continuing: the same run
                return record
            checkpoints = any(self.path.joinpath(CHECKPOINTS).glob("*.ckpt"))
            if (status in (Status.FINISHED, Status.PRUNED) or (status and checkpoints)) and not self.overwrite:
                state = "running, its process gone" if status is Status.RUNNING else status.value
                raise RunRefused(f"{name} exists ({state}{', with checkpoints' if checkpoints else ''}): continue "
                                 f"it with --ckpt_path last, train it afresh with --run.overwrite true, or give "
                                 f"another --run.id")
            record = {"uuid": uuids.uuid4().hex}   # a new run
            if status is not None:
                record["overwritten"] = {"run": run_identity(summary), "status": status.value,
                                         "finished_at": summary.get("finished_at"), "at": schema.now_iso()}
            return record
        # validate/test: a run's scores come from one model (its training, or one evaluated checkpoint)
        evaluated = summary.get("evaluated") or {}
        if summary.get("started_at"):
            own = not self.untrained and (not Path(self.ckpt_path).is_file()   # last, best: the run's own
                                          or self.path.resolve() in Path(self.ckpt_path).resolve().parents)
            holds = "the scores of its own training"
        elif summary.get("untrained"):
            own, holds = self.untrained, "untrained weights' scores"
        elif evaluated:   # the same file, with the same contents
            own = (not self.untrained and evaluated.get("checkpoint") == checkpoint_name(self.ckpt_path, self.path)
                   and evaluated.get("sha256") == sha256(self.ckpt_path))
            holds = f"the scores of {evaluated.get('checkpoint')} (sha256 {str(evaluated.get('sha256'))[:12]}...)"
        else:
            own, holds = True, None
        if not own:
            asked = "--run.untrained" if self.untrained else f"--ckpt_path {self.ckpt_path}"
            raise RunRefused(f"{name} holds {holds}; {asked} is another model, whose scores would be recorded as "
                             f"this run's: leave out --run.id or give a new one")
        if self.untrained:
            record["untrained"] = True
        return record

    def release(self) -> None:
        """Give the run directory back (its CLAIM removed if it is still this process's)."""
        if self._stop is None:
            return
        self._stop.set()
        holder = _read_holder(self.file) or {}
        if {k: holder.get(k) for k in ("pid", "host", "pid_started")} == process_identity():
            self.file.unlink(missing_ok=True)


def _heartbeat(file: Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_SECONDS):
        try:
            os.utime(file)
        except OSError:   # the claim is gone (its run directory removed by a refusal)
            return


def sha256(path) -> str:
    """The SHA-256 (hex) of the file ``path``."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def checkpoint_name(path, run_dir: Path) -> str:
    """A checkpoint as a run's summary names it: its path relative to the runs root of ``run_dir``
    (<root>/<group>/<id>), else absolute."""
    path, root = Path(path).resolve(), Path(run_dir).resolve().parent.parent
    return str(path.relative_to(root)) if root in path.parents else str(path)
