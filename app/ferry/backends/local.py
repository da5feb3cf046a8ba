"""This computer's disks.

Writes go to a hidden partial file in the destination folder and are renamed into place with
``renameat2(RENAME_NOREPLACE)`` (or link+unlink where that is missing), so a file that appears
meanwhile is never overwritten unless the policy says so. Read-back verification re-reads the
partial file through its own descriptor while later chunks are still being written, so checking
the destination overlaps the copy instead of doubling its time.

A job writes through :meth:`LocalBackend.confined`, a view that never follows a symbolic link
below the job's destination roots: the folder a file goes into is opened from the root's
descriptor without following any link (one ``openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)``
on Linux 5.6+, else folder by folder with ``O_NOFOLLOW | O_DIRECTORY``), and every write,
creation, rename and removal is made relative to that folder's descriptor, so a link found in
the destination (left by an earlier copy, or planted) is reported as
:class:`~ferry.core.errors.LinkInTheWay` instead of being written through. Links at or above a
root (``/scratch -> /lustre/scratch``, a destination the user named that is a link) are the
user's choice and are followed.
"""

from __future__ import annotations

import ctypes
import errno
import io
import os
import shutil
import stat as stat_mod
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime

from ferry.backends.base import (
    Backend,
    Capabilities,
    Entry,
    Kind,
    Reader,
    Writer,
    datetime_ns,
    ns_datetime,
    temp_name,
)
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import AlreadyExists, FerryError, LinkInTheWay, UnsafeName, from_oserror
from ferry.core.hashing import HASH_ALGORITHMS, Hasher, new_hasher

_READBACK_THREAD_MIN = 8 << 20  # below this, read back in the caller: a thread costs more than it saves
_CHUNK = 4 << 20
_CHECK_BUFFER = 1 << 20  # a write is read back in pieces of this size (the copy's chunk, copy.CHUNK)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW  # a folder below a root: never through a link
_AT_FDCWD = -100
# Paths resolved from folder descriptors (POSIX): where this is missing, confined() is the backend
# itself, as before.
_CONFINABLE = (
    bool(_NOFOLLOW and _DIRECTORY)
    and {
        os.open,
        os.stat,
        os.mkdir,
        os.unlink,
        os.rmdir,
        os.rename,
        os.symlink,
        os.utime,
        os.readlink,
    }
    <= os.supports_dir_fd
)


def _map_error(exc: OSError, path: str) -> FerryError:
    return from_oserror(exc, path)


def _mtime(st: os.stat_result) -> datetime:
    return ns_datetime(st.st_mtime_ns)  # exact to the microsecond; Entry.mtime_ns holds the rest


_ns = datetime_ns
_BLOCK = 4096  # runs of zeros of a sparse source are skipped (left as holes) in whole blocks
_ZEROS = bytes(_BLOCK)
_UMASK: list[int] = []


def _umask() -> int:
    """This process's umask, read once (from /proc where Linux has it: setting it to read it
    would race with other threads creating files)."""
    if not _UMASK:
        found = None
        try:
            with open("/proc/self/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Umask:"):
                        found = int(line.split()[1], 8)
        except (OSError, ValueError, IndexError):
            found = None
        if found is None:
            found = os.umask(0o022)
            os.umask(found)
        _UMASK.append(found)
    return _UMASK[0]


def _xattrs_of(ref: str | int, dir_fd: int | None = None) -> dict[str, bytes]:
    """Extended attributes (POSIX ACLs among them) of a path, a name in ``dir_fd``, or an open file."""
    if isinstance(ref, int):
        names = os.listxattr(ref)
        return {n: os.getxattr(ref, n) for n in names}
    if dir_fd is not None:
        fd = os.open(ref, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        try:
            return _xattrs_of(fd)
        finally:
            os.close(fd)
    names = os.listxattr(ref, follow_symlinks=False)
    return {n: os.getxattr(ref, n, follow_symlinks=False) for n in names}


def _set_xattrs(fd: int, attrs: Mapping[str, bytes]) -> list[str]:
    """Set ``attrs`` on an open file; the names the file system or our privileges refused."""
    refused = []
    for name, value in attrs.items():
        try:
            os.setxattr(fd, name, value)
        except OSError:
            refused.append(name)
    return refused


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _entry(path: str, name: str, st: os.stat_result, ref: str | None = None, dir_fd: int | None = None) -> Entry:
    mode = st.st_mode
    if stat_mod.S_ISREG(mode):
        kind, size = Kind.FILE, st.st_size
    elif stat_mod.S_ISDIR(mode):
        kind, size = Kind.DIR, None
    elif stat_mod.S_ISLNK(mode):
        kind, size = Kind.LINK, st.st_size
    else:
        kind, size = Kind.SPECIAL, None
    target = None
    meta: dict[str, str] = {}
    if kind is Kind.LINK:
        try:
            target = os.readlink(path if ref is None else ref, dir_fd=dir_fd)
        except OSError:
            target = None
    elif kind is Kind.SPECIAL:
        meta["special"] = _special_kind(mode)
    regular = kind is Kind.FILE
    return Entry(
        path=path,
        name=name,
        kind=kind,
        size=size,
        mtime=_mtime(st),
        link_target=target,
        mode=stat_mod.S_IMODE(mode),
        meta=meta,
        mtime_ns=st.st_mtime_ns,
        inode=(st.st_dev, st.st_ino) if regular else None,
        nlink=st.st_nlink if regular else 1,
        sparse=regular and st.st_blocks * 512 < st.st_size,
    )


def _special_kind(mode: int) -> str:
    if stat_mod.S_ISFIFO(mode):
        return "named pipe"
    if stat_mod.S_ISSOCK(mode):
        return "socket"
    if stat_mod.S_ISCHR(mode):
        return "character device"
    if stat_mod.S_ISBLK(mode):
        return "block device"
    return "special file"


def _load_renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    # The C library is found through the running program's own symbols (dlopen(NULL)), not
    # ctypes.util.find_library: that imports a dozen modules and runs ldconfig in a subprocess,
    # a noticeable part of a short 'ferry cp'.
    fn = None
    for lib in (None, "libc.so.6"):
        try:
            fn = ctypes.CDLL(lib, use_errno=True).renameat2
            break
        except (OSError, AttributeError):
            continue
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    rename_noreplace = 1

    def rename_noreplace_fn(src: str, dst: str, src_dir: int = _AT_FDCWD, dst_dir: int = _AT_FDCWD) -> int:
        if fn(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst), rename_noreplace) == 0:
            return 0
        return ctypes.get_errno()

    return rename_noreplace_fn


_renameat2 = _load_renameat2()


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> Callable[[int, bytes, bool], int] | None:
    """Linux's ``openat2`` (5.6+): a path below a descriptor opened in one call that refuses
    every symbolic link on the way (``RESOLVE_NO_SYMLINKS``) and never leaves the descriptor's
    tree (``RESOLVE_BENEATH``): a folder, or (``path_only``) an ``O_PATH`` handle on whatever is
    there, a final link included. Returns the descriptor or ``-errno``; None where there is no
    such call, and the folder-by-folder walk does the same job."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    fn.restype = ctypes.c_long
    sys_openat2, resolve_no_symlinks, resolve_beneath = 437, 0x04, 0x08  # 437 on every architecture
    o_path = getattr(os, "O_PATH", 0o10000000)
    folder = _OpenHow(os.O_RDONLY | _DIRECTORY | os.O_CLOEXEC, 0, resolve_no_symlinks | resolve_beneath)
    handle = _OpenHow(o_path | _NOFOLLOW | os.O_CLOEXEC, 0, resolve_no_symlinks | resolve_beneath)
    refs = (ctypes.byref(folder), ctypes.byref(handle))
    size = ctypes.sizeof(folder)

    def openat2(dir_fd: int, rel: bytes, path_only: bool = False) -> int:
        fd = int(fn(sys_openat2, dir_fd, rel, refs[path_only], size))
        return fd if fd >= 0 else -ctypes.get_errno()

    return openat2


_openat2 = _load_openat2()


def rename_no_replace(src: str, dst: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
    """Rename, failing with EEXIST instead of replacing an existing ``dst``. With folder
    descriptors, ``src`` and ``dst`` are names within those folders (``renameat2``)."""
    if _renameat2 is not None:
        if src_dir_fd is None and dst_dir_fd is None:
            err = _renameat2(src, dst)
        else:
            at_src = _AT_FDCWD if src_dir_fd is None else src_dir_fd
            err = _renameat2(src, dst, at_src, _AT_FDCWD if dst_dir_fd is None else dst_dir_fd)
        if err == 0:
            return
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), dst)
    try:
        os.link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EMLINK, errno.EXDEV):
            if _lexists(dst, dst_dir_fd):
                raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), dst) from None
            os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            return
        raise
    os.unlink(src, dir_fd=src_dir_fd)


def _lexists(path: str, dir_fd: int | None) -> bool:
    try:
        os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


_scratch = threading.local()  # per worker thread: one buffer that write checks read back into


class _WriteCheck:
    """The read-back when the caller hashes exactly the buffers it writes: each write is read back
    as soon as it is written and compared with those bytes (``preadv`` into a reused buffer and a
    memcmp, ~0.2 ms per MiB against SHA-256's ~0.75), so a download is hashed once, not twice. The
    result is the caller's digest only if every byte read back matched and the file holds nothing
    beyond what was written; otherwise a value no digest equals."""

    def __init__(self, fd: int, hasher: Hasher) -> None:
        self.fd = fd
        self.hasher = hasher
        self.same = True

    def check(self, start: int, data: memoryview) -> None:
        buf: bytearray | None = getattr(_scratch, "buf", None)
        if buf is None:
            buf = _scratch.buf = bytearray(_CHECK_BUFFER)
        view = memoryview(buf)
        done = 0
        while done < len(data) and self.same:
            k = min(len(buf), len(data) - done)
            got = os.preadv(self.fd, [view[:k]], start + done)
            # startswith compares the first len(piece) bytes in place: a memcmp, where comparing
            # two memoryviews goes item by item.
            self.same = got == k and buf.startswith(data[done : done + k])
            done += k

    def result(self, written: int) -> str:
        if self.same and os.fstat(self.fd).st_size == written:
            return self.hasher.hexdigest()
        return "differs from what was written"


class _ReadBack:
    """Hashes a file being written by reading it back (``pread`` on the writer's descriptor,
    opened read-write): what is hashed is what the file holds, not the buffers handed to write.

    Large files are read back on a thread that follows the write position, so checking the
    destination overlaps the copy; small files are read back at the end, where a thread would
    cost more than it saves.
    """

    def __init__(self, fd: int, algo: str, threaded: bool) -> None:
        self.fd = fd
        self.hasher: Hasher = new_hasher(algo)
        self.pos = 0
        self.limit = 0  # bytes known to be written
        self.done = False
        self.error: OSError | None = None
        self._thread: threading.Thread | None = None
        if threaded:
            self._cond = threading.Condition()
            self._thread = threading.Thread(target=self._run, name="ferry-readback", daemon=True)
            self._thread.start()

    def advance(self, limit: int) -> None:
        if self._thread is None:
            self.limit = limit
            return
        with self._cond:
            self.limit = limit
            self._cond.notify()

    def _read_to(self, limit: int) -> bool:
        """Read up to ``limit``; False if the file ended before it."""
        while self.pos < limit:
            data = os.pread(self.fd, min(_CHUNK, limit - self.pos), self.pos)
            if not data:  # shorter than what was written: the hash will not match
                return False
            self.hasher.update(data)
            self.pos += len(data)
        return True

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while self.pos >= self.limit and not self.done:
                        self._cond.wait()
                    limit, done = self.limit, self.done
                # A file cut shorter than what was written (under us) ends the thread too; it
                # used to retry that end forever, and the copy waited on it forever.
                if not self._read_to(limit) or (done and self.pos >= limit):
                    return
        except OSError as exc:
            self.error = exc

    def _join(self) -> None:
        if self._thread is not None:
            with self._cond:
                self.done = True
                self._cond.notify()
            self._thread.join()
            self._thread = None

    def result(self) -> str:
        self._join()
        if self.error is not None:
            raise self.error
        # Read to the real end of the file: anything beyond what we were told was written counts.
        self._read_to(max(self.limit, os.fstat(self.fd).st_size))
        return self.hasher.hexdigest()

    def close(self) -> None:
        if self._thread is not None:
            with self._cond:
                self.limit = self.pos  # stop at once
            self._join()


class LocalWriter(Writer):
    """Writes ``final_path`` through a partial file beside it. With ``dir_fd`` (a descriptor of the
    folder, opened without following links below the job's root, owned by the writer from now on)
    every call names the partial and the final file within that folder, so no link on the way is
    followed between open and commit."""

    def __init__(
        self,
        final_path: str,
        token: str,
        size: int | None,
        resume: bool,
        readback: str | None,
        dir_fd: int | None = None,
    ):
        folder, name = os.path.split(final_path)
        partial = temp_name(name, token)
        self.final_path = final_path
        self.temp_path = os.path.join(folder, partial)
        self.offset = 0
        self._closed = False
        self._ended = False  # committed or aborted: the partial's name means nothing any more
        self._dir = dir_fd
        # What the calls name: within the folder's descriptor, or the full paths without one.
        self._final, self._temp = (name, partial) if dir_fd is not None else (final_path, self.temp_path)
        try:
            self.fd, self.offset = self._open_partial(resume)
        except OSError as exc:
            self._close_dir()
            raise _map_error(exc, final_path) from exc
        self.written = self.offset
        self._mode: int | None = None  # set at commit (set_mode)
        self._mtime_ns: int | None = None  # exact time for commit (set_mtime)
        self._sparse = False  # zero blocks skipped as holes (set_sparse)
        self._check: _WriteCheck | None = None
        self._readback: _ReadBack | None = None
        if readback:
            threaded = size is None or size >= _READBACK_THREAD_MIN
            self._readback = _ReadBack(self.fd, readback, threaded)
            self._readback.advance(self.offset)

    def _open_partial(self, resume: bool) -> tuple[int, int]:
        """The partial file and how much it holds: a new one, made by this call (``O_EXCL``:
        nothing that stood under its name is ever written through), or with ``resume`` the one an
        earlier attempt left, if it is a regular file with no other name. Anything else under the
        partial's name (a link, a hard link planted there, a stale partial) is removed first."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW
        try:
            return os.open(self._temp, flags, 0o666, dir_fd=self._dir), 0
        except FileExistsError:
            pass
        if resume:
            fd = self._earlier_partial()
            if fd is not None:
                return fd, os.lseek(fd, 0, os.SEEK_END)
        try:
            os.unlink(self._temp, dir_fd=self._dir)
        except FileNotFoundError:
            pass  # gone meanwhile
        return os.open(self._temp, flags, 0o666, dir_fd=self._dir), 0

    def _earlier_partial(self) -> int | None:
        try:
            fd = os.open(self._temp, os.O_RDWR | _NOFOLLOW, dir_fd=self._dir)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOENT):
                return None
            raise
        st = os.fstat(fd)
        if stat_mod.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return fd
        os.close(fd)
        return None

    def _close_dir(self) -> None:
        fd, self._dir = self._dir, None
        _close(fd)

    def set_mtime(self, mtime: datetime | None, mtime_ns: int | None = None) -> None:
        self._mtime_ns = mtime_ns

    def set_mode(self, mode: int, *, umask: bool = False) -> bool:
        self._mode = mode & 0o777 & ~_umask() if umask else stat_mod.S_IMODE(mode)
        return True

    def set_sparse(self) -> bool:
        self._sparse = True
        return True

    def set_xattrs(self, attrs: Mapping[str, bytes]) -> list[str]:
        return _set_xattrs(self.fd, attrs)

    def _write_sparse(self, view: memoryview) -> None:
        """Write ``view`` at ``written``, leaving whole zero blocks (aligned in the file) as
        holes; the file is extended over a hole at its end, so its size is always ``written``."""
        pos, end, i = self.written, len(view), 0
        run = 0  # start of the data run not yet written
        hole_at_end = False
        while i < end:
            stop = min(end, i + _BLOCK - (pos + i) % _BLOCK)
            zero = stop - i == _BLOCK and _ZEROS.startswith(view[i:stop])
            if zero:
                self._pwrite_all(view[run:i], pos + run)
                run = stop
            hole_at_end = zero
            i = stop
        self._pwrite_all(view[run:end], pos + run)
        self.written = pos + end
        if hole_at_end and os.fstat(self.fd).st_size < self.written:
            os.ftruncate(self.fd, self.written)

    def _pwrite_all(self, view: memoryview, at: int) -> None:
        while view:
            n = os.pwrite(self.fd, view, at)
            view, at = view[n:], at + n

    def write(self, data: bytes | bytearray | memoryview) -> None:
        whole = view = memoryview(data)
        start = self.written
        try:
            if self._sparse:
                self._write_sparse(view)
                view = view[len(view) :]
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
                self.written += n
            if self._check is not None:
                self._check.check(start, whole)
        except OSError as exc:
            raise _map_error(exc, self.final_path) from exc
        if self._readback is not None:
            self._readback.advance(self.written)

    def write_from_fd(self, src_fd: int, offset: int, count: int) -> int:
        """Kernel-side copy (copy_file_range); returns bytes copied, 0 at end of file. A sparse
        source is read and written here instead, so its holes stay holes."""
        if self._sparse:
            data = os.pread(src_fd, count, offset)
            self.write(data)
            return len(data)
        try:
            n = os.copy_file_range(src_fd, self.fd, count, offset)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                data = os.pread(src_fd, count, offset)
                self.write(data)
                return len(data)
            raise _map_error(exc, self.final_path) from exc
        self.written += n
        if self._check is not None:
            self._check.same = False  # bytes the kernel copied were never in hand to compare with
        if self._readback is not None:
            self._readback.advance(self.written)
        return n

    def compare_writes(self, hasher: Hasher) -> bool:
        rb = self._readback
        if rb is None or self.offset or self.written or rb.pos:
            return False  # nothing read back, or already under way: the read-back hash stands
        rb.close()
        self._readback = None
        self._check = _WriteCheck(self.fd, hasher)
        return True

    def finish(self) -> str | None:
        try:
            if self._check is not None:
                return self._check.result(self.written)
            if self._readback is None:
                return None
            return self._readback.result()
        except OSError as exc:
            raise _map_error(exc, self.final_path) from exc

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._readback is not None:
                self._readback.close()
            os.close(self.fd)

    def commit(self, *, overwrite: bool, mtime: datetime | None = None) -> None:
        # A rename replaces (under overwrite) whatever stands under the final name, a link
        # included, as a name: never what a link points to.
        d = self._dir
        try:
            if self._mode is not None:
                os.fchmod(self.fd, self._mode)
            if mtime is not None:
                ns = self._mtime_ns if self._mtime_ns is not None else _ns(mtime)
                os.utime(self.fd, ns=(ns, ns))
            self._close()
            if overwrite:
                os.replace(self._temp, self._final, src_dir_fd=d, dst_dir_fd=d)
            else:
                rename_no_replace(self._temp, self._final, src_dir_fd=d, dst_dir_fd=d)
        except FileExistsError as exc:
            raise AlreadyExists(f"Already exists: {self.final_path}") from exc
        except OSError as exc:
            raise _map_error(exc, self.final_path) from exc
        self._ended = True
        self._close_dir()  # kept after a failed commit: abort() may still remove the partial

    def abort(self, *, keep_partial: bool = False) -> None:
        self._close()
        if self._ended:
            return
        self._ended = True
        try:
            if not keep_partial:
                os.unlink(self._temp, dir_fd=self._dir)
        except FileNotFoundError:
            pass
        finally:
            self._close_dir()


class _Limited:
    """A file object that stops after ``length`` bytes."""

    def __init__(self, f: io.FileIO, length: int) -> None:
        self._f = f
        self._left = length

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data

    def readinto(self, buf: memoryview | bytearray) -> int:
        view = memoryview(buf)[: max(0, self._left)]
        n = self._f.readinto(view)
        self._left -= n or 0
        return n or 0

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> _Limited:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalBackend(Backend):
    scheme = "local"
    capabilities = Capabilities(
        range_read=True,
        resume_write=True,
        server_side_copy=True,  # copy_file_range: the kernel moves the bytes
        hashes=HASH_ALGORITHMS,
        slow_hash=True,
        readback=True,
        symlinks=os.name == "posix",
        set_mtime=True,
        mtime_precision=1e-9,
        modes=os.name == "posix",
        hard_links=os.name == "posix",
        sparse=os.name == "posix",
        xattrs=hasattr(os, "setxattr"),
        case_insensitive=sys.platform in ("darwin", "win32"),
    )

    def __init__(self, address: Address | None = None) -> None:
        super().__init__(address or Address("local", os.sep))

    def join(self, base: str, *names: str) -> str:
        return os.path.join(base, *names)

    def split(self, path: str) -> tuple[str, str]:
        return os.path.split(path.rstrip(os.sep) or os.sep)

    def display(self, path: str) -> str:
        return path

    def list(self, path: str, cancel: CancelToken | None = None) -> Iterator[Entry]:
        try:
            it = os.scandir(path)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        with it:
            for i, de in enumerate(it):
                if cancel is not None and not i % 1024:
                    cancel.check()
                try:
                    st = de.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # vanished between readdir and stat
                except OSError as exc:
                    raise _map_error(exc, de.path) from exc
                yield _entry(de.path, de.name, st)

    # -- where a path is opened: ConfinedLocal resolves folders below a job's roots by descriptor --

    def _parent(self, path: str, create: bool = False) -> tuple[int | None, str]:
        """(a descriptor of the folder holding ``path``, the name within it), or (None, ``path``)
        for a path used as it is. The caller closes a descriptor it is given."""
        return None, path

    def _at(self, path: str, create: bool = False) -> tuple[int | None, str]:
        try:
            return self._parent(path, create)
        except OSError as exc:
            raise _map_error(exc, path) from exc

    def stat(self, path: str) -> Entry:
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        return _entry(path, os.path.basename(path.rstrip(os.sep)) or path, st)

    def stat_or_none(self, path: str) -> Entry | None:
        """``stat``, but None when nothing is there. The copier asks this of every destination
        before writing it; building, raising and catching NotFound cost more than the lstat."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _map_error(exc, path) from exc
        return _entry(path, os.path.basename(path.rstrip(os.sep)) or path, st)

    def open_read(self, path: str, offset: int = 0, length: int | None = None) -> Reader:
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - returned to the caller
            if offset:
                f.seek(offset)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        if length is not None:
            return _Limited(f, length)
        return f

    def open_write(
        self, path: str, *, size: int | None, token: str, resume: bool = False, readback: str | None = None
    ) -> LocalWriter:
        fd, _ = self._at(path)
        return LocalWriter(path, token, size, resume, readback, fd)

    def server_copy(
        self,
        src_path: str,
        writer: Writer,
        on_bytes: Callable[[int], None],
        cancel: CancelToken,
        chunk: int = 8 << 20,
    ) -> None:
        """Copy with copy_file_range in chunks, so progress, cancel and bandwidth still apply."""
        assert isinstance(writer, LocalWriter)
        try:
            fd = os.open(src_path, os.O_RDONLY)
        except OSError as exc:
            raise _map_error(exc, src_path) from exc
        try:
            pos = writer.offset
            while True:
                cancel.check()
                n = writer.write_from_fd(fd, pos, chunk)
                if n == 0:
                    return
                pos += n
                on_bytes(n)
        finally:
            os.close(fd)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        try:
            if parents:
                os.makedirs(path, exist_ok=exist_ok)
            else:
                os.mkdir(path)
        except FileExistsError as exc:
            if exist_ok and os.path.isdir(path):
                return
            raise AlreadyExists(f"Already exists: {path}") from exc
        except OSError as exc:
            raise _map_error(exc, path) from exc

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove what stands at ``path``: a link is removed itself, never what it points to."""
        fd, ref = self._at(path)
        try:
            st = os.stat(ref, dir_fd=fd, follow_symlinks=False)
            if stat_mod.S_ISDIR(st.st_mode):
                if recursive:
                    shutil.rmtree(ref, dir_fd=fd)  # by descriptors: links inside are not followed
                else:
                    os.rmdir(ref, dir_fd=fd)
            else:
                os.unlink(ref, dir_fd=fd)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(fd)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        sfd, sref = self._at(src)
        try:
            dfd, dref = self._at(dst)
        except BaseException:
            _close(sfd)
            raise
        try:
            if overwrite:
                os.replace(sref, dref, src_dir_fd=sfd, dst_dir_fd=dfd)
            else:
                rename_no_replace(sref, dref, src_dir_fd=sfd, dst_dir_fd=dfd)
        except FileExistsError as exc:
            raise AlreadyExists(f"Already exists: {dst}") from exc
        except OSError as exc:
            raise _map_error(exc, src) from exc
        finally:
            _close(sfd)
            _close(dfd)

    def symlink(self, target: str, path: str) -> None:
        fd, ref = self._at(path)
        try:
            os.symlink(target, ref, dir_fd=fd)
        except FileExistsError as exc:
            raise AlreadyExists(f"Already exists: {path}") from exc
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(fd)

    def set_mtime(self, path: str, mtime: datetime, mtime_ns: int | None = None) -> None:
        ns = _ns(mtime) if mtime_ns is None else mtime_ns
        fd, ref = self._at(path)
        try:
            os.utime(ref, ns=(ns, ns), dir_fd=fd, follow_symlinks=False)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(fd)

    def _open_folder(self, path: str) -> int:
        """A descriptor of the folder at ``path``, never through a final link."""
        fd, ref = self._at(path)
        try:
            return os.open(ref, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(fd)

    def set_mode(self, path: str, mode: int) -> None:
        """Permission bits (setgid and sticky included) of the folder or file at ``path`` (chmod);
        never through a final link (O_NOFOLLOW), never blocking on a FIFO (O_NONBLOCK)."""
        dfd, ref = self._at(path)
        try:
            fd = os.open(ref, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(dfd)
        try:
            os.fchmod(fd, stat_mod.S_IMODE(mode))
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            os.close(fd)

    def hard_link(self, existing: str, path: str, *, overwrite: bool = False) -> None:
        """``path`` as another name of ``existing``: never through a link, and (without
        ``overwrite``) never replacing what stands at ``path``."""
        sfd, sref = self._at(existing)
        try:
            dfd, dref = self._at(path)
        except BaseException:
            _close(sfd)
            raise
        try:
            if not overwrite:
                os.link(sref, dref, src_dir_fd=sfd, dst_dir_fd=dfd, follow_symlinks=False)
                return
            folder, name = os.path.split(dref)
            temp = os.path.join(folder, temp_name(name, "link"))
            try:
                os.unlink(temp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            os.link(sref, temp, src_dir_fd=sfd, dst_dir_fd=dfd, follow_symlinks=False)
            os.replace(temp, dref, src_dir_fd=dfd, dst_dir_fd=dfd)
        except FileExistsError as exc:
            raise AlreadyExists(f"Already exists: {path}") from exc
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(sfd)
            _close(dfd)

    def get_xattrs(self, path: str) -> dict[str, bytes]:
        fd, ref = self._at(path)
        try:
            return _xattrs_of(ref, fd)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(fd)

    def set_xattrs(self, path: str, attrs: Mapping[str, bytes]) -> Sequence[str]:
        fd = self._open_folder(path)
        try:
            return _set_xattrs(fd, attrs)
        finally:
            os.close(fd)

    def free_space(self, path: str) -> int | None:
        try:
            st = os.statvfs(path)
        except (OSError, AttributeError):
            return None
        return st.f_bavail * st.f_frsize

    def confined(self, roots: Sequence[str]) -> LocalBackend:
        """The view one job writes through: no link followed below any of ``roots``."""
        return ConfinedLocal(self.address, roots) if _CONFINABLE else self


class ConfinedLocal(LocalBackend):
    """One job's view of this computer's disks: below each of the job's destination roots, every
    folder is opened from its parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY``, and every
    write, creation, rename and removal names its file within its folder's descriptor. A link
    where a folder must be raises :class:`LinkInTheWay` (with the link's path); the folders
    found on the way stay the ones opened, so a link swapped in meanwhile is not followed either.

    Paths at or above a root, and paths below none, are used as they are (links followed): they
    are the user's own choice of destination."""

    def __init__(self, address: Address, roots: Sequence[str]) -> None:
        super().__init__(address)
        norm = {os.path.normpath(os.path.abspath(r)) for r in roots}
        # Longest first: a path is below the innermost root that holds it.
        self.roots = tuple(sorted(norm, key=len, reverse=True))
        self._prefixes = tuple((r, r if r.endswith(os.sep) else r + os.sep) for r in self.roots)
        # Each root's descriptor, opened once and closed with the view (never while it is in
        # use, so worker threads share them); one whose folder went is kept aside until then.
        self._root_fds: dict[str, int] = {}
        self._retired: list[int] = []
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._root_fds, self._retired)

    def _below(self, path: str) -> tuple[str, str] | None:
        """(the root, the rest of ``path`` below it, normalised), or None for a path below no
        root (or the root itself). A path that climbs out with ``..`` is refused."""
        sep = os.sep
        for root, prefix in self._prefixes:
            if path.startswith(prefix):
                rest = path[len(prefix) :].rstrip(sep)
                if sep + "." in sep + rest or sep + sep in rest:  # rare: ".", "..", ".hidden", "a//b"
                    names = [n for n in rest.split(sep) if n not in ("", ".")]
                    if ".." in names:
                        raise UnsafeName(f"Refused a path that would leave the destination: {path}")
                    rest = sep.join(names)
                return (root, rest) if rest else None
        return None

    def _parent(self, path: str, create: bool = False) -> tuple[int | None, str]:
        found = self._below(path)
        if found is None:
            return None, path
        root, rest = found
        head, _, name = rest.rpartition(os.sep)
        return self._descend(root, head, create), name

    def _descend(self, root: str, rest: str, create: bool) -> int:
        """A descriptor of the folder ``rest`` below ``root`` (the caller's to close), each
        folder below the root opened without following a link (and made, with ``create``): in
        one ``openat2`` call where the kernel has it, else (and to say which link is in the way,
        or to make what is missing) folder by folder."""
        global _openat2
        top = self._root_fds.get(root)
        if top is None or create:
            top = self._root_fd(root, create)
        if not rest:
            return os.dup(top)
        if _openat2 is not None:
            got = _openat2(top, os.fsencode(rest), False)
            if got >= 0:
                return got
            if got == -errno.ENOENT and not create:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.path.join(root, rest))
            if got in (-errno.ENOSYS, -errno.EINVAL):
                _openat2 = None  # an older kernel, or one that refuses it here: the walk from now on
        names = rest.split(os.sep)
        fd = top
        try:
            for i, name in enumerate(names):
                sub = _open_below(fd, name, create, root, names, i + 1)
                if fd != top:
                    os.close(fd)
                fd = sub
        except BaseException:
            if fd != top:
                os.close(fd)
            raise
        return fd

    def _root_fd(self, root: str, create: bool) -> int:
        """The root's descriptor (links at and above it followed: the user's own path). With
        ``create`` a root that was deleted meanwhile is made and opened again."""
        fd = self._root_fds.get(root)
        if fd is not None and not (create and os.fstat(fd).st_nlink == 0):
            return fd
        with self._lock:
            fd = self._root_fds.get(root)
            if fd is None or (create and os.fstat(fd).st_nlink == 0):
                if fd is not None:
                    self._retired.append(fd)
                fd = self._root_fds[root] = _open_root(root, create)
        return fd

    def stat(self, path: str) -> Entry:
        fd, ref = self._at(path)
        try:
            st = os.stat(ref, dir_fd=fd, follow_symlinks=False)
            return _entry(path, os.path.basename(path.rstrip(os.sep)) or path, st, ref, fd)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(fd)

    def stat_or_none(self, path: str) -> Entry | None:
        """As ``stat``, None when nothing is there; and a path whose folder is a link below the
        root is not there either (nothing is reached through it: the write that follows meets
        the link and raises LinkInTheWay for the copy to apply its policy to)."""
        # Nothing at ``path`` as the system resolves it (links and all) means nothing there
        # without following links either: one lstat answers a fresh copy's question. What is
        # found is looked at again, folder by folder, without following any link.
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError:
            st = None
        if st is not None and not stat_mod.S_ISLNK(st.st_mode) and self._no_link_to(path):
            return _entry(path, os.path.basename(path.rstrip(os.sep)) or path, st)
        try:
            fd, ref = self._parent(path)
        except (FileNotFoundError, LinkInTheWay):
            return None
        except OSError as exc:
            raise _map_error(exc, path) from exc
        try:
            st = os.stat(ref, dir_fd=fd, follow_symlinks=False)
            return _entry(path, os.path.basename(path.rstrip(os.sep)) or path, st, ref, fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(fd)

    def _no_link_to(self, path: str) -> bool:
        """Whether ``path`` is reached from its root with no link on the way, told by one
        ``openat2`` of an ``O_PATH`` handle; False where it cannot be told that cheaply."""
        if _openat2 is None:
            return False
        found = self._below(path)
        if found is None:
            return True  # at or above a root, or below none: used as it is
        top = self._root_fds.get(found[0])
        if top is None:
            return False  # the root is not open yet: the walk opens it
        fd = _openat2(top, os.fsencode(found[1]), True)
        if fd < 0:
            return False  # a link on the way, or gone: the walk says which
        os.close(fd)
        return True

    def open_read(self, path: str, offset: int = 0, length: int | None = None) -> Reader:
        fd, ref = self._at(path)
        if fd is None:
            return super().open_read(path, offset, length)
        try:
            f = open(os.open(ref, os.O_RDONLY | _NOFOLLOW, dir_fd=fd), "rb", buffering=0)  # noqa: SIM115
            if offset:
                f.seek(offset)
        except OSError as exc:
            raise _map_error(exc, path) from exc
        finally:
            _close(fd)
        if length is not None:
            return _Limited(f, length)
        return f

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        found = self._below(path)
        if found is None:
            return super().mkdir(path, parents=parents, exist_ok=exist_ok)
        root, rest = found
        try:
            if parents and exist_ok:
                os.close(self._descend(root, rest, True))
                return None
            head, _, name = rest.rpartition(os.sep)
            fd = self._descend(root, head, parents)
            try:
                os.mkdir(name, 0o777, dir_fd=fd)
            finally:
                os.close(fd)
        except (FileExistsError, NotADirectoryError) as exc:
            raise AlreadyExists(f"Already exists: {path}") from exc
        except OSError as exc:
            raise _map_error(exc, path) from exc
        return None


def _close_all(fds: dict[str, int], retired: list[int]) -> None:
    for fd in [*fds.values(), *retired]:
        try:
            os.close(fd)
        except OSError:
            pass


def _open_root(root: str, create: bool) -> int:
    """A job's destination root, the user's own path: links at and above it are followed."""
    try:
        return os.open(root, os.O_RDONLY | _DIRECTORY)
    except FileNotFoundError:
        if not create:
            raise
    os.makedirs(root, exist_ok=True)
    return os.open(root, os.O_RDONLY | _DIRECTORY)


def _open_below(fd: int, name: str, create: bool, root: str, names: list[str], depth: int) -> int:
    """The folder ``name`` (``names[depth - 1]`` below ``root``) in folder ``fd``, never through
    a link (made first with ``create``). Other files of the job make and replace folders at the
    same time, so what stood there a moment ago is looked at again before giving up."""
    for attempt in range(4):
        last = attempt == 3
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create or last:
                raise
            try:
                os.mkdir(name, 0o777, dir_fd=fd)
            except FileExistsError:
                pass  # made meanwhile: opened below, without following
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            mode = _mode_at(fd, name)
            if mode is not None and stat_mod.S_ISLNK(mode):
                link = os.path.join(root, *names[:depth])
                raise LinkInTheWay(
                    f"{link} is a symbolic link where a folder must be: Ferry does not write through links "
                    "inside the destination",
                    link,
                ) from None
            if last or (mode is not None and not stat_mod.S_ISDIR(mode)):
                raise  # a file in the way: the error as it is (a folder now, or gone: again)
    raise AssertionError("unreachable")


def _mode_at(fd: int, name: str) -> int | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except OSError:
        return None
