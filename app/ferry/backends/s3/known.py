"""What one S3 backend knows without asking the store again.

* A prefix seen holding no key at all answers "not found" for the keys under it, for
  :data:`ABSENT_TTL` seconds, unless this backend wrote them: the destination stat of a fresh
  upload then costs no request. The answer only steers the conflict policy (skip/rename); the
  no-overwrite guarantee itself is the commit's If-None-Match or its HEAD just before the PUT,
  which are always sent.
* stat() asks with a GET of the first :data:`STAT_GET` bytes instead of a HEAD (the same headers,
  and a small object's whole body): those bytes are kept for :data:`BODY_TTL` seconds for the
  open_read that follows, so a small download is one request, not HEAD + GET.
"""

from __future__ import annotations

import threading
import time

ABSENT_TTL = 30.0
STAT_GET = 256 << 10
BODY_TTL = 30.0
MAX_ABSENT = 10_000
MAX_BODIES = 256  # stats nobody read from: never hold more than ~64 MiB


class KnownKeys:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._absent: dict[str, float] = {}  # "a/b/" -> when it was seen holding no key at all
        self._touched: set[str] = set()  # keys written through this backend, and their "a/", "a/b/"
        self._bodies: dict[str, tuple[float, bytes, int, str]] = {}  # stat()'s first bytes, size, ETag

    def absent(self, key: str) -> bool:
        """Whether a folder of ``key`` held no key moments ago and this backend wrote nothing there."""
        k = key.rstrip("/")
        if not self._absent or k in self._touched or k + "/" in self._touched:
            return False
        now = time.monotonic()
        p = k
        while "/" in p:
            p = p.rsplit("/", 1)[0]
            seen = self._absent.get(p + "/")
            if seen is not None and now - seen < ABSENT_TTL:
                return True
        return False

    def note_absent(self, key: str) -> None:
        if len(self._absent) > MAX_ABSENT:
            self._absent.clear()
        self._absent[key.rstrip("/") + "/"] = time.monotonic()

    def note_written(self, key: str) -> None:
        """``key`` now exists (we wrote it): never answer "not found" for it or its folders."""
        parts = key.split("/")
        self._bodies.pop(key, None)
        with self._lock:
            self._touched.add(key)
            for i in range(1, len(parts)):
                self._touched.add("/".join(parts[:i]) + "/")

    def keep_body(self, key: str, body: bytes, total: int, etag: str) -> None:
        """The first bytes of ``key`` (``total`` bytes long, version ``etag``), seen by stat()."""
        if len(self._bodies) > MAX_BODIES:
            self._bodies.clear()
        self._bodies[key] = (time.monotonic(), body, total, etag)

    def take_body(self, key: str) -> tuple[bytes, int, str] | None:
        """The first bytes stat() saw of ``key`` moments ago, their total and ETag (once)."""
        got = self._bodies.pop(key, None)
        if got is None or time.monotonic() - got[0] > BODY_TTL:
            return None
        return got[1], got[2], got[3]

    def forget_body(self, key: str) -> None:
        """``key`` is being deleted: its bytes must not be read from memory."""
        self._bodies.pop(key, None)
