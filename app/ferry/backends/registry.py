"""Which module serves which address scheme; backends are imported only when first used.

Adding a backend is one module plus one line in ``_BACKENDS``.
"""

from __future__ import annotations

import importlib
import threading

from ferry.backends.base import Backend
from ferry.core.address import Address
from ferry.core.errors import Unsupported

_BACKENDS: dict[str, str] = {
    "local": "ferry.backends.local:LocalBackend",
    "memory": "ferry.backends.memory:MemoryBackend",
    "sftp": "ferry.backends.sftp:SFTPBackend",
    "s3": "ferry.backends.s3:S3Backend",
    "globus": "ferry.backends.globus:GlobusBackend",
}


def register(scheme: str, target: str) -> None:
    """Register ``module:Class`` for ``scheme`` (tests and plug-ins)."""
    _BACKENDS[scheme] = target


def backend_class(scheme: str) -> type[Backend]:
    try:
        target = _BACKENDS[scheme]
    except KeyError:
        raise Unsupported(f"No backend for '{scheme}' addresses") from None
    module, _, name = target.partition(":")
    cls: type[Backend] = getattr(importlib.import_module(module), name)
    return cls


class BackendPool:
    """One backend instance per endpoint, shared by every transfer in the process.

    Sharing is what lets a remote backend keep one authenticated connection per host (one 2FA
    prompt however many files run in parallel).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._backends: dict[str, Backend] = {}

    def get(self, address: Address) -> Backend:
        key = address.endpoint
        with self._lock:
            backend = self._backends.get(key)
            if backend is None:
                backend = backend_class(address.scheme)(address)
                self._backends[key] = backend
            return backend

    def close(self) -> None:
        with self._lock:
            backends, self._backends = list(self._backends.values()), {}
        for b in backends:
            b.close()

    def __enter__(self) -> BackendPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
