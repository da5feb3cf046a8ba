"""How uploads are verified: small files by reading back what the server holds on the same open
handle (no remote process), bigger ones by a remote checksum tool, preferring ``openssl dgst``
(SHA instructions) when it proves it computes the right digest. Against the real sshd."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import ferry.backends.sftp as sftp_mod
from ferry.backends.sftp import limits
from sftp.conformance_site import sftp_backend
from sshd import SshServer


@pytest.fixture
def backend(sshd: SshServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    config = sshd.ssh_config(tmp_path / "ssh_config", "verify")
    b = sftp_backend(sshd, config, "verify")
    yield b
    sftp_mod.close_all()


def no_remote_hash(*_a: Any, **_k: Any) -> Any:
    raise AssertionError("a small file must not need a remote hash")


def test_small_upload_is_read_back_without_a_remote_process(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = sshd.mkdir()
    data = os.urandom(300_000)  # more than one 255 KiB request
    monkeypatch.setattr(limits, "READBACK_MAX", 4 << 20)  # read-back over several requests
    monkeypatch.setattr(backend._host.hasher, "hash", no_remote_hash)
    w = backend.open_write(str(folder / "a.bin"), size=len(data), token="1", readback="sha256")
    w.write(data[:100_000])
    w.write(data[100_000:])
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert (folder / "a.bin").read_bytes() == data


def test_read_back_sees_what_the_server_holds(backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes changed on the server under the partial file show up in the digest: the check reads
    the server's file, not Ferry's own buffers."""
    folder = sshd.mkdir()
    data = b"x" * 50_000
    w = backend.open_write(str(folder / "b.bin"), size=len(data), token="2", readback="sha256")
    w.write(data)
    w._drain()  # the bytes have landed
    partial = Path(w.temp_path)
    with open(partial, "r+b") as f:  # the server's disk flips a byte
        f.seek(1234)
        f.write(b"y")
    digest = w.finish()
    assert digest != hashlib.sha256(data).hexdigest()
    assert digest == hashlib.sha256(data[:1234] + b"y" + data[1235:]).hexdigest()
    w.abort()
    assert not partial.exists()


def test_bigger_files_use_the_remote_tool(backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "READBACK_MAX", 1000)
    monkeypatch.setattr(limits, "FOLLOW_MIN", 1000)
    assert backend.capabilities.readback
    tool = backend._host.hash_tools["sha256"]
    if shutil.which("openssl"):  # the server is this machine
        assert tool == "openssl dgst -sha256 -r"
    else:
        assert tool == "sha256sum"
    folder = sshd.mkdir()
    data = os.urandom(5000)
    w = backend.open_write(str(folder / "c.bin"), size=len(data), token="3", readback="sha256")
    calls: list[str] = []
    real = backend._host.hasher.hash

    def counting(path: str, tool: str) -> Any:
        calls.append(tool)
        return real(path, tool)

    monkeypatch.setattr(backend._host.hasher, "hash", counting)
    w.write(data)
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert calls == []  # the size was known: the tool followed the upload (tests/sftp/test_follow_hash.py)
    # Known, but under FOLLOW_MIN: hashed by the batched remote tool after it closes.
    monkeypatch.setattr(limits, "FOLLOW_MIN", 1 << 20)
    w = backend.open_write(str(folder / "m.bin"), size=len(data), token="5", readback="sha256")
    w.write(data)
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert calls == [tool]
    calls.clear()
    # Size unknown: no follower, the finished file is hashed by the (batched) remote tool.
    w = backend.open_write(str(folder / "d.bin"), size=None, token="4", readback="sha256")
    w.write(data)
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert calls == [tool]
    assert backend.hash(str(folder / "c.bin"), "sha1") == hashlib.sha1(data).hexdigest()
    assert backend.hash(str(folder / "c.bin"), "md5") == hashlib.md5(data).hexdigest()


@pytest.mark.parametrize("request_size", [255 << 10, 32 << 10])
def test_reads_of_every_shape_are_exact(backend: Any, sshd: SshServer, request_size: int) -> None:
    """Small files (size and bytes in one round trip), mid-size ones (first bytes, then one
    pipelined stream), ranges and an empty file; with OpenSSH's big requests and SFTP's portable
    32 KiB ones."""
    backend._host.transport()
    backend._host.connection.request_size = request_size
    folder = sshd.mkdir()
    blobs = {"empty": b"", "small": os.urandom(4096), "edge": os.urandom(request_size), "mid": os.urandom(3_000_017)}
    for name, data in blobs.items():
        (folder / name).write_bytes(data)
    sshd.chown(folder)
    for name, data in blobs.items():
        with backend.open_read(str(folder / name)) as r:
            assert r.read() == data, name
        for offset, length in ((0, 10), (1, None), (request_size - 1, 3), (len(data) // 2, 70_000)):
            if offset > len(data):
                continue
            with backend.open_read(str(folder / name), offset, length) as r:
                want = data[offset : None if length is None else offset + length]
                assert r.read() == want, (name, offset, length)
    # The channel is still in step after all those unanswered CLOSEs.
    assert sorted(e.name for e in backend.list(str(folder))) == sorted(blobs)
