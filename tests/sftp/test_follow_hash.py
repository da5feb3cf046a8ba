"""The remote hash that follows a big upload (``FollowingHash``): the server hashes the partial
file while it is written, from bytes it has acknowledged, so verification ends right after the
last byte. Exact in every case it answers, and when it cannot answer the finished file is hashed
the usual way. Against the real sshd."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

import ferry.backends.sftp as sftp_mod
import ferry.backends.sftp.remote_hash as hash_mod
from ferry.backends.sftp import limits
from sftp.conformance_site import sftp_backend
from sshd import SshServer


@pytest.fixture
def backend(sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    # Same code paths at test sizes: "big" from 64 KiB, the follower stepping every 100,003 bytes.
    monkeypatch.setattr(limits, "READBACK_MAX", 64 << 10)
    monkeypatch.setattr(limits, "FOLLOW_MIN", 64 << 10)
    monkeypatch.setattr(hash_mod, "FOLLOW_STEP", 100_003)
    config = sshd.ssh_config(tmp_path / "ssh_config", "follow")
    b = sftp_backend(sshd, config, "follow")
    assert b.capabilities.readback
    yield b
    sftp_mod.close_all()


@pytest.fixture
def batch_calls(backend: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = backend._host.hasher.hash

    def counting(path: str, tool: str) -> Any:
        calls.append(path)
        return real(path, tool)

    monkeypatch.setattr(backend._host.hasher, "hash", counting)
    return calls


def upload(backend: Any, path: Path, data: bytes, token: str, piece: int = 300_007) -> Any:
    w = backend.open_write(str(path), size=len(data), token=token, readback="sha256")
    for i in range(0, len(data), piece):
        w.write(memoryview(data)[i : i + piece])
    return w


def test_follower_hashes_the_upload_as_it_lands(backend: Any, sshd: SshServer, batch_calls: list[str]) -> None:
    folder = sshd.mkdir()
    data = os.urandom(3_000_017)
    before = sshd.log_text().count("Starting session: command")
    w = upload(backend, folder / "a.bin", data, "1")
    assert w._follow is not None
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert (folder / "a.bin").read_bytes() == data
    assert batch_calls == []  # no second pass over the file
    assert sshd.log_text().count("Starting session: command") - before == 1
    # Its session was given back: the budget is where it started.
    assert backend._host.pool._open == len(backend._host.pool._idle) + backend._host.shell.holds_session


def test_follower_reads_the_servers_bytes(backend: Any, sshd: SshServer) -> None:
    """A byte changed on the server's disk before the follower reached it is in the digest: the
    check is of what the server holds, not of what Ferry sent."""
    folder = sshd.mkdir()
    data = os.urandom(1_000_000)
    w = backend.open_write(str(folder / "b.bin"), size=len(data), token="2", readback="sha256")
    w.write(data[:50_000])  # below one follower step: nothing hashed yet
    w._drain()
    with open(w.temp_path, "r+b") as f:
        f.seek(1234)
        f.write(b"\0" if data[1234] else b"\1")
    w.write(data[50_000:])
    changed = bytearray(data)
    changed[1234] = 0 if data[1234] else 1
    assert w.finish() == hashlib.sha256(changed).hexdigest()
    w.abort()


def test_resumed_upload_is_followed_from_its_first_byte(backend: Any, sshd: SshServer, batch_calls: list[str]) -> None:
    folder = sshd.mkdir()
    data = os.urandom(700_001)
    w = upload(backend, folder / "c.bin", data[:400_000], "3")
    w.abort(keep_partial=True)
    w = backend.open_write(str(folder / "c.bin"), size=len(data), token="3", resume=True, readback="sha256")
    assert w.offset == 400_000 and w._follow is not None
    w.write(data[400_000:])
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert (folder / "c.bin").read_bytes() == data and batch_calls == []


def test_a_broken_follower_falls_back_to_hashing_the_file(
    backend: Any, sshd: SshServer, batch_calls: list[str]
) -> None:
    folder = sshd.mkdir()
    data = os.urandom(500_000)
    w = upload(backend, folder / "d.bin", data[:200_000], "4")
    w._follow._chan.close()  # the follower's channel goes away mid-upload
    w.write(data[200_000:])
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert len(batch_calls) == 1


def test_follower_whose_tool_fails_is_not_trusted(
    backend: Any, sshd: SshServer, batch_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower's answer counts only with exit status 0 and every byte passed through."""
    monkeypatch.setitem(backend._host.hash_tools, "sha256", "false")
    folder = sshd.mkdir()
    data = os.urandom(300_000)
    w = upload(backend, folder / "e.bin", data, "5")
    assert w._follow is not None
    follow = w._follow
    w._follow = None
    w._close_file()
    assert follow.result(len(data)) is None
    w.abort()
    assert not Path(w.temp_path).exists()


def test_follower_takes_no_session_the_transfers_need(backend: Any, sshd: SshServer, batch_calls: list[str]) -> None:
    """Under a tight MaxSessions the follower is simply not started (never waited for)."""
    host = backend._host
    host.pool.max_sessions = 2  # this writer's SFTP channel plus one kept spare
    folder = sshd.mkdir()
    data = os.urandom(200_000)
    w = upload(backend, folder / "f.bin", data, "6")
    assert w._follow is None
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert len(batch_calls) == 1


def test_abort_closes_the_follower(backend: Any, sshd: SshServer) -> None:
    folder = sshd.mkdir()
    w = upload(backend, folder / "g.bin", os.urandom(300_000), "7")
    chan = w._follow._chan
    w.abort()
    assert chan.closed and w._follow is None
    assert backend._host.pool._open == len(backend._host.pool._idle) + backend._host.shell.holds_session
