"""Study storage: SQLite by default, PostgreSQL (or any SQLAlchemy URL) for several workers/machines.

Only RDB storage has heartbeats, so a worker killed mid-trial leaves a RUNNING trial that the next
worker fails and re-queues (RetryHeartbeatStaleTrialCallback). Passwords never leave this module
unmasked: print and log `mask_url(url)`.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import optuna

# Heartbeats, retries and PartialFixedSampler are "experimental" in Optuna 5 and say so on every use.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

STORAGE_ENV = "LIT_ATTENTION_SWEEP_STORAGE"  # how the driver hands the URL to its workers (not argv)


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***."""
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a SQLAlchemy URL: mask anything that looks like user:password@
        return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def default_url(root: Path, study_name: str) -> str:
    path = (Path(root) / study_name / "study.db").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def make_storage(url: str, heartbeat_interval: int, grace_period: int, max_retry: int) -> optuna.storages.RDBStorage:
    engine_kwargs = {}
    if url.startswith("sqlite"):
        # Several worker processes write one file: wait for the lock instead of failing at once.
        engine_kwargs = {"connect_args": {"timeout": 120}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    return optuna.storages.RDBStorage(
        url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval,
        grace_period=grace_period,
        heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=max_retry))
