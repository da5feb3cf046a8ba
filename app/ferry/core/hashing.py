"""Hash algorithms by name, and a helper to hash a readable stream.

sha256 is the default (universal; ~1.3 GB/s with SHA-NI), blake3 the fast choice (~2.5 GB/s in one
thread). Both release the GIL for large buffers, so a reader thread and a read-back thread hash in
parallel on two cores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

from ferry.core.cancel import CancelToken
from ferry.core.errors import UsageError


class Readable(Protocol):
    def readinto(self, buffer: bytearray | memoryview, /) -> int | None: ...


class Hasher(Protocol):
    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...
    def hexdigest(self) -> str: ...


def _blake3() -> Hasher:
    import blake3

    # max_threads stays 1: the scheduler already runs one hashing thread per transfer.
    h: Hasher = blake3.blake3()
    return h


_FACTORIES: dict[str, Callable[[], Hasher]] = {
    "sha256": hashlib.sha256,
    "blake3": _blake3,
    "md5": hashlib.md5,
    "sha1": hashlib.sha1,
}

HASH_ALGORITHMS = tuple(_FACTORIES)
class VerifyMode(StrEnum):
    """How a job checks what it copied (stored with the job; the same strings in the queue)."""

    SHA256 = "sha256"
    BLAKE3 = "blake3"
    SIZE = "size"
    NONE = "none"

    @property
    def hash_algo(self) -> str | None:
        return self.value if self in (VerifyMode.SHA256, VerifyMode.BLAKE3) else None


VERIFY_MODES = tuple(m.value for m in VerifyMode)


def new_hasher(algo: str) -> Hasher:
    try:
        return _FACTORIES[algo]()
    except KeyError:
        raise UsageError(f"Unknown hash algorithm '{algo}' (known: {', '.join(HASH_ALGORITHMS)})") from None


def hash_stream(
    stream: Readable, algo: str, cancel: CancelToken | None = None, chunk: int = 4 << 20
) -> tuple[str, int]:
    """Hash a stream to its end; return (hex digest, bytes read)."""
    h = new_hasher(algo)
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    while True:
        if cancel is not None:
            cancel.check()
        n = stream.readinto(view)
        if not n:
            return h.hexdigest(), total
        h.update(view[:n])
        total += n
