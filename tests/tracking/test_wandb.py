"""W&B's mode: WANDB_MODE decides when set; else online only with a key wandb finds for the server
wandb itself would use (WANDB_BASE_URL, its settings file, its default) and an answer from that
server (a real socket on the loopback stands in for it)."""

import os
import random
import socket

import pytest
import wandb

from lit_attention.config_check import ConfigError
from lit_attention.tracking.wandb import wandb_mode


KEY = "k3y" + "0" * 40   # the shape wandb accepts (40+ characters)


@pytest.fixture
def no_key(monkeypatch, tmp_path):
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))   # no ~/.netrc
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))   # no settings file
    wandb.teardown()     # wandb reads its settings once per process: each test starts afresh
    yield tmp_path
    wandb.teardown()


def write_netrc(path, machine):
    path.write_text(f"machine {machine}\n  login user\n  password {KEY}\n")
    os.chmod(path, 0o600)
    return path


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
    assert wandb_mode() == ("offline", f"no API key for http://127.0.0.1:{listening} (`wandb login` stores one)")


def test_the_default_server_is_the_installed_wandbs(no_key):
    """Nothing set: the key is looked for on the server wandb.init would use, whatever this wandb's
    default is (not a copy of some version's default)."""
    default = wandb.Settings().base_url
    assert wandb_mode() == ("offline", f"no API key for {default} (`wandb login` stores one)")


def test_the_server_wandb_login_host_stored_is_asked(no_key, listening):
    """`wandb login --host URL` writes base_url to W&B's settings file and the key to ~/.netrc
    under the URL's host:port: the decision follows both."""
    (no_key / "wandb-config").mkdir()
    (no_key / "wandb-config" / "settings").write_text(
        f"[default]\nbase_url = http://127.0.0.1:{listening}\n")
    write_netrc(no_key / ".netrc", f"127.0.0.1:{listening}")
    assert wandb_mode() == ("online", f"an API key and 127.0.0.1:{listening} answers")


def test_a_key_in_the_netrc_file_NETRC_names_is_found(no_key, listening, monkeypatch):
    monkeypatch.setenv("NETRC", str(write_netrc(no_key / "elsewhere", f"127.0.0.1:{listening}")))
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{listening}")
    assert wandb_mode() == ("online", f"an API key and 127.0.0.1:{listening} answers")


def test_wandb_offline_in_the_settings_file_is_offline(no_key):
    (no_key / "wandb-config").mkdir()
    (no_key / "wandb-config" / "settings").write_text("[default]\nmode = offline\n")
    assert wandb_mode() == ("offline", "W&B's settings say mode=offline")


def test_a_server_that_does_not_answer_means_offline(no_key, monkeypatch):
    port = closed_port()
    monkeypatch.setenv("WANDB_API_KEY", KEY)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    assert wandb_mode() == ("offline", f"127.0.0.1:{port} does not answer")


def test_a_key_wandb_would_refuse_is_refused(no_key, listening, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "k3y")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{listening}")
    with pytest.raises(ConfigError, match="W&B API key for http://127.0.0.1:.*40"):
        wandb_mode()


@pytest.mark.parametrize("url", ["wandb.example.org", "ftp://wandb.example.org", "http://"])
def test_a_base_url_wandb_refuses_is_refused(no_key, monkeypatch, url):
    monkeypatch.setenv("WANDB_BASE_URL", url)
    with pytest.raises(ConfigError, match=f"W&B's base_url '{url}': .*WANDB_BASE_URL"):
        wandb_mode()



def junk_url(rng: random.Random) -> str:
    if rng.random() < 0.4:   # a host name, with or without a usable port
        host = "".join(rng.choice("ab1-") for _ in range(rng.randrange(1, 6)))
        return f"{rng.choice(['http', 'https'])}://{host}.example{rng.choice(['', ':8080', ':0', ':99999', '/x'])}"
    text = "".join(rng.choice("aZ9.:/@[]% -_?#é\x00\n") for _ in range(rng.randrange(12)))
    return rng.choice(["", "http://", "https://", "ftp://", "http://[", "//"]) + text


def test_any_base_url_is_a_decision_or_one_line(no_key, monkeypatch):
    """Whatever WANDB_BASE_URL holds: a mode and its reason, or one short line naming the setting."""
    rng = random.Random(0)
    for _ in range(40):
        url = junk_url(rng)
        if "\x00" in url:
            continue   # no environment variable holds a NUL
        monkeypatch.setenv("WANDB_BASE_URL", url)
        wandb.teardown()
        try:
            mode, why = wandb_mode()
        except ConfigError as e:
            assert "\n" not in str(e) and len(str(e)) < 400 and "base_url" in str(e), (url, str(e))
        else:
            assert mode == "offline" and why.startswith("no API key for "), (url, why)
