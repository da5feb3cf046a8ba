"""Nothing changes silently over SFTP (issue 18), against the real OpenSSH fixture: permission bits
kept both ways (setgid folders included, as ``sftp put -pr``/``get -pr``), times to SFTP's whole
seconds, and hard links, which an SFTP destination cannot make, reported per file."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from helpers import file_events
from sftp.test_cli_sftp import ferry_as, url, user_home
from sshd import SshServer, login_account

T_NS = 1_600_000_000_123_456_789


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _tree(src: Path) -> None:
    (src / "shared").mkdir(parents=True)
    (src / "private.key").write_bytes(b"secret\n")
    (src / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (src / "big.bin").write_bytes(os.urandom(3 << 20))  # the general writer, not a small-file one
    (src / "shared" / "notes.txt").write_bytes(b"notes\n")
    os.chmod(src / "private.key", 0o600)
    os.chmod(src / "run.sh", 0o755)
    os.chmod(src / "big.bin", 0o640)
    os.chmod(src / "shared", 0o2775)
    for p in (src / "private.key", src / "run.sh", src / "big.bin"):
        os.utime(p, ns=(T_NS, T_NS))


def test_permissions_and_times_kept_up_and_down(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    src = tmp_path / "src"
    _tree(src)
    remote = sshd.mkdir()
    ferry.ok("cp", "-r", src, url(sshd, f"{remote}/up"))
    up = remote / "up"
    assert _mode(up / "private.key") == 0o600
    assert _mode(up / "run.sh") == 0o755
    assert _mode(up / "big.bin") == 0o640
    assert _mode(up / "shared") == 0o2775
    assert os.stat(up / "run.sh").st_mtime_ns == T_NS // 10**9 * 10**9  # SFTP carries whole seconds

    back = tmp_path / "back"
    ferry.ok("cp", "-r", url(sshd, f"{remote}/up"), back)
    assert _mode(back / "private.key") == 0o600
    assert _mode(back / "run.sh") == 0o755
    assert _mode(back / "big.bin") == 0o640
    assert _mode(back / "shared") == 0o2775
    assert os.stat(back / "big.bin").st_mtime_ns == T_NS // 10**9 * 10**9


def test_a_server_refusing_setstat_is_reported_per_file(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    """sftp-server's -P denies requests by name, as locked-down appliances do: the files land,
    and each says its time and permissions were not kept, on the terminal and in its record."""
    user = login_account().pw_name
    server = sshd_factory(extra_config=[f"Match User {user}", "ForceCommand internal-sftp -P setstat,fsetstat"])
    ferry = ferry_as(tmp_path, user_home(server, tmp_path))
    src = tmp_path / "src"
    src.mkdir()
    (src / "run.sh").write_bytes(b"#!/bin/sh\n")
    (src / "big.bin").write_bytes(os.urandom(3 << 20))
    os.chmod(src / "run.sh", 0o755)
    remote = server.mkdir()
    res = ferry.ok("cp", "-r", "--json", src, url(server, f"{remote}/up"))
    assert (remote / "up" / "run.sh").read_bytes() == b"#!/bin/sh\n"
    files = file_events(res.stdout)
    for name in ("up/run.sh", "up/big.bin"):
        assert sorted(files[name]["not_kept"]) == ["mtime", "permissions"], files[name]
        assert "modification time and permissions not kept: the server refused" in files[name]["verified"]
    assert "permissions 0755 not kept" in files["up"]["verified"]  # the folder's chmod, refused too
    res = ferry.ok("cp", src / "run.sh", url(server, f"{remote}/again.sh"))
    assert "copied, not all kept: again.sh: " in res.stderr, res.stderr


def test_hard_links_to_sftp_are_reported(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.dat").write_bytes(os.urandom(100_000))
    os.link(src / "a.dat", src / "b.dat")
    remote = sshd.mkdir()
    res = ferry.ok("cp", "-r", "--json", src, url(sshd, f"{remote}/up"))
    assert (remote / "up" / "a.dat").read_bytes() == (remote / "up" / "b.dat").read_bytes()
    notes = [e["verified"] for e in file_events(res.stdout).values()]
    assert sum("hard link of" in n and "cannot make hard links" in n for n in notes) == 1, notes
