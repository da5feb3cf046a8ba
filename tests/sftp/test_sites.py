"""Saved SFTP sites: their identity_file, proxy_jump, user and port options win over ssh_config
(as ``ssh -i/-J/-l/-p`` would), and a password saved in the keychain answers a password prompt
only, never a one-time code. Against the real sshd."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ferry.backends.sftp as sftp_mod
from ferry.backends.sftp.auth import is_password_prompt
from ferry.core.address import Address
from ferry.core.errors import UsageError
from ferry.credentials import keychain, prompts
from ferry.credentials.sites import SiteStore
from ferry.credentials.ssh_config import SshTarget, apply_site
from helpers import Ferry, file_digests
from sftp.test_auth import AS_ROOT, password_server, totp, totp_server
from sshd import SshServer

root_only = pytest.mark.skipif(not AS_ROOT, reason="password/PAM logins need a root-run sshd (CI runs as root)")


def bare_home(server: SshServer, tmp_path: Path, *, key: bool, config: str) -> Path:
    """A ``$HOME`` whose ssh_config points the wrong way (a dead port, a wrong user, a key that
    does not exist and a ProxyCommand that fails): only the site's options can make it work."""
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    shutil.copy(server.known_hosts, ssh / "known_hosts")
    if key:
        shutil.copy(server.client_key, ssh / "id_ed25519")
        (ssh / "id_ed25519").chmod(0o600)
    (ssh / "config").write_text(config)
    return home


def ferry_in(tmp_path: Path, home: Path) -> Ferry:
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env={"HOME": str(home), "SSH_AUTH_SOCK": ""})


def test_site_identity_file_user_and_port_override_ssh_config(sshd: SshServer, tmp_path: Path) -> None:
    home = bare_home(
        sshd, tmp_path, key=False, config="Host 127.0.0.1\n  Port 1\n  User nobody-here\n  IdentityFile ~/.ssh/nope\n"
    )
    key = tmp_path / "keys" / "site_key"
    key.parent.mkdir()
    shutil.copy(sshd.client_key, key)
    key.chmod(0o600)
    ferry = ferry_in(tmp_path, home)
    remote = sshd.mkdir()
    added = ferry(
        "sites", "add", "lab", f"sftp://{sshd.host}{remote}",
        "--option", f"identity_file={key}", "--option", f"user={sshd.user}", "--option", f"port={sshd.port}",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}.bin").write_bytes(os.urandom(5000 + i))
    done = ferry("cp", "-r", src, "lab:in/")
    assert done.returncode == 0, done.stderr
    assert file_digests(remote / "in" / "src") == file_digests(src)
    (tmp_path / "back").mkdir()
    back = ferry("cp", "-r", "lab:in/src", f"{tmp_path / 'back'}/")
    assert back.returncode == 0, back.stderr
    assert file_digests(tmp_path / "back" / "src") == file_digests(src)
    # The plain URL (what a queued job records) finds the one saved site on that host...
    plain = ferry("ls", f"sftp://{sshd.host}{remote}/")
    assert plain.returncode == 0 and "in/" in plain.stdout, plain.stderr
    # ...and without the site it goes where ssh_config says (port 1) and fails: the site's
    # options did the work.
    assert ferry("sites", "remove", "lab").returncode == 0
    assert ferry("ls", f"sftp://{sshd.host}{remote}/").returncode != 0


def test_site_proxy_jump_replaces_ssh_configs_proxycommand(sshd: SshServer, tmp_path: Path) -> None:
    home = bare_home(sshd, tmp_path, key=True, config="Host 127.0.0.1\n  ProxyCommand false\n")
    # The jump host is the same server under another name, so ssh_config's ProxyCommand (which
    # OpenSSH's -J hop would also obey for its own host) does not apply to the hop itself.
    known = home / ".ssh" / "known_hosts"
    known.write_text(known.read_text() + known.read_text().replace("[127.0.0.1]", "[localhost]"))
    ferry = ferry_in(tmp_path, home)
    remote = sshd.mkdir()
    (remote / "hello.txt").write_text("through the jump host\n")
    sshd.chown(remote)
    offset = sshd.log.stat().st_size  # a byte offset, as log_text(offset) seeks (its text has CRLF folded)
    jump = f"{sshd.user}@localhost:{sshd.port}"
    added = ferry("sites", "add", "jumped", f"sftp://{sshd.user}@{sshd.host}:{sshd.port}{remote}",
                  "--option", f"proxy_jump={jump}")  # fmt: skip
    assert added.returncode == 0, added.stderr
    got = ferry("cp", "jumped:hello.txt", tmp_path / "hello.txt")
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "hello.txt").read_text() == "through the jump host\n"
    log = sshd.log_text(offset)
    assert log.count("Accepted publickey") == 2, log  # the jump host's login and the target's
    assert "direct-tcpip" in log or "Connection from 127.0.0.1" in log


def test_apply_site_rules() -> None:
    t = SshTarget(
        alias="h", hostname="h.example.org", user="cfg", port=2222, identity_files=["/cfg/key"], proxy_command="nc"
    )
    apply_site(t, "s", {"identity_file": "/site/%r_key", "proxy_jump": "bastion", "user": "u", "port": "23"},
               user_given=False, port_given=False)  # fmt: skip
    assert (t.user, t.port, t.site) == ("u", 23, "s")
    assert t.identity_files == ["/site/u_key", "/cfg/key"]  # the site's key first, like ssh -i
    assert t.proxy_jump == "bastion"
    assert t.proxy_command is None
    kept = SshTarget(alias="h", hostname="h", user="url-user", port=2200)
    apply_site(kept, "s", {"user": "u", "port": "23"}, user_given=True, port_given=True)
    assert (kept.user, kept.port) == ("url-user", 2200)  # the address's own user@host:port wins
    with pytest.raises(UsageError, match="port"):
        apply_site(SshTarget(alias="h", hostname="h", user="x"), "s", {"port": "ssh"}, user_given=False,
                   port_given=False)  # fmt: skip


def test_only_plain_password_prompts_get_the_saved_password() -> None:
    ok = is_password_prompt
    assert ok("Password: ", "")
    assert ok("alice@hpc's password:", "")
    assert not ok("Verification code: ", "")
    assert not ok("One-time password:", "")
    assert not ok("Password:", "Enter your OTP token")
    assert not ok("Passcode or option (1-3): ", "")


class Recording:
    """A prompter that answers from a table and remembers what it was asked."""

    def __init__(self, answers: dict[str, Callable[[], str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def ask(self, title: str, prompt: str, *, echo: bool) -> str:
        self.asked.append(prompt)
        for key, answer in self.answers.items():
            if key.lower() in prompt.lower():
                return answer()
        raise AssertionError(f"unexpected prompt {prompt!r}")

    def confirm_host_key(self, host: str, key_type: str, fingerprint: str) -> str:
        raise AssertionError("the host key is in known_hosts")


@pytest.fixture
def site_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SSH_AUTH_SOCK", "")
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.delenv("FERRY_SSH_CONFIG", raising=False)
    keychain.reset()
    before = prompts.prompter()
    yield home
    prompts.set_prompter(before)
    sftp_mod.close_all()
    keychain.reset()


def _login(server: SshServer, remote: Path, site: str, prompter: Recording) -> list[str]:
    prompts.set_prompter(prompter)
    address = Address(
        scheme="sftp", host=server.host, user=server.user, port=server.port, path=str(remote), site=site or None
    )
    backend = sftp_mod.SFTPBackend(address)
    try:
        return sorted(e.name for e in backend.list(str(remote)))
    finally:
        backend.close()


@root_only
def test_saved_password_answers_the_password_prompt(
    sshd_factory: Callable[..., SshServer], site_env: Path, tmp_path: Path
) -> None:
    server = password_server(sshd_factory, "saved pass 1")
    shutil.copy(server.known_hosts, site_env / ".ssh" / "known_hosts")
    remote = server.mkdir()
    (remote / "a.txt").write_text("x")
    SiteStore().add("pw", f"sftp://{server.user}@{server.host}:{server.port}{remote}")
    keychain.set_secret(keychain.site_secret_key("pw"), "saved pass 1")
    nobody = Recording({})  # any prompt fails the test: the saved password must be enough
    assert _login(server, remote, "pw", nobody) == ["a.txt"]
    assert nobody.asked == []


@root_only
def test_wrong_saved_password_falls_back_to_asking(
    sshd_factory: Callable[..., SshServer], site_env: Path, tmp_path: Path
) -> None:
    server = password_server(sshd_factory, "right one")
    shutil.copy(server.known_hosts, site_env / ".ssh" / "known_hosts")
    remote = server.mkdir()
    (remote / "b.txt").write_text("x")
    SiteStore().add("pw2", f"sftp://{server.user}@{server.host}:{server.port}{remote}")
    keychain.set_secret(keychain.site_secret_key("pw2"), "stale one")
    person = Recording({"password": lambda: "right one"})
    assert _login(server, remote, "pw2", person) == ["b.txt"]
    assert len(person.asked) == 1


@root_only
def test_saved_password_is_never_sent_as_a_one_time_code(
    sshd_factory: Callable[..., SshServer], site_env: Path, tmp_path: Path
) -> None:
    server = totp_server(sshd_factory)
    shutil.copy(server.known_hosts, site_env / ".ssh" / "known_hosts")
    shutil.copy(server.client_key, site_env / ".ssh" / "id_ed25519")
    (site_env / ".ssh" / "id_ed25519").chmod(0o600)
    remote = server.mkdir()
    (remote / "c.txt").write_text("x")
    SiteStore().add("otp", f"sftp://{server.user}@{server.host}:{server.port}{remote}")
    keychain.set_secret(keychain.site_secret_key("otp"), "123456")  # looks like a code: still never sent
    person = Recording({"verification code": totp})
    assert _login(server, remote, "otp", person) == ["c.txt"]
    assert any("Verification code" in p for p in person.asked)


class SavesKey(Recording):
    """A front end that shows the known_hosts line (the desktop dialog does) and saves it."""

    def __init__(self) -> None:
        super().__init__({})
        self.lines: list[str] = []

    def confirm_host_key(self, host: str, key_type: str, fingerprint: str, *, known_hosts_line: str = "") -> str:
        self.lines.append(known_hosts_line)
        return "save"


def test_host_key_prompt_gets_the_exact_known_hosts_line(sshd: SshServer, site_env: Path) -> None:
    known = site_env / ".ssh" / "known_hosts"
    assert not known.exists()
    shutil.copy(sshd.client_key, site_env / ".ssh" / "id_ed25519")
    (site_env / ".ssh" / "id_ed25519").chmod(0o600)
    remote = sshd.mkdir()
    (remote / "d.txt").write_text("x")
    person = SavesKey()
    assert _login(sshd, remote, "", person) == ["d.txt"]
    assert len(person.lines) == 1
    line = person.lines[0]
    assert known.read_text() == line + "\n"  # what was shown is what was saved
    host, key_type, blob = line.split()
    assert host == f"[{sshd.host}]:{sshd.port}"
    assert f"{key_type} {blob}" in sshd.known_hosts.read_text()  # the server's real key
