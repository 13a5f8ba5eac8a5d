import csv
import gzip
import os
import pwd
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
CONFIGS = REPO / "configs"
# `fit` options that write checkpoints by the writer thread, as on a GPU (lightning/checksum.py),
# here on the CPU, where they are written in line by default
BACKGROUND_WRITES = ["--trainer.plugins", '{"class_path": "lit_attention.lightning.checksum.ChecksummedCheckpointIO", '
                                          '"init_args": {"background": true}}']


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (a fresh clone has no ../shared)")
    return SHARED_DATA


def write_lines(path, lines, gz=False) -> str:
    """Write `lines` (one per line, newline-terminated) to `path`, gzipped if asked; returns the path."""
    data = "".join(line + "\n" for line in lines).encode()
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        Path(path).write_bytes(data)
    return str(path)


def family_options(config: Path) -> list[str]:
    """The model options ``config`` sets that belong to some families only (its own family's)."""
    import yaml

    from lit_attention import registry
    model = yaml.safe_load(Path(config).read_text())["model"]
    families = registry.LM_MODELS if model["class_path"].endswith("LanguageModelModule") else registry.SEQ2SEQ_MODELS
    return [k for k in model["init_args"] if k in registry.family_options(families)]


def unset_family_options(config: Path) -> list[str]:
    """CLI arguments that unset ``config``'s family options, so that `--model.family <another>`
    may follow them (an option of another family is refused)."""
    return [arg for key in family_options(config) for arg in (f"--model.{key}", "null")]


def family_neutral(config: Path) -> dict:
    """``config`` as a mapping without its family options: a sweep base any family starts from."""
    import yaml
    data = yaml.safe_load(Path(config).read_text())
    drop = family_options(config)
    data["model"]["init_args"] = {k: v for k, v in data["model"]["init_args"].items() if k not in drop}
    return data


def files_config(folder) -> Path:
    """configs/copy.yaml without the options that shape generated pairs, written to ``folder``: a
    config that `--data.task files` may follow (task `files` does not read them, and `fit` refuses
    them)."""
    import yaml

    from lit_attention.data.translation import TranslationDataModule
    config = yaml.safe_load((CONFIGS / "copy.yaml").read_text())
    data = config["data"]["init_args"]
    for key in TranslationDataModule.GENERATOR_OPTIONS:
        data.pop(key, None)
    path = Path(folder) / "files.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def cli_env(**extra) -> dict:
    env = dict(os.environ)
    env.pop("LIT_ATTENTION_RUN_ID", None)
    env.pop("LOCAL_RANK", None)
    env.setdefault("WANDB_SILENT", "true")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def write_sweep(directory: Path, name: str, data: dict) -> Path:
    """``data`` as the sweep file ``directory/name.yaml``."""
    import yaml
    path = Path(directory) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sweep_cmd(path: Path, *args) -> list[str]:
    """The command line of ``lit-attention sweep path ARGS``."""
    return [sys.executable, "-m", "lit_attention.cli", "sweep", str(path), *map(str, args)]


# pytest-timeout stops a test after pyproject's `timeout` (600 s); no test waits longer than this on
# one subprocess, so that a hung run fails with its own output, not with pytest-timeout's stack dump.
SUBPROCESS_TIMEOUT = 480


def run_cli(*args, cwd=None, timeout=SUBPROCESS_TIMEOUT, env=None) -> subprocess.CompletedProcess:
    """Run `lit-attention ARGS` in a fresh process, the way users and the sweep driver do."""
    return subprocess.run([sys.executable, "-m", "lit_attention.cli", *map(str, args)],
                          cwd=cwd or REPO, capture_output=True, text=True, timeout=timeout,
                          env=env or cli_env())


def cli_in_process(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """``lit_attention.cli.main(ARGS)`` in this process: the same return code (what the process
    would exit with), stdout and stderr as `run_cli`, without paying ~3 s of imports again.

    For commands that stop before training (argument, config and data errors, refusals before a
    run store or study is written, `sweep --dry-run`) and short fits whose subject is what fit
    prints or writes: a test that checks a signal, a process's exit or what only a fresh process
    has (its threads, its environment at import) uses `run_cli`. The environment is ``env`` (as for `run_cli`,
    default cli_env()) for the call and restored after it; warnings are shown on the captured
    stderr under Python's default filters, and the stderr handlers of named loggers (Lightning's
    "Seed set to 1", ...) write to it too, as in a fresh process.
    """
    import contextlib
    import io
    import logging
    import warnings

    from lit_attention.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    call_env = env or cli_env()   # before clearing os.environ, which cli_env() copies

    def show(message, category, filename, lineno, file=None, line=None):
        err.write(warnings.formatwarning(message, category, filename, lineno, line))

    handlers = [h for logger in list(logging.Logger.manager.loggerDict.values())
                if isinstance(logger, logging.Logger) for h in logger.handlers
                if type(h) is logging.StreamHandler]
    streams = [h.setStream(err) for h in handlers]
    handlers_of = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}   # the sweep sets SIGTERM's
    try:
        os.environ.clear()
        os.environ.update(call_env)
        os.chdir(cwd or REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.resetwarnings()
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)   # Python's default filters
            warnings.showwarning = show
            try:
                code = main(list(map(str, args)))
            except SystemExit as exc:   # what `sys.exit(main())` would turn it into
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=err)
                    code = 1
    finally:
        for handler, stream in zip(handlers, streams):
            handler.setStream(stream)
        for signum, handler in handlers_of.items():
            if handler is not None:
                signal.signal(signum, handler)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["lit-attention", *map(str, args)], code, out.getvalue(), err.getvalue())


def error_lines(stderr: str) -> list[str]:
    """The lines of a command's stderr that report an error; there is never a traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if "error" in line.lower()]


def sweep_in_process(path, *args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """`lit-attention sweep PATH ARGS` with its driver in this process (`cli_in_process`: ~5 CPU
    seconds of imports less) and real worker and trial processes; what those (and C code in this
    process) print is in stdout and stderr too, after the driver's own lines. For sweeps
    whose subject is what they run and write; a test that signals or kills the driver, or starts
    two at once, runs it as a process (`sweep_cmd`)."""
    with tempfile.TemporaryFile() as child_out, tempfile.TemporaryFile() as child_err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(child_out.fileno(), 1)   # the worker processes inherit fds 1 and 2
        os.dup2(child_err.fileno(), 2)
        try:
            done = cli_in_process("sweep", path, *args, cwd=cwd, env=env)
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        child_out.seek(0)
        child_err.seek(0)
        done.stdout += child_out.read().decode(errors="replace")
        done.stderr += child_err.read().decode(errors="replace")
    return done


def pytest_configure(config):
    """Every process the tests start trains on one thread (`lit-attention fit` follows
    OMP_NUM_THREADS): tiny models gain nothing from a second one, and on a loaded machine its
    OpenMP threads spin waiting for each other (a copy-task epoch: 4 s CPU on one thread, 7.6 s on
    two). Tests of the thread placement itself build their environment without it."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    if config.getoption("cpu_times"):
        config.pluginmanager.register(CpuTimes(config.getoption("cpu_times")), "cpu_times")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run faster on one thread, and CI shares two cores with the subprocesses tests start."""
    import torch
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def python_sigint_handler():
    """Each test starts with Python's Ctrl-C handler.

    A Trainer that sees a KeyboardInterrupt in this process sets SIGINT to SIG_IGN and leaves it so;
    every process a later test starts would inherit the ignored SIGINT, and a test that interrupts
    a sweep with SIGINT would watch it run to the end.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


# -- PostgreSQL: a private server on a free port, started once per test session ---------------------

def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL server; yields a function making a fresh database URL."""
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (.ci/run installs them; elsewhere: "
                    "apt-get install -y postgresql)")
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("starting a private PostgreSQL server needs root (to run initdb as the postgres user)")
    try:
        pg_user = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres system user")
    data = Path(tempfile.mkdtemp(prefix="lit-attention-pg-"))
    os.chown(data, pg_user.pw_uid, pg_user.pw_gid)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def as_postgres(*cmd):
        return subprocess.run(["runuser", "-u", "postgres", "--", *map(str, cmd)], capture_output=True,
                              text=True, timeout=120)

    init = as_postgres(bindir / "initdb", "-D", data / "db", "-A", "trust", "-U", "postgres")
    assert init.returncode == 0, init.stderr
    start = as_postgres(bindir / "pg_ctl", "-D", data / "db", "-l", data / "server.log", "-w", "start",
                        "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {data}")
    assert start.returncode == 0, start.stderr + (data / "server.log").read_text()
    import psycopg2
    counter = iter(range(1000))

    def new_database(password: str = "pw") -> str:
        name = f"study{next(counter)}"
        conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
        conn.autocommit = True
        conn.cursor().execute(f"CREATE DATABASE {name}")
        conn.close()
        # trust authentication ignores the password; it is there to prove it never leaks
        return f"postgresql+psycopg2://postgres:{password}@127.0.0.1:{port}/{name}"

    try:
        yield new_database
    finally:
        as_postgres(bindir / "pg_ctl", "-D", data / "db", "-m", "fast", "-w", "stop")
        shutil.rmtree(data, ignore_errors=True)


# -- SLURM: a private one-node cluster (munged, slurmctld, slurmd), started once per test session ----

from slurm_cluster import slurm  # noqa: E402,F401  (the fixture)


# -- Real file-system faults: a tmpfs of a given size (ENOSPC when full), remountable read-only -----

class Tmpfs:
    def __init__(self, path: Path):
        self.path = path

    def remount(self, options: str) -> None:
        """e.g. "ro", "rw", "size=64m" (a full file system given room)."""
        subprocess.run(["mount", "-o", f"remount,{options}", str(self.path)], check=True)


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)``: a real tmpfs mounted under tmp_path (needs root; skips otherwise)."""
    mounted = []

    def mount(size: str = "64m") -> Tmpfs:
        path = tmp_path / f"fs{len(mounted)}"
        path.mkdir()
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                                str(path)], capture_output=True).returncode != 0:
            pytest.skip("mounting a tmpfs needs root (and a mount namespace that allows it)")
        mounted.append(path)
        return Tmpfs(path)

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


# -- Where the CPU seconds go: `pytest --cpu-times FILE.csv` ------------------------------------------

def pytest_addoption(parser):
    parser.addoption("--cpu-times", metavar="CSV", help="append the CPU seconds of every test phase "
                     "(setup, call, teardown) and every fixture setup to CSV: this process's and its "
                     "finished subprocesses', so that a loaded machine does not count")


def _cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class CpuTimes:
    """The --cpu-times plugin (registered for the whole session, so that session-scoped fixtures,
    which belong to no directory's conftest, are timed too)."""

    def __init__(self, path: str):
        self.path, self.rows = path, []

    def _timed(self, node, kind: str, name: str, scope: str = ""):
        """A hook wrapper's body: adds the CPU and wall seconds of what runs inside it to the rows."""
        cpu, wall = _cpu_seconds(), time.perf_counter()
        try:
            return (yield)
        finally:
            self.rows.append((kind, node.nodeid, name, scope,
                              round(_cpu_seconds() - cpu, 3), round(time.perf_counter() - wall, 3)))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item):
        return (yield from self._timed(item, "phase", "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        return (yield from self._timed(item, "phase", "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        return (yield from self._timed(item, "phase", "teardown"))

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        """Exclusive of the fixtures it requests: pytest sets those up before calling this hook."""
        return (yield from self._timed(request.node, "fixture", fixturedef.argname, fixturedef.scope))

    def pytest_sessionfinish(self, session):
        worker = os.environ.get("PYTEST_XDIST_WORKER")   # -n: a file per worker
        if self.rows:
            with open(f"{self.path}.{worker}" if worker else self.path, "a", newline="") as f:
                csv.writer(f).writerows(self.rows)
