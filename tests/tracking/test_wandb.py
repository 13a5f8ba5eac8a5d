"""W&B's mode: WANDB_MODE decides when set; else online only with a key for WANDB_BASE_URL's
server and an answer from it (a real socket on the loopback stands in for the server)."""

import os
import socket

import pytest

from lit_attention.config_check import ConfigError
from lit_attention.tracking.wandb import wandb_mode


@pytest.fixture
def no_key(monkeypatch, tmp_path):
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))   # no ~/.netrc
    monkeypatch.delenv("NETRC", raising=False)
    return tmp_path


@pytest.fixture
def listening():
    """A port on 127.0.0.1 that accepts connections (a W&B server as far as a connect goes)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("given, mode", [("offline", "offline"), ("dryrun", "offline"),
                                         ("online", "online"), ("disabled", "disabled")])
def test_wandb_mode_given_wins(no_key, monkeypatch, given, mode):
    monkeypatch.setenv("WANDB_MODE", given)
    assert wandb_mode() == (mode, f"WANDB_MODE={given}")


def test_an_unknown_wandb_mode_is_refused(no_key, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "onlin")
    with pytest.raises(ConfigError, match="WANDB_MODE='onlin' is not one of: online"):
        wandb_mode()


def test_without_a_key_it_is_offline_and_says_so(no_key, listening, monkeypatch):
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{listening}")
    assert wandb_mode() == ("offline", "no API key for 127.0.0.1 (WANDB_API_KEY unset, no ~/.netrc entry)")


def test_a_self_hosted_server_with_a_key_in_netrc_is_online(no_key, listening, monkeypatch):
    netrc = no_key / ".netrc"
    netrc.write_text("machine 127.0.0.1\n  login user\n  password k3y\n")
    os.chmod(netrc, 0o600)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{listening}")
    assert wandb_mode() == ("online", f"an API key and 127.0.0.1:{listening} answers")


def test_a_server_that_does_not_answer_means_offline(no_key, monkeypatch):
    port = closed_port()
    monkeypatch.setenv("WANDB_API_KEY", "k3y")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    assert wandb_mode() == ("offline", f"127.0.0.1:{port} does not answer")


def test_a_base_url_without_a_host_is_refused(no_key, monkeypatch):
    monkeypatch.setenv("WANDB_BASE_URL", "wandb.example.org")
    with pytest.raises(ConfigError, match="WANDB_BASE_URL='wandb.example.org' names no host"):
        wandb_mode()
