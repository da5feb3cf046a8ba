"""Backends under test for the conformance suite.

Each fixture param yields a :class:`Site`: a backend and a folder on it the test owns. A new
backend joins the suite by adding one factory to ``_FACTORIES`` (skipping, with a reason, when
the service it needs is not reachable); every contract test then runs against it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.backends.base import Backend
from ferry.backends.local import LocalBackend
from ferry.backends.memory import MemoryBackend, reset_memory_stores
from ferry.core.address import Address


@dataclass
class Site:
    backend: Backend
    root: str  # an existing, empty folder the test may fill

    def path(self, *names: str) -> str:
        return self.backend.join(self.root, *names)


def _local(tmp_path: Path) -> Iterator[Site]:
    root = tmp_path / "root"
    root.mkdir()
    backend = LocalBackend()
    yield Site(backend, str(root))
    backend.close()


def _memory(tmp_path: Path) -> Iterator[Site]:
    # A store of its own per test: nothing leaks between tests, and the name shows in failures.
    name = f"conformance-{uuid.uuid4().hex[:12]}"
    backend = MemoryBackend(Address("memory", "/", host=name))
    backend.mkdir("/conformance")  # not the store root, so paths have a real parent folder
    yield Site(backend, "/conformance")
    backend.close()
    reset_memory_stores(name)


def _sftp(tmp_path: Path) -> Iterator[Site]:
    # A real OpenSSH sshd on loopback (tests/sshd.py), started once per run on first use.
    from sftp.conformance_site import sftp_site

    yield from sftp_site(tmp_path)


def _globus(tmp_path: Path) -> Iterator[Site]:
    # A GCSv5-style collection with HTTPS in the local fake of Globus (tests/globus/fake_globus.py).
    from globus.conformance_site import globus_site

    yield from globus_site(tmp_path, Site)


_FACTORIES: dict[str, Callable[[Path], Iterator[Site]]] = {
    "globus": _globus,
    "local": _local,
    "memory": _memory,
    "sftp": _sftp,
}


@pytest.fixture(params=sorted(_FACTORIES))
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    yield from _FACTORIES[request.param](tmp_path)
