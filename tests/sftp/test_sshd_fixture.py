"""The sshd fixtures serve real OpenSSH logins: checked with OpenSSH's own clients and paramiko."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict, Unpack

import paramiko
import pytest

import sshd as sshd_module
from sshd import KEY_PASSPHRASE, TEST_USER, SshServer, _descendants, _state, require_sshd

AS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not AS_ROOT, reason="password logins need a root-run sshd")


def run(*cmd: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([os.fspath(c) for c in cmd], capture_output=True, text=True, timeout=30, check=False)


class Auth(TypedDict, total=False):
    """How connect() logs in: paramiko's SSHClient.connect arguments of that name."""

    key_filename: str
    passphrase: str
    password: str


def connect(server: SshServer, **auth: Unpack[Auth]) -> paramiko.SSHClient:
    """A paramiko client that trusts only the server's known_hosts file."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(server.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    auth = auth or {"key_filename": str(server.client_key)}
    client.connect(server.host, server.port, server.user, look_for_keys=False, allow_agent=False, timeout=10, **auth)
    return client


def transport(client: paramiko.SSHClient) -> paramiko.Transport:
    t = client.get_transport()
    assert t is not None, "the client is not connected"
    return t


def exec_out(client: paramiko.SSHClient, command: str) -> str:
    _, stdout, _ = client.exec_command(command, timeout=10)
    return str(stdout.read().decode()).strip()


def test_openssh_client_logs_in_with_strict_host_key_checking(sshd: SshServer, tmp_path: Path) -> None:
    config = sshd.ssh_config(tmp_path / "ssh_config")
    done = run("ssh", "-F", config, "ferry-test", "true")
    assert done.returncode == 0, done.stderr


def test_host_key_checking_is_real(sshd: SshServer, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = sshd.ssh_config(tmp_path / "ssh_config")
    done = run("ssh", "-F", config, "-o", f"UserKnownHostsFile={empty}", "ferry-test", "true")
    assert done.returncode == 255
    assert "Host key verification failed" in done.stderr


def test_logs_in_an_unprivileged_user_with_a_plain_shell(sshd: SshServer, tmp_path: Path) -> None:
    done = run("ssh", "-F", sshd.ssh_config(tmp_path / "ssh_config"), "ferry-test", "id -u; id -un")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(sshd.uid), sshd.user]
    if AS_ROOT:
        assert sshd.uid != 0
        assert sshd.user == TEST_USER
        assert pwd.getpwnam(TEST_USER).pw_shell == "/bin/sh"


def test_sftp_put_and_get_in_root(sshd: SshServer, tmp_path: Path) -> None:
    folder = sshd.mkdir()
    local = tmp_path / "up.bin"
    local.write_bytes(os.urandom(100_000))
    back = tmp_path / "back.bin"
    batch = tmp_path / "batch"
    batch.write_text(f"put {local} {folder}/up.bin\nget {folder}/up.bin {back}\n")
    done = run("sftp", "-F", sshd.ssh_config(tmp_path / "ssh_config"), "-b", batch, "ferry-test")
    assert done.returncode == 0, done.stderr
    assert back.read_bytes() == local.read_bytes()
    assert (folder / "up.bin").stat().st_uid == sshd.uid  # written by the login user, not root


def test_known_hosts_and_fingerprints_match_the_server(sshd: SshServer) -> None:
    assert set(sshd.host_key_fingerprints) == {"ssh-ed25519", "ssh-rsa"}
    for pub in sshd.dir.glob("host_*.pub"):
        shown = run("ssh-keygen", "-lf", pub).stdout.split()[1]
        assert shown in sshd.host_key_fingerprints.values()
    lines = sshd.known_hosts.read_text().splitlines()
    assert [line.split()[0] for line in lines] == [f"[127.0.0.1]:{sshd.port}"] * 2


def test_paramiko_verifies_host_key_and_logs_in(sshd: SshServer) -> None:
    client = connect(sshd)
    try:
        key = transport(client).get_remote_server_key()
        assert key.fingerprint in sshd.host_key_fingerprints.values()
        assert exec_out(client, "id -u") == str(sshd.uid)
        sftp = client.open_sftp()
        folder = sshd.mkdir()
        with sftp.open(f"{folder}/p.txt", "w") as f:
            f.write(b"hello")
        assert (folder / "p.txt").read_bytes() == b"hello"
    finally:
        client.close()


def test_paramiko_rejects_an_unknown_host(sshd: SshServer) -> None:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        client.connect(sshd.host, sshd.port, sshd.user, key_filename=str(sshd.client_key), look_for_keys=False)
    client.close()


def test_encrypted_key_needs_its_passphrase(sshd: SshServer) -> None:
    with pytest.raises(paramiko.PasswordRequiredException):
        paramiko.Ed25519Key.from_private_key_file(str(sshd.encrypted_key))
    client = connect(sshd, key_filename=str(sshd.encrypted_key), passphrase=KEY_PASSPHRASE)
    assert exec_out(client, "echo ok") == "ok"
    client.close()


def test_wrong_key_is_refused(sshd: SshServer, tmp_path: Path) -> None:
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", tmp_path / "other")
    with pytest.raises(paramiko.AuthenticationException):
        connect(sshd, key_filename=str(tmp_path / "other"))


@root_only
def test_password_login(sshd_factory: Callable[..., SshServer]) -> None:
    server = sshd_factory(authentication_methods="password")
    server.set_password("s3cret pass")
    assert exec_out(connect(server, password="s3cret pass"), "id -u") == str(server.uid)
    with pytest.raises(paramiko.AuthenticationException):
        connect(server, password="wrong")
    with pytest.raises(paramiko.AuthenticationException):  # keys are not enough here
        connect(server)


def kbd_interactive_login(server: SshServer, password: str) -> bool:
    transport = paramiko.Transport((server.host, server.port))
    try:
        transport.start_client(timeout=10)
        transport.auth_interactive(server.user, lambda _title, _instr, prompts: [password] * len(prompts))
        return bool(transport.is_authenticated())
    except paramiko.AuthenticationException:
        return False
    finally:
        transport.close()


@root_only
def test_keyboard_interactive_needs_pam(sshd_factory: Callable[..., SshServer]) -> None:
    kbd = {"kbd_interactive_authentication": True, "authentication_methods": "keyboard-interactive"}
    with_pam, without_pam = sshd_factory(use_pam=True, **kbd), sshd_factory(**kbd)
    with_pam.set_password("s3cret pass")
    assert kbd_interactive_login(with_pam, "s3cret pass")
    assert not kbd_interactive_login(without_pam, "s3cret pass")  # no kbd-interactive device without PAM


def test_max_sessions_is_respected(sshd_factory: Callable[..., SshServer]) -> None:
    server = sshd_factory(max_sessions=2)
    client = connect(server)
    try:
        transport = client.get_transport()
        assert transport is not None
        channels = [transport.open_session(timeout=10) for _ in range(2)]
        with pytest.raises(paramiko.ChannelException):
            transport.open_session(timeout=10)
        channels[0].close()
    finally:
        client.close()


def test_kill_connections_drops_clients_but_keeps_serving(sshd_factory: Callable[..., SshServer]) -> None:
    server = sshd_factory()
    client = connect(server)
    channel = transport(client).open_session()
    channel.exec_command("sleep 60")
    server.kill_connections()
    assert channel.recv(1) == b""  # EOF: the connection is gone
    client.close()
    again = connect(server)
    assert exec_out(again, "echo back") == "back"
    again.close()


def test_proxyjump_through_a_second_server(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    jump, target = sshd_factory(), sshd_factory()
    config = tmp_path / "ssh_config"
    config.write_text(jump.ssh_config_block("jump") + target.ssh_config_block("target", ["ProxyJump jump"]))
    config.chmod(0o600)
    done = run("ssh", "-F", config, "target", "true")
    assert done.returncode == 0, done.stderr
    assert "Accepted publickey" in jump.log_text()  # the login really went through the jump host
    assert "Starting session" not in jump.log_text()


def test_extra_config_overrides_defaults(sshd_factory: Callable[..., SshServer]) -> None:
    server = sshd_factory(extra_config=["MaxSessions 1", "Match User nobody", "  PasswordAuthentication no"])
    config = server.config.read_text()
    assert config.index("MaxSessions 1") < config.index("MaxSessions 10") < config.index("Match User nobody")


def test_a_port_taken_meanwhile_is_retried(
    sshd_factory: Callable[..., SshServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        free = sshd_module._free_port()
        ports = [free, taken.getsockname()[1]]  # pop() hands out the taken one first
        monkeypatch.setattr(sshd_module, "_free_port", ports.pop)
        server = sshd_factory()
    assert server.port == free
    assert "Address already in use" in server.log_text()
    client = connect(server)
    assert exec_out(client, "echo ok") == "ok"
    client.close()


def test_missing_sshd_fails_unless_skipping_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sshd.find_sshd", lambda: None)
    monkeypatch.delenv("FERRY_SKIP_SSHD", raising=False)
    with pytest.raises(pytest.fail.Exception, match=r"scripts/system-packages\.sh"):
        require_sshd()
    monkeypatch.setenv("FERRY_SKIP_SSHD", "1")
    with pytest.raises(pytest.skip.Exception):
        require_sshd()


def test_stop_ends_sessions_and_removes_everything(sshd_factory: Callable[..., SshServer]) -> None:
    server = sshd_factory()
    assert server.process is not None
    client = connect(server)
    channel = transport(client).open_session()
    channel.exec_command("echo started; sleep 60")
    assert channel.recv(8) == b"started\n"
    pids = [server.process.pid, *(pid for level in _descendants(server.process.pid) for pid in level)]
    assert len(pids) >= 3  # listener, per-connection sshd, the session's shell
    server.stop()
    assert channel.recv(1) == b""
    client.close()
    assert not server.dir.exists()
    assert all(_state(pid) in (None, "Z") for pid in pids)  # gone, or exited and awaiting PID 1
