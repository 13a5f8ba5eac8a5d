"""The sweep driver: create the study once, then workers pull trials from it until it is done.

Grid and brute force enumerate every configuration x seed cell up front and enqueue them all when
the study is created; a worker pops a waiting trial atomically (Optuna marks it RUNNING in one
database update), so two workers never run the same cell. Random and TPE sample a configuration
and enqueue its other seeds. A trial's seed is its user attribute `seed`, not an Optuna parameter:
seeds are replicates, and Optuna's importances and plots see only the configuration. A worker that
dies mid-trial stops sending heartbeats; the next worker to look fails that trial (at once if the
dead worker ran on its host) and re-queues its cell
(`fail_abandoned`, `retry_uncovered`). A worker that only stalled past the grace period finds its
trial failed and stops its run (`Fence`), so that a cell never counts two runs. What Optuna cannot
do in one transaction (create a study and enqueue its cells, re-queue a cell only if nothing covers
it) runs under the database's study lock (`storage.study_lock`).

Workers do not leave while a trial of the study is still running somewhere: it might go stale and
need running again.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import warnings
from datetime import datetime
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from lit_attention.sweep import interrupts
from lit_attention.sweep import space as sp
from lit_attention.sweep import trial as tr
from lit_attention.sweep.progress import (SKIPPED, counted_trials, fit, params_of, seed_of,
                                          short_params, trial_cell)
from lit_attention.sweep.schema import BASE_PARAM, Sweep, SweepError, design_changes
from lit_attention.sweep.storage import STORAGE_ENV, make_storage, study_lock
from lit_attention.tracking import schema
from lit_attention.tracking.liveness import gone, process_identity, run_state
from lit_attention.tracking.schema import Status, Summary, config_name, trial_run_id

READY = "lit_attention.ready"  # study user attr: every cell is enqueued, workers may start
HALT = "lit_attention.halt"    # study user attr: why no further trial starts (set, or None)
WAIT_SECONDS = 2.0
PENDING = (TrialState.WAITING, TrialState.RUNNING)
DONE = (TrialState.COMPLETE, TrialState.PRUNED)
# A failed trial without an `error` (what its worker saw) was failed by another worker's heartbeat
# or liveness check: its worker, recorded when it took the trial, died or stalled; or it had none
# yet (a driver killed between a worker taking the trial and recording itself). The reason is
# derived when read, so a finished trial carries none.
NO_RECORD = "failed by a heartbeat or liveness check before its worker recorded anything (killed just after taking it)"


def failure_reason(t: optuna.trial.FrozenTrial) -> str:
    if t.user_attrs.get("error"):
        return t.user_attrs["error"]
    worker = t.user_attrs.get("worker")
    return (f"stale heartbeat: worker {worker} stopped sending heartbeats before the trial ended "
            f"(killed, its machine lost, or stalled)") if worker else NO_RECORD


def enqueue_cell(study: optuna.Study, cell: dict) -> None:
    """Queue one configuration x seed cell: the configuration as fixed parameters, the seed apart."""
    study.enqueue_trial({k: v for k, v in cell.items() if k != "seed"}, user_attrs={"seed": cell["seed"]})


class StudyMismatch(SweepError):
    pass


def check_trials(sweep: Sweep, root: Path, **launch) -> None:
    """Parse the training arguments of a few trials with the training CLI's own parser, before
    any trial starts: together they use every value of every space parameter (ranges: their
    bounds and second step), so an unknown key, a value of the wrong type or an invalid choice
    stops the sweep here, naming the sweep key. Raises SweepError; writes nothing.
    """
    from lit_attention.lightning.cli import training_args_checker
    from lit_attention.config_check import ConfigError

    check_training_args = training_args_checker()
    for cell in sp.probe_cells(sweep.space) or [{}]:
        base = sweep.base_for(cell)
        base = yaml.safe_dump(base) if isinstance(base, dict) else base
        cmd = trial_command(sweep, root, cell, sweep.seeds[0], "check", "check", base, **launch)
        try:
            check_training_args(["fit", *cmd[cmd.index("--config"):]])
        except ConfigError as e:
            named = re.search(r"(?:option|value for|invalid configuration:) ([\w.]+)", str(e))
            config_key = named.group(1) if named else None
            keys = [f"space.{k}" for k in cell if config_name(k) == config_key]
            keys += [f"fixed.{config_key}"] if config_key in sweep.fixed else []
            chosen = cell.get(BASE_PARAM)
            choice = f"space.{BASE_PARAM}.choices[{list(sweep.bases).index(chosen)}]" if chosen else None
            key = (keys or [choice or ("space" if cell else "base")])[0]
            line = next((sweep.lines[k] for k in (key, key.rpartition(".")[0]) if k in sweep.lines), None)
            where = f"base choice {chosen!r} ({base}): " if chosen else ""
            raise SweepError(sweep.path, key, f"{where}{e} (checked with the training CLI: "
                                              f"{short_params(cell) or 'base + fixed'})", line) from None


def retry_uncovered(url: str, max_retry: int, study: optuna.Study,
                    trial: optuna.trial.FrozenTrial) -> None:
    """For a trial a heartbeat or liveness check failed: close its run and re-queue its cell.

    Its worker died (or stalled) before recording the run's outcome. A run whose process is gone
    is recorded `killed` with the reason, so that the cell's next attempt continues it from its
    last checkpoint (`Objective._run`). A run that still reads finished (it finished
    just before its driver was killed) or running (its process alive: a stalled worker, or on
    another host) is recorded as failed, so that it never counts beside the re-run. The cell is
    re-queued (Optuna's retry, at most `max_retry` times) under the study lock and only if no other
    trial covers it: a driver resuming on another machine may have enqueued it again meanwhile
    (`_enqueue_missing`).
    """
    close_abandoned_run(trial)
    with study_lock(url):
        cell = trial_cell(trial)
        if cell is None or cell not in covered_cells(study, but=trial.number):
            # Optuna's retry copies the user attributes: not the dead worker's identity, which
            # would make the retry look abandoned the moment another worker takes it (until
            # the retries run out and the cell is left failed).
            fresh = copy.deepcopy(trial)
            fresh.user_attrs = {} if seed_of(trial) is None else {"seed": seed_of(trial)}
            optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry)(study, fresh)


def close_abandoned_run(trial: optuna.trial.FrozenTrial) -> None:
    """Record the end of the run a trial that lost its worker left (see `retry_uncovered`)."""
    run_dir = Path(trial.user_attrs.get("run_dir") or "/nonexistent")
    why = (f"abandoned: trial {trial.number} lost its worker before it recorded this run's outcome; "
           f"its cell was queued again")
    with contextlib.suppress(schema.SummaryError):   # never written, or not on this machine
        summary = schema.read_summary(run_dir)
        status, _ = run_state(summary)
        # its process is gone
        killed = status is Status.KILLED and summary.status is Status.RUNNING
        if killed or status in (Status.FINISHED, Status.RUNNING):
            tr.record_end(run_dir, Status.KILLED if killed else Status.FAILED, why, summary)


def study_options(sweep: Sweep, url: str) -> dict:
    """The study, storage, sampler and pruner a driver or worker opens the study with."""
    # grid/bruteforce trials are all enqueued; random fills the rest (tpe's options: seed,
    # n_startup_trials). Pruner `none`: NopPruner (`None` would mean MedianPruner in Optuna).
    sampler = {"tpe": optuna.samplers.TPESampler}.get(sweep.sampler, optuna.samplers.RandomSampler)
    pruner = {"median": optuna.pruners.MedianPruner,
              "hyperband": optuna.pruners.HyperbandPruner}.get(sweep.pruner, optuna.pruners.NopPruner)
    storage = make_storage(url, sweep.heartbeat_interval, sweep.grace_period, sweep.max_retry,
                           stale_callback=functools.partial(retry_uncovered, url, sweep.max_retry))
    return dict(study_name=sweep.study_name, storage=storage,
                sampler=sampler(**sweep.sampler_options), pruner=pruner(**sweep.pruner_options))


def planned_cells(sweep: Sweep) -> list[dict]:
    """Grid: every configuration x seed, declaration order; brute force: the same, shuffled."""
    configs = sp.grid(sweep.space)
    if sweep.sampler == "bruteforce":
        random.Random(sweep.sampler_options.get("seed", 0)).shuffle(configs)
    return [{**c, "seed": s} for c in configs for s in sweep.seeds][: sweep.n_trials or None]


def covered_cells(study: optuna.Study, but: int | None = None) -> set:
    """The cells of the finished or pending trials (other than trial `but`)."""
    return {trial_cell(t) for t in counted_trials(study)
            if t.state in DONE + PENDING and t.number != but}


def sampled_configs(trials) -> set[str]:
    """The configurations the trials of a random/TPE study have taken so far."""
    return {sp.config_key(params_of(t)) for t in trials
            if params_of(t) and not t.user_attrs.get(SKIPPED)}


def _enqueue_missing(study: optuna.Study, sweep: Sweep) -> None:
    """Enqueue every planned cell that has no finished or pending trial (also cells that failed);
    random/TPE: the cells of sampled configurations whose every attempt failed."""
    covered = covered_cells(study)
    wanted = planned_cells(sweep) if sweep.enumerated else [
        {**params_of(t), "seed": seed_of(t)} for t in counted_trials(study)
        if seed_of(t) is not None]
    for key, cell in {sp.cell_key(c, c["seed"]): c for c in wanted}.items():   # each cell once
        if key not in covered:
            enqueue_cell(study, cell)


def open_study(sweep: Sweep, url: str, resume: bool = False) -> optuna.Study:
    """Create the study (and enqueue its cells) if it does not exist, else join it.

    Called once by each driver before its workers start, under the database's study lock: drivers
    started at once on one database (machines sharing a PostgreSQL study) create it once and join it
    one after the other. A study found without its ready mark lost its creator before every cell
    was enqueued (the creator holds the lock until then); it is completed here. With `resume`,
    cells without a finished or pending trial (failed, interrupted, missing) are enqueued again.
    """
    with study_lock(url):
        study = optuna.create_study(direction=sweep.direction, load_if_exists=True,
                                    **study_options(sweep, url))
        attrs = study.user_attrs
        if attrs.get("spec_hash", sweep.spec_hash()) != sweep.spec_hash():
            raise StudyMismatch(sweep.path, "study_name",
                                f"study {sweep.study_name!r} already exists with a different space, objective, "
                                "sampler or seeds; choose another study_name (or delete the study)")
        design = sweep.design()   # the base: a study created before designs were recorded has none
        if attrs.get("design", design) != design:
            raise StudyMismatch(sweep.path, "base",
                                f"study {sweep.study_name!r} was created from another base "
                                f"({design_changes(attrs['design'], design)}): its trials would mix two designs; "
                                "restore the base, or give the sweep another study_name (or delete the study)")
        study.set_user_attr("design", design)   # (a study created before designs has none yet)
        if study.direction.name.lower() != sweep.direction:
            raise StudyMismatch(sweep.path, "objective.direction",
                                f"the existing study {sweep.direction}s the other way")
        if not attrs.get(READY):
            # Sampler settings are part of the experiment (TPE defaults changed in Optuna 5).
            sampler = {"name": sweep.sampler, **sweep.sampler_options, "optuna": optuna.__version__}
            for key, value in (("spec", sweep.spec()), ("spec_hash", sweep.spec_hash()),
                               ("sweep_file", str(sweep.path)), ("sampler", sampler)):
                study.set_user_attr(key, value)
            _enqueue_missing(study, sweep)   # (random/TPE: nothing yet)
            study.set_user_attr(READY, True)
        elif resume:
            fail_abandoned(study, sweep, url)
            _enqueue_missing(study, sweep)
            study.set_user_attr(HALT, None)   # asked to try again: one trial will tell
        return study


def fail_abandoned(study: optuna.Study, sweep: Sweep, url: str) -> None:
    """Fail the running trials nobody runs any more and re-queue their cells (`retry_uncovered`).

    Where the facts are known, at once: a trial whose worker process on this host has ended (a
    driver killed with SIGKILL takes its workers along), or that has no worker recorded
    `grace_period` after it started (killed between taking it and its first heartbeat, which no
    heartbeat check would ever fail). The rest, when their heartbeat is older than the grace period.
    """
    now = datetime.now()   # Optuna's datetime_start is naive local time too
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        process = t.user_attrs.get("worker_process")
        orphan = process is None and t.datetime_start and (now - t.datetime_start).total_seconds() > sweep.grace_period
        if orphan or gone(process):
            try:
                study.tell(t.number, state=TrialState.FAIL)   # its reason: see failure_reason
            except ValueError:   # it ended meanwhile
                continue
            retry_uncovered(url, sweep.max_retry, study, t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)


class Fence:
    """Whether this worker still owns its trial.

    Another worker fails a trial whose heartbeat is older than the grace period and re-queues its
    cell; a worker that only stalled (a loaded machine, a slow disk) then still runs the trial, and
    the cell would get two runs. Once the trial is no longer RUNNING in the study, its run is
    stopped and recorded as failed with the reason, so that it is not counted beside the re-run
    (a run that finished too late as well).
    """

    def __init__(self, trial: optuna.Trial, grace: int, every: float):
        self.trial, self.grace, self.every = trial, grace, every
        self.run_dir: Path | None = None
        self.reason: str | None = None
        self.bug = False  # the objective raised what it does not expect (a bug)
        self._next = time.monotonic() + every

    def check(self) -> str | None:
        """Why the trial is no longer this worker's, or None. When it is found lost, its run is
        recorded as failed with that reason."""
        running = self.trial.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if self.reason is None and all(t.number != self.trial.number for t in running):
            self.reason = (f"superseded: another worker failed trial {self.trial.number} when its heartbeat "
                           f"was older than {self.grace} s and re-queued its cell; this run was stopped "
                           f"and does not count")
            if self.run_dir is not None:
                tr.record_end(self.run_dir, Status.FAILED, self.reason)
            print(f"[{self.trial.study.study_name}] trial {self.trial.number} {self.reason}",
                  flush=True)
        self._next = time.monotonic() + self.every
        return self.reason

    def __call__(self) -> str | None:
        """`check()` at most every `every` seconds (for the trial's poll loop)."""
        return self.reason or (self.check() if time.monotonic() >= self._next else None)

    def report(self, value: float, step: int) -> None:
        try:
            self.trial.report(value, step)
        except optuna.exceptions.UpdateFinishedTrialError:
            self.check()


def base_file(sweep: Sweep, root: Path, params: dict) -> Path:
    """The config file a trial with these parameters starts from; an inline base is the file
    ROOT/<study>/base.yaml, which each worker writes."""
    base = sweep.base_for(params)
    return root / sweep.study_name / "base.yaml" if isinstance(base, dict) else base


def trial_command(sweep: Sweep, root: Path, params: dict, seed: int, run_id: str, name: str,
                  base: Path | str | None = None, **launch) -> list[str]:
    """The `lit-attention fit` command of one trial (`base`: the config, else `base_file`'s)."""
    return tr.build_command(base=base or base_file(sweep, root, params), root=root,
                            study=sweep.study_name, run_id=run_id, seed=seed, params=params,
                            fixed=sweep.fixed, tracking=sweep.tracking, name=name, **launch)


class Objective:
    """Runs one trial: picks its cell, launches `lit-attention fit`, reports, returns the objective."""

    def __init__(self, sweep: Sweep, url: str, root: Path, sharing: int | None = None, **launch):
        self.sweep, self.url, self.root = sweep, url, root
        self.launch = launch   # devices, accelerator, nodes of each trial (build_command's)
        self.sharing = sharing   # trials at once on this worker's GPUs (None: not placed on a GPU)
        self.fence: Fence | None = None  # the current trial's
        self.skips = 0   # trials skipped in a row (the sampler proposes taken configurations)
        if isinstance(sweep.base, dict):
            path = base_file(sweep, root, {})
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(sweep.base, sort_keys=False))

    def _skip(self, trial: optuna.Trial, why: str) -> None:
        self.skips += 1
        trial.set_user_attr(SKIPPED, why)
        trial.set_user_attr("error", f"skipped: {why}")
        raise tr.TrialFailed(f"skipped: {why}")

    def __call__(self, trial: optuna.Trial) -> float:
        fence = self.fence = Fence(trial, self.sweep.grace_period, self.sweep.heartbeat_interval)
        try:
            return self._run(trial, fence)
        except optuna.exceptions.UpdateFinishedTrialError:  # only another worker finishes our trial
            raise tr.TrialFailed(fence.check() or "the trial was finished elsewhere") from None
        except BaseException as exc:
            fence.bug = not isinstance(exc, (tr.TrialFailed, optuna.TrialPruned))
            raise

    def _run(self, trial: optuna.Trial, fence: Fence) -> float:
        sweep = self.sweep
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        trial.set_user_attr("worker_process", process_identity())
        trials = trial.study.get_trials(deepcopy=False)
        me = next(t for t in trials if t.number == trial.number)
        enqueued = "fixed_params" in me.system_attrs
        if sweep.enumerated and not enqueued:
            # Another worker popped the last waiting trial between our look and our ask.
            self._skip(trial, "no waiting cell left")
        params = sp.suggest(trial, sweep.space)
        seed = sweep.seeds[0] if seed_of(me) is None else seed_of(me)   # sampled: the first seed
        trial.set_user_attr("seed", seed)
        cell = sp.cell_key(params, seed)
        attempts = [t for t in trials if trial_cell(t) == cell and t.number != trial.number
                    and not t.user_attrs.get(SKIPPED)]   # earlier ones: the trials come in order
        if any(t.state in DONE for t in attempts):
            self._skip(trial, f"duplicate of a finished cell {cell}")
        if not enqueued:
            # One sampled configuration at a time: two workers whose samplers proposed the same
            # configuration at once must not both run it (and enqueue its seeds twice).
            with study_lock(self.url):
                configs = sampled_configs(t for t in trial.study.get_trials(deepcopy=False)
                                          if t.number != trial.number)
                if sp.config_key(params) in configs:
                    self._skip(trial, "the sampler proposed a configuration already in the study")
                if len(configs) >= sweep.n_trials // len(sweep.seeds):
                    self._skip(trial, "budget of configurations reached")
                for s in sweep.seeds[1:]:
                    enqueue_cell(trial.study, {**params, "seed": s})
        self.skips = 0

        run_id = trial_run_id(trial.number, seed)
        name = f"{sweep.study_name}-t{trial.number}-s{seed}"
        # The cell's latest failed attempt, if the run it left can be continued (trial.resumable)
        failed = [t for t in attempts if t.state == TrialState.FAIL and t.user_attrs.get("run_id")]
        runs = self.root / sweep.study_name
        last = failed[-1] if failed else None
        earlier = last if last and tr.resumable(runs / last.user_attrs["run_id"]) else None
        if earlier is not None:   # continue the run it left, from its last checkpoint
            run_id, name = earlier.user_attrs["run_id"], earlier.user_attrs.get("run_name", name)
            trial.set_user_attr("resumed_from", earlier.number)
        run_dir = runs / run_id
        for key, value in (("run_name", name), ("cell", cell), ("run_id", run_id),
                           ("run_dir", str(run_dir))):
            trial.set_user_attr(key, value)
        if "failed_trial" in me.system_attrs:
            trial.set_user_attr("retry_of", me.system_attrs["failed_trial"])
        cmd = trial_command(sweep, self.root, params, seed, run_id, name,
                            resume=earlier is not None, **self.launch)
        resumed = (f" (continuing trial {earlier.number}'s run from its last checkpoint)"
                   if earlier is not None else "")
        print(fit(f"[{sweep.study_name}] trial {trial.number} start{resumed}: {short_params(params)} "
                  f"seed={seed} -> {run_dir}"), flush=True)
        fence.run_dir = run_dir
        try:
            out = tr.run(cmd, run_dir, sweep.objective, fence.report, trial.should_prune, fence, self.sharing)
        except OSError as exc:   # the run directory cannot be written (read-only, full): a reason, not a crash
            why = f"cannot write {exc.filename or run_dir}: {exc.strerror or exc}"
            out = tr.Outcome(Status.FAILED, Summary(), why)
        except KeyboardInterrupt as stop:
            trial.set_user_attr("status", Status.INTERRUPTED.value)
            trial.set_user_attr("error", f"interrupted ({interrupts.cause(stop)}); continue with --resume")
            raise
        except Exception as exc:   # a bug in the driver: not a stale heartbeat, whatever Optuna does next
            trial.set_user_attr("error", f"{type(exc).__name__}: {exc}")
            raise
        if fence.check():   # lost while running, or just after: the trial is no longer ours to update
            raise tr.TrialFailed(fence.reason)
        s = out.summary
        trial.set_user_attr("wandb_run_id", s.get("wandb_run_id"))
        results = {k: s.get(k) for k in ("val_loss", "val_ppl", "val_bleu", "val_chrf", "test_bleu",
                                         "params", "train_seconds", "epochs")}
        for key, value in {"status": out.status.value, "error": out.error, **results}.items():
            if value is not None:   # one number per attribute: the dashboard sorts, filters by them
                trial.set_user_attr(key, value)
        print(f"[{sweep.study_name}] trial {trial.number} {out.status}"
              + (f": {sweep.objective}={out.value:.4g}" if out.value is not None else "")
              + (f" ({out.error})" if out.error else ""), flush=True)
        if out.status is Status.PRUNED:
            raise optuna.TrialPruned()
        if out.objective_absent:   # every trial of the study would train in vain: start no other
            trial.study.set_user_attr(HALT, f"trial {trial.number}: {out.error}")
        if out.status is not Status.FINISHED:
            raise tr.TrialFailed(out.error)
        return out.value


def unfinished_cells(sweep: Sweep, study: optuna.Study) -> list[str]:
    """One line per requested cell without a finished (or pruned) trial, with the reason."""
    trials = counted_trials(study)
    by_cell: dict[str, list] = {}
    for t in trials:
        by_cell.setdefault(trial_cell(t), []).append(t)
    wanted = ([sp.cell_key(c, c["seed"]) for c in planned_cells(sweep)] if sweep.enumerated
              else [c for c in by_cell if c is not None])
    lines = []
    for cell in wanted:
        attempts = by_cell.get(cell, [])
        if any(t.state in DONE for t in attempts):
            continue
        config, _, seed = cell.rpartition("|")
        label = f"{short_params(json.loads(config)) or '(base)'} {seed}"
        if any(t.state in PENDING for t in attempts):
            lines.append(f"{label}: unfinished (still waiting or running)")
        elif attempts:
            why = failure_reason(attempts[-1])[:300]
            lines.append(f"{label}: failed ({len(attempts)} attempt(s)): {why}")
        else:
            lines.append(f"{label}: never ran")
    if not sweep.enumerated:
        done = sum(t.state in DONE for t in trials)
        if done + len(lines) < sweep.n_trials:
            lines.append(f"{sweep.n_trials - done - len(lines)} of {sweep.n_trials} requested trials never ran "
                         "(the sampler kept proposing configurations already in the study)")
    return lines


def run_worker(sweep: Sweep, url: str, root: Path, sharing: int | None = None, **launch) -> int:
    """Pull trials from the (existing) study until every cell is finished. Returns an exit code.

    Ctrl-C and SIGTERM stop it where it waits (between storage calls, see interrupts.py): the
    running trial's training is interrupted and the trial failed as interrupted; exit code 130.
    """
    # The worker prints every trial's outcome and reason itself; Optuna's warning for a failed
    # trial adds a traceback even to a routine skip.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    study = optuna.load_study(**study_options(sweep, url))
    objective = Objective(sweep, url, root, sharing, **launch)
    try:
        with interrupts.deferred():
            return _pull_trials(study, sweep, url, objective)
    except KeyboardInterrupt:
        return 130


def _pull_trials(study: optuna.Study, sweep: Sweep, url: str, objective: Objective) -> int:
    while True:
        interrupts.check()   # not a new trial after a stop was asked for
        fail_abandoned(study, sweep, url)  # re-queues cells of dead workers
        if study.user_attrs.get(HALT):
            return 0
        trials = study.get_trials(deepcopy=False)
        states = {t.state for t in trials}
        sampling = (not sweep.enumerated and objective.skips < 20
                    and len(sampled_configs(trials)) < sweep.n_trials // len(sweep.seeds))
        if TrialState.WAITING not in states and not sampling:
            if TrialState.RUNNING not in states:
                return 0
            interrupts.sleep(WAIT_SECONDS)   # a running trial may go stale and need running again
            continue
        objective.fence = None
        try:
            study.optimize(objective, n_trials=1, catch=(tr.TrialFailed,))
        except Exception:
            # Optuna cannot tell a trial another worker failed as stale meanwhile ("Cannot tell
            # a FAIL trial."); an exception of the objective itself is a bug and is raised.
            if objective.fence is None or objective.fence.bug or objective.fence.check() is None:
                raise


def first_commands(sweep: Sweep, root: Path, n: int, **launch) -> list[list[str]]:
    """The command of each of the first n trials, as a worker would start them (for --dry-run).

    Grid and brute force: the first n cells in queue order (which worker pops which is a race);
    random/TPE: the first probe configuration, since their cells are sampled while running.
    """
    probe = {**(sp.probe_cells(sweep.space) or [{}])[0], "seed": sweep.seeds[0]}
    cells = (planned_cells(sweep) if sweep.enumerated else []) + [probe] * n
    return [trial_command(sweep, root, {k: v for k, v in cell.items() if k != "seed"},
                          cell["seed"], trial_run_id(i, cell["seed"]),
                          f"{sweep.study_name}-t{i}-s{cell['seed']}", **launch)
            for i, cell in enumerate(cells[:n])]


def spawn_workers(sweep_file: Path, url: str, placements: list, root: Path, devices: int, tracking: str | None,
                  accelerator: str | None = None, max_cells: int | None = None, nodes: int = 1) -> list:
    """One worker process per placement, with that placement's GPUs and threads in its environment
    (its trials inherit them); a worker on a GPU is told how many trials share it (`--trials-per-gpu`,
    for the reason of a trial that runs out of GPU memory)."""
    options = {"--root": root, "--devices-per-trial": devices, "--nodes-per-trial": nodes,
               "--accelerator": accelerator, "--max-cells": max_cells, "--tracking": tracking}
    cmd = [sys.executable, "-m", "lit_attention.sweep.guard", str(os.getpid()), sys.executable,
           "-m", "lit_attention.sweep.cli", "--worker", str(sweep_file), *tr.flag_args(options)]
    env = {**os.environ, STORAGE_ENV: url, "PYTHONUNBUFFERED": "1"}
    # Own session: Ctrl-C reaches the driver only, which then stops each worker once.
    return [subprocess.Popen(cmd + tr.flag_args({"--trials-per-gpu": p.gpus and p.sharing}),
                             env={**env, **p.env()}, start_new_session=True) for p in placements]


def wait_workers(procs: list, study: optuna.Study, progress) -> list[int]:
    """Wait for the worker processes, printing progress; Ctrl-C stops them cleanly."""
    try:
        with interrupts.deferred():   # not inside progress()'s storage read: see interrupts.py
            while any(p.poll() is None for p in procs):
                progress(study)
                interrupts.sleep(WAIT_SECONDS, until_exit=procs)
    except KeyboardInterrupt as stop:
        print(f"\n[{study.study_name}] stopping: waiting for the running trials to stop...", flush=True)
        for p in procs:   # the signal the driver got (if still running): each trial records it
            p.send_signal(interrupts.signum(stop))
        for p in procs:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        raise
    progress(study)
    return [p.returncode for p in procs]
