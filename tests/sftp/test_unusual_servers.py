"""Servers Ferry's OpenSSH fixture does not model (issue 18, "Every server works"): ``rclone
serve sftp`` with its defaults (writes only in order, a exec channel without a shell), sftp-only
chroot accounts, full, read-only and forbidden folders, and host keys of another type."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ferry.backends.sftp as sftp_mod
from ferry.backends.sftp import SFTPBackend
from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.backends.sftp.errors import HostKeyChanged
from ferry.core.address import Address
from ferry.core.errors import Transient
from helpers import Ferry, describe, file_events, partials, result_event, sha256_file, write_random
from sftp.conformance_site import sftp_backend
from sftp.rclone_sftp import RcloneSftp
from sftp.test_resilience import alias_block, known_line
from sshd import SshServer, login_account


def ferry_with(tmp_path: Path, config: str, known: str) -> Ferry:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(config)
    (home / ".ssh" / "known_hosts").write_text(known)
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env={"HOME": str(home), "SSH_AUTH_SOCK": ""})


@pytest.fixture
def rclone_sftp() -> Iterator[RcloneSftp]:
    with RcloneSftp() as server:
        yield server


def test_rclone_serve_sftp_big_upload_falls_back_to_one_stream(rclone_sftp: RcloneSftp, tmp_path: Path) -> None:
    """rclone refuses writes at out-of-order offsets: the parallel ranges of a 64 MiB+ upload
    failed as "Connection lost" five times and left a partial file. Now the refusal is found
    (SFTP "Failure" while the disk has space), said once, and the file goes as one stream."""
    ferry = ferry_with(tmp_path, rclone_sftp.ssh_config("rc"), rclone_sftp.known_hosts())
    big = tmp_path / "big.bin"
    digest = write_random(big, 80 << 20)
    res = ferry("cp", "--json", big, "rc:/", timeout=300)
    assert res.returncode == 0, describe(res)
    assert sha256_file(rclone_sftp.root / "big.bin") == digest
    assert not partials(rclone_sftp.root), os.listdir(rclone_sftp.root)
    event = file_events(res.stdout)["big.bin"]
    assert event["state"] == "done", event
    # rclone's own sha256sum (no shell) checked what landed.
    assert event["level"] == "checksum" and event["verified"].startswith("sha256 match"), event
    assert res.stderr.count("out-of-order") == 1, res.stderr  # said once
    # A second big file in the same run goes as one stream at once (no failure, no retry).
    (tmp_path / "two").mkdir()
    d1 = write_random(tmp_path / "two" / "a.bin", 70 << 20)
    d2 = write_random(tmp_path / "two" / "b.bin", 70 << 20)
    res = ferry("cp", "-r", "--json", tmp_path / "two", "rc:/", timeout=300)
    assert res.returncode == 0, describe(res)
    assert sha256_file(rclone_sftp.root / "two" / "a.bin") == d1
    assert sha256_file(rclone_sftp.root / "two" / "b.bin") == d2
    assert not partials(rclone_sftp.root)
    assert result_event(res.stdout)["state"] == "done"


def test_out_of_order_refusal_is_found_without_statvfs(
    rclone_sftp: RcloneSftp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that refuses out-of-order writes and does not answer statvfs (appliances): the
    refusal of parallel ranges is not taken for a full disk (which would pause the job for
    nothing): the file is handed back to be sent again as one stream, which then works."""
    monkeypatch.setattr(adapter, "statvfs", lambda client, path: None)
    (tmp_path / "known_hosts").write_text(rclone_sftp.known_hosts())
    config = tmp_path / "ssh_config"
    config.write_text(rclone_sftp.ssh_config("rc-nostatvfs") + f"  UserKnownHostsFile {tmp_path / 'known_hosts'}\n")
    monkeypatch.setenv("FERRY_SSH_CONFIG", str(config))
    backend = SFTPBackend(Address("sftp", "/", host="rc-nostatvfs"))
    try:
        data = os.urandom(70 << 20)
        w = backend.open_write("/big.bin", size=len(data), token="7")
        with pytest.raises(Transient) as caught:
            for at in range(0, len(data), 1 << 20):
                w.write(data[at : at + (1 << 20)])
            w.finish()
        w.abort(keep_partial=True)  # what the copy's "with writer" does on a failure
        assert "out-of-order" in str(caught.value)
        assert backend._host.sequential_writes
        assert not partials(rclone_sftp.root)
        w = backend.open_write("/big.bin", size=len(data), token="8")
        for at in range(0, len(data), 1 << 20):
            w.write(data[at : at + (1 << 20)])
        w.finish()
        w.commit(overwrite=False)
        assert (rclone_sftp.root / "big.bin").read_bytes() == data
        assert not partials(rclone_sftp.root)
    finally:
        sftp_mod.close_all()


def test_partial_file_rclone_will_not_reopen_is_written_again(
    rclone_sftp: RcloneSftp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rclone (no VFS cache) takes no WRITE at the offset where an interrupted upload's partial
    file ends (nor a second handle's without truncating): the refusal is found, the partial file
    goes and the retry writes the file from its first byte (every retry failed as "Connection
    lost" before), and later files to that host are not resumed at all."""
    (tmp_path / "known_hosts").write_text(rclone_sftp.known_hosts())
    config = tmp_path / "ssh_config"
    config.write_text(rclone_sftp.ssh_config("rc-resume") + f"  UserKnownHostsFile {tmp_path / 'known_hosts'}\n")
    monkeypatch.setenv("FERRY_SSH_CONFIG", str(config))
    backend = SFTPBackend(Address("sftp", "/", host="rc-resume"))
    try:
        data = os.urandom(5 << 20)
        w = backend.open_write("/f.bin", size=len(data), token="9")
        w.write(data[: 2 << 20])
        w.abort(keep_partial=True)  # interrupted: the partial file stays for a resume
        assert [p.stat().st_size for p in partials(rclone_sftp.root)] == [2 << 20]
        w = backend.open_write("/f.bin", size=len(data), token="9", resume=True)
        assert w.offset == 2 << 20  # OpenSSH would resume here
        with pytest.raises(Transient) as caught:
            w.write(data[w.offset :])
            w.finish()
        w.abort(keep_partial=True)
        assert "out-of-order" in str(caught.value) and backend._host.sequential_writes
        assert not partials(rclone_sftp.root)
        w = backend.open_write("/f.bin", size=len(data), token="9", resume=True)  # the retry
        assert w.offset == 0
        w.write(data)
        w.finish()
        w.commit(overwrite=False)
        assert (rclone_sftp.root / "f.bin").read_bytes() == data
        assert not partials(rclone_sftp.root)
    finally:
        sftp_mod.close_all()


def test_rclone_hash_tools_without_a_shell(rclone_sftp: RcloneSftp, tmp_path: Path) -> None:
    """rclone answers ``sha256sum PATH`` on its exec channel without a POSIX shell: found by
    running each tool bare, used one file per command (odd names escaped as rclone reads them)."""
    ferry = ferry_with(tmp_path, rclone_sftp.ssh_config("rc"), rclone_sftp.known_hosts())
    src = tmp_path / "src"
    src.mkdir()
    names = ["plain.bin", "with space.bin", "quote'and\\back.bin", "caf\u00e9.bin"]
    want = {n: write_random(src / n, (1 << 20) + i) for i, n in enumerate(names)}
    res = ferry("cp", "-r", "--json", src, "rc:/", timeout=300)
    assert res.returncode == 0, describe(res)
    events = {k.rsplit("/", 1)[-1]: e for k, e in file_events(res.stdout).items() if e.get("kind", "file") == "file"}
    for name, digest in want.items():
        assert sha256_file(rclone_sftp.root / "src" / name) == digest
        assert events[name]["level"] == "checksum", events[name]
        assert events[name]["verified"] == "sha256 match", events[name]
    got = ferry.ok("hash", f"rc:/src/{names[1]}").stdout.split()[0]
    assert got == want[names[1]]
    md5 = ferry.ok("hash", "--algo", "md5", f"rc:/src/{names[0]}").stdout.split()[0]
    assert md5 == hashlib.md5((src / names[0]).read_bytes()).hexdigest()


# ---- SFTP status codes: full, read-only and forbidden folders ----


def _mount_tmpfs(path: Path, size: str, owner: SshServer) -> None:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=False)
    if done.returncode != 0:
        pytest.fail("mounting a tmpfs failed: these tests need root (CI runs as root)", pytrace=False)
    owner.chown(path)


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=False)
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.mount
def test_full_sftp_disk_pauses_the_job_and_leaves_no_partials(sshd: SshServer, tmp_path: Path) -> None:
    """A full disk on the server answers WRITE with SFTP's reasonless "Failure": statvfs says it
    is full, so the job pauses as for a full local disk (it was "Connection lost", retried five
    times, then failed), partial files are removed, and after space is made the job completes."""
    ferry = ferry_with(tmp_path, alias_block(sshd, "box"), known_line(sshd))
    remote = sshd.mkdir()
    disk = remote / "small"
    _mount_tmpfs(disk, "2m", sshd)
    try:
        src = tmp_path / "src"
        src.mkdir()
        want = {f"f{i}.bin": write_random(src / f"f{i}.bin", 900 << 10) for i in range(4)}
        res = ferry("cp", "-r", "--json", "--parallel", "2", src, f"box:{disk}/")
        result = result_event(res.stdout)
        assert res.returncode == 1 and result["state"] == "paused", describe(res)
        job = ferry.job(result["job"])
        assert job["state"] == "paused" and "full" in job["message"], job
        assert job["files_failed"] == 0, job
        assert not partials(disk), os.listdir(disk / "src")
        left = sorted(
            os.path.relpath(os.path.join(d, n), disk) for d, dirs, files in os.walk(disk) for n in dirs + files
        )
        assert set(left) <= {"src", *(f"src/{n}" for n in want)}, left  # no staging folders either
        for name in want:  # nothing truncated under a final name
            landed = disk / "src" / name
            assert not landed.exists() or sha256_file(landed) == want[name]
        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
        ferry.ok("queue", "resume", str(result["job"]))
        res = ferry("queue", "run", "--json")
        assert res.returncode == 0, describe(res)
        assert {n: sha256_file(disk / "src" / n) for n in want} == want
        assert not partials(disk)
    finally:
        _umount(disk)


@pytest.mark.mount
def test_full_disk_under_parallel_streams_is_full_not_out_of_order(sshd: SshServer, tmp_path: Path) -> None:
    """A 64 MiB+ upload goes as parallel byte ranges; a full disk refusing them is told apart from
    a server refusing out-of-order writes (statvfs first): the job pauses, no stream fallback."""
    ferry = ferry_with(tmp_path, alias_block(sshd, "box"), known_line(sshd))
    remote = sshd.mkdir()
    disk = remote / "small"
    _mount_tmpfs(disk, "2m", sshd)
    try:
        write_random(tmp_path / "big.bin", 70 << 20)
        res = ferry("cp", "--json", tmp_path / "big.bin", f"box:{disk}/")
        result = result_event(res.stdout)
        assert res.returncode == 1 and result["state"] == "paused", describe(res)
        assert "full" in ferry.job(result["job"])["message"]
        assert "out-of-order" not in res.stderr, res.stderr
        assert not os.listdir(disk)
    finally:
        _umount(disk)


@pytest.mark.mount
def test_read_only_sftp_folder_is_a_permanent_error(sshd: SshServer, tmp_path: Path) -> None:
    """A read-only file system answers with "Failure" too: statvfs says read-only, so the file
    fails at once as a permission problem, not as a lost connection retried five times."""
    ferry = ferry_with(tmp_path, alias_block(sshd, "box"), known_line(sshd))
    remote = sshd.mkdir()
    backing = sshd.mkdir()
    ro = remote / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(backing), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
        (tmp_path / "small.txt").write_bytes(b"small")
        write_random(tmp_path / "big.bin", 3 << 20)
        for name in ("small.txt", "big.bin"):
            res = ferry("cp", "--json", tmp_path / name, f"box:{ro}/")
            assert res.returncode == 1, describe(res)
            event = file_events(res.stdout)[name]
            assert event["state"] == "failed" and event["error_kind"] == "permission-denied", event
            assert "read-only" in event["error"] and "retry" not in event["error"], event
        (tmp_path / "tree").mkdir()
        (tmp_path / "tree" / "a.txt").write_bytes(b"a")
        res = ferry("cp", "-r", "--json", tmp_path / "tree", f"box:{ro}/")  # its folder cannot be made
        assert res.returncode == 1, describe(res)
        assert "read-only" in res.stdout + res.stderr and "Connection lost" not in res.stdout, describe(res)
        assert not os.listdir(backing)
    finally:
        _umount(ro)


def test_forbidden_sftp_folder_is_a_permanent_error(sshd: SshServer, tmp_path: Path) -> None:
    """A folder the login user may not write (0555): SFTP's "permission denied", failed at once."""
    ferry = ferry_with(tmp_path, alias_block(sshd, "box"), known_line(sshd))
    locked = sshd.mkdir()
    locked.chmod(0o555)
    (tmp_path / "small.txt").write_bytes(b"small")
    res = ferry("cp", "--json", tmp_path / "small.txt", f"box:{locked}/")
    assert res.returncode == 1, describe(res)
    event = file_events(res.stdout)["small.txt"]
    assert event["state"] == "failed" and event["error_kind"] == "permission-denied", event
    assert not os.listdir(locked)


# ---- host keys as OpenSSH judges them ----


class _Asked:
    """A prompter that records host-key questions and trusts for this run (what a hurried person
    answers): a test fails if Ferry asks where OpenSSH would not."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def ask(self, title: str, prompt: str, *, echo: bool) -> str:
        raise AssertionError(f"unexpected question {prompt!r}")

    def confirm_host_key(self, host: str, key_type: str, fingerprint: str) -> str:
        self.asked.append(key_type)
        return "once"


@pytest.fixture
def asked() -> Iterator[_Asked]:
    from ferry.credentials import prompts

    before = prompts.prompter()
    recorder = _Asked()
    prompts.set_prompter(recorder)
    try:
        yield recorder
    finally:
        prompts.set_prompter(before)
        sftp_mod.close_all()


def _backend_with_known(sshd: SshServer, tmp_path: Path, known: str, alias: str) -> Any:
    (tmp_path / "known_hosts").write_text(known)
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host {alias}\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {tmp_path / 'known_hosts'}\n"
    )
    return sftp_backend(sshd, config, alias)


def test_known_rsa_key_is_used_not_asked_about(sshd: SshServer, tmp_path: Path, asked: _Asked) -> None:
    """known_hosts holds the server's RSA key only; the server has an Ed25519 key too. OpenSSH
    asks for the RSA key and connects; Ferry asked "unknown ed25519 key, trust it?"."""
    rsa = [line for line in known_line(sshd).splitlines() if " ssh-rsa " in line]
    backend = _backend_with_known(sshd, tmp_path, rsa[0] + "\n", "rsa-known")
    folder = sshd.mkdir()
    assert list(backend.list(str(folder))) == []
    assert asked.asked == []
    key = backend._host.connection.transport().get_remote_server_key()
    assert key.get_name() == "ssh-rsa"


def test_host_key_of_another_type_is_changed_and_refused(sshd: SshServer, tmp_path: Path, asked: _Asked) -> None:
    """known_hosts holds an ECDSA key for the host, which the server does not offer: the key it
    shows is "changed" and refused (typed), never offered for trust as an unknown one."""
    other = tmp_path / "other_ecdsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(other)], check=True)
    line = f"[{sshd.host}]:{sshd.port} {' '.join(other.with_suffix('.pub').read_text().split()[:2])}\n"
    backend = _backend_with_known(sshd, tmp_path, line, "ecdsa-known")
    with pytest.raises(HostKeyChanged) as caught:
        list(backend.list("/"))
    assert asked.asked == []
    assert "CHANGED" in str(caught.value) and "ecdsa-sha2-nistp256" in str(caught.value)
    assert caught.value.kind == "host-key"


# ---- sftp-only accounts: ForceCommand internal-sftp with ChrootDirectory ----


@pytest.fixture
def jail(sshd_factory: Callable[..., SshServer]) -> Iterator[tuple[SshServer, Path]]:
    """An sshd whose login user is an sftp-only account locked in a chroot (``/data`` inside it is
    the user's). sshd wants every component of the chroot's path root-owned and writable by no
    one else, which rules out /tmp: the jail is made under /run."""
    if os.geteuid() != 0:
        pytest.skip("ChrootDirectory needs a root-run sshd (CI runs as root); ForceCommand alone is tested elsewhere")
    root = Path(tempfile.mkdtemp(prefix="ferry-chroot-", dir="/run"))
    root.chmod(0o755)
    data = root / "data"
    data.mkdir()
    try:
        match = [f"Match User {login_account().pw_name}", f"  ChrootDirectory {root}", "  ForceCommand internal-sftp"]
        server = sshd_factory(extra_config=match)
        server.chown(data)
        yield server, data
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_chrooted_sftp_only_account(jail: tuple[SshServer, Path], tmp_path: Path) -> None:
    """No shell and no commands in a chroot: finding hash tools neither hangs nor fails; files up
    to 64 KiB are read back over SFTP and hashed here (they were recorded as size only), bigger
    ones are recorded as size only with the reason; downloads are checked locally as anywhere."""
    server, data = jail
    ferry = ferry_with(tmp_path, alias_block(server, "jail"), known_line(server))
    src = tmp_path / "src"
    src.mkdir()
    want = {f"s{i}.txt": write_random(src / f"s{i}.txt", 1000 + i) for i in range(4)}
    want["big.bin"] = write_random(src / "big.bin", 300_000)
    res = ferry("cp", "-r", "--json", src, "jail:/data/", timeout=120)
    assert res.returncode == 0, describe(res)
    events = {k.rsplit("/", 1)[-1]: e for k, e in file_events(res.stdout).items() if e.get("kind", "file") == "file"}
    for name in want:
        assert sha256_file(data / "src" / name) == want[name]
        e = events[name]
        if name == "big.bin":
            assert e["level"] == "size", e
            assert e["verified"] == "size only (the server has no sha256sum to check sha256)", e
        else:
            assert e["level"] == "checksum" and e["evidence"] == ["read-back"], e
    assert result_event(res.stdout)["size_only"] == 1
    assert not partials(data)
    back = tmp_path / "back"
    res = ferry("cp", "-r", "--json", "jail:/data/src", back, timeout=120)
    assert res.returncode == 0, describe(res)
    assert {n: sha256_file(back / n) for n in want} == want
    res = ferry("hash", "jail:/data/src/big.bin")
    assert res.returncode != 0 and "cannot compute sha256" in res.stderr, describe(res)
