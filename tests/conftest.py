import os
import signal
import subprocess
import sys
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


def cli_env(**extra) -> dict:
    env = dict(os.environ)
    env.pop("LIT_ATTENTION_RUN_ID", None)
    env.pop("LOCAL_RANK", None)
    env.setdefault("WANDB_SILENT", "true")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


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
