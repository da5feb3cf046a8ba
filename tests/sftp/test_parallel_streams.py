"""Parallel byte-range streams for big files, against the real sshd: the configured count
(FERRY_SFTP_STREAMS, a saved site's ``streams``) is what the server sees (one ``sftp-server``
process per SFTP channel, each holding the file open), uploads write their ranges in place and
arrive exact with the server's own hash, and an upload cut by a dropped connection resumes
below any hole the streams may have left."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

import ferry.backends.sftp as sftp_mod
import ferry.backends.sftp.parallel_write as pw
from ferry.backends.sftp import limits
from ferry.backends.sftp.host import host_for
from ferry.core.errors import FerryError, UsageError
from ferry.credentials.sites import SiteStore, resolve_address
from sftp.conformance_site import sftp_backend
from sshd import SshServer, _descendants


@pytest.fixture
def backend(sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(limits, "PARALLEL_MIN", 8 << 20)  # streams on files a test can afford
    monkeypatch.setattr(pw, "BLOCK", 1 << 20)
    config = sshd.ssh_config(tmp_path / "ssh_config", "streams")
    b = sftp_backend(sshd, config, "streams")
    yield b
    sftp_mod.close_all()


def holders(server: SshServer, path: Path) -> set[int]:
    """Server processes (below sshd) that hold ``path`` open: one sftp-server per SFTP channel."""
    assert server.process is not None
    found = set()
    for level in _descendants(server.process.pid):
        for pid in level:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                        found.add(pid)
                except OSError:
                    pass
    return found


def wait_for_holders(server: SshServer, path: Path, n: int) -> set[int]:
    deadline = time.monotonic() + 10
    while len(seen := holders(server, path)) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return seen


def test_the_configured_stream_count_is_what_the_server_sees_both_ways(
    sshd: SshServer, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(limits.STREAMS_ENV, "3")
    folder = sshd.mkdir()
    data = os.urandom((24 << 20) + 4321)
    w = backend.open_write(str(folder / "big.bin"), size=len(data), token="9", resume=False, readback="sha256")
    assert w._ranges is not None
    for start in range(0, len(data), (1 << 20) + 13):
        w.write(data[start : start + (1 << 20) + 13])
    # Every stream still holds its handle on the partial file until finish: three sftp-server
    # processes have it open, each from its own channel.
    partial = folder / ".big.bin.9.ferry-part"
    assert len(wait_for_holders(sshd, partial, 3)) == 3
    assert w.finish() == hashlib.sha256(data).hexdigest()  # the server's hash of what landed
    w.commit(overwrite=False)
    assert (folder / "big.bin").read_bytes() == data
    assert not holders(sshd, folder / "big.bin")  # every handle closed

    with backend.open_read(str(folder / "big.bin")) as r:
        assert r._parallel is not None and len(r._parallel._clients) == 3
        first = bytearray(1 << 20)
        got = r.readinto(first)
        assert got > 0
        assert len(wait_for_holders(sshd, folder / "big.bin", 3)) == 3
        out = bytearray(first[:got])
        buf = bytearray(777_777)
        while n := r.readinto(buf):
            out += buf[:n]
    assert bytes(out) == data


def test_one_stream_means_one_channel(sshd: SshServer, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(limits.STREAMS_ENV, "1")
    folder = sshd.mkdir()
    data = os.urandom(9 << 20)
    w = backend.open_write(str(folder / "one.bin"), size=len(data), token="1", resume=False, readback="sha256")
    assert w._ranges is None
    w.write(data)
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    with backend.open_read(str(folder / "one.bin")) as r:
        assert r._parallel is not None and len(r._parallel._clients) == 1


def test_a_saved_sites_streams_option_and_the_environment(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv(limits.STREAMS_ENV, raising=False)
    store = SiteStore()
    store.add("wide", f"sftp://{sshd.user}@{sshd.host}:{sshd.port}/", {"streams": "4"})
    store.add("broken", f"sftp://{sshd.user}@127.0.0.2:{sshd.port}/", {"streams": "lots"})
    try:
        host = host_for(resolve_address("wide:/tmp"))
        assert host.streams(up=True) == 4 and host.streams(up=False) == 4
        monkeypatch.setenv(limits.STREAMS_ENV, "2")  # the environment wins for a run
        assert host.streams(up=True) == 2
        monkeypatch.setenv(limits.STREAMS_ENV, "0")
        with pytest.raises(UsageError, match="FERRY_SFTP_STREAMS"):
            host.streams(up=True)
        with pytest.raises(UsageError, match="site 'broken'"):
            host_for(resolve_address("broken:/tmp"))
    finally:
        sftp_mod.close_all()


def test_safe_resume_offset_lies_below_any_hole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pw, "BLOCK", 1 << 20)
    monkeypatch.setattr(pw, "LEAD", 4)
    assert pw.safe_resume_offset(0) == 0
    assert pw.safe_resume_offset(3 << 20) == 0
    # The last byte in block 9: blocks 6.. may have been in flight; 0..5 were acknowledged.
    assert pw.safe_resume_offset((9 << 20) + 5) == 6 << 20
    assert pw.safe_resume_offset(10 << 20) == 6 << 20


def test_an_upload_cut_by_a_dropped_connection_resumes_exact(
    sshd: SshServer, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(limits.STREAMS_ENV, "4")
    monkeypatch.setattr(pw, "LEAD", 6)
    folder = sshd.mkdir()
    data = os.urandom((40 << 20) + 99)
    path = str(folder / "cut.bin")
    partial = folder / ".cut.bin.5.ferry-part"
    w = backend.open_write(path, size=len(data), token="5", resume=False, readback="sha256")
    assert w._ranges is not None
    with pytest.raises(FerryError):
        for start in range(0, len(data), 1 << 20):
            w.write(data[start : start + (1 << 20)])
            if start == 20 << 20:
                sshd.kill_connections()
        w.finish()
    w.abort(keep_partial=True)
    assert partial.exists()
    # A hole the streams could have left, made certain: zeros inside the last LEAD blocks.
    held = partial.stat().st_size
    with open(partial, "r+b") as f:
        f.seek(max(0, held - (3 << 20)))
        f.write(bytes(1 << 20))
    w = backend.open_write(path, size=len(data), token="5", resume=True, readback="sha256")
    assert 0 < w.offset == pw.safe_resume_offset(held) < held
    assert partial.read_bytes()[: w.offset] == data[: w.offset]
    view = memoryview(data)
    for start in range(w.offset, len(data), (1 << 20) + 1):
        w.write(view[start : min(len(data), start + (1 << 20) + 1)])
    assert w.finish() == hashlib.sha256(data).hexdigest()
    assert "resumed after" in w.verified_note
    w.commit(overwrite=False)
    assert (folder / "cut.bin").read_bytes() == data
