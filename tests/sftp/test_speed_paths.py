"""The fast paths are exact: parallel byte-range reads of big files, batched remote hashes
(one exec for many files), and what happens to each when the connection drops."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

import ferry.backends.sftp as sftp_mod
from ferry.backends.sftp import limits
from ferry.core.errors import NotFound, Transient
from sftp.conformance_site import sftp_backend
from sftp.tcp_proxy import TcpProxy
from sshd import SshServer


@pytest.fixture
def backend(sshd: SshServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    config = sshd.ssh_config(tmp_path / "ssh_config", "speed")
    b = sftp_backend(sshd, config, "speed")
    yield b
    sftp_mod.close_all()


def remote_file(sshd: SshServer, size: int) -> tuple[Path, str]:
    folder = sshd.mkdir()
    path = folder / "big.bin"
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            block = os.urandom(min(left, 4 << 20))
            h.update(block)
            f.write(block)
            left -= len(block)
    sshd.chown(folder)
    return path, h.hexdigest()


def read_all(reader: object, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    while n := reader.readinto(view):  # type: ignore[attr-defined]
        h.update(view[:n])
    return h.hexdigest()


def test_big_file_is_read_over_several_channels_in_order(
    sshd: SshServer, backend: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "PARALLEL_MIN", 8 << 20)  # same code path, smaller file
    path, digest = remote_file(sshd, 40 << 20)
    before = sshd.log_text().count("subsystem 'sftp'")
    with backend.open_read(str(path)) as r:  # type: ignore[attr-defined]
        assert r._parallel is not None and len(r._parallel._clients) > 1
        assert read_all(r) == digest
    assert sshd.log_text().count("subsystem 'sftp'") - before >= 2
    # A ranged read in the middle is exact too (resume of a download starts there).
    with backend.open_read(str(path), 9_000_001, 20 << 20) as r:  # type: ignore[attr-defined]
        got = read_all(r, 300_007)
    with open(path, "rb") as f:
        f.seek(9_000_001)
        assert got == hashlib.sha256(f.read(20 << 20)).hexdigest()


# paramiko's own read-ahead thread reports the dropped socket on stderr too; ours raises Transient.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_parallel_read_cut_midway_fails_cleanly_then_reconnects(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "PARALLEL_MIN", 8 << 20)
    path, digest = remote_file(sshd, 48 << 20)
    proxy = TcpProxy((sshd.host, sshd.port))
    try:
        known = tmp_path / "known_hosts"
        known.write_text(sshd.known_hosts.read_text().replace(f"]:{sshd.port} ", f"]:{proxy.port} "))
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host cut\n  HostName {sshd.host}\n  Port {proxy.port}\n  User {sshd.user}\n"
            f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
        )
        b = sftp_backend(sshd, config, "cut")
        fired = threading.Event()

        def cut(p: TcpProxy) -> None:
            if not fired.is_set() and p.downstream_bytes > 12 << 20:
                fired.set()
                p.cut()

        proxy.on_bytes = cut
        with pytest.raises(Transient), b.open_read(str(path)) as r:
            read_all(r)
        proxy.on_bytes = None
        with b.open_read(str(path)) as r:  # a new login, same backend
            assert read_all(r) == digest
        assert proxy.connections == 2
    finally:
        proxy.close()
        sftp_mod.close_all()


def test_remote_hashes_are_batched_and_exact(sshd: SshServer, backend: object) -> None:
    folder = sshd.mkdir()
    names = [f"f{i}" for i in range(30)] + ["new\nline", "back\\slash", "sp ace", "-dash", "quo'te"]
    want = {}
    for name in names:
        data = name.encode() * 100
        (folder / name).write_bytes(data)
        want[name] = hashlib.sha256(data).hexdigest()
    sshd.chown(folder)
    b = backend
    assert "sha256" in b.capabilities.hashes  # type: ignore[attr-defined]
    before = sshd.log_text().count("Starting session: command")
    got: dict[str, str] = {}
    barrier = threading.Barrier(len(names))

    def one(name: str) -> None:
        barrier.wait()
        got[name] = b.hash(str(folder / name), "sha256")  # type: ignore[attr-defined]

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want
    execs = sshd.log_text().count("Starting session: command") - before
    assert 1 <= execs < len(names)  # many files per exec, not one exec per file
    with pytest.raises(NotFound):
        b.hash(str(folder / "missing"), "sha256")  # type: ignore[attr-defined]
