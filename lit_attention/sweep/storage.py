"""Study storage: SQLite by default, PostgreSQL (or any SQLAlchemy URL) for several workers/machines.

Only RDB storage has heartbeats, so a worker killed mid-trial leaves a RUNNING trial that the next
worker fails and re-queues (RetryHeartbeatStaleTrialCallback). Passwords never leave this module
unmasked: print and log `mask_url(url)`. `study_lock(url)` serializes what Optuna cannot do in one
transaction: creating the tables and a study, and enqueuing its cells.
"""

from __future__ import annotations

import fcntl
import warnings
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import optuna

# Heartbeats, retries and PartialFixedSampler are "experimental" in Optuna 5 and say so on every use.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

STORAGE_ENV = "LIT_ATTENTION_SWEEP_STORAGE"  # how the driver hands the URL to its workers (not argv)


# Query parameters whose value is a secret (libpq's password, sslpassword; tokens of other drivers).
SECRET_KEYS = ("password", "passwd", "pwd", "secret", "token")


def redact(text: str, url: str) -> str:
    """``text`` (a message, a config, an error) with every secret of ``url`` replaced by ***: the
    password of user:password@ (which may itself contain '@') and secret query parameters, in
    every spelling (as written, URL-decoded, re-encoded)."""
    base, _, query = url.partition("?")
    userinfo = (base.partition("://")[2] or base).rpartition("@")[0]
    found = [userinfo.partition(":")[2]]   # "" when there is no password
    found += [value for key, _, value in (part.partition("=") for part in query.split("&"))
              if value and any(k in unquote_plus(key).lower() for k in SECRET_KEYS)]
    forms = {form for secret in found
             for form in (secret, unquote(secret), unquote_plus(secret), quote(unquote(secret), safe=""),
                          quote_plus(unquote_plus(secret)))}
    for secret in sorted(filter(None, forms), key=len, reverse=True):   # longest first
        text = text.replace(secret, "***")
    return text


def mask_url(url: str) -> str:
    """The URL with its password and secret query parameters replaced by ***."""
    return redact(url, url)


def default_url(root: Path, study_name: str) -> str:
    path = (Path(root) / study_name / "study.db").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def make_storage(url: str, heartbeat_interval: int, grace_period: int, max_retry: int,
                 stale_callback=None) -> optuna.storages.RDBStorage:
    """`stale_callback(study, trial)` runs for each trial a heartbeat check failed (default: Optuna's
    retry, at most `max_retry` times)."""
    sqlite = url.startswith("sqlite")
    # Several worker processes write one SQLite file: wait for its lock instead of failing at once.
    engine_kwargs = {"connect_args": {"timeout": 120}} if sqlite else {"pool_pre_ping": True}
    storage = optuna.storages.RDBStorage(
        url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval,
        grace_period=grace_period,
        heartbeat_stale_trial_callback=stale_callback or optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry))
    if not sqlite:
        return storage
    # Every SQLite transaction takes the write lock at its start (BEGIN IMMEDIATE). Python's sqlite3
    # runs a SELECT outside any transaction, so Optuna's read-then-update pop of a waiting trial
    # (SELECT ... FOR UPDATE, which SQLite ignores) let two workers both see WAITING and both take
    # the trial. SQLAlchemy's documented recipe for SQLite transactions: the driver leaves
    # transactions to us, we begin them.
    import sqlalchemy

    @sqlalchemy.event.listens_for(storage.engine, "connect")
    def _no_driver_transactions(dbapi_connection, connection_record):
        dbapi_connection.isolation_level = None

    @sqlalchemy.event.listens_for(storage.engine, "begin")
    def _begin_immediate(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    storage.engine.dispose()  # connections made before the listeners existed
    return storage


# pg_advisory_lock key of the study lock (any constant; one lock per database).
_PG_LOCK_KEY = 0x6C69745F61747400  # "lit_att\0"
_held: dict[str, int] = {}  # url -> depth of study_lock in this process (it is re-entrant)


@contextmanager
def study_lock(url: str):
    """Hold the database's study lock (re-entrant within one process, blocking across processes).

    Two drivers opening a new study at once would both create Optuna's tables (PostgreSQL: "duplicate
    key value violates unique constraint pg_type_typname_nsp_index"; SQLite: "table alembic_version
    already exists"), and one would exit with the raw error. SQLite: flock on ``<db>.lock`` beside the
    database; PostgreSQL: a session advisory lock, so drivers on several machines queue too. A
    holder killed with SIGKILL releases it (the file is closed, the server sees the connection end).
    Other databases: no lock.
    """
    import sqlalchemy
    parsed = sqlalchemy.engine.make_url(url)
    backend = None if _held.get(url) else parsed.get_backend_name()   # None: this process holds it
    with ExitStack() as held:
        if backend == "sqlite" and parsed.database not in (None, "", ":memory:"):
            path = Path(parsed.database)
            path.parent.mkdir(parents=True, exist_ok=True)
            fcntl.flock(held.enter_context(open(f"{path}.lock", "a")), fcntl.LOCK_EX)
        elif backend == "postgresql":
            engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
            held.callback(engine.dispose)
            conn = held.enter_context(engine.connect())
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": _PG_LOCK_KEY})
            conn.commit()
        _held[url] = _held.get(url, 0) + 1
        try:
            yield
        finally:
            _held[url] -= 1
