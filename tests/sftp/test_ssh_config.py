"""ssh_config as OpenSSH reads it: Host/Match, tokens, IdentityFile lists, ProxyJump chains and
``none``, ProxyCommand, Include globs, and unsupported options named in a warning."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from ferry.credentials.ssh_config import is_alias, resolve
from helpers import Ferry
from sshd import SshServer


@pytest.fixture
def ssh_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("FERRY_SSH_CONFIG", raising=False)
    return home / ".ssh"


def test_host_patterns_negation_and_first_value_wins(ssh_dir: Path) -> None:
    (ssh_dir / "config").write_text(
        "Host *.cluster !login3.cluster\n  User alice\n  Port 2222\n"
        "Host login3.cluster\n  User carol\n"
        "Host *\n  User fallback\n  Port 22\n"
    )
    one = resolve("login1.cluster")
    assert (one.hostname, one.user, one.port) == ("login1.cluster", "alice", 2222)
    three = resolve("login3.cluster")
    assert (three.user, three.port) == ("carol", 22)
    explicit = resolve("login1.cluster", user="dave", port=2200)  # the URL's user and port win
    assert (explicit.user, explicit.port) == ("dave", 2200)


def test_match_host_and_user(ssh_dir: Path) -> None:
    (ssh_dir / "config").write_text(
        "Host gpu\n  HostName gpu01.example.org\n  User alice\n"
        "Match host gpu01.example.org user alice\n  Port 2022\n  IdentityFile ~/.ssh/gpu_key\n"
    )
    t = resolve("gpu")
    assert (t.hostname, t.port) == ("gpu01.example.org", 2022)
    assert t.identity_files == [str(ssh_dir / "gpu_key")]


def test_identity_files_in_order_with_tokens(ssh_dir: Path) -> None:
    (ssh_dir / "config").write_text(
        "Host hpc\n  HostName hpc.example.org\n  User bob\n"
        "  IdentityFile ~/.ssh/id_%h_%r\n  IdentityFile ~/.ssh/second\n  IdentitiesOnly yes\n"
        "  IdentityAgent none\n"
    )
    t = resolve("hpc")
    assert t.identity_files == [str(ssh_dir / "id_hpc.example.org_bob"), str(ssh_dir / "second")]
    assert t.identities_only
    assert t.identity_agent == "none"


def test_proxyjump_chain_none_and_proxycommand(ssh_dir: Path) -> None:
    (ssh_dir / "config").write_text(
        "Host inner\n  ProxyJump alice@bastion1:2222,bastion2\n"
        "Host direct\n  ProxyJump none\n  ProxyCommand none\n"
        "Host piped\n  HostName piped.example.org\n  ProxyCommand nc %h %p\n"
        "Host *\n  ProxyJump default-bastion\n"
    )
    assert resolve("inner").proxy_jump == "alice@bastion1:2222,bastion2"
    direct = resolve("direct")
    assert direct.proxy_jump is None and direct.proxy_command is None  # first value (none) wins
    piped = resolve("piped")
    assert piped.proxy_command == "nc piped.example.org 22"


def test_include_globs_in_sorted_order_relative_to_ssh_dir(ssh_dir: Path) -> None:
    (ssh_dir / "conf.d").mkdir()
    (ssh_dir / "conf.d" / "20-b.conf").write_text("Host cluster\n  User second\n  Port 2002\n")
    (ssh_dir / "conf.d" / "10-a.conf").write_text("Host cluster\n  User first\n")
    (ssh_dir / "conf.d" / "ignored.txt").write_text("Host cluster\n  User never\n")
    (ssh_dir / "config").write_text("Include conf.d/*.conf\nHost cluster\n  HostName c.example.org\n")
    t = resolve("cluster")
    assert (t.user, t.port, t.hostname) == ("first", 2002, "c.example.org")
    assert is_alias("cluster") and not is_alias("elsewhere")


def test_unsupported_options_are_named_in_a_warning(ssh_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    (ssh_dir / "config").write_text(
        "Host x\n  LocalForward 8080 localhost:80\n  StrictHostKeyChecking no\n  ServerAliveInterval 7\n"
        "  ConnectTimeout 3\n  UserKnownHostsFile ~/kh1 ~/kh2\n"
    )
    with caplog.at_level(logging.WARNING, logger="ferry.ssh"):
        t = resolve("x")
    text = caplog.text
    assert "'localforward'" in text
    assert "StrictHostKeyChecking no" in text and "asks" in text  # never silently accepts keys
    assert "serveraliveinterval" not in text and "connecttimeout" not in text
    assert (t.server_alive_interval, t.connect_timeout) == (7, 3.0)
    assert t.known_hosts_files == [str(ssh_dir.parent / "kh1"), str(ssh_dir.parent / "kh2")]
    assert t.strict_host_key_checking == "ask"


def test_proxycommand_end_to_end_through_openssh(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    """``ProxyCommand ssh -W %h:%p bastion``, the classic form, with OpenSSH's own client."""
    jump, target = sshd_factory(), sshd_factory()
    jump_cfg = jump.ssh_config(tmp_path / "jump_config", "bastion")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "known_hosts").write_text(target.known_hosts.read_text())
    (home / ".ssh" / "config").write_text(
        f"Host inner\n  HostName {target.host}\n  Port {target.port}\n  User {target.user}\n"
        f"  IdentityFile {target.client_key}\n  IdentitiesOnly yes\n"
        f"  ProxyCommand ssh -F {jump_cfg} -W %h:%p bastion\n"
    )
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env={"HOME": str(home), "SSH_AUTH_SOCK": ""})
    remote = target.mkdir()
    (remote / "hello").write_bytes(b"hi")
    target.chown(remote)
    out = ferry.ok("ls", f"inner:{remote}").stdout
    assert "hello" in out
    assert jump.log_text().count("Accepted publickey") == 1
