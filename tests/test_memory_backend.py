"""MemoryBackend specifics: shared named stores, fault injection, link following.
(The shared contract is checked in tests/conformance.)"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from ferry.backends.memory import MemoryBackend, get_store, reset_memory_stores
from ferry.backends.registry import backend_class
from ferry.core.address import Address, parse_address
from ferry.core.errors import FerryError, NoSpace, NotFound, PermissionDenied, Transient, UsageError


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    reset_memory_stores()
    yield
    reset_memory_stores()


def mem(name: str = "t") -> MemoryBackend:
    return MemoryBackend(Address("memory", "/", host=name))


def put(b: MemoryBackend, path: str, data: bytes, token: str = "t") -> None:
    w = b.open_write(path, size=len(data), token=token)
    w.write(data)
    w.finish()
    w.commit(overwrite=False)


def read(b: MemoryBackend, path: str) -> bytes:
    with b.open_read(path) as f:
        return f.read()


def test_registry_and_address_reach_the_backend() -> None:
    cls = backend_class("memory")
    assert cls is MemoryBackend
    b = cls(parse_address("memory://shared/x"))
    assert isinstance(b, MemoryBackend) and b.store is get_store("shared")
    assert b.display("/a b") == "memory://shared/a b"


def test_instances_with_the_same_name_share_a_store() -> None:
    put(mem("a"), "/f", b"one")
    assert read(mem("a"), "/f") == b"one"
    with pytest.raises(NotFound):
        mem("b").stat("/f")
    reset_memory_stores("a")
    with pytest.raises(NotFound):
        mem("a").stat("/f")


def test_root_always_exists_and_cannot_be_removed() -> None:
    b = mem()
    assert b.stat("/").name == "/" and b.stat("").path == "/"
    b.mkdir("/", exist_ok=True)
    with pytest.raises(FerryError):
        b.remove("/", recursive=True)


def test_fail_write_after_keeps_the_prefix_and_fires_once() -> None:
    b = mem()
    b.store.fail_write_after("big", 1000, Transient("connection dropped"))
    data = bytes(range(256)) * 20
    w = b.open_write("/big", size=len(data), token="j")
    w.write(data[:600])
    with pytest.raises(Transient):
        w.write(data[600:1200])
    w.abort(keep_partial=True)
    w2 = b.open_write("/big", size=len(data), token="j", resume=True)
    assert w2.offset == 1000  # exactly the bytes stored before the failure
    w2.write(data[1000:])
    w2.commit(overwrite=False)
    assert read(b, "/big") == data
    put(b, "/big2", b"x" * 2000)  # the fault fired once and is used up


def test_fail_write_after_every_time_and_on_short_files() -> None:
    b = mem()
    b.store.fail_write_after("/full/", 10, NoSpace("No space left on the destination"), times=None)
    b.mkdir("/full")
    for _ in range(2):
        w = b.open_write("/full/f", size=100, token="t")
        with pytest.raises(NoSpace):
            w.write(b"y" * 100)
        w.abort()
    w = b.open_write("/full/tiny", size=5, token="t")
    w.write(b"12345")
    with pytest.raises(NoSpace):
        w.finish()  # fewer than n bytes: the failure comes when the data should have landed
    put(b, "/elsewhere", b"y" * 100)  # only matching paths fail


def test_corrupt_on_commit_is_seen_by_readback_and_hash() -> None:
    b = mem()
    data = b"precious bytes" * 100
    b.store.corrupt_on_commit("victim")
    w = b.open_write("/victim", size=len(data), token="t", readback="sha256")
    w.write(data)
    assert w.finish() != hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert b.hash("/victim", "sha256") != hashlib.sha256(data).hexdigest()
    assert len(read(b, "/victim")) == len(data)  # same size: only a hash can tell
    put(b, "/victim2", data)  # used up
    assert read(b, "/victim2") == data


def test_corrupt_without_finish_still_lands_damaged() -> None:
    b = mem()
    b.store.corrupt_on_commit("e")
    w = b.open_write("/e", size=0, token="t")
    w.commit(overwrite=False)
    assert read(b, "/e") != b""  # an empty file cannot flip a byte: it grows one


def test_fail_on_operation() -> None:
    b = mem()
    b.mkdir("/locked")
    b.store.fail_on("list", "/locked", PermissionDenied("Permission denied: /locked"), times=None)
    with pytest.raises(PermissionDenied):
        list(b.list("/locked"))
    assert list(b.list("/")) != []
    b.store.clear_faults()
    assert list(b.list("/locked")) == []


def test_open_read_follows_links_and_stops_loops() -> None:
    b = mem()
    b.mkdir("/d")
    put(b, "/d/f", b"data")
    b.symlink("f", "/d/rel")
    b.symlink("/d/rel", "/abs")
    assert read(b, "/abs") == b"data"
    b.symlink("/loop2", "/loop1")
    b.symlink("/loop1", "/loop2")
    with pytest.raises(FerryError):
        read(b, "/loop1")


def test_naive_mtime_is_refused() -> None:
    b = mem()
    put(b, "/f", b"x")
    from datetime import datetime

    with pytest.raises(UsageError):
        b.set_mtime("/f", datetime(2020, 1, 1))


def test_rename_folder_into_itself_is_refused() -> None:
    b = mem()
    b.mkdir("/a/b")
    with pytest.raises(FerryError):
        b.rename("/a", "/a/b/c")
    assert b.stat("/a/b").is_dir
