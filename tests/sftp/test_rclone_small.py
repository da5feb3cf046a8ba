"""Small and medium uploads to ``rclone serve sftp`` (issue 18): small ones paused the job as
"Destination full" although rclone's disk had room. rclone (no VFS cache) cannot read a file on
the handle it is written through ("Illegal seek", SFTP "Failure"), and that refused read-back was
taken for a refused write. Now the file is read back through a handle of its own; every file lands
whole, is checked, and the run exits 0."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.transfers.store import Store
from helpers import Ferry, describe, file_events, partials, result_event, sha256_file, write_random
from sftp.rclone_sftp import RcloneSftp
from sftp.test_resilience import alias_block, known_line
from sshd import SshServer, require_sshd


def _ferry(tmp_path: Path, server: RcloneSftp) -> Ferry:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(server.ssh_config("rc"))
    (home / ".ssh" / "known_hosts").write_text(server.known_hosts())
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env={"HOME": str(home), "SSH_AUTH_SOCK": ""})


@pytest.fixture
def rclone_sftp() -> Iterator[RcloneSftp]:
    with RcloneSftp() as server:
        yield server


@pytest.mark.parametrize("size", [12, 40 << 10, 3 << 20], ids=["small", "read-back-size", "medium"])
def test_upload_to_rclone_serve_sftp_lands_and_is_verified(rclone_sftp: RcloneSftp, tmp_path: Path, size: int) -> None:
    ferry = _ferry(tmp_path, rclone_sftp)
    src = tmp_path / "file.bin"
    digest = write_random(src, size)
    res = ferry("cp", "--json", src, "rc:/", timeout=180)
    assert res.returncode == 0, describe(res)
    assert "full" not in res.stderr.lower(), res.stderr
    assert result_event(res.stdout)["state"] == "done", res.stdout
    event = file_events(res.stdout)["file.bin"]
    assert event["state"] == "done", event
    assert event["level"] == "checksum" and event["verified"].startswith("sha256 match"), event
    assert sha256_file(rclone_sftp.root / "file.bin") == digest
    assert not partials(rclone_sftp.root), os.listdir(rclone_sftp.root)


def test_many_small_files_to_rclone_serve_sftp_are_read_back(rclone_sftp: RcloneSftp, tmp_path: Path) -> None:
    """After the first refused read-back, the rest of the run reads back through a handle of
    their own at once: every file checked by read-back (not size only), nothing left behind."""
    ferry = _ferry(tmp_path, rclone_sftp)
    src = tmp_path / "src"
    src.mkdir()
    want = {f"f{i:02d}.txt": write_random(src / f"f{i:02d}.txt", 100 + i * 997) for i in range(20)}
    res = ferry("cp", "-r", "--json", src, "rc:/", timeout=180)
    assert res.returncode == 0, describe(res)
    events = {k.rsplit("/", 1)[-1]: e for k, e in file_events(res.stdout).items() if e.get("kind", "file") == "file"}
    for name, digest in want.items():
        assert sha256_file(rclone_sftp.root / "src" / name) == digest
        assert events[name]["level"] == "checksum", events[name]
        assert events[name]["verified"].startswith("sha256 match"), events[name]
    assert not partials(rclone_sftp.root)


# ---- a statvfs answer that cannot be real ----

# sshd's sftp subsystem as OpenSSH's own sftp-server, with every statvfs@openssh.com reply
# replaced by zeros (as some servers fill it): a real server, one answer made unreal.
_ZERO_STATVFS = r"""#!/usr/bin/python3
import struct, subprocess, sys, threading
child = subprocess.Popen(["/usr/lib/openssh/sftp-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
asked = set()
def exact(f, n):
    b = b""
    while len(b) < n:
        more = f.read(n - len(b))
        if not more:
            return None
        b += more
    return b
def upstream():
    src = sys.stdin.buffer
    while True:
        head = exact(src, 4)
        if head is None:
            break
        body = exact(src, struct.unpack(">I", head)[0])
        if body is None:
            break
        if body[0] == 200:
            n = struct.unpack(">I", body[5:9])[0]
            if body[9:9 + n] == b"statvfs@openssh.com":
                asked.add(body[1:5])
        child.stdin.write(head + body)
        child.stdin.flush()
    child.stdin.close()
threading.Thread(target=upstream, daemon=True).start()
out = sys.stdout.buffer
while True:
    head = exact(child.stdout, 4)
    if head is None:
        break
    body = exact(child.stdout, struct.unpack(">I", head)[0])
    if body[0] == 201 and body[1:5] in asked:
        body = body[:5] + bytes(8 * 11)
    out.write(struct.pack(">I", len(body)) + body)
    out.flush()
"""


@contextlib.contextmanager
def server_client(server: SshServer) -> Iterator[Any]:
    """A plain paramiko SFTP client logged in to ``server`` (with Ferry's status conversion)."""
    transport = paramiko.Transport((server.host, server.port))
    try:
        transport.connect(username=server.user, pkey=paramiko.Ed25519Key.from_private_key_file(str(server.client_key)))
        client = paramiko.SFTPClient.from_transport(transport)
        yield client
    finally:
        transport.close()


class _ZeroStatvfsSshd(SshServer):
    """The fixture's sshd with its sftp subsystem replaced by ``script``."""

    def __init__(self, script: Path) -> None:
        super().__init__()
        self.script = script

    def _write_config(self) -> None:
        super()._write_config()
        text = self.config.read_text().replace("Subsystem sftp internal-sftp", f"Subsystem sftp {self.script}")
        assert str(self.script) in text
        self.config.write_text(text)


@pytest.fixture
def zero_statvfs_sshd() -> Iterator[SshServer]:
    require_sshd()
    where = Path(tempfile.mkdtemp(prefix="ferry-zero-statvfs-"))
    where.chmod(0o755)
    script = where / "sftp-zero-statvfs"
    script.write_text(_ZERO_STATVFS)
    script.chmod(0o755)
    try:
        with _ZeroStatvfsSshd(script) as server:
            yield server
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.mount
def test_statvfs_of_no_blocks_is_no_answer_not_a_full_disk(zero_statvfs_sshd: SshServer, tmp_path: Path) -> None:
    """A server answering statvfs with zeros (0 blocks, 0 free) has not got a full disk: the answer
    counts as none (it was read as "0 B free"). A small upload where there is space lands; a
    refused write (a really full tmpfs) still pauses the job as a full disk does, its reason
    not known."""
    server = zero_statvfs_sshd
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env={"SSH_AUTH_SOCK": ""})
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(alias_block(server, "zero"))
    (home / ".ssh" / "known_hosts").write_text(known_line(server))
    ferry.extra_env["HOME"] = str(home)
    remote = server.mkdir()
    with server_client(server) as client:
        assert adapter.statvfs(client, str(remote).encode()) is None  # zeros: no answer
    digest = write_random(tmp_path / "small.txt", 12)
    res = ferry("cp", "--json", tmp_path / "small.txt", f"zero:{remote}/")
    assert res.returncode == 0, describe(res)
    assert sha256_file(remote / "small.txt") == digest
    disk = remote / "full"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(disk)], check=False)
    if done.returncode != 0:
        pytest.fail("mounting a tmpfs failed: this test needs root (CI runs as root)", pytrace=False)
    try:
        server.chown(disk)
        write_random(tmp_path / "big.bin", 3 << 20)
        res = ferry("cp", "--json", tmp_path / "big.bin", f"zero:{disk}/")
        result = result_event(res.stdout)
        assert res.returncode == 1 and result["state"] == "paused", describe(res)
        store = Store(ferry.home / "data" / "queue.db")
        try:
            (task,) = store.tasks(result["job"], kinds=["file"])
        finally:
            store.close()
        assert task.error_kind == "no-space", task  # paused as a full disk is, the reason not known
        assert not partials(disk), os.listdir(disk)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
