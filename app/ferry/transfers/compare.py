"""Comparing two trees as two sorted streams: what is only in A, only in B, different, identical.

Each side is walked depth-first with every folder's listing sorted by name, so both walks yield
paths in the same order (component by component, as tuples compare). :func:`compare` merges the
two streams like the merge step of a merge sort: at any moment it holds one entry of each side
and the folder listings on the current path, never either tree, and it reports each difference
as soon as both walks have passed its name.

Times are compared within the coarser side's precision (``Capabilities.mtime_precision``: S3 and
SFTP keep seconds, local disks nanoseconds). A listing may give a time other than the file's own
(an S3 listing gives the upload time; Ferry and rclone keep the file's time in the object's
metadata): where times differ and a side's listing did not give nanoseconds, that side's entry is
asked for (``stat``) before the file is called different.

``--by checksum`` (:class:`ContentCheck`) compares content only where sizes agree, using what the
servers hold first: a hash in the listing, a hash the server computes (an SSH host's
``sha256sum``), one the store keeps with the object (S3: Ferry's stored SHA-256; else its ETag or
checksums, which the other side's bytes are fed to), and reads a file only where nothing else
exists. Every checked pair says how (:attr:`Item.how`), so nothing is called checked that was not.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial

from ferry.backends.base import PARTIAL_SUFFIX, Backend, Entry, Kind
from ferry.core.cancel import CancelToken
from ferry.core.errors import FerryError, NotFound, Unsupported, UsageError
from ferry.core.hashing import new_hasher

_CHUNK = 1 << 20


class By(StrEnum):
    SIZE_MTIME = "size-mtime"
    CHECKSUM = "checksum"


class State(StrEnum):
    ONLY_A = "only-a"
    ONLY_B = "only-b"
    DIFFERENT = "different"
    SAME = "same"


class Reason(StrEnum):
    KIND = "kind"  # a file on one side, a folder or link on the other
    SIZE = "size"
    TIME = "time"
    CONTENT = "content"
    LINK = "link"  # two links pointing elsewhere


@dataclass(frozen=True)
class Item:
    """One name of the union of both trees. ``rel`` uses "/" whatever the backends."""

    rel: str
    state: State
    a: Entry | None
    b: Entry | None
    reasons: tuple[Reason, ...] = ()
    how: str = ""  # for people: how content was compared (checksum mode), which side was read

    @property
    def kind(self) -> Kind:
        entry = self.a if self.a is not None else self.b
        assert entry is not None
        return entry.kind


@dataclass
class Totals:
    """Counts of files (and links) by state; folders are not counted."""

    only_a: int = 0
    only_b: int = 0
    different: int = 0
    same: int = 0
    read_a: int = 0  # files whose bytes were read to compare content
    read_b: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)

    def add(self, item: Item) -> None:
        if item.kind is Kind.DIR and item.state in (State.SAME, State.ONLY_A, State.ONLY_B):
            return
        if item.state is State.ONLY_A:
            self.only_a += 1
        elif item.state is State.ONLY_B:
            self.only_b += 1
        elif item.state is State.DIFFERENT:
            self.different += 1
            for r in item.reasons:
                self.by_reason[r.value] = self.by_reason.get(r.value, 0) + 1
        else:
            self.same += 1

    @property
    def identical(self) -> bool:
        return not (self.only_a or self.only_b or self.different)

    def to_json(self) -> dict[str, object]:
        return {
            "only_a": self.only_a,
            "only_b": self.only_b,
            "different": self.different,
            "same": self.same,
            "different_by_reason": dict(sorted(self.by_reason.items())),
            "read_a": self.read_a,
            "read_b": self.read_b,
        }


Key = tuple[str, ...]
# A name decided at once, or a content check still to run (``--by checksum``).
Decided = Item | Callable[[], Item]


LISTERS = 0  # folder listings fetched ahead, per side, on local disks (measured: no gain, the GIL is the limit)
REMOTE_LISTERS = 8  # ... and where each listing is a round trip to a server


def sorted_walk(
    backend: Backend,
    root: str,
    *,
    recursive: bool = True,
    cancel: CancelToken | None = None,
    listers: int | None = None,
) -> Iterator[tuple[Key, Entry]]:
    """(path components, entry) under the folder ``root`` in tuple order: each folder's listing
    sorted by name, a folder followed at once by its contents. Links are never followed.

    The listings of the next folders the walk will enter are fetched ahead by ``listers``
    threads (default: :data:`LISTERS` on local disks, :data:`REMOTE_LISTERS` on servers), so a
    walk of many small folders waits for one round trip at a time, not one per folder. Held at
    any moment: the listings of the folders on the current path and at most ``listers`` fetched
    ahead, never the tree."""
    if listers is None:
        listers = LISTERS if backend.address.scheme in ("local", "memory") else REMOTE_LISTERS
    ahead = _Ahead(backend, cancel, listers) if recursive and listers > 0 else None
    try:
        yield from _walk(backend, root, recursive, cancel, ahead)
    finally:
        if ahead is not None:
            ahead.close()


def _walk(
    backend: Backend, root: str, recursive: bool, cancel: CancelToken | None, ahead: _Ahead | None
) -> Iterator[tuple[Key, Entry]]:
    first = _sorted_list(backend, root, cancel)
    stack: list[tuple[Key, list[Entry], int]] = [((), first, 0)]
    if ahead is not None:
        ahead.top_up(stack)
    while stack:
        parent, entries, at = stack[-1]
        if at >= len(entries):
            stack.pop()
            continue
        entry = entries[at]
        stack[-1] = (parent, entries, at + 1)
        if is_ferrys_own(entry.name):
            continue
        key = (*parent, entry.name)
        yield key, entry
        if recursive and entry.kind is Kind.DIR:
            listing = ahead.take(entry.path) if ahead is not None else _sorted_list(backend, entry.path, cancel)
            stack.append((key, listing, 0))
            if ahead is not None:
                ahead.top_up(stack)


class _Ahead:
    """Folder listings fetched ahead of a depth-first walk, in the order the walk will want them:
    the next folders of the deepest listing first, then those of the folders above it."""

    def __init__(self, backend: Backend, cancel: CancelToken | None, listers: int) -> None:
        self.backend, self.cancel, self.limit = backend, cancel, listers
        self.pool = ThreadPoolExecutor(listers, thread_name_prefix="ferry-list-ahead")
        self.pending: dict[str, Future[list[Entry]]] = {}

    def take(self, path: str) -> list[Entry]:
        """The listing of ``path``: fetched ahead (its error, if it failed, raised here, in the
        walk's order, as a direct listing would), or listed now."""
        future = self.pending.pop(path, None)
        if future is None:
            return _sorted_list(self.backend, path, self.cancel)
        return future.result()

    def top_up(self, stack: list[tuple[Key, list[Entry], int]]) -> None:
        for _parent, entries, at in reversed(stack):
            for entry in entries[at:]:
                if len(self.pending) >= self.limit:
                    return
                if entry.kind is Kind.DIR and entry.path not in self.pending and not is_ferrys_own(entry.name):
                    self.pending[entry.path] = self.pool.submit(_sorted_list, self.backend, entry.path, self.cancel)

    def close(self) -> None:
        for future in self.pending.values():
            future.cancel()
        self.pending.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)


def is_ferrys_own(name: str) -> bool:
    """Ferry's own temporary names: a partial file (``.NAME.TOKEN.ferry-part``, kept so a paused
    or interrupted copy resumes) and an S3 checksum probe (``.ferry-probe-…``, deleted at once but
    seen by a listing made meanwhile). Neither is compared, copied or deleted by a sync."""
    return name.endswith(PARTIAL_SUFFIX) or name.startswith(".ferry-probe-")


def _sorted_list(backend: Backend, path: str, cancel: CancelToken | None) -> list[Entry]:
    return sorted(backend.list(path, cancel), key=lambda e: e.name)


@dataclass(frozen=True)
class Side:
    backend: Backend
    root: str  # a folder, or a file (then compared as that one file)
    is_dir: bool


def open_side(backend: Backend, path: str, label: str) -> Side:
    """The side at ``path``, or a UsageError (bad input: nothing compared) if it cannot be read."""
    try:
        entry = backend.stat(path)
    except NotFound:
        raise UsageError(f"{label} not found: {backend.display(path)}") from None
    except FerryError as exc:
        raise UsageError(f"Cannot read {backend.display(path)}: {exc.message}") from None
    if entry.kind is Kind.DIR:
        return Side(backend, path, True)
    if entry.kind is Kind.FILE:
        return Side(backend, path, False)
    raise UsageError(f"{backend.display(path)} is neither a file nor a folder")


def compare(
    a: Side,
    b: Side,
    *,
    by: By = By.SIZE_MTIME,
    recursive: bool = False,
    cancel: CancelToken | None = None,
    totals: Totals | None = None,
) -> Iterator[Item]:
    """Every name of both sides, in order, as it is decided. Two files compare as themselves.

    With ``by=checksum`` the content checks of up to ``CHECKERS`` pairs run at once (each reads
    or asks a server), and items still come out in order, at most ``WINDOW`` names behind."""
    if a.is_dir != b.is_dir:
        raise UsageError("Compare a folder with a folder, or a file with a file")
    tolerance = max(a.backend.capabilities.mtime_precision, b.backend.capabilities.mtime_precision)
    content = ContentCheck(a.backend, b.backend, totals) if by is By.CHECKSUM else None
    decided = _merge(
        a, b, recursive, cancel, lambda rel, ea, eb: _pair(rel, ea, eb, a.backend, b.backend, tolerance, content)
    )
    if content is None:
        for item in decided:
            assert isinstance(item, Item)
            yield item
        return
    yield from _in_order(decided)


def _merge(
    a: Side, b: Side, recursive: bool, cancel: CancelToken | None, pair: Callable[[str, Entry, Entry], Decided]
) -> Iterator[Decided]:
    if not a.is_dir:
        ea, eb = a.backend.stat(a.root), b.backend.stat(b.root)
        yield pair(ea.name, ea, eb)
        return
    left = sorted_walk(a.backend, a.root, recursive=recursive, cancel=cancel)
    right = sorted_walk(b.backend, b.root, recursive=recursive, cancel=cancel)
    x, y = next(left, None), next(right, None)
    while x is not None or y is not None:
        if cancel is not None:
            cancel.check()
        if y is None or (x is not None and x[0] < y[0]):
            assert x is not None
            yield Item("/".join(x[0]), State.ONLY_A, x[1], None)
            x = next(left, None)
        elif x is None or y[0] < x[0]:
            yield Item("/".join(y[0]), State.ONLY_B, None, y[1])
            y = next(right, None)
        else:
            yield pair("/".join(x[0]), x[1], y[1])
            x, y = next(left, None), next(right, None)


CHECKERS = 8  # content checks at once (as rclone's --checkers)
WINDOW = 256  # names decided ahead of the one being reported


def _in_order(decided: Iterator[Decided]) -> Iterator[Item]:
    """Run the pending content checks on a pool of threads; yield every item in walk order."""
    window: deque[Item | Future[Item]] = deque()
    with ThreadPoolExecutor(max_workers=CHECKERS, thread_name_prefix="ferry-compare") as pool:
        try:
            for d in decided:
                window.append(d if isinstance(d, Item) else pool.submit(d))
                while window and (len(window) > WINDOW or _ready(window[0])):
                    yield _result(window.popleft())
            while window:
                yield _result(window.popleft())
        finally:
            for w in window:
                if isinstance(w, Future):
                    w.cancel()


def _ready(w: Item | Future[Item]) -> bool:
    return isinstance(w, Item) or w.done()


def _result(w: Item | Future[Item]) -> Item:
    return w if isinstance(w, Item) else w.result()


def _pair(
    rel: str, ea: Entry, eb: Entry, ba: Backend, bb: Backend, tolerance: float, content: ContentCheck | None
) -> Decided:
    if ea.kind is not eb.kind:
        return Item(rel, State.DIFFERENT, ea, eb, (Reason.KIND,))
    if ea.kind is Kind.DIR:
        return Item(rel, State.SAME, ea, eb)
    if ea.kind is Kind.LINK:
        same = ea.link_target == eb.link_target
        return Item(rel, State.SAME if same else State.DIFFERENT, ea, eb, () if same else (Reason.LINK,))
    if ea.size is not None and eb.size is not None and ea.size != eb.size:
        return Item(rel, State.DIFFERENT, ea, eb, (Reason.SIZE,))
    if content is not None:
        return partial(_by_content, content, rel, ea, eb)
    if not times_equal(ea, eb, tolerance):
        # The listing's time may not be the file's own (S3 lists the upload time): ask the entry.
        ea2 = ea if ea.mtime_ns is not None else ba.stat(ea.path)
        eb2 = eb if eb.mtime_ns is not None else bb.stat(eb.path)
        if not times_equal(ea2, eb2, tolerance):
            return Item(rel, State.DIFFERENT, ea2, eb2, (Reason.TIME,))
        ea, eb = ea2, eb2
    if ea.size is None or eb.size is None:
        return Item(rel, State.DIFFERENT, ea, eb, (Reason.SIZE,))  # unknown is never "the same"
    return Item(rel, State.SAME, ea, eb)


def _by_content(content: ContentCheck, rel: str, ea: Entry, eb: Entry) -> Item:
    same, how = content.same(ea, eb)
    return Item(rel, State.SAME if same else State.DIFFERENT, ea, eb, () if same else (Reason.CONTENT,), how)


def times_equal(a: Entry, b: Entry, tolerance: float) -> bool:
    """Closer than ``tolerance`` seconds (the coarser side's precision: a time kept to the second
    matches any within that second); unknown is not equal."""
    ta, tb = a.own_mtime_ns, b.own_mtime_ns
    if ta is None or tb is None:
        return False
    return abs(ta - tb) < max(1, round(tolerance * 1e9))


# ---------------------------------------------------------------- content


class ContentCheck:
    """Whether two files of the same size hold the same bytes, by the cheapest honest means."""

    algo = "sha256"

    def __init__(self, a: Backend, b: Backend, totals: Totals | None = None) -> None:
        self.a, self.b = a, b
        self.totals = totals
        self._lock = threading.Lock()  # checks run on several threads

    def same(self, ea: Entry, eb: Entry) -> tuple[bool, str]:
        """(same content, how it was found) for two files."""
        ha, how_a = self._free_hash(self.a, ea)
        hb, how_b = self._free_hash(self.b, eb)
        if ha is None and hb is None:
            found = self._by_evidence(ea, eb)
            if found is not None:
                return found
        if ha is None:
            ha, how_a = self._read(self.a, ea, "a")
        if hb is None:
            hb, how_b = self._read(self.b, eb, "b")
        return ha == hb, f"{self.algo}: A {how_a}, B {how_b}"

    def _free_hash(self, backend: Backend, entry: Entry) -> tuple[str | None, str]:
        """A hash that moves no file bytes through Ferry: listed, kept by the store, or computed on
        the server (an SSH host's own tool). None where the file would have to be read."""
        listed = entry.hashes.get(self.algo)
        if listed:
            return listed, "listed"
        if backend.scheme == "sftp" and self.algo in backend.capabilities.hashes:
            return backend.hash(entry.path, self.algo), "hashed on the server"
        if backend.capabilities.source_evidence:
            stored = backend.stat(entry.path).hashes.get(self.algo)
            if stored:
                return stored, "stored with the object"
        return None, ""

    def _by_evidence(self, ea: Entry, eb: Entry) -> tuple[bool, str] | None:
        """One side's store keeps evidence (S3 ETag, checksums): read only the other side's bytes
        and compare them with it. None where neither side keeps any, or it cannot decide."""
        for holder, he, reader, re_, side in ((self.b, eb, self.a, ea, "a"), (self.a, ea, self.b, eb, "b")):
            source = holder.features.source_evidence
            if source is None:
                continue
            check = source.evidence_for(he)
            with reader.open_read(re_.path) as f:
                while chunk := f.read(_CHUNK):
                    check.update(chunk)
            self._count(side)
            result = check.result()
            if result.evidence is None:
                continue
            other = "B" if side == "a" else "A"
            return (
                result.matched,
                f"{result.evidence.value}: {side.upper()} read, compared with {other}'s {result.evidence.value}",
            )
        return None

    def _read(self, backend: Backend, entry: Entry, side: str) -> tuple[str, str]:
        self._count(side)
        try:
            return backend.hash(entry.path, self.algo), "read"
        except Unsupported:
            hasher = new_hasher(self.algo)
            with backend.open_read(entry.path) as f:
                while chunk := f.read(_CHUNK):
                    hasher.update(chunk)
            return hasher.hexdigest(), "read"

    def _count(self, side: str) -> None:
        if self.totals is None:
            return
        with self._lock:
            if side == "a":
                self.totals.read_a += 1
            else:
                self.totals.read_b += 1
