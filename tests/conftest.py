"""Shared fixtures: the real ``ferry`` command, isolated in the test's own folder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.backends.memory import reset_memory_stores
from ferry.transfers.store import Store
from helpers import Ferry, MemSite


@pytest.fixture
def ferry(tmp_path: Path) -> Ferry:
    """Run ``ferry`` in a subprocess with its data and config under ``tmp_path``."""
    return Ferry(home=tmp_path, cwd=tmp_path)


@pytest.fixture
def site() -> Iterator[MemSite]:
    """A fresh in-memory site (``mem://`` addresses), emptied afterwards. Folders with a site of
    another kind (the conformance suite) override this."""
    name = f"mem-{uuid.uuid4().hex[:10]}"
    yield MemSite(name)
    reset_memory_stores(name)


@pytest.fixture
def store(ferry: Ferry) -> Iterator[Store]:
    """The queue database the ``ferry`` fixture's CLI uses too."""
    s = Store(ferry.home / "data" / "queue.db")
    yield s
    s.close()
