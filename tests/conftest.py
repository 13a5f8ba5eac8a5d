import gzip
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
CONFIGS = REPO / "configs"


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


def run_cli(*args, cwd=None, timeout=600, env=None) -> subprocess.CompletedProcess:
    """Run `lit-attention ARGS` in a fresh process, the way users and the sweep driver do."""
    return subprocess.run([sys.executable, "-m", "lit_attention.cli", *map(str, args)],
                          cwd=cwd or REPO, capture_output=True, text=True, timeout=timeout,
                          env=env or cli_env())


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
