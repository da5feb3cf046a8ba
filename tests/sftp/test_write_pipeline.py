"""The upload writer's own pipelined WRITEs: byte-exact at every request boundary, replies read
as they come (what the server acknowledged is known), and a failing WRITE fails the file while
the channel stays usable. Against the real sshd."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

import ferry.backends.sftp as sftp_mod
from ferry.backends.sftp import limits
from ferry.core.errors import FerryError
from sftp.conformance_site import sftp_backend
from sshd import SshServer


@pytest.fixture
def backend(sshd: SshServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    config = sshd.ssh_config(tmp_path / "ssh_config", "writes")
    b = sftp_backend(sshd, config, "writes")
    yield b
    sftp_mod.close_all()


@pytest.mark.parametrize("piece", [7, 4095, 255 << 10, (255 << 10) + 1, 1 << 20])
def test_writes_of_every_shape_land_exactly(backend: Any, sshd: SshServer, piece: int) -> None:
    folder = sshd.mkdir()
    data = os.urandom(700_003 if piece > 7 else 40_000)  # over the small-file writer's 32 KiB
    w = backend.open_write(str(folder / "a.bin"), size=len(data), token="1", readback=None)
    buf = bytearray(piece)  # reused between calls, as the copy does
    for i in range(0, len(data), piece):
        n = len(data[i : i + piece])
        buf[:n] = data[i : i + piece]
        w.write(memoryview(buf)[:n])
    w.finish()
    assert w.acknowledged == len(data)  # every reply read by the time the file is closed
    w.commit(overwrite=False)
    assert hashlib.sha256((folder / "a.bin").read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()


def test_many_writes_in_flight_are_acknowledged_as_they_arrive(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "WRITE_DEPTH", 4)
    folder = sshd.mkdir()
    data = os.urandom(3 << 20)
    w = backend.open_write(str(folder / "b.bin"), size=len(data), token="2", readback=None)
    for i in range(0, len(data), 1 << 20):
        w.write(data[i : i + (1 << 20)])
        assert len(w._pending) <= 4
        assert 0 < w.acknowledged <= (i + (1 << 20))
    w.finish()
    w.commit(overwrite=False)
    assert (folder / "b.bin").read_bytes() == data


def test_a_failing_write_fails_the_file_and_the_channel_stays_in_step(backend: Any, sshd: SshServer) -> None:
    from paramiko.sftp import CMD_CLOSE

    folder = sshd.mkdir()
    (folder / "keep.txt").write_bytes(b"x")
    sshd.chown(folder)
    w = backend.open_write(str(folder / "c.bin"), size=3 << 20, token="3", readback=None)
    w._client._request(CMD_CLOSE, w._handle)  # the server forgets the handle: every WRITE now fails
    with pytest.raises(FerryError):
        for _ in range(3):
            w.write(os.urandom(1 << 20))
        w.finish()
    w.abort()
    # The same pooled channel answers the next requests correctly.
    names = sorted(e.name for e in backend.list(str(folder)))
    assert names == ["keep.txt"]
    assert backend.stat(str(folder / "keep.txt")).size == 1
