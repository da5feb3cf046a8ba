"""Logging in as OpenSSH does, through the real CLI on a terminal: encrypted keys, passwords,
keyboard-interactive with a real TOTP second factor (Debian's ``pam_google_authenticator`` behind
sshd's PAM), unknown host keys decided by the person. One login per host however many files run
in parallel."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import file_digests
from sftp.terminal import run_on_terminal
from sshd import KEY_PASSPHRASE, SshServer

AS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not AS_ROOT, reason="password/PAM logins need a root-run sshd (CI runs as root)")
# Made per test run (base32, as google-authenticator writes it): no secret lives in the repository.
TOTP_SECRET = base64.b32encode(os.urandom(20)).decode()


def totp(secret: str = TOTP_SECRET, when: float | None = None) -> str:
    """RFC 6238 (HMAC-SHA1, 30 s steps, 6 digits), as the PAM module checks it."""
    counter = int((time.time() if when is None else when) // 30)
    mac = hmac.new(base64.b32decode(secret), struct.pack(">Q", counter), hashlib.sha1).digest()
    offset = mac[-1] & 0x0F
    code = (struct.unpack(">I", mac[offset : offset + 4])[0] & 0x7FFFFFFF) % 1_000_000
    return f"{code:06d}"


def home_with(server: SshServer, tmp_path: Path, key: Path | None, *, known: bool = True) -> Path:
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    if key is not None:
        shutil.copy(key, ssh / "id_ed25519")
        (ssh / "id_ed25519").chmod(0o600)
    if known:
        shutil.copy(server.known_hosts, ssh / "known_hosts")
    return home


def cp_on_terminal(
    server: SshServer, tmp_path: Path, home: Path, answers: dict[str, Callable[[], str]], files: int = 1
) -> tuple[object, Path, Path]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    for i in range(files):
        (src / f"f{i:03d}.bin").write_bytes(os.urandom(2048 + i))
    remote = server.mkdir()
    run = run_on_terminal(
        ["cp", "-r", "--parallel", "8", src, f"sftp://{server.user}@{server.host}:{server.port}{remote}/"],
        home=tmp_path,
        cwd=tmp_path,
        extra_env={"HOME": str(home), "SSH_AUTH_SOCK": ""},
        answers=answers,
    )
    return run, src, remote


def test_encrypted_key_asks_for_its_passphrase_once(sshd: SshServer, tmp_path: Path) -> None:
    home = home_with(sshd, tmp_path, sshd.encrypted_key)
    run, src, remote = cp_on_terminal(sshd, tmp_path, home, {"passphrase": lambda: KEY_PASSPHRASE}, files=12)
    assert run.returncode == 0, run.output  # type: ignore[attr-defined]
    assert run.count("passphrase") == 1  # type: ignore[attr-defined]
    assert KEY_PASSPHRASE not in run.output.replace(f"{KEY_PASSPHRASE}\r\n", "")  # type: ignore[attr-defined]
    assert file_digests(remote / "src") == file_digests(src)


def test_wrong_passphrase_is_a_clear_error(sshd: SshServer, tmp_path: Path) -> None:
    home = home_with(sshd, tmp_path, sshd.encrypted_key)
    run, _src, remote = cp_on_terminal(sshd, tmp_path, home, {"passphrase": lambda: "wrong"})
    assert run.returncode != 0  # type: ignore[attr-defined]
    assert "passphrase" in run.output.lower()  # type: ignore[attr-defined]
    assert list(remote.iterdir()) == []


def password_server(sshd_factory: Callable[..., SshServer], password: str) -> SshServer:
    """Password logins checked by a PAM stack of the server's own (pam_exec against a file), not
    /etc/shadow: the shared test account's password is not raced by other test processes."""
    folder = Path(tempfile.mkdtemp(prefix="ferry-pw-"))
    (folder / "password").write_text(password)
    check = folder / "check"
    check.write_text(
        "#!/usr/bin/python3\nimport sys\n"
        f"want = open({str(folder / 'password')!r}, 'rb').read()\n"
        "sys.exit(0 if sys.stdin.buffer.read().rstrip(b'\\0') == want else 1)\n"
    )
    check.chmod(0o700)
    stack = (
        f"auth required pam_exec.so expose_authtok quiet {check}\n"
        "account required pam_permit.so\nsession required pam_permit.so\n"
    )
    return sshd_factory(use_pam=True, pam_stack=stack)


@root_only
def test_password_login(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    server = password_server(sshd_factory, "s3cret pass")
    home = home_with(server, tmp_path, None)
    run, src, remote = cp_on_terminal(server, tmp_path, home, {"password:": lambda: "s3cret pass"}, files=5)
    assert run.returncode == 0, run.output  # type: ignore[attr-defined]
    assert run.count("password:") == 1  # type: ignore[attr-defined]
    assert file_digests(remote / "src") == file_digests(src)


@root_only
def test_wrong_password_fails_cleanly(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    server = password_server(sshd_factory, "s3cret pass")
    home = home_with(server, tmp_path, None)
    run, _src, remote = cp_on_terminal(server, tmp_path, home, {"password:": lambda: "nope"})
    assert run.returncode != 0  # type: ignore[attr-defined]
    assert "login" in run.output.lower() and "failed" in run.output  # type: ignore[attr-defined]
    assert "nope" not in run.output.replace("nope\r\n", "")  # type: ignore[attr-defined]
    assert list(remote.iterdir()) == []


def totp_server(sshd_factory: Callable[..., SshServer]) -> SshServer:
    """publickey AND a TOTP code through PAM, as many clusters are set up."""
    secret_dir = Path(tempfile.mkdtemp(prefix="ferry-totp-"))
    secret = secret_dir / "google_authenticator"
    secret.write_text(f'{TOTP_SECRET}\n" TOTP_AUTH\n')
    secret.chmod(0o600)
    stack = (
        f"auth required pam_google_authenticator.so secret={secret} user=root\n"
        "account required pam_permit.so\n"
        "session required pam_permit.so\n"
    )
    return sshd_factory(
        use_pam=True,
        kbd_interactive_authentication=True,
        password_authentication=False,
        authentication_methods="publickey,keyboard-interactive",
        pam_stack=stack,
    )


@root_only
def test_totp_second_factor_is_asked_once_for_many_parallel_files(
    sshd_factory: Callable[..., SshServer], tmp_path: Path
) -> None:
    server = totp_server(sshd_factory)
    home = home_with(server, tmp_path, server.client_key)
    run, src, remote = cp_on_terminal(server, tmp_path, home, {"Verification code": totp}, files=40)
    assert run.returncode == 0, run.output  # type: ignore[attr-defined]
    assert run.count("Verification code") == 1, run.output  # type: ignore[attr-defined]
    assert file_digests(remote / "src") == file_digests(src)
    assert server.log_text().count("Accepted keyboard-interactive/pam") == 1


@root_only
def test_wrong_totp_code_is_refused(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    server = totp_server(sshd_factory)
    home = home_with(server, tmp_path, server.client_key)
    bad = f"{(int(totp()) + 500_000) % 1_000_000:06d}"
    run, _src, remote = cp_on_terminal(server, tmp_path, home, {"Verification code": lambda: bad})
    assert run.returncode != 0  # type: ignore[attr-defined]
    assert "login" in run.output.lower()  # type: ignore[attr-defined]
    assert list(remote.iterdir()) == []


@pytest.mark.parametrize(("answer", "saved"), [("y", True), ("o", False), ("n", False)])
def test_unknown_host_key_is_the_persons_decision(sshd: SshServer, tmp_path: Path, answer: str, saved: bool) -> None:
    home = home_with(sshd, tmp_path, sshd.client_key, known=False)
    run, src, remote = cp_on_terminal(sshd, tmp_path, home, {"Trust it?": lambda: answer})
    fingerprints = sshd.host_key_fingerprints.values()
    assert any(fp in run.output for fp in fingerprints), run.output  # type: ignore[attr-defined]
    assert run.count("Trust it?") == 1  # type: ignore[attr-defined]
    known = home / ".ssh" / "known_hosts"
    if answer == "n":
        assert run.returncode != 0  # type: ignore[attr-defined]
        assert list(remote.iterdir()) == []
    else:
        assert run.returncode == 0, run.output  # type: ignore[attr-defined]
        assert file_digests(remote / "src") == file_digests(src)
    assert known.exists() == saved
    if saved:
        assert f"[{sshd.host}]:{sshd.port}" in known.read_text()
