"""An in-process store for tests: ``memory://NAME/path``.

Every MemoryBackend whose address names the same store (``address.host``) sees the same tree,
so a test can write through one instance and check through another, as two processes would
share a disk. The store behaves like a POSIX disk where the engine can tell the difference:
partial files are hidden entries in the destination folder (so resume finds them by listing),
commit refuses to clobber unless told to, and errors are the ``ferry.core.errors`` types
local.py raises for the same situation (they are built from the same errno, so even messages
match).

Symbolic links are stored and listed; ``open_read`` (and so ``hash``) follows a final link, as
opening one on disk does, but links in the middle of a path are not resolved: the engine never
needs that, and it keeps lookups a plain walk down the tree.

Fault injection for engine tests lives on the store (see :class:`MemoryStore`): failing a writer
after N bytes (transient errors, ENOSPC, retries), corrupting what lands (read-back must catch
it), and failing any other operation (permission denied, dropped connections).
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ferry.backends.base import Backend, Capabilities, Entry, Kind, Reader, Writer, temp_name
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import FerryError, UsageError, from_oserror
from ferry.core.hashing import HASH_ALGORITHMS, new_hasher

_MAX_LINK_HOPS = 40  # as Linux's MAXSYMLINKS: a loop of links fails instead of spinning


def _map_error(code: int, path: str) -> FerryError:
    """The error local.py would raise for ``code``: built through the same errno mapping so the
    two backends agree on classes and wording without a second table to keep in sync."""
    return from_oserror(OSError(code, os.strerror(code), path), path)


def _now() -> datetime:
    return datetime.now(UTC)


def _utc(mtime: datetime) -> datetime:
    if mtime.tzinfo is None:
        # A naive time has no defined instant; local.py would fail subtracting it too.
        raise UsageError(f"Modification time must carry a time zone: {mtime!r}")
    return mtime.astimezone(UTC)


def _norm(path: str) -> str:
    # Leading slashes collapsed first: normpath keeps POSIX's special "//" prefix otherwise.
    return posixpath.normpath("/" + path.lstrip("/"))


# -- the tree --


@dataclass(eq=False)
class _Node:
    mtime: datetime


@dataclass(eq=False)
class _File(_Node):
    data: bytearray = field(default_factory=bytearray)
    mode: int | None = None  # permission bits, when a copy kept them (Writer.set_mode)


@dataclass(eq=False)
class _Dir(_Node):
    children: dict[str, _Node] = field(default_factory=dict)


@dataclass(eq=False)
class _Link(_Node):
    target: str = ""


def _entry(path: str, name: str, node: _Node) -> Entry:
    if isinstance(node, _File):
        return Entry(path=path, name=name, kind=Kind.FILE, size=len(node.data), mtime=node.mtime, mode=node.mode)
    if isinstance(node, _Dir):
        return Entry(path=path, name=name, kind=Kind.DIR, size=None, mtime=node.mtime)
    assert isinstance(node, _Link)
    # A link's size is its target's length in bytes, as lstat reports it.
    size = len(node.target.encode("utf-8", "surrogateescape"))
    return Entry(path=path, name=name, kind=Kind.LINK, size=size, mtime=node.mtime, link_target=node.target)


# -- fault injection --


@dataclass
class _Fault:
    kind: str  # "write" (fail a writer), "corrupt" (flip a stored byte) or "op" (fail an operation)
    substring: str
    exc: BaseException | None = None
    nbytes: int = 0
    op: str = ""
    times: int | None = 1  # how many more times it fires; None: every time

    def claim(self) -> bool:
        if self.times is None:
            return True
        if self.times <= 0:
            return False
        self.times -= 1
        return True


class MemoryStore:
    """One named tree, shared by every backend instance on it; all access holds ``lock``."""

    def __init__(self, name: str) -> None:
        self.name = name
        # Re-entrant: fault checks and lookups nest inside operations that already hold it.
        self.lock = threading.RLock()
        self.root = _Dir(_now())
        self.faults: list[_Fault] = []

    # -- fault hooks (each fires ``times`` times, None: always; matched on a path substring) --
    def fail_write_after(self, path_substring: str, nbytes: int, exc: BaseException, *, times: int | None = 1) -> None:
        """The next ``times`` writers for a matching final path store ``nbytes`` bytes (counted
        from where that writer started, so a resumed writer gets its own budget) and then raise
        ``exc``; the bytes before the failure stay in the partial file, as on a full disk. A
        writer handed no more than ``nbytes`` in total raises from finish()/commit() instead."""
        with self.lock:
            self.faults.append(_Fault("write", path_substring, exc=exc, nbytes=nbytes, times=times))

    def corrupt_on_commit(self, path_substring: str, *, times: int | None = 1) -> None:
        """Flip a byte of what a matching writer stored (append one to an empty file), as a bad
        disk or a buggy server would. It happens when the writer finishes, before a requested
        read-back hashes the partial, or at commit if finish() was skipped, so both read-back
        and a later ``hash()`` of the committed file see the damage."""
        with self.lock:
            self.faults.append(_Fault("corrupt", path_substring, times=times))

    def fail_on(self, op: str, path_substring: str, exc: BaseException, *, times: int | None = 1) -> None:
        """Make backend method ``op`` ("list", "stat", "open_read", "open_write", "mkdir",
        "remove", "rename", "symlink", "set_mtime") raise ``exc`` for a matching path."""
        with self.lock:
            self.faults.append(_Fault("op", path_substring, exc=exc, op=op, times=times))

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def _claim(self, kind: str, path: str, op: str = "") -> _Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.kind == kind and fault.op == op and fault.substring in path and fault.claim():
                    return fault
        return None

    def _check_op(self, op: str, *paths: str) -> None:
        for path in paths:
            fault = self._claim("op", path, op)
            if fault is not None:
                assert fault.exc is not None
                raise fault.exc

    # -- tree walking (callers hold the lock) --
    def _lookup(self, path: str, where: str | None = None) -> _Node:
        """The node at ``path``; errors name ``where`` (the path the caller was asked about)."""
        node: _Node = self.root
        for part in path.split("/")[1:] if path != "/" else []:
            if not isinstance(node, _Dir):
                raise _map_error(errno.ENOTDIR, where or path)
            child = node.children.get(part)
            if child is None:
                raise _map_error(errno.ENOENT, where or path)
            node = child
        return node

    def _parent(self, path: str, where: str | None = None) -> tuple[_Dir, str]:
        """The folder holding ``path`` and the name in it; the folder must exist."""
        where = where or path
        if path == "/":
            raise _map_error(errno.EBUSY, where)  # the root has no parent to change it in
        folder, name = posixpath.split(path)
        parent = self._lookup(folder, where)
        if not isinstance(parent, _Dir):
            raise _map_error(errno.ENOTDIR, where)
        return parent, name


_stores: dict[str, MemoryStore] = {}
_stores_lock = threading.Lock()


def get_store(name: str) -> MemoryStore:
    """The store called ``name``, created empty on first use."""
    with _stores_lock:
        store = _stores.get(name)
        if store is None:
            store = _stores[name] = MemoryStore(name)
        return store


def reset_memory_stores(name: str | None = None) -> None:
    """Forget one store, or all of them: the next use starts from an empty root. Backends still
    holding the old store keep it, so tests should create their backends after resetting."""
    with _stores_lock:
        if name is None:
            _stores.clear()
        else:
            _stores.pop(name, None)


# -- writing --


class MemoryWriter(Writer):
    def __init__(self, store: MemoryStore, final_path: str, token: str, resume: bool, readback: str | None) -> None:
        self._store = store
        self.final_path = final_path
        folder, name = posixpath.split(final_path)
        self.temp_path = posixpath.join(folder, temp_name(name, token))
        self.offset = 0
        self._readback = readback
        if readback is not None:
            new_hasher(readback)  # an unknown algorithm fails now, not after the whole copy
        self._done = False  # committed or aborted
        self._finished = False
        self._corrupted = False
        with store.lock:
            parent, _ = store._parent(final_path)  # errors name the file the user asked for
            tname = posixpath.basename(self.temp_path)
            existing = parent.children.get(tname)
            if resume and isinstance(existing, _File):
                self._node = existing
                self.offset = len(existing.data)
            else:
                if isinstance(existing, _Dir):
                    raise _map_error(errno.EISDIR, self.temp_path)
                self._node = _File(_now())
                parent.children[tname] = self._node
                parent.mtime = _now()
            # The fault is taken now so "the next N writers" counts writers, not write calls.
            self._fault = store._claim("write", final_path)
        self._written = 0  # bytes handed to this writer, for the fault budget

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._done:
            raise ValueError("write to a committed or aborted writer")
        view = memoryview(data).cast("B")
        fault = self._fault
        if fault is not None and self._written + len(view) > fault.nbytes:
            keep = max(0, fault.nbytes - self._written)
            self._store_bytes(view[:keep])
            self._fire()
        self._store_bytes(view)

    def _store_bytes(self, view: memoryview) -> None:
        with self._store.lock:
            self._node.data += view
            self._node.mtime = _now()
        self._written += len(view)

    def _fire(self) -> None:
        fault, self._fault = self._fault, None
        assert fault is not None and fault.exc is not None
        raise fault.exc

    def _land(self) -> None:
        """Everything handed over has reached the store: the point where a full disk reports
        the last failure and where a bad disk has already damaged the bytes."""
        if self._fault is not None:
            self._fire()
        if not self._corrupted:
            self._corrupted = True
            if self._store._claim("corrupt", self.final_path) is not None:
                with self._store.lock:
                    data = self._node.data
                    if data:
                        data[len(data) // 2] ^= 0xFF
                    else:
                        data.append(0)

    def finish(self) -> str | None:
        self._land()
        self._finished = True
        if self._readback is None:
            return None
        with self._store.lock:
            stored = bytes(self._node.data)  # hash what landed, not what we were handed
        h = new_hasher(self._readback)
        h.update(stored)
        return h.hexdigest()

    _mode: int | None = None

    def set_mode(self, mode: int, *, umask: bool = False) -> bool:
        """Kept with the file as given (a store of this process has no umask of its own)."""
        self._mode = mode & 0o777 if umask else mode
        return True

    def commit(self, *, overwrite: bool, mtime: datetime | None = None) -> None:
        if self._done:
            raise ValueError("commit of a committed or aborted writer")
        if not self._finished:
            self._land()
        store = self._store
        with store.lock:
            tparent, tname = store._parent(self.temp_path)
            if tparent.children.get(tname) is not self._node:
                # Removed or replaced behind our back: on disk the rename would find nothing.
                raise _map_error(errno.ENOENT, self.final_path)
            parent, name = store._parent(self.final_path)
            existing = parent.children.get(name)
            if existing is not None:
                if not overwrite:
                    raise _map_error(errno.EEXIST, self.final_path)
                if isinstance(existing, _Dir):
                    raise _map_error(errno.EISDIR, self.final_path)
            if mtime is not None:
                self._node.mtime = _utc(mtime)
            self._node.mode = self._mode
            del tparent.children[tname]
            parent.children[name] = self._node
            parent.mtime = tparent.mtime = _now()
            self._done = True

    def abort(self, *, keep_partial: bool = False) -> None:
        if self._done:
            return
        self._done = True
        if keep_partial:
            return
        store = self._store
        with store.lock:
            try:
                parent, tname = store._parent(self.temp_path)
            except FerryError:
                return  # the folder went away with the partial in it
            if parent.children.get(tname) is self._node:
                del parent.children[tname]
                parent.mtime = _now()


# -- the backend --


class MemoryBackend(Backend):
    scheme = "memory"
    capabilities = Capabilities(
        range_read=True,
        resume_write=True,
        server_side_copy=False,
        hashes=HASH_ALGORITHMS,
        slow_hash=True,
        readback=True,
        symlinks=True,
        set_mtime=True,
        mtime_precision=1e-6,  # datetimes keep microseconds, stored as given
    )

    def __init__(self, address: Address | None = None) -> None:
        super().__init__(address or Address("memory", "/", host="default"))
        self.store = get_store(self.address.host)

    def list(self, path: str, cancel: CancelToken | None = None) -> Iterator[Entry]:
        path = _norm(path)
        store = self.store
        with store.lock:
            store._check_op("list", path)
            node = store._lookup(path)
            if not isinstance(node, _Dir):
                raise _map_error(errno.ENOTDIR, path)
            # A snapshot of the names: callers iterate lazily and may change the folder
            # meanwhile. Names only (strings are not tracked by the cyclic garbage collector; a
            # list of 100,000 (name, node) pairs cost the window a 20 ms collection pass).
            names = list(node.children)
        return self._entries(path, node, names, cancel)

    def _entries(self, path: str, folder: _Dir, names: Sequence[str], cancel: CancelToken | None) -> Iterator[Entry]:
        children = folder.children
        for i, name in enumerate(names):
            if cancel is not None and not i % 1024:
                cancel.check()
            node = children.get(name)
            if node is not None:  # else removed since the snapshot
                yield _entry(posixpath.join(path, name), name, node)

    def stat(self, path: str) -> Entry:
        path = _norm(path)
        with self.store.lock:
            self.store._check_op("stat", path)
            node = self.store._lookup(path)
            return _entry(path, posixpath.basename(path) or "/", node)

    def open_read(self, path: str, offset: int = 0, length: int | None = None) -> Reader:
        path = _norm(path)
        if offset < 0 or (length is not None and length < 0):
            raise UsageError(f"Negative offset or length reading {path}")
        store = self.store
        with store.lock:
            store._check_op("open_read", path)
            node, where = store._lookup(path), path
            hops = 0
            while isinstance(node, _Link):
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    raise _map_error(errno.ELOOP, path)
                # A relative target is relative to the folder of the link that holds it.
                where = _norm(posixpath.join(posixpath.dirname(where), node.target))
                node = store._lookup(where)
            if isinstance(node, _Dir):
                raise _map_error(errno.EISDIR, path)
            assert isinstance(node, _File)
            end = len(node.data) if length is None else offset + length
            # A copy, so a writer replacing the file cannot change bytes mid-read.
            return io.BytesIO(bytes(node.data[offset:end]))

    def open_write(
        self, path: str, *, size: int | None, token: str, resume: bool = False, readback: str | None = None
    ) -> MemoryWriter:
        path = _norm(path)
        self.store._check_op("open_write", path)
        return MemoryWriter(self.store, path, token, resume, readback)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        path = _norm(path)
        store = self.store
        store._check_op("mkdir", path)
        with store.lock:
            try:
                node = store._lookup(path)
            except FileNotFoundError:
                pass
            else:
                if exist_ok and isinstance(node, _Dir):
                    return
                raise _map_error(errno.EEXIST, path)
            # Missing folders from the top down; a file on the way fails the walk (ENOTDIR).
            parts = path.split("/")[1:]
            for depth in range(0 if parents else len(parts) - 1, len(parts)):
                folder = "/" + "/".join(parts[: depth + 1])
                parent, name = store._parent(folder, where=path)
                if name not in parent.children:
                    parent.children[name] = _Dir(_now())
                    parent.mtime = _now()

    def remove(self, path: str, *, recursive: bool = False) -> None:
        path = _norm(path)
        store = self.store
        with store.lock:
            store._check_op("remove", path)
            parent, name = store._parent(path)
            node = parent.children.get(name)
            if node is None:
                raise _map_error(errno.ENOENT, path)
            if isinstance(node, _Dir) and node.children and not recursive:
                raise _map_error(errno.ENOTEMPTY, path)
            del parent.children[name]
            parent.mtime = _now()

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        src, dst = _norm(src), _norm(dst)
        store = self.store
        with store.lock:
            store._check_op("rename", src, dst)
            sparent, sname = store._parent(src)
            node = sparent.children.get(sname)
            if node is None:
                raise _map_error(errno.ENOENT, src)
            dparent, dname = store._parent(dst)
            if isinstance(node, _Dir) and (dst + "/").startswith(src + "/") and dst != src:
                raise _map_error(errno.EINVAL, src)  # into its own subtree
            existing = dparent.children.get(dname)
            if existing is not None:
                if not overwrite:
                    raise _map_error(errno.EEXIST, dst)
                if existing is node:
                    return
                # The same refusals rename(2) makes when replacing.
                if isinstance(existing, _Dir) and not isinstance(node, _Dir):
                    raise _map_error(errno.EISDIR, dst)
                if isinstance(node, _Dir) and not isinstance(existing, _Dir):
                    raise _map_error(errno.ENOTDIR, dst)
                if isinstance(existing, _Dir) and existing.children:
                    raise _map_error(errno.ENOTEMPTY, dst)
            del sparent.children[sname]
            dparent.children[dname] = node
            sparent.mtime = dparent.mtime = _now()

    def symlink(self, target: str, path: str) -> None:
        path = _norm(path)
        store = self.store
        with store.lock:
            store._check_op("symlink", path)
            parent, name = store._parent(path)
            if name in parent.children:
                raise _map_error(errno.EEXIST, path)
            parent.children[name] = _Link(_now(), target)  # stored verbatim, as on disk
            parent.mtime = _now()

    def set_mtime(self, path: str, mtime: datetime, mtime_ns: int | None = None) -> None:
        path = _norm(path)
        when = _utc(mtime)
        with self.store.lock:
            self.store._check_op("set_mtime", path)
            self.store._lookup(path).mtime = when
