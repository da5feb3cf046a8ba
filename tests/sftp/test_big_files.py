"""Big files over the lean data paths (``ferry.backends.sftp.paramiko_adapter``), against the real sshd:
channel data built straight into AES-GCM packets on upload, replies read straight into place on
download. Exact bytes, through a rekey in the middle, with and without AES-GCM, and a file cut
short under a download."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

import ferry.backends.sftp as sftp_mod
import ferry.backends.sftp.parallel_read as parallel_mod
from ferry.backends.sftp import limits
from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.core.errors import FerryError, Transient
from sftp.conformance_site import sftp_backend
from sshd import SshServer


@pytest.fixture
def backend(sshd: SshServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    config = sshd.ssh_config(tmp_path / "ssh_config", "big")
    b = sftp_backend(sshd, config, "big")
    yield b
    sftp_mod.close_all()


def upload(b: Any, path: str, data: bytes, piece: int = (1 << 20) + 7) -> str | None:
    """Write ``data`` in odd-sized pieces (packets and requests never line up with them) and
    return the server's sha256 of what it holds."""
    w = b.open_write(path, size=len(data), token="7", resume=False, readback="sha256")
    view = memoryview(data)
    for start in range(0, len(data), piece):
        w.write(view[start : start + piece])
    digest = w.finish()
    w.commit(overwrite=False)
    return digest  # type: ignore[no-any-return]


def download(b: Any, path: str, chunk: int = 300_007) -> bytes:
    out = bytearray()
    buf = bytearray(chunk)
    view = memoryview(buf)
    with b.open_read(path) as r:
        while n := r.readinto(view):
            out += view[:n]
    return bytes(out)


def test_upload_and_download_take_the_lean_paths_and_are_exact(
    sshd: SshServer, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "PARALLEL_MIN", 8 << 20)  # two range streams on a smaller file
    sent: list[int] = []
    real_send = adapter._send_packet

    def counting(transport: Any, parts: Any, length: int) -> None:
        sent.append(length)
        real_send(transport, parts, length)

    monkeypatch.setattr(adapter, "_send_packet", counting)
    folder = sshd.mkdir()
    data = os.urandom((20 << 20) + 12_345)
    digest = upload(backend, str(folder / "up.bin"), data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert (folder / "up.bin").read_bytes() == data
    transport = backend._host.transport()
    assert "gcm" in transport.local_cipher and adapter.usable(transport)
    assert transport.packetizer._ferry_lean_reads  # and the transport reads GCM packets the lean way
    # Every data packet went the lean way, each within the server's packet limit.
    chan_max = max(sent)
    assert sum(sent) >= len(data) and chan_max <= 32 << 10
    # Downloads: every SFTP channel reads through a ChunkPipe, replies straight into the blocks.
    with backend.open_read(str(folder / "up.bin")) as r:
        assert r._parallel is not None and len(r._parallel._clients) == 2
        assert all(adapter.pipe_of(c) is not None for c in r._parallel._clients)
        assert r._parallel._in_order
    assert download(backend, str(folder / "up.bin")) == data


def test_a_rekey_in_the_middle_of_big_transfers(sshd: SshServer, backend: Any) -> None:
    """paramiko renegotiates keys every 512 MiB; here every 2 MiB, so the lean sender must wait
    for the new keys and carry on with the new cipher state (a wrong IV or sequence number makes
    sshd drop the connection)."""
    folder = sshd.mkdir()
    backend.stat(str(folder))
    transport = backend._host.transport()
    pk = transport.packetizer
    pk.REKEY_BYTES = 2 << 20  # this connection only (the class keeps paramiko's value)
    exchanges = []
    real_kex = transport._send_kex_init

    def kex() -> None:
        exchanges.append(1)
        real_kex()

    transport._send_kex_init = kex
    data = os.urandom((9 << 20) + 333)
    assert upload(backend, str(folder / "re.bin"), data) == hashlib.sha256(data).hexdigest()
    up_rekeys = len(exchanges)
    assert download(backend, str(folder / "re.bin")) == data
    assert up_rekeys >= 3 and len(exchanges) > up_rekeys
    assert transport.is_active()


def test_without_aes_gcm_the_ordinary_paths_are_used(sshd_factory: Any, tmp_path: Path) -> None:
    server = sshd_factory(extra_config=["Ciphers aes128-ctr"])
    b = sftp_backend(server, server.ssh_config(tmp_path / "ssh_config", "ctr"), "ctr")
    try:
        folder = server.mkdir()
        data = os.urandom((3 << 20) + 5)
        assert upload(b, str(folder / "ctr.bin"), data) == hashlib.sha256(data).hexdigest()
        transport = b._host.transport()
        assert transport.local_cipher == "aes128-ctr" and not adapter.usable(transport)
        assert download(b, str(folder / "ctr.bin")) == data
    finally:
        sftp_mod.close_all()


def test_a_file_cut_short_under_a_download_fails_instead_of_padding(
    sshd: SshServer, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "PARALLEL_MIN", 8 << 20)
    monkeypatch.setattr(parallel_mod, "AHEAD", 1)  # block 3 is asked for only after block 0 is taken
    folder = sshd.mkdir()
    path = folder / "shrinks.bin"
    path.write_bytes(os.urandom(40 << 20))
    sshd.chown(folder)
    buf = bytearray(1 << 20)
    with pytest.raises(Transient, match="changed while it was read"), backend.open_read(str(path)) as r:
        os.truncate(path, 28 << 20)
        while r.readinto(buf):
            pass


def test_chunk_pipe_reads_like_paramikos_pipe() -> None:
    from paramiko.buffered_pipe import PipeTimeout

    p = adapter.ChunkPipe()
    with pytest.raises(PipeTimeout):
        p.read(10, timeout=0.01)
    p.feed(b"hello ")
    p.feed(bytearray(b"world"))
    assert len(p) == 11 and p.read_ready()
    assert p.read(3) == b"hel"
    target = bytearray(5)
    assert p.readinto(memoryview(target)) == 5 and target == b"lo wo"
    assert p.read(100) == b"rld"
    assert not p.read_ready()
    p.feed(b"tail")
    p.close()
    assert p.read(100) == b"tail"  # what was fed before the close is still read
    assert p.read(100) == b"" and p.readinto(memoryview(bytearray(4))) == 0


def test_a_big_upload_sends_from_its_own_thread_and_a_failure_still_fails_the_file(
    backend: Any, sshd: SshServer
) -> None:
    import threading

    from paramiko.sftp import CMD_CLOSE

    folder = sshd.mkdir()
    (folder / "keep.txt").write_bytes(b"x")
    sshd.chown(folder)
    w = backend.open_write(str(folder / "c.bin"), size=limits.SEND_THREAD_MIN, token="3", readback=None)
    assert w._sender is not None
    w._client._request(CMD_CLOSE, w._handle)  # the server forgets the handle: every WRITE now fails
    with pytest.raises(FerryError):
        for _ in range(limits.SEND_THREAD_MIN >> 20):
            w.write(os.urandom(1 << 20))
        w.finish()
    w.abort()
    assert not [t for t in threading.enumerate() if t.name == "sftp-send"]
    # The same pooled channel answers the next requests correctly.
    assert sorted(e.name for e in backend.list(str(folder))) == ["keep.txt"]
    # And a big upload through the thread is exact, acknowledged to its last byte.
    data = os.urandom(limits.SEND_THREAD_MIN + 999)
    w = backend.open_write(str(folder / "d.bin"), size=len(data), token="4", readback=None)
    assert w._sender is not None
    for start in range(0, len(data), 1 << 20):
        w.write(data[start : start + (1 << 20)])
    assert w.finish() is None and w.acknowledged == len(data)
    w.commit(overwrite=False)
    assert (folder / "d.bin").read_bytes() == data


def test_with_the_lean_paths_switched_off_paramiko_moves_the_same_bytes(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FERRY_SSH_FASTPATH=0 is the way out should a paramiko release change what the lean paths
    # rely on: everything then goes through paramiko's own code, and must stay exact.
    monkeypatch.setenv(adapter.ENV, "0")
    monkeypatch.setattr(limits, "PARALLEL_MIN", 8 << 20)
    config = sshd.ssh_config(tmp_path / "ssh_config", "plain")
    b = sftp_backend(sshd, config, "plain")
    try:
        folder = sshd.mkdir()
        data = os.urandom((12 << 20) + 999)
        assert upload(b, str(folder / "up.bin"), data) == hashlib.sha256(data).hexdigest()
        assert (folder / "up.bin").read_bytes() == data
        transport = b._host.transport()
        assert not adapter.usable(transport) and not getattr(transport.packetizer, "_ferry_lean_reads", False)
        assert download(b, str(folder / "up.bin")) == data
    finally:
        sftp_mod.close_all()


def test_sftp_channel_data_skips_paramikos_dispatch_and_stays_exact(
    sshd: SshServer, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transport's reader feeds an SFTP channel's data packets to its ChunkPipe itself (a view
    of the decrypted packet, several packets per recv_into): paramiko's Channel._feed never sees
    them, exec channels (the remote hash) still go paramiko's way, and every byte arrives."""
    import paramiko

    monkeypatch.setattr(limits, "PARALLEL_MIN", 8 << 20)
    fed: list[bool] = []
    real_feed = paramiko.Channel._feed  # type: ignore[attr-defined]  # private: not in types-paramiko

    def counting(chan: Any, m: Any) -> None:
        fed.append(isinstance(chan.in_buffer, adapter.ChunkPipe))
        real_feed(chan, m)

    # Transport.run dispatches through this table (it holds the functions, not the names).
    handlers = paramiko.Transport._channel_handler_table  # type: ignore[attr-defined]  # private, as above
    monkeypatch.setitem(handlers, 94, counting)  # MSG_CHANNEL_DATA
    folder = sshd.mkdir()
    data = os.urandom((17 << 20) + 4097)
    (folder / "in.bin").write_bytes(data)
    sshd.chown(folder)
    assert download(backend, str(folder / "in.bin")) == data
    assert upload(backend, str(folder / "back.bin"), data) == hashlib.sha256(data).hexdigest()
    assert fed and not any(fed)  # only exec channels' data went through Channel._feed
