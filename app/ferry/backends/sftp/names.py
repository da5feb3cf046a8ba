"""Answers about remote names without a round trip (:class:`KnownNames`, one per host).

A small file's copy starts with a stat: of the source (a download: the copy wants the size and
time as they are now) or of the destination (an upload: is the name taken?). Against a host
that is a round trip per file, a third of a small download's and a quarter of a small upload's.
Two things this process already knows answer most of them:

* a file's attributes from the listing the planner made moments ago (READDIR returns them):
  used once, then forgotten, and only for FRESH seconds, so a retried file asks the server;
* a folder this process created itself moments ago holds only the names this process wrote
  into it: any other name is absent. Every name Ferry may create there (a writer's final name,
  a folder, a link, a rename's target) is noted *before* the request goes out, so a name that
  might exist is always asked for. If another program puts a file into such a folder within
  FRESH seconds, nothing is overwritten: the commit's RENAME never replaces, so that file ends
  "already exists" instead of following the conflict policy.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ferry.backends.base import Entry, Kind

FRESH = 10.0  # seconds a listing's attributes or a new folder's emptiness is trusted
_LISTED_MAX = 8192  # attributes kept from listings (the oldest go first)


class KnownNames:
    """What one host's connection knows about names without asking (see above)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._fresh: dict[str, float] = {}  # folders created here -> when
        # Every name Ferry may have created -> when. Kept for all folders, fresh or not: a worker
        # may touch a name just before another worker's mkdir of its folder is recorded.
        self._touched: dict[str, float] = {}
        self._listed: OrderedDict[str, tuple[Entry, float]] = OrderedDict()
        self._prune_fresh_at = 4096
        self._prune_touched_at = 50_000

    def _prune(self, now: float) -> None:
        # A touch matters only while its folder is fresh: FRESH seconds after a creation that
        # came at most moments after the touch. Twice that is a wide margin. The next prune waits
        # until the table has doubled, so a fast run never pays for one per name.
        if len(self._fresh) > self._prune_fresh_at:
            self._fresh = {p: t for p, t in self._fresh.items() if now - t <= FRESH}
            self._prune_fresh_at = max(4096, 2 * len(self._fresh))
        if len(self._touched) > self._prune_touched_at:
            self._touched = {n: t for n, t in self._touched.items() if now - t <= 2 * FRESH}
            self._prune_touched_at = max(50_000, 2 * len(self._touched))

    def created_folder(self, path: str) -> None:
        with self._lock:
            now = self._clock()
            self._prune(now)
            self._fresh[path.rstrip("/") or "/"] = now

    def touch(self, path: str) -> None:
        """``path`` may exist from now on: always ask the server about it."""
        path = path.rstrip("/") or "/"
        with self._lock:
            now = self._clock()
            self._prune(now)
            self._touched[path] = now
            self._listed.pop(path, None)

    def absent(self, path: str) -> bool:
        path = path.rstrip("/") or "/"
        with self._lock:
            made = self._fresh.get(posixpath.dirname(path))
            if made is None or path in self._touched:
                return False
            if self._clock() - made > FRESH:
                del self._fresh[posixpath.dirname(path)]
                return False
            return True

    def listed(self, entry: Entry) -> None:
        if entry.kind is not Kind.FILE:
            return
        with self._lock:
            self._listed[entry.path] = (entry, self._clock())
            if len(self._listed) > _LISTED_MAX:
                self._listed.popitem(last=False)

    def take_listed(self, path: str) -> Entry | None:
        with self._lock:
            got = self._listed.pop(path, None)
        if got is None or self._clock() - got[1] > FRESH:
            return None
        return got[0]

    def forget(self) -> None:
        with self._lock:
            self._fresh.clear()
            self._touched.clear()
            self._listed.clear()
