"""Folder listings fetched ahead of a comparison's walk (issue 23: "lists at the backends' best
speed, listings in parallel per folder"): the walk yields exactly what a one-at-a-time walk
yields, in the same order; several listings are in flight at once where the backend is a
server; a listing that fails is raised where the walk reaches that folder; and no more than
``listers`` listings are ever held ahead."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ferry.backends.base import Entry
from ferry.backends.memory import MemoryBackend, get_store, reset_memory_stores
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import PermissionDenied
from ferry.transfers.compare import REMOTE_LISTERS, sorted_walk


class SlowServer(MemoryBackend):
    """A memory tree whose listings take a round trip (``rtt`` seconds), as an SFTP or S3 server's
    do; it notes how many listings were in flight at once and how many were asked for."""

    def __init__(self, address: Address, rtt: float) -> None:
        super().__init__(address)
        self.rtt = rtt
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.listed: list[str] = []

    def list(self, path: str, cancel: CancelToken | None = None) -> Iterator[Entry]:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.listed.append(path)
        try:
            time.sleep(self.rtt)
            return iter(list(super().list(path, cancel)))
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture
def tree() -> Iterator[str]:
    reset_memory_stores()
    b = MemoryBackend(Address("memory", "/", host="ahead"))
    for d in range(12):
        for sub in range(3):
            b.mkdir(f"/root/d{d:02}/s{sub}", parents=True, exist_ok=True)
            _put(b, f"/root/d{d:02}/s{sub}/f.dat", b"x")
        _put(b, f"/root/d{d:02}/top.txt", b"ab")
    yield "ahead"
    reset_memory_stores()


def _put(b: MemoryBackend, path: str, data: bytes) -> None:
    w = b.open_write(path, size=len(data), token="t")
    w.write(data)
    w.finish()
    w.commit(overwrite=False)


def walk(server: SlowServer, listers: int) -> list[tuple[tuple[str, ...], str, int | None]]:
    return [(k, e.kind.value, e.size) for k, e in sorted_walk(server, "/root", listers=listers)]


def test_fetching_ahead_yields_what_a_plain_walk_yields_with_listings_in_parallel(tree: str) -> None:
    plain = SlowServer(Address("memory", "/", host=tree), rtt=0.01)
    ahead = SlowServer(Address("memory", "/", host=tree), rtt=0.01)
    expected = walk(plain, 0)
    assert walk(ahead, REMOTE_LISTERS) == expected
    assert len(expected) == 12 * (1 + 3 * 2 + 1)
    assert plain.most_in_flight == 1
    assert ahead.most_in_flight > 1  # several round trips overlapped
    assert sorted(ahead.listed) == sorted(plain.listed)  # each folder listed once, none extra


def test_never_more_than_listers_held_ahead(tree: str) -> None:
    server = SlowServer(Address("memory", "/", host=tree), rtt=0.005)
    walk(server, 3)
    assert 1 < server.most_in_flight <= 3 + 1  # the pool's three, plus the walk's own first listing


def test_a_failed_listing_is_raised_where_the_walk_reaches_it(tree: str) -> None:
    get_store(tree).fail_on("list", "/root/d05/s1", PermissionDenied("no access to d05/s1"), times=None)
    for listers in (0, REMOTE_LISTERS):
        server = SlowServer(Address("memory", "/", host=tree), rtt=0.002)
        seen: list[tuple[str, ...]] = []
        with pytest.raises(PermissionDenied):
            for key, _ in sorted_walk(server, "/root", listers=listers):
                seen.append(key)
        assert seen[-1] == ("d05", "s1")  # everything before it was yielded, nothing after
        assert ("d05", "s2") not in seen
