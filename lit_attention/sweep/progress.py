"""What a sweep has done so far: the one-line progress report, and the trial list of --dry-run."""

from __future__ import annotations

import contextlib
import shlex
import textwrap

import optuna
from optuna.trial import TrialState

from lit_attention.sweep.space import cell_key
from lit_attention.tracking.schema import config_name

SKIPPED = "skipped"  # trial user attr of a trial that ran nothing (a cell another worker took)
WIDTH = 100          # a progress line's width; a trial's parameters continue on indented lines


def counted_trials(study: optuna.Study) -> list:
    return [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get(SKIPPED)]


def params_of(trial) -> dict:
    """A trial's configuration: its parameters (an enqueued cell carries them before it starts)."""
    return trial.system_attrs.get("fixed_params") or trial.params


def seed_of(trial) -> int | None:
    """A trial's seed: its user attribute (a parameter in studies created before seeds were
    replicates); enqueued cells carry it before they start."""
    return trial.user_attrs.get("seed", params_of(trial).get("seed"))


def trial_cell(trial) -> str | None:
    """The configuration x seed cell a trial runs (`space.cell_key`)."""
    seed = seed_of(trial)
    return trial.user_attrs.get("cell") if seed is None else cell_key(params_of(trial), seed)


def counts(study: optuna.Study) -> dict:
    """Trials by state; a failed trial whose cell a later trial took over (`--resume` re-queues an
    interrupted or killed run, which continues from its checkpoint) is `requeued`, not `failed`."""
    trials = counted_trials(study)
    by = {s: sum(t.state == s for t in trials) for s in TrialState}
    last = {trial_cell(t): t.number for t in trials}   # trials come in the order of their numbers
    taken_over = sum(t.state == TrialState.FAIL and last[trial_cell(t)] > t.number for t in trials)
    return {"complete": by[TrialState.COMPLETE], "pruned": by[TrialState.PRUNED],
            "failed": by[TrialState.FAIL] - taken_over, "requeued": taken_over,
            "running": by[TrialState.RUNNING], "waiting": by[TrialState.WAITING]}


def short_params(params: dict) -> str:
    """`family=rnn lr=0.001962` for {"model.family": "rnn", "model.lr": 0.0019634..., "seed": 0}."""
    return " ".join(f"{config_name(k).rpartition('.')[2]}={f'{v:.4g}' if isinstance(v, float) else v}"
                    for k, v in params.items() if k != "seed")


def fit(line: str) -> str:
    """`line` within WIDTH characters, broken at spaces onto indented lines."""
    return textwrap.fill(line, WIDTH, subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False)


def progress_line(study: optuna.Study, metric: str, total: int | None = None) -> str:
    """`[study] 13/24 done | 1 running | 0 failed | best val_bleu=27.86 (trial 13)`: trials pruned,
    waiting and re-queued (`counts`: stopped, to continue) only where there are some."""
    c = counts(study)
    parts = [f"[{study.study_name}] {c['complete'] + c['pruned']}{'/' + str(total) if total else ''} done"]
    parts += [f"{c[k]} {k.replace('requeued', 're-queued')}"
              for k in ("pruned", "running", "waiting", "failed", "requeued") if c[k] or k == "failed"]
    with contextlib.suppress(ValueError):   # no trial has completed yet
        b = study.best_trial
        parts.append(f"best {metric}={b.value:.4g} (trial {b.number})")
    return fit(" | ".join(parts))


def trial_list(sweep, cells: list[dict], commands: list[list[str]]) -> str:
    """What `--dry-run` lists after the workers: every trial's command, in queue order (grid and
    brute force; the trial numbers and run ids are those of a new study), or why there is no list."""
    if not sweep.enumerated:
        return (f"trials: {sweep.n_trials}, sampled by the {sweep.sampler} sampler while the sweep runs "
                "(no list before it runs)")
    lines = [f"trial {i}: {short_params(cell) or '(base)'} seed={cell['seed']}: {shlex.join(cmd)}"
             for i, (cell, cmd) in enumerate(zip(cells, commands))]
    return "\n".join([f"trials: {len(cells)}, in queue order:", *lines])
