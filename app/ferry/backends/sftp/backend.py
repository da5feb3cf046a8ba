"""SSH hosts over SFTP: :class:`SFTPBackend`, the protocol's operations on paths.

What it stands on is in the modules beside it: the :class:`~ferry.backends.sftp.host.Host`
(one login per host per process, its channels and remote commands), readers and writers,
parallel byte ranges for big files and tar streams for many small ones.
"""

from __future__ import annotations

import posixpath
import stat as stat_mod
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ferry.backends.base import Backend, BatchData, Capabilities, Entry, JobDelegate, Kind, Reader, temp_name
from ferry.backends.sftp import limits
from ferry.backends.sftp.errors import is_failure, map_error, refused_write
from ferry.backends.sftp.host import host_for
from ferry.backends.sftp.parallel_write import safe_resume_offset
from ferry.backends.sftp.protocol import entry_of, from_wire, listdir, wire
from ferry.backends.sftp.reader import SFTPReader
from ferry.backends.sftp.writer import SFTPWriter, SmallFileWriter, is_small
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import (
    AlreadyExists,
    FerryError,
    IsADirectory,
    LinkInTheWay,
    NotADirectory,
    NotFound,
    UnsafeName,
    Unsupported,
)


class SFTPBackend(Backend):
    scheme = "sftp"
    _BASE = Capabilities(
        range_read=True,
        resume_write=True,
        hashes=(),
        slow_hash=True,
        readback=False,
        symlinks=True,
        set_mtime=True,
        mtime_precision=1.0,
        modes=True,
        max_connections=9,
    )

    def __init__(self, address: Address) -> None:
        super().__init__(address)
        import_paramiko()
        self._host = host_for(address)
        self._caps: Capabilities | None = None

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        """Known after connecting: which checksums the host can compute decides ``hashes``.
        ``readback`` holds on every host: files up to 64 KiB are read back over SFTP and hashed
        here (an sftp-only account too); a bigger one on a host without the tool is recorded as
        checked by size, saying why."""
        if self._caps is None:
            self._host.transport()
            if not self._host.hash_tools:
                self._host.detect_hash_tools()
            hashes = tuple(self._host.hash_tools)
            self._caps = replace(
                self._BASE,
                hashes=hashes,
                readback=True,
                max_connections=max(1, self._host.pool.max_sessions - 1),
            )
        return self._caps

    def display(self, path: str) -> str:
        return str(replace(self.address, path=path, site=None, trailing_slash=False))

    def _abs(self, path: str) -> str:
        if not path:
            with self._host.pool.sftp() as c:
                return str(c.normalize("."))
        return path

    def list(self, path: str, cancel: CancelToken | None = None) -> Iterator[Entry]:
        path = self._abs(path)
        names = self._host.names
        links: list[Entry] = []
        with self._host.pool.sftp() as c:
            try:
                # listdir_iter pages (READDIR batches) instead of building one huge list.
                for i, attr in enumerate(listdir(c, path)):
                    if cancel is not None and not i % 1024:
                        cancel.check()
                    name = attr.filename
                    if name in (".", ".."):
                        continue
                    entry = entry_of(posixpath.join(path, name), name, attr)
                    if entry.kind is Kind.LINK:
                        # No other request on this channel while READDIRs are in flight: later.
                        links.append(entry)
                        continue
                    names.listed(entry)  # the copy's stat of a file just listed needs no round trip
                    yield entry
                for entry in links:
                    yield replace(entry, link_target=from_wire(c.readlink(wire(entry.path))))
            except FerryError:
                raise
            except Exception as exc:
                raise self._refine(c, exc, path) from exc

    def _refine(self, c: Any, exc: BaseException, path: str, *, from_parent: bool = False) -> FerryError:
        """SFTP v3 reports ENOTDIR as "No such file": find the file in the way to say it right.
        Folders known to exist end the search without a round trip (a missing destination file
        is stat'ed before every copy; its folder is almost always known)."""
        err = map_error(exc, self.display(path))
        if isinstance(err, NotFound):
            probe = path.rstrip("/") or "/"
            if from_parent:
                probe = posixpath.dirname(probe)
            while probe not in ("/", ""):
                if probe in self._host.known_dirs:
                    break
                try:
                    attr = c.stat(wire(probe))
                except OSError:
                    probe = posixpath.dirname(probe)
                    continue
                if not stat_mod.S_ISDIR(attr.st_mode or 0):
                    return NotADirectory(f"Not a folder: {self.display(probe)}")
                self._host.remember_dir(probe)
                break
        return err

    def stat(self, path: str) -> Entry:
        path = self._abs(path)
        names = self._host.names  # answers known without a round trip (see names.py)
        if names.absent(path):
            raise NotFound(f"No such file or folder: {self.display(path)}")
        listed = names.take_listed(path)
        if listed is not None:
            return listed
        with self._host.pool.sftp() as c:
            try:
                attr = c.lstat(wire(path))
                entry = entry_of(path, posixpath.basename(path.rstrip("/")) or path, attr)
                if entry.kind is Kind.LINK:
                    entry = replace(entry, link_target=from_wire(c.readlink(wire(path))))
                elif entry.kind is Kind.DIR:
                    self._host.remember_dir(path)
                return entry
            except Exception as exc:
                raise self._refine(c, exc, path, from_parent=True) from exc

    def open_read(self, path: str, offset: int = 0, length: int | None = None) -> Reader:
        return SFTPReader(self._host, self._abs(path), offset, length)

    def open_write(
        self, path: str, *, size: int | None, token: str, resume: bool = False, readback: str | None = None
    ) -> SFTPWriter:
        self._host.names.touch(self._abs(path))
        if is_small(size):  # small files: three round trips, not six
            return SmallFileWriter(self, self._abs(path), token, readback)
        return SFTPWriter(self, self._abs(path), token, resume, readback, size)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        path = self._abs(path)
        try:
            self._mkdir(path, parents, exist_ok)
        except FerryError:
            raise
        except Exception as exc:
            # A connection dropped under a folder's creation (paramiko's SSHException is no
            # OSError) must fail as Transient so the task is retried, not as a plain failure.
            raise map_error(exc, self.display(path)) from exc

    def _mkdir(self, path: str, parents: bool, exist_ok: bool) -> None:
        with self._host.pool.sftp() as c:
            todo = [path]
            if parents:
                parent = posixpath.dirname(path.rstrip("/"))
                while parent and parent != "/":
                    try:
                        c.stat(wire(parent))
                        break
                    except FileNotFoundError:
                        todo.append(parent)
                        parent = posixpath.dirname(parent)
            names = self._host.names
            for p in reversed(todo):
                self._host.known_dirs.discard(p)
                names.touch(p)
                try:
                    c.mkdir(wire(p))
                    names.created_folder(p)  # empty but for what Ferry writes into it
                except OSError as exc:
                    try:
                        attr = c.stat(wire(p))
                    except OSError:
                        refused = is_failure(exc) and refused_write(c, exc, posixpath.dirname(p), self.display(p))
                        raise (refused or map_error(exc, self.display(p))) from exc
                    if not stat_mod.S_ISDIR(attr.st_mode or 0):
                        raise AlreadyExists(f"A file is in the way of folder {self.display(p)}") from exc
                    if p == path and not exist_ok:
                        raise AlreadyExists(f"Already exists: {self.display(p)}") from exc
                self._host.remember_dir(p)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        path = self._abs(path)
        entry = self.stat(path)
        if entry.kind is Kind.DIR:
            self._host.forget_dirs()
        with self._host.pool.sftp() as c:
            try:
                if entry.kind is Kind.DIR:
                    if recursive:
                        for child in list(self.list(path)):
                            self.remove(child.path, recursive=True)
                    c.rmdir(wire(path))
                else:
                    c.remove(wire(path))
            except FerryError:
                raise
            except Exception as exc:
                if isinstance(exc, OSError) and exc.errno is None and entry.kind is Kind.DIR:
                    raise AlreadyExists(f"Folder not empty: {self.display(path)}") from exc
                raise map_error(exc, self.display(path)) from exc

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self._host.forget_dirs()
        with self._host.pool.sftp() as c:
            try:
                if overwrite:
                    c.posix_rename(wire(src), wire(dst))
                    return
                try:
                    c.lstat(wire(dst))
                    raise AlreadyExists(f"Already exists: {self.display(dst)}")
                except FileNotFoundError:
                    pass
                c.rename(wire(src), wire(dst))
            except FerryError:
                raise
            except Exception as exc:
                raise map_error(exc, self.display(src)) from exc

    def hash(self, path: str, algo: str, cancel: CancelToken | None = None) -> str:
        tool = self._host.hash_tools.get(algo) if self.capabilities.hashes else None
        if tool is None:
            raise Unsupported(f"{self.address.host} cannot compute {algo} checksums")
        req = self._host.hasher.hash(self._abs(path), tool)
        if req.error is not None:
            raise map_error(req.error, self.display(path)) from req.error
        if req.problem == "missing":
            raise NotFound(f"No such file or folder: {self.display(path)}")
        if req.problem == "not-a-file":
            raise IsADirectory(f"Not a regular file: {self.display(path)}")
        if req.problem or not req.digest:
            raise FerryError(f"Remote {tool} could not read {self.display(path)}", detail=str(req.problem))
        return req.digest

    def symlink(self, target: str, path: str) -> None:
        self._host.names.touch(path)
        with self._host.pool.sftp() as c:
            try:
                c.symlink(wire(target), wire(path))
            except Exception as exc:
                if self.exists(path):
                    raise AlreadyExists(f"Already exists: {self.display(path)}") from exc
                raise map_error(exc, self.display(path)) from exc

    def set_mtime(self, path: str, mtime: datetime, mtime_ns: int | None = None) -> None:
        ts = mtime.timestamp()  # SFTP carries whole seconds: mtime_ns adds nothing
        with self._host.pool.sftp() as c:
            try:
                c.utime(wire(path), (ts, ts))
            except Exception as exc:
                raise map_error(exc, self.display(path)) from exc

    def set_mode(self, path: str, mode: int) -> None:
        """A folder's permission bits (setgid included), as ``sftp put -pr`` sets them."""
        with self._host.pool.sftp() as c:
            try:
                c.chmod(wire(path), stat_mod.S_IMODE(mode))
            except Exception as exc:
                raise map_error(exc, self.display(path)) from exc

    # ---- many small files in one tar stream (batches; driven by ferry.transfers.batch) ----
    def batch_usable(self, direction: str, algo: str | None) -> bool:
        """Whether small files may go in tar batches: up (``write_batch``) needs the remote tool
        for ``algo`` to check what tar extracted (``wc -c`` when only sizes are checked); down
        (``read_batch``) only the tar."""
        from ferry.backends.sftp import batches

        if not batches.usable(self._host):
            return False
        return direction == "down" or algo is None or algo in self.capabilities.hashes

    def write_batch(
        self, items: Sequence[tuple[str, bytes | BatchData, str, datetime | None]], algo: str | None
    ) -> Sequence[str | BaseException]:
        from ferry.backends.sftp import batches

        return batches.write_batch(self, [(self._abs(p), data, tok, mt) for p, data, tok, mt in items], algo)

    def commit_batch(self, items: Sequence[tuple[str, str, bool, int]]) -> Sequence[BaseException | None]:
        from ferry.backends.sftp import batches

        return batches.commit_batch(self, items)

    def read_batch(self, paths: Sequence[str]) -> Sequence[tuple[Entry, bytes | bytearray] | BaseException]:
        from ferry.backends.sftp import batches

        return batches.read_batch(self, [self._abs(p) for p in paths])

    def delegation(self, src: Backend, dst: Backend) -> JobDelegate | None:
        """Site to site: between this host and an S3 bucket the host's ``curl`` moves the bytes
        (``direct.py``); :class:`~ferry.backends.base.NoDirectRoute` says why not where it cannot."""
        from ferry.backends.sftp.direct import direct_route

        if src is self and isinstance(dst, SFTPBackend):  # host to host: host A copies (direct_ssh.py)
            from ferry.backends.sftp.direct_ssh import host_pair_route

            return host_pair_route(self, self._host.shell, dst, dst._host.shell)
        return direct_route(self, self._host.shell, src, dst)

    def close(self) -> None:
        """Connections are shared per host for the whole process (one login per host per run)."""

    def stream_plan(self) -> str | None:
        plan = self._host.last_plan  # lanes.StreamPlan: connections and streams, and why
        return plan.text() if plan is not None else None

    def partial_kept(self, path: str, file_size: int | None) -> int | None:
        held = super().partial_kept(path, file_size)
        if held and file_size is not None and file_size >= limits.PARALLEL_MIN and held <= file_size:
            return safe_resume_offset(held)  # what the writer resumes from (see writer.SFTPWriter)
        return held

    def confined(self, roots: Sequence[str]) -> SFTPBackend:
        """The view one job writes through: no link followed below any of ``roots``."""
        return ConfinedSFTP(self, roots)


class ConfinedSFTP(SFTPBackend):
    """One job's view of an SSH host: below each of the job's destination roots, nothing is
    created, written, renamed or deleted through a symbolic link. SFTP names paths, never
    folder handles, so each folder on the way from a root to a path is looked at with LSTAT
    (which does not follow a link) before the path is used; the folders this job made or found
    real are remembered, so a tree costs about one LSTAT per folder, not per file. A link where
    a folder must be raises :class:`LinkInTheWay` (with the link's own path) for the copy to
    apply its conflict policy to: kept (the folder's files are skipped), or the link itself
    removed (REMOVE never follows) and a real folder made in its place.

    The last name of a path is never followed either: a file goes to a partial name and is
    RENAMEd into place (RENAME replaces a link, not its target). Paths at or above a root, and
    paths below none, are used as they are (links followed): they are the user's own choice.
    Unlike the local view (folder descriptors), a link swapped in by another program between
    the LSTAT and the write is not caught: SFTP has no request that resolves a path without
    following links."""

    def __init__(self, base: SFTPBackend, roots: Sequence[str]) -> None:
        Backend.__init__(self, base.address)
        self._host = base._host
        self._caps = base._caps
        # The login folder ("" or ".") holds the relative paths: its prefix is "" (and no path
        # starting with "/" is below it).
        norm = {"" if posixpath.normpath(r) == "." else posixpath.normpath(r) for r in roots}
        self.roots = tuple(sorted(norm, key=len, reverse=True))  # the innermost root first
        self._prefixes = tuple((r, r if not r or r.endswith("/") else r + "/") for r in self.roots)
        self._real: set[str] = set()  # folders below a root seen real (not links) by this job
        self._roots_made: set[str] = set()  # roots made (or found) by mkdir for this job
        self._lock = threading.Lock()

    def _below(self, path: str) -> tuple[str, list[str]] | None:
        """(the root, the names of ``path`` below it), or None for a path below no root (or a
        root itself). A path that climbs out with ``..`` is refused."""
        for root, prefix in self._prefixes:
            if path.startswith(prefix) and (prefix or not path.startswith("/")):
                names = [n for n in path[len(prefix) :].split("/") if n not in ("", ".")]
                if ".." in names:
                    raise UnsafeName(f"Refused a path that would leave the destination: {self.display(path)}")
                return (root, names) if names else None
        return None

    def _folders(self, path: str, *, including: bool = False) -> list[str]:
        """The folders below a root on the way to ``path`` (``path`` itself too with
        ``including``), outermost first."""
        found = self._below(path)
        if found is None:
            return []
        root, names = found
        if not including:
            names = names[:-1]
        out, at = [], root
        for name in names:
            at = f"{at.rstrip('/')}/{name}" if at else name
            out.append(at)
        return out

    def _check(self, path: str, *, including: bool = False) -> None:
        """Raise LinkInTheWay if a folder on the way to ``path`` below its root is a link. A
        folder that is missing ends the check (nothing below it exists to be followed)."""
        todo = [f for f in self._folders(path, including=including) if f not in self._real]
        if not todo:
            return
        with self._host.pool.sftp() as c:
            for folder in todo:
                try:
                    attr = c.lstat(wire(folder))
                except FileNotFoundError:
                    return
                except Exception as exc:
                    raise map_error(exc, self.display(folder)) from exc
                if stat_mod.S_ISLNK(attr.st_mode or 0):
                    raise _link_in_the_way(self.display(folder), folder)
                if not stat_mod.S_ISDIR(attr.st_mode or 0):
                    return  # a file in the way: the request itself fails and says so
                with self._lock:
                    self._real.add(folder)

    def _forget(self, path: str) -> None:
        """A folder at ``path`` (or below it) may be gone or replaced: look at it again."""
        prefix = path.rstrip("/") + "/"
        with self._lock:
            self._real = {f for f in self._real if f != path and not f.startswith(prefix)}

    def list(self, path: str, cancel: CancelToken | None = None) -> Iterator[Entry]:
        self._check(self._abs(path), including=True)
        return super().list(path, cancel)

    def stat(self, path: str) -> Entry:
        self._check(self._abs(path))
        return super().stat(path)

    def open_write(
        self, path: str, *, size: int | None, token: str, resume: bool = False, readback: str | None = None
    ) -> SFTPWriter:
        path = self._abs(path)
        self._check(path)
        folder, name = posixpath.split(path)
        partial = posixpath.join(folder, temp_name(name, token))
        if resume and not is_small(size) and self._folders(path) and not self._host.names.absent(partial):
            # A resumed partial is opened as it stands (a new one with CREAT|EXCL): a link at
            # its name is removed first (REMOVE never follows), and the file written anew. One
            # LSTAT per file that may resume, none in a folder this job has just made.
            try:
                with self._host.pool.sftp() as c:
                    attr = _lstat_or_none(c, partial)
                    if attr is not None and stat_mod.S_ISLNK(attr.st_mode or 0):
                        c.remove(wire(partial))
            except FerryError:
                raise
            except Exception as exc:  # a dropped connection is Transient: the task is retried
                raise map_error(exc, self.display(path)) from exc
        return super().open_write(path, size=size, token=token, resume=resume, readback=readback)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        """Each folder below the root made or found without following a link: those above
        ``path`` LSTATed (usually there), ``path`` itself and anything below a missing one
        MKDIRed at once (usually new: one round trip), LSTATed only if that fails."""
        path = self._abs(path)
        found = self._below(path)
        if found is None:
            return super().mkdir(path, parents=parents, exist_ok=exist_ok)
        folders = [f for f in self._folders(path, including=True) if f not in self._real]
        if not folders and not exist_ok:
            raise AlreadyExists(f"Already exists: {self.display(path)}")
        root = found[0]
        if folders and posixpath.dirname(folders[0]) == root and parents and root not in self._roots_made:
            # The root is the user's own path (links followed): made as the backend makes it,
            # once per job (a fresh destination, "sftp://host/new/").
            super().mkdir(root or ".", parents=True, exist_ok=True)
            with self._lock:
                self._roots_made.add(root)
        try:
            with self._host.pool.sftp() as c:
                self._make_all(c, path, folders, parents, exist_ok)
        except FerryError:
            raise
        except Exception as exc:
            raise map_error(exc, self.display(path)) from exc
        return None

    def _make_all(self, c: Any, path: str, folders: Sequence[str], parents: bool, exist_ok: bool) -> None:
        missing = False
        for folder in folders:
            last = folder == path
            if missing or last:
                if not (parents or last):
                    raise NotFound(f"No such file or folder: {self.display(folder)}")
                self._make(c, folder, exist_ok or not last)
                continue
            attr = _lstat_or_none(c, folder)
            missing = attr is None
            if missing:
                if not parents:
                    raise NotFound(f"No such file or folder: {self.display(folder)}")
                self._make(c, folder, True)
            else:
                self._found(folder, attr, True)

    def _make(self, c: Any, folder: str, exist_ok: bool) -> None:
        """MKDIR ``folder``; if that fails, what stands there must be a real folder."""
        names = self._host.names
        self._host.known_dirs.discard(folder)
        names.touch(folder)
        try:
            c.mkdir(wire(folder))
        except OSError as exc:
            attr = _lstat_or_none(c, folder)
            if attr is None:
                parent = posixpath.dirname(folder)
                refused = is_failure(exc) and refused_write(c, exc, parent, self.display(folder))
                raise (refused or map_error(exc, self.display(folder))) from exc
            self._found(folder, attr, exist_ok)
            return
        names.created_folder(folder)  # empty but for what Ferry writes into it
        self._host.remember_dir(folder)
        with self._lock:
            self._real.add(folder)

    def _found(self, folder: str, attr: Any, exist_ok: bool) -> None:
        """What LSTAT found at ``folder``, where a folder must be."""
        mode = attr.st_mode or 0
        if stat_mod.S_ISLNK(mode):
            raise _link_in_the_way(self.display(folder), folder)
        if not stat_mod.S_ISDIR(mode):
            raise AlreadyExists(f"A file is in the way of folder {self.display(folder)}")
        if not exist_ok:
            raise AlreadyExists(f"Already exists: {self.display(folder)}")
        self._host.remember_dir(folder)
        with self._lock:
            self._real.add(folder)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        path = self._abs(path)
        self._check(path)
        self._forget(path)
        super().remove(path, recursive=recursive)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self._check(src)
        self._check(dst)
        self._forget(src)
        self._forget(dst)
        super().rename(src, dst, overwrite=overwrite)

    def symlink(self, target: str, path: str) -> None:
        self._check(path)
        super().symlink(target, path)

    def set_mtime(self, path: str, mtime: datetime, mtime_ns: int | None = None) -> None:
        self._check(path, including=True)  # SETSTAT follows a link: never on one below a root
        super().set_mtime(path, mtime, mtime_ns)

    def set_mode(self, path: str, mode: int) -> None:
        self._check(path, including=True)
        super().set_mode(path, mode)

    def write_batch(
        self, items: Sequence[tuple[str, bytes | BatchData, str, datetime | None]], algo: str | None
    ) -> Sequence[str | BaseException]:
        """As the backend's, for the items whose folders are no links (``tar -x``, ``mkdir -p``
        and ``mv`` on the server would follow them); the others go per file (Unsupported),
        where the link meets the conflict policy."""
        results: list[str | BaseException] = [Unsupported("not sent in a tar batch")] * len(items)
        keep: list[int] = []
        for i, (path, _data, _token, _mtime) in enumerate(items):
            try:
                self._check(self._abs(path))
            except LinkInTheWay:
                results[i] = Unsupported("a symbolic link is on its way: per file, where the policy decides")
                continue
            keep.append(i)
        if keep:
            sent = super().write_batch([items[i] for i in keep], algo)
            for i, got in zip(keep, sent, strict=True):
                results[i] = got
        return results

    def commit_batch(self, items: Sequence[tuple[str, str, bool, int]]) -> Sequence[BaseException | None]:
        results: list[BaseException | None] = [None] * len(items)
        keep: list[int] = []
        for i, (_partial, final, _overwrite, _size) in enumerate(items):
            try:
                self._check(final)
            except LinkInTheWay as exc:
                results[i] = exc
                continue
            keep.append(i)
        if keep:
            done = super().commit_batch([items[i] for i in keep])
            for i, got in zip(keep, done, strict=True):
                results[i] = got
        return results


def _link_in_the_way(shown: str, link: str) -> LinkInTheWay:
    return LinkInTheWay(
        f"{shown} is a symbolic link where a folder must be: Ferry does not write through links inside the destination",
        link,
    )


def _lstat_or_none(c: Any, path: str) -> Any:
    try:
        return c.lstat(wire(path))
    except FileNotFoundError:
        return None


def import_paramiko() -> None:
    """Import paramiko without ``invoke`` unless an ssh_config asks for ``Match exec``, the one
    thing paramiko wants it for. invoke pulls in importlib.metadata and more: ~0.2 s of the
    0.43 s ``import paramiko`` took here (``-X importtime``), paid by every ``ferry`` run that
    touches an SSH host. paramiko imports invoke inside ``try/except ImportError``."""
    import sys

    if "paramiko" in sys.modules or "invoke" in sys.modules:
        return
    from ferry.credentials.ssh_config import _expand_includes, config_paths

    for path in config_paths():
        if path.exists():
            for line in _expand_includes(path):
                words = line.lower().replace("=", " ").split()
                if words[:1] == ["match"] and "exec" in words:
                    return
            break
    sys.modules["invoke"] = None  # type: ignore[assignment]  # makes "import invoke" fail at once
    try:
        import paramiko  # noqa: F401
    finally:
        del sys.modules["invoke"]
