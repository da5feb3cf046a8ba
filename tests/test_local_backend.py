"""What only the local backend does: special files, permission mapping, rename without replace,
kernel-side copy and the threaded read-back. The shared contract is in tests/conformance."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest

import ferry.backends.local as local
from ferry.backends.base import Entry, Kind
from ferry.backends.local import LocalBackend, LocalWriter, rename_no_replace
from ferry.core.cancel import CancelToken
from ferry.core.errors import Action, AlreadyExists, Cancelled, PermissionDenied, from_oserror
from helpers import OsWritingWrong

posix_only = pytest.mark.skipif(os.name != "posix", reason="symlinks, fifos and permission bits are POSIX")


def data_of(n: int) -> bytes:
    # Not a repeating pattern, so an offset mistake changes the bytes (and the hash).
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(i.to_bytes(8, "little")).digest()
        i += 1
    return bytes(out[:n])


@pytest.fixture
def backend() -> LocalBackend:
    return LocalBackend()


def entries(backend: LocalBackend, folder: Path) -> dict[str, Entry]:
    return {e.name: e for e in backend.list(str(folder))}


# -- special entries --


@posix_only
def test_symlink_is_listed_as_link_with_target(backend: LocalBackend, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "to-dir")
    os.symlink("does/not/exist", tmp_path / "dangling")
    listed = entries(backend, tmp_path)
    assert listed["to-dir"].kind is Kind.LINK  # not DIR: the link is never followed
    assert listed["to-dir"].link_target == "real"
    assert listed["to-dir"].size == len("real")  # lstat's size of a link: its target's length
    assert listed["dangling"].kind is Kind.LINK
    assert listed["dangling"].link_target == "does/not/exist"
    st = backend.stat(str(tmp_path / "to-dir"))
    assert (st.kind, st.link_target, st.name) == (Kind.LINK, "real", "to-dir")


@posix_only
def test_fifo_is_listed_as_special(backend: LocalBackend, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    e = entries(backend, tmp_path)["pipe"]
    assert e.kind is Kind.SPECIAL
    assert e.meta["special"] == "named pipe"
    assert e.size is None  # never transferred, so no size to promise
    assert backend.stat(str(tmp_path / "pipe")).meta["special"] == "named pipe"


@posix_only
def test_socket_and_device_are_special(backend: LocalBackend, tmp_path: Path) -> None:
    sock_path = tmp_path / "s"
    if len(os.fsencode(sock_path)) >= 100:  # sun_path holds 108 bytes on Linux, 104 on macOS
        pytest.skip(f"temporary path too long for a unix socket: {sock_path}")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        assert entries(backend, tmp_path)["s"].meta["special"] == "socket"
    if stat.S_ISCHR(os.stat("/dev/null").st_mode):
        dev = backend.stat("/dev/null")
        assert (dev.kind, dev.meta["special"]) == (Kind.SPECIAL, "character device")


# -- permission denied --


@contextlib.contextmanager
def unprivileged() -> Iterator[None]:
    """Run the block without root's permission bypass.

    Root ignores mode bits, so a chmod 000 folder is readable to it and the real syscall never
    fails. When the tests run as root we switch the *effective* uid to nobody for the block (the
    real uid stays 0, so switching back is allowed), which makes the kernel check the bits again.
    """
    if os.geteuid() != 0:
        yield
        return
    try:
        os.seteuid(65534)
    except OSError as exc:
        pytest.skip(f"running as root and cannot drop to an unprivileged uid to test EACCES: {exc}")
    try:
        yield
    finally:
        os.seteuid(0)


@pytest.fixture
def locked_folder() -> Iterator[Path]:
    """A chmod-000 folder inside a folder anyone may traverse.

    Not under tmp_path: pytest makes that 0700 for root, so an unprivileged uid would be stopped
    one level higher and the test would not be about the locked folder itself."""
    base = Path(tempfile.mkdtemp(prefix="ferry-perm-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir()
        (locked / "secret").write_bytes(b"x")
        locked.chmod(0)
        yield locked
    finally:
        (base / "locked").chmod(0o755)
        shutil.rmtree(base)


@posix_only
def test_unreadable_folder_maps_to_permission_denied(backend: LocalBackend, locked_folder: Path) -> None:
    with unprivileged():
        with pytest.raises(PermissionDenied) as listing:
            list(backend.list(str(locked_folder)))
        with pytest.raises(PermissionDenied) as reading:
            backend.open_read(str(locked_folder / "secret"))
        with pytest.raises(PermissionDenied):
            backend.open_write(str(locked_folder / "new"), size=1, token="t")
    for info in (listing, reading):
        assert isinstance(info.value, PermissionError)  # callers catching the builtin still work
        assert info.value.action is Action.CHECK_PERMISSIONS
        assert str(locked_folder) in info.value.message


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EROFS])
def test_permission_errnos_map_to_permission_denied(code: int) -> None:
    # The mapping itself, independent of who runs the tests (root cannot provoke EROFS on a
    # writable disk, nor EPERM on its own files).
    err = local._map_error(PermissionError(code, os.strerror(code), "/x"), "/x")
    assert isinstance(err, PermissionDenied) and isinstance(err, PermissionError)
    assert err.message == "Permission denied: /x"
    assert err.__cause__ is not None
    assert from_oserror(err, "/elsewhere") is err  # already mapped: passed through unchanged


# -- rename without replace --


def _rename_cases(tmp_path: Path) -> tuple[Path, Path, Path]:
    (tmp_path / "a").write_bytes(b"A")
    (tmp_path / "b").write_bytes(b"B")
    return tmp_path / "a", tmp_path / "b", tmp_path / "c"


@pytest.fixture(params=["renameat2", "link-unlink", "renameat2-einval"])
def rename_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way rename_no_replace can work: the syscall, the fallback where it is missing, and
    the fallback after the syscall says the filesystem does not support the flag."""
    if request.param == "renameat2":
        if local._renameat2 is None:
            pytest.skip("renameat2 is not available on this system")
    elif request.param == "link-unlink":
        monkeypatch.setattr(local, "_renameat2", None)
    else:
        monkeypatch.setattr(local, "_renameat2", lambda src, dst: errno.EINVAL)
    return str(request.param)


def test_rename_no_replace_moves_to_a_free_name(tmp_path: Path, rename_impl: str) -> None:
    a, _, c = _rename_cases(tmp_path)
    rename_no_replace(str(a), str(c))
    assert not a.exists() and c.read_bytes() == b"A"


def test_rename_no_replace_refuses_an_existing_name(tmp_path: Path, rename_impl: str) -> None:
    a, b, _ = _rename_cases(tmp_path)
    with pytest.raises(FileExistsError) as info:
        rename_no_replace(str(a), str(b))
    assert info.value.errno == errno.EEXIST
    assert (a.read_bytes(), b.read_bytes()) == (b"A", b"B")


def test_rename_no_replace_moves_a_folder(tmp_path: Path, rename_impl: str) -> None:
    # Hard links to folders are refused (EPERM), so the fallback must still move folders.
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x")
    rename_no_replace(str(tmp_path / "d"), str(tmp_path / "e"))
    assert (tmp_path / "e" / "f").read_bytes() == b"x" and not (tmp_path / "d").exists()
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError):
        rename_no_replace(str(tmp_path / "e"), str(tmp_path / "taken"))
    assert (tmp_path / "e" / "f").exists()


def test_rename_no_replace_is_loaded_on_linux() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("renameat2 is Linux-only")
    # glibc has had renameat2 since 2.28 (2018); losing it would silently fall back to link+unlink.
    assert local._renameat2 is not None


def test_backend_rename_maps_eexist(backend: LocalBackend, tmp_path: Path, rename_impl: str) -> None:
    a, b, _ = _rename_cases(tmp_path)
    with pytest.raises(AlreadyExists):
        backend.rename(str(a), str(b))
    backend.rename(str(a), str(b), overwrite=True)
    assert b.read_bytes() == b"A" and not a.exists()


# -- kernel-side copy --


def _server_copy(backend: LocalBackend, src: Path, writer: LocalWriter, chunk: int) -> list[int]:
    counted: list[int] = []
    backend.server_copy(str(src), writer, counted.append, CancelToken(), chunk=chunk)
    return counted


def test_server_copy_produces_identical_bytes(backend: LocalBackend, tmp_path: Path) -> None:
    data = data_of(5 * 1024 * 1024 + 3)
    (tmp_path / "src").write_bytes(data)
    w = backend.open_write(str(tmp_path / "dst"), size=len(data), token="t", readback="sha256")
    counted = _server_copy(backend, tmp_path / "src", w, chunk=1 << 20)
    # Read-back still sees what the kernel copied, though no bytes passed through write().
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert (tmp_path / "dst").read_bytes() == data
    assert sum(counted) == len(data) and len(counted) == 6  # progress per chunk, not one lump


def test_server_copy_continues_a_resumed_partial(backend: LocalBackend, tmp_path: Path) -> None:
    data = data_of(3 * 1024 * 1024)
    (tmp_path / "src").write_bytes(data)
    w = backend.open_write(str(tmp_path / "dst"), size=len(data), token="t")
    w.write(data[:1_000_001])
    w.abort(keep_partial=True)
    w2 = backend.open_write(str(tmp_path / "dst"), size=len(data), token="t", resume=True)
    assert w2.offset == 1_000_001
    counted = _server_copy(backend, tmp_path / "src", w2, chunk=1 << 20)
    w2.commit(overwrite=False)
    assert (tmp_path / "dst").read_bytes() == data
    assert sum(counted) == len(data) - 1_000_001


def test_server_copy_falls_back_across_filesystems(
    backend: LocalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_cross_device(*args: object) -> int:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "copy_file_range", no_cross_device)
    data = data_of(2 * 1024 * 1024 + 5)
    (tmp_path / "src").write_bytes(data)
    w = backend.open_write(str(tmp_path / "dst"), size=len(data), token="t")
    counted = _server_copy(backend, tmp_path / "src", w, chunk=1 << 20)
    w.commit(overwrite=False)
    assert (tmp_path / "dst").read_bytes() == data and sum(counted) == len(data)


def test_server_copy_stops_when_cancelled(backend: LocalBackend, tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(data_of(1000))
    w = backend.open_write(str(tmp_path / "dst"), size=1000, token="t")
    token = CancelToken()
    token.cancel("pause")
    with pytest.raises(Cancelled):
        backend.server_copy(str(tmp_path / "src"), w, lambda n: None, token)
    w.abort()
    assert os.listdir(tmp_path) == ["src"]


# -- read-back --

NINE_MIB = 9 * 1024 * 1024


@pytest.mark.parametrize("size_hint", [NINE_MIB, None], ids=["known-size", "unknown-size"])
def test_readback_thread_hashes_a_large_file(backend: LocalBackend, tmp_path: Path, size_hint: int | None) -> None:
    data = data_of(NINE_MIB)
    w = backend.open_write(str(tmp_path / "big"), size=size_hint, token="t", readback="sha256")
    assert w._readback is not None and w._readback._thread is not None  # the threaded path
    for k in range(0, len(data), 1 << 20):
        w.write(data[k : k + (1 << 20)])
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert (tmp_path / "big").stat().st_size == NINE_MIB


def test_readback_small_file_uses_no_thread(backend: LocalBackend, tmp_path: Path) -> None:
    data = data_of(1000)
    w = backend.open_write(str(tmp_path / "small"), size=len(data), token="t", readback="blake3")
    assert w._readback is not None and w._readback._thread is None
    w.write(data)
    assert w.finish() == blake3.blake3(data).hexdigest()
    w.commit(overwrite=False)


@pytest.mark.parametrize("size_hint", [NINE_MIB, 1000], ids=["threaded", "inline"])
def test_readback_reads_the_disk_not_the_caller_bytes(backend: LocalBackend, tmp_path: Path, size_hint: int) -> None:
    # Bytes that reach the partial file by another route (a faulty layer below us) must change
    # the read-back hash: it is computed from what is on disk, up to its real end.
    data = data_of(size_hint)
    w = backend.open_write(str(tmp_path / "f"), size=size_hint, token="t", readback="sha256")
    w.write(data)
    with open(w.temp_path, "ab") as sneaky:
        sneaky.write(b"garbage")
    got = w.finish()
    assert got == hashlib.sha256(data + b"garbage").hexdigest()
    assert got != hashlib.sha256(data).hexdigest()
    w.abort()


@pytest.mark.parametrize("size", [NINE_MIB, 1000])
@pytest.mark.parametrize("damage", ["none", "changed as written", "appended", "truncated"])
def test_compared_writes_give_the_stream_digest_only_for_what_landed(
    backend: LocalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, damage: str
) -> None:
    # A caller that hashes exactly what it writes has each write read back and compared instead
    # of the file hashed a second time: its digest comes back only if the disk holds those bytes.
    from ferry.backends import local

    data = data_of(size)
    hasher = hashlib.sha256()
    w = backend.open_write(str(tmp_path / "f"), size=size, token="t", readback="sha256")
    assert w.compare_writes(hasher)
    assert w._readback is None  # no read-back thread hashing alongside
    if damage == "changed as written":
        monkeypatch.setattr(local, "os", OsWritingWrong())
    for k in range(0, size, 1 << 20):
        piece = data[k : k + (1 << 20)]
        hasher.update(piece)
        w.write(piece)
    monkeypatch.undo()
    if damage == "appended":
        os.pwrite(w.fd, b"x", size)
    elif damage == "truncated":
        os.ftruncate(w.fd, size - 1)
    got = w.finish()
    assert (got == hashlib.sha256(data).hexdigest()) == (damage == "none"), got
    w.abort()


def test_compared_writes_are_refused_once_writing_began(backend: LocalBackend, tmp_path: Path) -> None:
    data = data_of(1000)
    w = backend.open_write(str(tmp_path / "f"), size=1000, token="t", readback="sha256")
    w.write(data[:10])
    assert not w.compare_writes(hashlib.sha256())  # too late: the read-back keeps hashing
    w.write(data[10:])
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.abort()
    plain = backend.open_write(str(tmp_path / "g"), size=1000, token="u")
    assert not plain.compare_writes(hashlib.sha256())  # nothing is read back: nothing to compare
    plain.abort()


def test_readback_thread_ends_when_the_file_is_shorter_than_written(tmp_path: Path) -> None:
    # Told 5,000 bytes were written to a file that holds 1,000 (cut short under the writer):
    # the thread stops at the real end and the hash is of what is there (it once spun forever).
    from ferry.backends.local import _ReadBack

    data = data_of(1000)
    path = tmp_path / "short"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    try:
        rb = _ReadBack(fd, "sha256", threaded=True)
        rb.advance(5000)
        thread = rb._thread
        assert thread is not None
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert rb.result() == hashlib.sha256(data).hexdigest()
    finally:
        os.close(fd)


def test_readback_thread_after_resume_covers_the_whole_file(backend: LocalBackend, tmp_path: Path) -> None:
    data = data_of(NINE_MIB)
    w = backend.open_write(str(tmp_path / "big"), size=NINE_MIB, token="t")
    w.write(data[: 4 * 1024 * 1024 + 1])
    w.abort(keep_partial=True)
    w2 = backend.open_write(str(tmp_path / "big"), size=NINE_MIB, token="t", resume=True, readback="sha256")
    assert w2._readback is not None and w2._readback._thread is not None
    w2.write(data[w2.offset :])
    assert w2.finish() == hashlib.sha256(data).hexdigest()
    w2.commit(overwrite=False)


def test_abort_while_readback_thread_waits(backend: LocalBackend, tmp_path: Path) -> None:
    # An aborted writer must stop its read-back thread, not leave it blocked forever.
    w = backend.open_write(str(tmp_path / "f"), size=None, token="t", readback="sha256")
    w.write(b"x" * 1000)
    assert w._readback is not None
    thread = w._readback._thread
    assert thread is not None
    w.abort()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert os.listdir(tmp_path) == []


def test_free_space_is_reported(backend: LocalBackend, tmp_path: Path) -> None:
    free = backend.free_space(str(tmp_path))
    assert free is not None and free > 0
    assert backend.free_space(str(tmp_path / "missing")) is None
