"""Small uploads in three round trips (``ferry.backends.sftp.writer.SmallFileWriter``), against the real sshd:
exact bytes and digests for every small shape, the server's bytes (not Ferry's buffer) behind the
read-back, errors where the copy expects them, stale partial files, conflict policies inside one
run of many small files, and a connection cut in the middle of many small files."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import ferry.backends.sftp as sftp_mod
import ferry.backends.sftp.names as names_mod
import ferry.backends.sftp.protocol as protocol_mod
import ferry.backends.sftp.writer as writer_mod
from ferry.backends.base import temp_name
from ferry.backends.sftp.protocol import entry_of
from ferry.backends.sftp.writer import SMALL_MAX, SmallFileWriter
from ferry.core.errors import AlreadyExists, NotFound, Transient
from helpers import describe, file_digests, file_events, partials, result_event, wait_until
from sftp.conformance_site import sftp_backend
from sftp.tcp_proxy import TcpProxy
from sftp.test_resilience import alias_block, ferry_with, known_line, small_tree
from sftp.test_tar_batches import staging_folders
from sshd import SshServer


@pytest.fixture
def backend(sshd: SshServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    config = sshd.ssh_config(tmp_path / "ssh_config", "small")
    b = sftp_backend(sshd, config, "small")
    yield b
    sftp_mod.close_all()


def _upload(backend: Any, path: Path, data: bytes, token: str, readback: str | None = "sha256") -> str | None:
    w = backend.open_write(str(path), size=len(data), token=token, resume=True, readback=readback)
    assert isinstance(w, SmallFileWriter)
    w.write(data[: len(data) // 2])
    w.write(data[len(data) // 2 :])
    digest = w.finish()
    w.commit(overwrite=False, mtime=datetime(2020, 5, 17, 12, 0, 1, tzinfo=UTC))
    return digest


@pytest.mark.parametrize("request_size", [255 << 10, 32 << 10, 1000])
def test_every_small_shape_lands_exactly(backend: Any, sshd: SshServer, request_size: int) -> None:
    """Empty, one byte, 4 KiB, exactly the limit; one WRITE or several (a server with small
    requests); the digest is of what the server returns; the time is set; no partial left."""
    backend._host.transport()
    backend._host.connection.request_size = request_size
    folder = sshd.mkdir()
    for n, size in enumerate((0, 1, 4096, SMALL_MAX)):
        data = os.urandom(size)
        digest = _upload(backend, folder / f"f{n}", data, str(n))
        assert digest == hashlib.sha256(data).hexdigest()
        assert (folder / f"f{n}").read_bytes() == data
        assert (folder / f"f{n}").stat().st_mtime == datetime(2020, 5, 17, 12, 0, 1, tzinfo=UTC).timestamp()
    assert not partials(folder)
    # The channel is still in step after every pipelined flight.
    assert sorted(e.name for e in backend.list(str(folder))) == ["f0", "f1", "f2", "f3"]


def test_bigger_files_keep_the_general_writer(backend: Any, sshd: SshServer) -> None:
    folder = sshd.mkdir()
    w = backend.open_write(str(folder / "big"), size=SMALL_MAX + 1, token="1", readback="sha256")
    assert not isinstance(w, SmallFileWriter)
    w.abort()


def test_read_back_is_the_servers_bytes(backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A WRITE the server never received shows up in the digest: the read-back hashes the READ
    replies, never the bytes Ferry sent."""
    folder = sshd.mkdir()
    data = b"a" * 3000
    w = backend.open_write(str(folder / "x"), size=len(data), token="7", readback="sha256")
    w.write(data)
    w._written += 10  # ten bytes Ferry believes it sent, which the server does not hold
    digest = w.finish()
    assert digest != hashlib.sha256(data).hexdigest()
    assert digest == "short:3000"
    w.abort()
    assert not partials(folder)


def test_size_only_returns_no_digest(backend: Any, sshd: SshServer) -> None:
    folder = sshd.mkdir()
    assert _upload(backend, folder / "s", b"size only", "3", readback=None) is None
    assert (folder / "s").read_bytes() == b"size only"


def test_missing_folder_is_reported_at_open(backend: Any, sshd: SshServer) -> None:
    """The copy makes the folder when open_write says NotFound, then tries again."""
    folder = sshd.mkdir()
    with pytest.raises(NotFound):
        backend.open_write(str(folder / "no" / "f"), size=5, token="1", readback="sha256")
    backend.mkdir(str(folder / "no"))
    _upload(backend, folder / "no" / "f", b"hello", "1")
    assert (folder / "no" / "f").read_bytes() == b"hello"


def test_stale_partial_is_rewritten_from_zero(backend: Any, sshd: SshServer) -> None:
    """A partial file left by an interrupted run, longer or shorter than the source, never
    leaks into the result: a small file is simply written again (O_TRUNC)."""
    folder = sshd.mkdir()
    for token, stale in (("4", b"Z" * 9000), ("5", b"Z" * 10)):
        (folder / temp_name(f"r{token}", token)).write_bytes(stale)
        sshd.chown(folder / temp_name(f"r{token}", token))
        data = os.urandom(4096)
        w = backend.open_write(str(folder / f"r{token}"), size=len(data), token=token, resume=True, readback="sha256")
        assert w.offset == 0
        w.write(data)
        assert w.finish() == hashlib.sha256(data).hexdigest()
        w.commit(overwrite=False)
        assert (folder / f"r{token}").read_bytes() == data
    assert not partials(folder)


def test_commit_never_replaces_unless_asked(backend: Any, sshd: SshServer) -> None:
    folder = sshd.mkdir()
    (folder / "taken").write_bytes(b"theirs")
    sshd.chown(folder / "taken")
    w = backend.open_write(str(folder / "taken"), size=4, token="9", readback="sha256")
    w.write(b"ours")
    assert w.finish() == hashlib.sha256(b"ours").hexdigest()
    with pytest.raises(AlreadyExists):
        w.commit(overwrite=False)
    w.abort()
    assert (folder / "taken").read_bytes() == b"theirs"
    assert not partials(folder)
    _upload(backend, folder / "other", b"still in step", "10")  # the channel survived the refusal
    w = backend.open_write(str(folder / "taken"), size=4, token="11", readback="sha256")
    w.write(b"ours")
    w.finish()
    w.commit(overwrite=True)
    assert (folder / "taken").read_bytes() == b"ours"


@pytest.mark.parametrize("policy", ["skip", "overwrite", "rename"])
def test_conflict_policies_across_many_small_files(sshd: SshServer, tmp_path: Path, policy: str) -> None:
    """One ``ferry cp`` of 60 small files, a third of which already exist remotely: every file
    gets its own result, as the policy says."""
    ferry = ferry_with(tmp_path, alias_block(sshd, "small"), known_line(sshd))
    src = tmp_path / "many"
    want = small_tree(src, 60)
    remote = sshd.mkdir()
    clash = sorted(want)[::3]
    for rel in clash:
        (remote / "many" / rel).parent.mkdir(parents=True, exist_ok=True)
        (remote / "many" / rel).write_bytes(b"already here")
    sshd.chown(remote)
    res = ferry("cp", "-r", "--json", "--on-conflict", policy, src, f"small:{remote}/")
    assert res.returncode == 0, describe(res)
    events = {k: e for k, e in file_events(res.stdout).items() if e.get("kind", "file") == "file"}
    assert len(events) == 60
    got = file_digests(remote / "many")
    for rel, digest in want.items():
        state = next(e["state"] for k, e in events.items() if k.endswith(rel.split("/")[-1]))
        if rel in clash and policy == "skip":
            assert state == "skipped" and (remote / "many" / rel).read_bytes() == b"already here"
        else:
            assert state == "done"
        if rel in clash and policy == "rename":
            stem = (remote / "many" / rel).name
            assert (remote / "many" / rel).read_bytes() == b"already here"
            assert got[rel.replace(stem, f"{stem} (1)")] == digest
        elif rel not in clash or policy == "overwrite":
            assert got[rel] == digest
    assert not partials(remote)


def test_connection_cut_among_small_files_loses_and_repeats_nothing(sshd: SshServer, tmp_path: Path) -> None:
    """The network drops in the middle of 300 small uploads: Ferry reconnects, and every file is
    there exactly once, verified, with no partial file left and no duplicate record."""
    proxy = TcpProxy((sshd.host, sshd.port))
    try:
        ferry = ferry_with(tmp_path, alias_block(sshd, "flaky", port=proxy.port), known_line(sshd, proxy.port))
        src = tmp_path / "many"
        want = small_tree(src, 300)
        remote = sshd.mkdir()
        state = {"done": False}

        def cut_once(p: TcpProxy) -> None:
            if not state["done"] and p.upstream_bytes > 150_000:
                state["done"] = True
                p.cut()

        proxy.on_bytes = cut_once
        res = ferry("cp", "-r", "--json", src, f"flaky:{remote}/", timeout=180)
        assert res.returncode == 0, describe(res)
        assert state["done"] and proxy.connections >= 2  # it really was cut and reconnected
        assert result_event(res.stdout)["state"] == "done"
        files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
        assert len(files) == 300
        assert all(e["state"] == "done" and "sha256 match" in e["verified"] for e in files), files
        assert file_digests(remote / "many") == want
        assert not partials(remote)
        # A tar batch cut mid-stream removes its staging folder on the server (sshd's command
        # sees the early EOF after our connection is gone, so that can come a moment later).
        wait_until(lambda: not staging_folders(remote), 10, what="staging folders removed")
    finally:
        proxy.close()


# ---- answers without a round trip (names.KnownNames) ----


def _lstats(backend: Any, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Count the LSTAT requests the backend sends from now on."""
    seen: list[bytes] = []
    real = sftp_mod.SFTPBackend.stat

    def counting(self: Any, path: str) -> Any:
        with self._host.pool.sftp() as c:
            if not getattr(c, "_counted", False):
                inner = c.lstat

                def lstat(p: bytes) -> Any:
                    seen.append(p)
                    return inner(p)

                c.lstat = lstat
                c._counted = True
        return real(self, path)

    monkeypatch.setattr(sftp_mod.SFTPBackend, "stat", counting)
    return seen


def test_new_folder_answers_absent_but_never_for_a_name_ferry_wrote(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = sshd.mkdir()
    fresh = str(folder / "new")
    backend.mkdir(fresh)
    lstats = _lstats(backend, monkeypatch)
    with pytest.raises(NotFound):
        backend.stat(fresh + "/a")  # answered from what this process knows
    assert lstats == []
    _upload(backend, folder / "new" / "a", b"written", "1")
    assert backend.stat(fresh + "/a").size == 7  # a name Ferry wrote is always asked for
    backend.mkdir(fresh + "/sub")
    assert backend.stat(fresh + "/sub").is_dir
    backend.symlink("a", fresh + "/ln")
    assert backend.stat(fresh + "/ln").link_target == "a"
    assert len(lstats) == 3
    # A folder that existed before is never assumed empty.
    (folder / "old").mkdir()
    (folder / "old" / "x").write_bytes(b"there")
    sshd.chown(folder / "old")
    backend.mkdir(str(folder / "old"))
    assert backend.stat(str(folder / "old" / "x")).size == 5


def test_new_folder_knowledge_expires_and_is_dropped_on_rename(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = sshd.mkdir()
    backend.mkdir(str(folder / "n1"))
    backend.mkdir(str(folder / "n2"))
    (folder / "n1" / "theirs").write_bytes(b"x")
    (folder / "n2" / "theirs").write_bytes(b"y")
    names = backend._host.names
    assert names.absent(str(folder / "n1" / "theirs"))  # within FRESH: the accepted blind spot
    monkeypatch.setattr(names_mod, "FRESH", 0.0)
    assert backend.stat(str(folder / "n1" / "theirs")).size == 1
    monkeypatch.setattr(names_mod, "FRESH", 10.0)
    backend.mkdir(str(folder / "n3"))
    _upload(backend, folder / "n3" / "f", b"z", "2")
    backend.rename(str(folder / "n3" / "f"), str(folder / "n3" / "g"))
    assert backend.stat(str(folder / "n2" / "theirs")).size == 1  # a rename forgets it all


def test_a_name_touched_before_its_folder_is_recorded_is_still_asked_for() -> None:
    """Workers race: a file's writer may note its name just before another worker's mkdir of
    the folder is recorded as fresh. That name must still be asked for."""
    now = [100.0]
    names = names_mod.KnownNames(clock=lambda: now[0])
    names.touch("/d/f")
    names.created_folder("/d")
    assert not names.absent("/d/f")
    assert names.absent("/d/g")
    now[0] += names_mod.FRESH + 0.1
    assert not names.absent("/d/g")


def test_a_listed_file_is_stat_once_without_asking(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = sshd.mkdir()
    (folder / "f").write_bytes(b"12345")
    sshd.chown(folder / "f")
    listed = {e.name: e for e in backend.list(str(folder))}
    lstats = _lstats(backend, monkeypatch)
    assert backend.stat(str(folder / "f")) == listed["f"]
    assert lstats == []
    (folder / "f").write_bytes(b"1234567")  # changed since: the next stat asks the server
    assert backend.stat(str(folder / "f")).size == 7
    assert len(lstats) == 1


def test_download_of_many_small_files_is_exact(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_with(tmp_path, alias_block(sshd, "small"), known_line(sshd))
    remote = sshd.mkdir()
    want = small_tree(remote / "many", 80)
    sshd.chown(remote)
    res = ferry("cp", "-r", "--json", f"small:{remote}/many", tmp_path / "back")
    assert res.returncode == 0, describe(res)
    files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
    assert len(files) == 80 and all(e["state"] == "done" and "sha256 match" in e["verified"] for e in files)
    assert file_digests(tmp_path / "back") == want
    for rel in want:  # times preserved from the listing's attributes
        assert (tmp_path / "back" / rel).stat().st_mtime == int((remote / "many" / rel).stat().st_mtime)


@pytest.mark.parametrize("renamed", [True, False])
def test_connection_dropped_at_commit(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch, renamed: bool
) -> None:
    """The link dies with the RENAME sent. If the server did it, the file is in place and the
    commit succeeds (a retry would otherwise meet "its own" file as a conflict); if not, the
    commit fails as a dropped connection and the partial file is still there to retry."""
    import paramiko

    folder = sshd.mkdir()
    real = protocol_mod.setstat_then  # the function writer_mod imported, before the patch below

    def drop(client: Any, *args: Any, **kwargs: Any) -> None:
        if renamed:
            real(client, *args, **kwargs)
        backend._host.connection._transport.close()
        raise paramiko.SSHException("Server connection dropped")

    w = backend.open_write(str(folder / "c"), size=5, token="21", readback="sha256")
    w.write(b"hello")
    w.finish()
    monkeypatch.setattr(writer_mod, "setstat_then", drop)
    if renamed:
        w.commit(overwrite=False)
        assert (folder / "c").read_bytes() == b"hello"
        assert not partials(folder)
    else:
        with pytest.raises(Transient):
            w.commit(overwrite=False)
        assert not (folder / "c").exists() and len(partials(folder)) == 1


def test_known_names_stay_bounded() -> None:
    now = [0.0]
    names = names_mod.KnownNames(clock=lambda: now[0])
    for i in range(120_000):
        now[0] = i / 1000  # 1,000 names a second
        names.touch(f"/d/f{i}")
    assert len(names._touched) <= 2 * 50_000
    assert not names.absent("/d/f119999")
    for i in range(10_000):
        names.listed(entry_of(f"/l/f{i}", f"f{i}", _file_attr()))
    assert len(names._listed) == names_mod._LISTED_MAX


def _file_attr() -> Any:
    from paramiko.sftp_attr import SFTPAttributes

    a = SFTPAttributes()
    a.st_mode, a.st_size, a.st_mtime = 0o100644, 1, 0
    return a
