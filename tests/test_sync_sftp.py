"""``ferry compare`` and ``ferry sync`` against a real OpenSSH sshd on loopback, both directions:
times kept to the second on the host compared within that second, content compared by the
host's own ``sha256sum`` (no bytes downloaded for that side), a failed copy that prevents the
deletions, ``--backup-dir`` on the host."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from helpers import Ferry, describe, file_digests, put, snapshot
from sftp.conftest import sshd
from sftp.test_cli_sftp import ferry_as, url, user_home
from sshd import SshServer

__all__ = ["sshd"]  # the session's server, as the sftp tests use it

T = 1_700_000_000_123_456_789  # nanoseconds: the host keeps whole seconds of it


def local_tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for i in range(4):
        put(src, f"keep/f{i}.txt", f"same {i}\n".encode())
    put(src, "top.bin", os.urandom(70_000))
    return src


def items(stdout: str) -> dict[str, dict[str, Any]]:
    return {o["path"]: o for o in map(json.loads, stdout.splitlines()) if o["event"] == "item"}


def last(stdout: str, event: str) -> dict[str, Any]:
    found: dict[str, Any] = [o for o in map(json.loads, stdout.splitlines()) if o["event"] == event][-1]
    return found


def setup(sshd: SshServer, tmp_path: Path) -> tuple[Ferry, Path, Path, str]:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    src = local_tree(tmp_path)
    remote = sshd.mkdir() / "mirror"
    return ferry, src, remote, url(sshd, remote)


def test_sync_up_then_compare_within_the_hosts_precision(sshd: SshServer, tmp_path: Path) -> None:
    ferry, src, remote, there = setup(sshd, tmp_path)
    res = ferry("sync", src, there)
    assert res.returncode == 0, describe(res)
    assert file_digests(remote) == file_digests(src)
    # The host keeps whole seconds: 0.123456789 s apart is the same time there.
    assert (remote / "top.bin").stat().st_mtime_ns != T
    res = ferry("compare", "-r", src, there)
    assert res.returncode == 0, describe(res)
    # Changed by size, by time (a second later), by content with the same size and second.
    put(remote, "keep/f0.txt", b"longer than before\n")
    os.utime(remote / "keep/f1.txt", ns=(T + 2 * 10**9, T + 2 * 10**9))
    put(remote, "keep/f2.txt", b"SAME 2\n", T)
    put(remote, "extra.txt", b"only there")
    (src / "new.txt").write_bytes(b"only here")
    res = ferry("compare", "-r", "--json", src, there)
    got = items(res.stdout)
    assert res.returncode == 1, describe(res)
    assert got["keep/f0.txt"]["reasons"] == ["size"] and got["keep/f1.txt"]["reasons"] == ["time"]
    assert got["keep/f2.txt"]["state"] == "same"  # same size and second: only --by checksum sees it
    assert got["extra.txt"]["state"] == "only-b" and got["new.txt"]["state"] == "only-a"
    res = ferry("compare", "-r", "--by", "checksum", "--json", src, there)
    got = items(res.stdout)
    assert got["keep/f2.txt"]["reasons"] == ["content"], describe(res)
    assert got["keep/f2.txt"]["how"] == "sha256: A read, B hashed on the server"
    assert last(res.stdout, "summary")["read_b"] == 0  # nothing was downloaded to compare
    # Sync with --delete puts it all right.
    res = ferry("sync", "--delete", "--by", "checksum", "--max-delete", "1", src, there)
    assert res.returncode == 0, describe(res)
    assert file_digests(remote) == file_digests(src)
    assert ferry("compare", "-r", "--by", "checksum", src, there).returncode == 0


def test_sync_down_with_backup_dir(sshd: SshServer, tmp_path: Path) -> None:
    ferry, src, remote, there = setup(sshd, tmp_path)
    assert ferry("sync", src, there).returncode == 0
    put(remote, "keep/f3.txt", b"changed there\n")
    down = tmp_path / "down"
    assert ferry("sync", there, down).returncode == 0
    put(down, "stale.txt", b"to go")
    trash = tmp_path / "trash"
    res = ferry("sync", "--delete", "--backup-dir", trash, "--max-delete", "1", there, down)
    assert res.returncode == 0, describe(res)
    assert file_digests(down) == file_digests(remote)
    assert (trash / "stale.txt").read_bytes() == b"to go"
    # And on the host: deletions moved under a folder there.
    put(remote, "old/left.txt", b"left over")
    for p in (remote / "old", remote / "old" / "left.txt"):
        os.chown(p, sshd.uid, sshd.gid)  # made here as root: the host's user must be able to move it
    res = ferry("sync", "--delete", "--backup-dir", url(sshd, remote.parent / "bak"), "--max-delete", "1", src, there)
    assert res.returncode == 0, describe(res)
    assert (remote.parent / "bak" / "old" / "left.txt").read_bytes() == b"left over"
    assert not (remote / "old").exists()


def test_failed_copy_to_the_host_prevents_deletions(sshd: SshServer, tmp_path: Path) -> None:
    ferry, src, remote, there = setup(sshd, tmp_path)
    assert ferry("sync", src, there).returncode == 0
    put(src, "blocker", b"a file here")
    put(remote, "blocker/inside.txt", b"a folder there")
    put(remote, "extra.txt", b"only there")
    before = snapshot(remote)
    res = ferry("sync", "--delete", "--max-delete", "5", "--json", src, there)
    assert res.returncode == 1, describe(res)
    out = last(res.stdout, "result")
    assert out["outcomes"]["failed"] == 1 and out["deleted"] == 0, out
    assert snapshot(remote) == before  # nothing deleted, nothing else changed


def test_dry_run_and_empty_source_change_nothing_on_the_host(sshd: SshServer, tmp_path: Path) -> None:
    ferry, src, remote, there = setup(sshd, tmp_path)
    assert ferry("sync", src, there).returncode == 0
    put(remote, "extra.txt", b"only there")
    before = snapshot(remote)
    res = ferry("sync", "--dry-run", "--delete", "--max-delete", "1", src, there)
    assert res.returncode == 0 and "delete  extra.txt" in res.stdout, describe(res)
    empty = tmp_path / "empty"
    empty.mkdir()
    res = ferry("sync", "--delete", "--max-delete", "100", empty, there)
    assert res.returncode == 2 and "is empty: refusing to delete" in res.stderr, describe(res)
    assert snapshot(remote) == before
