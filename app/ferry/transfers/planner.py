"""Turning "copy these sources to that destination" into file tasks, lazily.

:func:`resolve_roots` checks the request up front (missing source, folder without ``-r``,
destination inside the source, several sources onto a file, unwritable destination) so bad input
fails before anything changes. :func:`expand` then walks each source depth-first and yields
tasks as it goes, so a million-file tree starts transferring before the walk ends and is never
held in memory at once.

Symbolic links are copied as links and never followed, so nothing outside the tree is read and a
link loop cannot trap the walk; a folder reached twice (bind mounts) is skipped the second time.

Every name is checked before it becomes a task: a name that would leave the destination folder
(``..``, a separator, NUL) is skipped as ``unsafe-name``; one the destination cannot hold (longer
than its NAME_MAX, or the same as another name of the folder but for case on a destination that
does not tell case apart) as ``unrepresentable``; each with a note, none renamed.
:func:`destination_roots` names the folders a job's sources land in, below which the copy never
follows a link.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ferry.backends.base import Backend, Entry, Kind
from ferry.backends.registry import BackendPool
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import FerryError, NotFound, Transient, UsageError, describe
from ferry.core.outcomes import SkipReason
from ferry.transfers.store import NewTask

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def mtime_us(mtime: datetime | None) -> int | None:
    return None if mtime is None else (mtime - _EPOCH) // timedelta(microseconds=1)


def from_us(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


def unsafe_reason(name: str) -> str | None:
    """Why ``name`` cannot be one path component at the destination, or None if it can.

    Remote listings can hold names like ``..``, ``a/b`` or absolute paths (S3 keys); joined
    naively they would write outside the destination. Control characters other than NUL are
    legal in local names and are kept (odd, but the user's data).
    """
    if name in ("", ".", ".."):
        return f"unsafe name {name!r} would leave the destination folder"
    if "/" in name or "\x00" in name or (os.sep != "/" and os.sep in name):
        return f"unsafe name {name!r} contains a path separator or NUL"
    return None


def destination_roots(backend: Backend, roots: Iterable[tuple[str, str, str]], dest: str) -> list[str]:
    """The folders a job's sources land in (each target's folder), or ``dest`` for a job fed file
    by file (a watch, a Shipper), whose tasks all land below it. The copy never writes through a
    link below these; links at or above them are the user's choice and are followed."""
    found = [backend.split(target)[0] for _src, target, _rel in roots]
    return sorted(set(found)) if found else [dest]


def name_limit(backend: Backend, path: str) -> int | None:
    """The longest name, in bytes, the destination holds at ``path`` (None: no limit known)."""
    if backend.scheme != "local":
        return None
    while path:
        try:
            return int(os.pathconf(path, "PC_NAME_MAX"))
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent
        except (OSError, ValueError):
            return None
    return None


def folds_case(backend: Backend, path: str) -> bool:
    """Whether names at ``path`` that differ only in case are one name: the backend says so, or
    (a local disk) a name at or above ``path`` is found again with its case swapped."""
    if backend.capabilities.case_insensitive:
        return True
    if backend.scheme != "local":
        return False
    while True:
        parent, name = os.path.split(path)
        if name != name.swapcase():
            try:
                here = os.lstat(path)
            except OSError:
                here = None
            if here is not None:
                try:
                    return os.path.samestat(here, os.lstat(os.path.join(parent, name.swapcase())))
                except OSError:
                    return False
        if not name or parent == path:
            return False
        path = parent


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _fold(name: str) -> str:
    return unicodedata.normalize("NFC", name.casefold())


class _Names:
    """What the destination can hold: checks each name of one source folder against the limits
    of the folder it lands in."""

    def __init__(self, dst: Backend, root_path: str) -> None:
        self.limit = name_limit(dst, root_path)
        self.folds = folds_case(dst, root_path)
        # S3 keys are UTF-8 text: a local name that is not valid UTF-8 (its bytes kept as surrogate
        # escapes) cannot be one. (SFTP paths are bytes: such names go there as they are.)
        self.text_only = dst.scheme == "s3"

    def refusal(self, name: str, taken: dict[str, str]) -> tuple[SkipReason, str] | None:
        """Why ``name`` cannot land in a folder that already takes ``taken`` (folded: original),
        or None (then it is taken)."""
        reason = unsafe_reason(name)
        if reason:
            return SkipReason.UNSAFE_NAME, reason
        if self.text_only and not _is_text(name):
            return SkipReason.UNREPRESENTABLE, (
                f"name {os.fsencode(name)!r} is not valid UTF-8, and the destination keeps names as text"
            )
        if self.limit is not None:
            size = len(os.fsencode(name))
            if size > self.limit:
                return SkipReason.UNREPRESENTABLE, (
                    f"name is {size} bytes long and the destination holds names of at most {self.limit} bytes"
                )
        if self.folds:
            key = _fold(name)
            first = taken.setdefault(key, name)
            if first != name:
                return SkipReason.UNREPRESENTABLE, (
                    f"differs from {first!r} only in case, and the destination does not tell case apart: "
                    f"only {first!r} is copied"
                )
        return None


@dataclass(frozen=True)
class Root:
    """One source and where it lands."""

    src_backend: Backend
    src: Entry
    dst_backend: Backend
    dst_path: str
    rel: str  # the target's name relative to the folder it lands in (manifest paths)


def check_xattrs(roots: Iterable[Root]) -> None:
    """``--xattrs`` copies extended attributes between local disks: refuse it, before anything
    changes, where an end has none to read or set (rather than drop them file by file)."""
    for root in roots:
        for backend in (root.src_backend, root.dst_backend):
            if not backend.capabilities.xattrs:
                raise UsageError(
                    f"--xattrs copies extended attributes and ACLs between local disks only; "
                    f"{backend.display(root.dst_path if backend is root.dst_backend else root.src.path)} "
                    f"is on {backend.scheme}"
                )


def _same_tree(a: Backend, b: Backend) -> bool:
    return a.endpoint == b.endpoint


def _inside(backend: Backend, child: str, parent: str) -> bool:
    if backend.scheme == "local":
        child, parent = os.path.realpath(child), os.path.realpath(parent)
        return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)
    parent = parent.rstrip("/")
    return child == parent or child.startswith(parent + "/")


def _nearest_existing(backend: Backend, path: str) -> Entry | None:
    while True:
        try:
            return backend.stat(path)
        except NotFound:
            parent, _ = backend.split(path)
            if parent == path or not parent:
                return None
            path = parent


def resolve_roots(sources: list[Address], dest: Address, pool: BackendPool, *, recursive: bool) -> list[Root]:
    """Validate the request and decide each source's target path; raise UsageError if it is bad."""
    if not sources:
        raise UsageError("Nothing to copy: give at least one source")
    dst_backend = pool.get(dest)
    try:
        dst_entry, into = _check_destination(dst_backend, dest, len(sources))
    except (UsageError, Transient):
        raise  # a server down or restarting is not bad input: the caller may wait it out (jobs.prepare)
    except FerryError as exc:
        # ENOTDIR, EACCES ... on the destination's path: bad input, reported before any change.
        raise UsageError(f"Cannot write to {dest}: {exc.message[:1].lower()}{exc.message[1:]}") from exc
    roots: list[Root] = []
    for src in sources:
        src_backend = pool.get(src)
        entry = _source_entry(src_backend, src, recursive)
        target, rel = _target(src, entry, dst_backend, dest, dst_entry, into)
        if _same_tree(src_backend, dst_backend) and _inside(dst_backend, target, entry.path):
            if entry.is_dir:
                raise UsageError(f"Destination {dst_backend.display(target)} is inside the source {src}")
            raise UsageError(f"{src} and {dst_backend.display(target)} are the same file")
        roots.append(Root(src_backend, entry, dst_backend, target, rel))
    return roots


def _source_entry(src_backend: Backend, src: Address, recursive: bool) -> Entry:
    """The source as it is now, or a UsageError saying why it cannot be copied."""
    try:
        entry = src_backend.stat(src.path)
    except NotFound:
        raise UsageError(f"Source not found: {src}") from None
    except Transient:
        raise  # not bad input (see resolve_roots)
    except FerryError as exc:
        raise UsageError(f"Cannot read source {src}: {exc.message}") from None
    if entry.is_dir and not recursive:
        raise UsageError(f"{src} is a folder (use -r to copy folders)")
    if entry.kind is Kind.SPECIAL:
        raise UsageError(
            f"{src} is a {entry.meta.get('special', 'special file')}; only files, folders and links can be copied"
        )
    return entry


def _target(
    src: Address, entry: Entry, dst_backend: Backend, dest: Address, dst_entry: Entry | None, into: bool
) -> tuple[str, str]:
    """Where a source lands (its path and its name relative to the job's destination)."""
    name = entry.name or src.name
    if into:
        refused = _Names(dst_backend, dest.path).refusal(name, {})
        if refused:
            raise UsageError(f"Cannot copy {src}: {refused[1]}")
        return dst_backend.join(dest.path, name), name
    if entry.is_dir and dst_entry is not None and not dst_entry.is_dir:
        raise UsageError(f"Cannot copy folder {src} onto file {dest}")
    return dest.path, dst_backend.split(dest.path)[1]


def _check_destination(dst_backend: Backend, dest: Address, n_sources: int) -> tuple[Entry | None, bool]:
    """Stat the destination; return (its entry or None, whether sources go *into* it)."""
    try:
        dst_entry: Entry | None = _followed(dst_backend, dst_backend.stat(dest.path), dest.is_local)
    except NotFound:
        dst_entry = None
    into = (dst_entry is not None and dst_entry.is_dir) or (
        dst_entry is None and (n_sources > 1 or dest.trailing_slash)
    )
    if dst_entry is not None and not dst_entry.is_dir and n_sources > 1:
        raise UsageError(f"Target {dest} is not a folder (several sources need a folder)")
    if dst_backend.scheme == "s3" and not dest.host:
        # s3:// alone lists the buckets: nothing can be written there.
        raise UsageError(f"Name a bucket to copy into: s3://BUCKET/ ('ferry ls s3://' lists yours), not {dest}")
    # S3 keys need no folders above them, and credentials limited to a prefix may not even look
    # above it: the walk up to the nearest existing folder would ask outside the grant.
    if (dst_entry is None or dst_entry.is_dir) and dst_backend.scheme != "s3":
        anchor = _nearest_existing(dst_backend, dest.path)
        if anchor is not None:
            anchor = _followed(dst_backend, anchor, dest.is_local)
            if not anchor.is_dir:
                raise UsageError(f"Cannot create {dest}: {dst_backend.display(anchor.path)} is not a folder")
            check_writable(dst_backend, anchor.path)
    return dst_entry, into


def _followed(backend: Backend, entry: Entry, local: bool) -> Entry:
    """A link to a folder, at or above where the sources land, is that folder: the user's own
    path (``/scratch -> /lustre/scratch``), followed. Remote links (SFTP) are followed by their
    targets, a few hops at most; one that leads nowhere stays the link."""
    if entry.kind is Kind.LINK and local and os.path.isdir(entry.path):
        return backend.stat(os.path.realpath(entry.path))
    found = entry
    for _hop in range(8):
        if local or found.kind is not Kind.LINK or not found.link_target:
            break
        target = found.link_target
        if not target.startswith("/"):
            target = backend.join(backend.split(found.path)[0], target)
        try:
            found = backend.stat(target)
        except FerryError:
            return entry
    return found if found.is_dir else entry


def check_writable(backend: Backend, folder: str) -> None:
    if backend.scheme == "local" and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"Cannot write to {folder}: permission denied")


def _task_for(entry: Entry, dst_backend: Backend, dst: str, rel: str) -> NewTask:
    mt = mtime_us(entry.mtime)
    if entry.kind is Kind.FILE:
        # A file with other names: its group, so a later run of the job links them too.
        group = f"inode:{entry.inode[0]}:{entry.inode[1]}" if entry.inode is not None and entry.nlink > 1 else None
        return NewTask("file", entry.path, dst, rel, entry.size, mt, group)
    if entry.kind is Kind.DIR:
        return NewTask("dir", entry.path, dst, rel, None, mt)
    if entry.kind is Kind.LINK:
        if not dst_backend.capabilities.symlinks:
            return NewTask(
                "link",
                entry.path,
                dst,
                rel,
                None,
                mt,
                entry.link_target,
                state="skipped",
                error="symbolic link: the destination cannot store links",
                skip_reason=SkipReason.UNSUPPORTED_TYPE,
            )
        if entry.link_target is None:
            return NewTask(
                "link",
                entry.path,
                dst,
                rel,
                None,
                mt,
                None,
                state="failed",
                error="symbolic link whose target cannot be read",
                error_kind="unreadable-link",
            )
        return NewTask("link", entry.path, dst, rel, None, mt, entry.link_target)
    what = entry.meta.get("special", "special file")
    return NewTask(
        "special",
        entry.path,
        dst,
        rel,
        None,
        mt,
        what,
        state="skipped",
        error=f"{what}: special files are not copied",
        skip_reason=SkipReason.UNSUPPORTED_TYPE,
    )


def expand(roots: list[Root], cancel: CancelToken | None = None) -> Iterator[NewTask]:
    """Yield every task for ``roots``: folders before their contents, depth-first."""
    for root in roots:
        yield _task_for(root.src, root.dst_backend, root.dst_path, root.rel)
        if root.src.is_dir:
            yield from _walk(root, cancel)


def _walk(root: Root, cancel: CancelToken | None) -> Iterator[NewTask]:
    src_b, dst_b = root.src_backend, root.dst_backend
    seen: set[str] = set()
    if src_b.scheme == "local":
        seen.add(os.path.realpath(root.src.path))
    names = _Names(dst_b, root.dst_path)
    stack: list[tuple[str, str, str]] = [(root.src.path, root.dst_path, root.rel)]
    while stack:
        src_dir, dst_dir, rel_dir = stack.pop()
        subdirs: list[tuple[str, str, str]] = []
        try:
            entries = sorted(src_b.list(src_dir, cancel), key=lambda e: e.name)
        except FerryError as exc:
            if cancel is not None and cancel.cancelled:
                raise
            yield NewTask(
                "dir",
                src_dir + "\x00unreadable",
                dst_dir,
                rel_dir,
                None,
                None,
                state="failed",
                error=f"Cannot list {src_b.display(src_dir)}: {describe(exc)}",
            )
            continue
        taken: dict[str, str] = {}
        for e in entries:
            rel = f"{rel_dir}/{e.name}"
            refused = _refused(e, names, taken)
            if refused is not None:
                why, note = refused
                yield NewTask("file", e.path, dst_dir, rel, e.size, None, state="skipped", error=note, skip_reason=why)
                continue
            dst = dst_b.join(dst_dir, e.name)
            if e.is_dir and src_b.scheme == "local":
                real = os.path.realpath(e.path)
                if real in seen:
                    yield NewTask(
                        "dir",
                        e.path,
                        dst,
                        rel,
                        None,
                        None,
                        state="skipped",
                        error="folder already copied once (a loop through a mount)",
                    )
                    continue
                seen.add(real)
            yield _task_for(e, dst_b, dst, rel)
            if e.is_dir:
                subdirs.append((e.path, dst, rel))
        stack.extend(reversed(subdirs))


_KNOWN_SKIPS = {r.value: r for r in SkipReason}


def _refused(e: Entry, names: _Names, taken: dict[str, str]) -> tuple[SkipReason, str] | None:
    """Why entry ``e`` is left out by its name, or None. A listing may refuse a name itself (S3:
    a key that is also a folder, "dir/" holding data, an empty segment), as a SkipReason value in
    ``meta["skip"]`` with its note; else the destination's own limits decide."""
    refused = e.meta.get("skip")
    if refused:
        return _KNOWN_SKIPS.get(refused, SkipReason.UNSAFE_NAME), e.meta.get("name_note") or refused
    return names.refusal(e.name, taken)
