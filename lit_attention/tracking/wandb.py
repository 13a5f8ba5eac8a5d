"""Weights & Biases: online when a key and the server are there, offline otherwise, never a hang.

Server, key and mode are what the installed wandb finds (WANDB_BASE_URL, WANDB_API_KEY, NETRC or
~/.netrc, WANDB_MODE, the settings `wandb login --host` and `wandb offline` write): the decision
asks wandb, so it names the server wandb.init would talk to. An offline run is uploaded later with
`wandb sync RUN_DIR/wandb/offline-run-*` (docs/SWEEPS.md).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

from lit_attention.config_check import ConfigError
from lit_attention.tracking import schema

# WANDB_MODE values W&B accepts -> the mode they mean
MODES = {"online": "online", "run": "online", "offline": "offline", "dryrun": "offline",
         "disabled": "disabled"}


def _settings():
    """wandb's own settings for this process, as wandb.init reads them (no service started)."""
    from wandb.sdk import wandb_setup

    try:
        return wandb_setup.singleton().settings
    except ValueError as e:          # pydantic's ValidationError: a WANDB_* value wandb refuses
        error = e.errors(include_url=False)[0] if hasattr(e, "errors") else {"msg": str(e)}
        name = ".".join(map(str, error.get("loc", ()))) or "settings"
        raise ConfigError(f"W&B's {name} {error.get('input', '')!r}: {error['msg']} (set by "
                          f"WANDB_{name.upper()} or W&B's settings file)") from None


def _has_api_key(base_url: str) -> bool:
    """Whether wandb finds credentials for ``base_url`` (environment, netrc, settings), without
    prompting, without the network and without changing the process's W&B session."""
    from wandb.errors import AuthenticationError
    from wandb.sdk.lib import wbauth

    try:
        return wbauth.authenticate_session(host=base_url, source="lit-attention", prompt=False,
                                           update_session=False) is not None
    except AuthenticationError as e:
        raise ConfigError(f"W&B API key for {base_url}: {e}") from None


def wandb_mode() -> tuple[str, str]:
    """(mode, why): an explicit WANDB_MODE wins, then a mode W&B's settings file holds
    (`wandb offline`), else online only with a key for wandb's server and a route to it. A
    WANDB_MODE or WANDB_BASE_URL W&B does not accept stops (ConfigError)."""
    if given := os.environ.get("WANDB_MODE"):
        if given not in MODES:
            raise ConfigError(f"WANDB_MODE={given!r} is not one of: {', '.join(MODES)}")
        return MODES[given], f"WANDB_MODE={given}"
    settings = _settings()
    if MODES.get(settings.mode, "online") != "online":
        return MODES[settings.mode], f"W&B's settings say mode={settings.mode}"
    url = urlsplit(settings.base_url)
    if not _has_api_key(settings.base_url):
        return "offline", f"no API key for {settings.base_url} (`wandb login` stores one)"
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=2.0).close()
    except OSError:
        return "offline", f"{url.hostname}:{port} does not answer"
    return "online", f"an API key and {url.hostname}:{port} answers"


def make_wandb_logger(run_dir: Path, project: str, group: str, name: str, job_type: str,
                      tags: list[str], run_id: str, config: dict):
    """A WandbLogger whose run's config holds ``config`` (the run's whole resolved config.yaml:
    model, data, trainer, budget, seed, ...) under the key ``run_config``."""
    from lightning.pytorch.loggers import WandbLogger

    mode, why = wandb_mode()
    if os.environ.get("LOCAL_RANK", "0") == "0":
        upload = f"; upload it later with `wandb sync {run_dir / 'wandb'}/offline-run-*`" if mode == "offline" else ""
        print(f"W&B: {mode} ({why}){upload}", file=sys.stderr, flush=True)
    logger = WandbLogger(project=project, group=group, name=name, job_type=job_type, tags=tags,
                         save_dir=str(run_dir), offline=mode != "online", id=run_id, log_model=False,
                         mode=mode)
    logger.log_hyperparams({"run_config": config})   # rank zero only; Lightning adds the model's
    return logger


RUN_FOLDER = "wandb"   # W&B's directory of a run inside its run directory (the logger's save_dir)


# The run store a W&B run carries as an artifact of this type (a new version after every `fit`
# and `test`): what `report --wandb` needs for the same tests and figures as on the local store.
RUN_STORE_ARTIFACT = "run-store"
# In the W&B run's own directory, <n>/ holds the files of the n-th artifact version it logged.
RUN_STORE_SNAPSHOTS = "run-store"
# What it holds: the run's files, its hypotheses, references and their sentence statistics, and
# its attention maps as data.
ARTIFACT_FILES = (schema.SUMMARY, schema.CONFIG, schema.METRICS, schema.GRADFLOW, f"{schema.HYPS}/*",
                  f"{schema.ATTENTION}/*.json")


def run_store_artifact(wandb, run_dir: Path):
    """The artifact of ``run_dir``'s run store (``wandb``: the imported module). Its files are
    copied into the W&B run's directory (RUN_STORE_SNAPSHOTS/<n>) and logged from there as they
    are (policy "immutable"), not from W&B's temporary staging cache: an offline run keeps what it
    logged after `wandb sync`, on another machine and after the cache is cleaned."""
    snapshots = Path(wandb.run.dir).parent / RUN_STORE_SNAPSHOTS
    snapshot = snapshots / str(len(list(snapshots.iterdir())) if snapshots.is_dir() else 0)
    artifact = wandb.Artifact(f"{RUN_STORE_ARTIFACT}-{wandb.run.id}", type=RUN_STORE_ARTIFACT,
                              description=f"lit-attention run store {run_dir.name}")
    for name in [path.relative_to(run_dir).as_posix() for pattern in ARTIFACT_FILES
                 for path in sorted(run_dir.glob(pattern)) if path.is_file()]:
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run_dir / name, snapshot / name)
        artifact.add_file(str(snapshot / name), name=name, policy="immutable")
    return artifact


def finish(run_dir: Path | None = None) -> None:
    """End the process's W&B run if there is one (also after a failure), after logging the run
    store under ``run_dir`` as its artifact."""
    wandb = sys.modules.get("wandb")
    if wandb is None or getattr(wandb, "run", None) is None:
        return
    if run_dir is not None and schema.summary_path(Path(run_dir)).is_file() and not wandb.run.disabled:
        wandb.run.log_artifact(run_store_artifact(wandb, Path(run_dir)))
    wandb.finish()
