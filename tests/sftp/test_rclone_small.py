"""Small and medium uploads to ``rclone serve sftp`` (issue 18): small ones paused the job as
"Destination full" although rclone's disk had room. rclone (no VFS cache) cannot read a file on
the handle it is written through ("Illegal seek", SFTP "Failure"), and that refused read-back was
taken for a refused write. Now the file is read back through a handle of its own; every file lands
whole, is checked, and the run exits 0."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Ferry, describe, file_events, partials, result_event, sha256_file, write_random
from sftp.rclone_sftp import RcloneSftp


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
