"""The download paths that make a large object fast, against both real servers: parallel ranged
GETs read straight into a few reused buffers, the stream's SHA-256 computed in order on the
fetching threads (handed over by the copy), and an object replaced mid-download refused rather than
stitched together from two versions. The range size is shrunk so a few MiB take many ranges."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ferry.backends.local import LocalBackend
from ferry.backends.s3 import S3Backend
from ferry.backends.s3.known import STAT_GET
from ferry.backends.s3.reader import RangedReader
from ferry.backends.s3.settings import settings_for
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import Transient
from ferry.core.outcomes import TaskState
from ferry.core.progress import Accounting
from ferry.transfers.bandwidth import Limiters
from ferry.transfers.copy import CopyContext, run_task
from ferry.transfers.options import JobOptions
from ferry.transfers.store import Task
from s3.conftest import make_backend
from s3.servers import S3Server, aws_env

RANGE = 128 << 10


@pytest.fixture
def backend(server: S3Server, bucket: str) -> Iterator[S3Backend]:
    """The conftest's backend, with small ranges."""
    b = make_backend(server, bucket, range_size=RANGE)
    yield b
    b.close()


class _Gets:
    """Every GET, by which path it went: the lean one's hook and botocore's before-send event."""

    def __init__(self, backend: S3Backend) -> None:
        self.lean: list[str] = []
        self.boto: list[str] = []
        assert backend.conn.lean is not None
        backend.conn.lean.sent = lambda method, key: self.lean.append(method)
        events = backend.conn.client.meta.events
        events.register("before-send.s3", lambda request, **_: self.boto.append(request.method))


def _task(src: str, dst: str, size: int) -> Task:
    name, queued = os.path.basename(dst), TaskState.QUEUED
    return Task(1, 1, "file", src, dst, name, size, None, None, queued, 0, False, None, None, None, None, None)


def test_a_large_object_comes_in_order_through_reused_buffers_and_is_hashed_on_the_way(
    server: S3Server, backend: S3Backend
) -> None:
    data = os.urandom(20 * RANGE + 12345)  # the stat's first 256 KiB, then 19 ranges and a short last one
    server.client().put_object(Bucket=backend.bucket, Key="big.bin", Body=data)
    gets = _Gets(backend)
    assert backend.stat("big.bin").size == len(data)
    hasher = hashlib.sha256()
    with backend.open_read("big.bin") as f:
        assert isinstance(f, RangedReader)
        assert f.feed_hasher(hasher)
        got = bytearray()
        buf = bytearray(100_000)  # not a divisor of the range: reads straddle buffer boundaries
        while n := f.readinto(buf):
            got += buf[:n]
        made = f._made
    assert bytes(got) == data
    assert hasher.hexdigest() == hashlib.sha256(data).hexdigest()
    assert made <= backend.settings.part_concurrency + 1  # a few buffers, reused range after range
    assert gets.boto == [] and len(gets.lean) == 1 + -(-(len(data) - STAT_GET) // RANGE)


def test_a_hasher_is_taken_only_before_the_first_byte(backend: S3Backend, server: S3Server) -> None:
    data = os.urandom(6 * RANGE)
    server.client().put_object(Bucket=backend.bucket, Key="late.bin", Body=data)
    with backend.open_read("late.bin") as f:  # no stat first: one GET finds the size, ranges follow
        assert isinstance(f, RangedReader)
        first = f.read(10)
        assert not f.feed_hasher(hashlib.sha256())  # the copy then hashes what it reads itself
        assert first + f.read() == data


def test_a_slice_of_a_large_object(backend: S3Backend, server: S3Server) -> None:
    data = os.urandom(9 * RANGE + 7)
    server.client().put_object(Bucket=backend.bucket, Key="slice.bin", Body=data)
    with backend.open_read("slice.bin", 1000, 5 * RANGE + 3) as f:
        assert f.read() == data[1000 : 1000 + 5 * RANGE + 3]
    with backend.open_read("slice.bin", 3 * RANGE + 1) as f:  # to the end
        assert f.read() == data[3 * RANGE + 1 :]


def test_the_copy_hands_its_hasher_to_the_reader_and_verifies_as_before(
    server: S3Server, backend: S3Backend, tmp_path: Path
) -> None:
    data = os.urandom(12 * RANGE + 99)
    server.client().put_object(Bucket=backend.bucket, Key="copy/big.bin", Body=data)
    fed: list[bool] = []
    real = RangedReader.feed_hasher

    def spy(self: RangedReader, hasher: Any) -> bool:
        fed.append(real(self, hasher))
        return fed[-1]

    local = LocalBackend(Address("file", "/"))
    ctx = CopyContext(backend, local, JobOptions(on_conflict="overwrite"), Accounting(), Limiters())
    dst = str(tmp_path / "big.bin")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RangedReader, "feed_hasher", spy)
        outcome = run_task(_task("copy/big.bin", dst, len(data)), ctx, CancelToken())
    assert fed == [True]  # the loop did not hash these bytes a second time
    assert Path(dst).read_bytes() == data
    assert outcome.hash == hashlib.sha256(data).hexdigest()
    assert outcome.verified.startswith("sha256 match")  # the stream hash against the read-back of the file


def test_the_readers_buffers_are_lent_in_order_and_are_the_bytes_it_hashed(
    server: S3Server, backend: S3Backend
) -> None:
    data = os.urandom(7 * RANGE + 321)
    server.client().put_object(Bucket=backend.bucket, Key="lent.bin", Body=data)
    assert backend.stat("lent.bin").size == len(data)
    hasher = hashlib.sha256()
    with backend.open_read("lent.bin") as f:
        assert isinstance(f, RangedReader) and f.feed_hasher(hasher)
        got = bytearray()
        while view := f.next_view():
            got += view
        made = f._made
    assert bytes(got) == data and hasher.hexdigest() == hashlib.sha256(data).hexdigest()
    assert made <= backend.settings.part_concurrency + 1


@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "bandwidth limit"])
def test_the_copy_writes_the_lent_buffers_and_compares_what_landed(
    server: S3Server, backend: S3Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limited: bool
) -> None:
    # The reader hashed its buffers and the copy writes those very buffers: the local read-back
    # compares each write instead of hashing the file again. Under a bandwidth limit the copy
    # reads into its own buffer (a copy of what was hashed): there the read-back hashes.
    from ferry.backends import local as local_mod
    from ferry.transfers.bandwidth import TokenBucket

    data = os.urandom(9 * RANGE + 5)
    server.client().put_object(Bucket=backend.bucket, Key="lend/big.bin", Body=data)
    assert backend.stat("lend/big.bin").size == len(data)  # as the copy's planner does
    lent: list[int] = []
    compared: list[bool] = []
    real_view, real_compare = RangedReader.next_view, local_mod.LocalWriter.compare_writes

    def view_spy(self: RangedReader) -> memoryview:
        lent.append(len(v := real_view(self)))
        return v

    def compare_spy(self: Any, hasher: Any) -> bool:
        compared.append(real_compare(self, hasher))
        return compared[-1]

    monkeypatch.setattr(RangedReader, "next_view", view_spy)
    monkeypatch.setattr(local_mod.LocalWriter, "compare_writes", compare_spy)
    local = LocalBackend(Address("file", "/"))
    limiters = Limiters(TokenBucket(1 << 40)) if limited else Limiters()
    ctx = CopyContext(backend, local, JobOptions(on_conflict="overwrite"), Accounting(), limiters)
    dst = str(tmp_path / "big.bin")
    outcome = run_task(_task("lend/big.bin", dst, len(data)), ctx, CancelToken())
    assert Path(dst).read_bytes() == data
    assert outcome.hash == hashlib.sha256(data).hexdigest() and outcome.verified.startswith("sha256 match")
    if limited:
        assert lent == [] and compared == []
    else:
        assert sum(lent) == len(data) and compared == [True]


def test_a_medium_object_is_hashed_once_and_compared_as_it_lands(
    server: S3Server, backend: S3Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferry.backends import local as local_mod

    data = os.urandom(STAT_GET + RANGE - 10)  # its first bytes with the stat, the rest in one GET
    server.client().put_object(Bucket=backend.bucket, Key="medium.bin", Body=data)
    compared: list[bool] = []
    real_compare = local_mod.LocalWriter.compare_writes

    def compare_spy(self: Any, hasher: Any) -> bool:
        compared.append(real_compare(self, hasher))
        return compared[-1]

    monkeypatch.setattr(local_mod.LocalWriter, "compare_writes", compare_spy)
    ctx = CopyContext(
        backend, LocalBackend(Address("file", "/")), JobOptions(on_conflict="overwrite"), Accounting(), Limiters()
    )
    dst = str(tmp_path / "medium.bin")
    outcome = run_task(_task("medium.bin", dst, len(data)), ctx, CancelToken())
    assert Path(dst).read_bytes() == data and compared == [True]
    assert outcome.hash == hashlib.sha256(data).hexdigest() and outcome.verified.startswith("sha256 match")


def test_an_object_replaced_during_the_download_is_refused(server: S3Server, backend: S3Backend) -> None:
    c = server.client()
    old, new = os.urandom(10 * RANGE), os.urandom(10 * RANGE)
    c.put_object(Bucket=backend.bucket, Key="moving.bin", Body=old)
    assert backend.stat("moving.bin").size == len(old)
    c.put_object(Bucket=backend.bucket, Key="moving.bin", Body=new)  # same size, other bytes
    # moto answers If-Match with 412; rclone ignores If-Match but names the new ETag in its answer.
    changed = pytest.raises(Transient, match="changed on the server during the download")
    with changed, backend.open_read("moving.bin") as f:
        f.read()


def test_a_medium_object_reaches_the_callers_buffer_in_one_read_of_one_version(
    backend: S3Backend, server: S3Server
) -> None:
    data = os.urandom(STAT_GET + RANGE // 2)  # stat's first bytes, then the rest in one GET
    c = server.client()
    c.put_object(Bucket=backend.bucket, Key="mid.bin", Body=data)
    gets = _Gets(backend)
    assert backend.stat("mid.bin").size == len(data)
    buf = bytearray(len(data) + 1)  # as the copy sizes it: the whole file and one byte
    with backend.open_read("mid.bin") as f:
        assert f.readinto(buf) == len(data)  # the stat's bytes and the rest, read into place
        assert bytes(buf[: len(data)]) == data
        assert f.readinto(buf) == 0
    assert gets.lean == ["GET", "GET"] and gets.boto == []
    with backend.open_read("mid.bin") as f:  # a small buffer still gets every byte, in order
        assert f.read() == data
    # Replaced between the stat and the read: refused, never stitched from two versions.
    assert backend.stat("mid.bin").size == len(data)
    c.put_object(Bucket=backend.bucket, Key="mid.bin", Body=os.urandom(len(data)))
    changed = pytest.raises(Transient, match="changed on the server during the download")
    with changed, backend.open_read("mid.bin") as f:
        f.readinto(buf)


@pytest.mark.parametrize("way", ["readinto", "lent buffers"])
def test_a_failed_range_fails_the_read_and_nothing_waits_forever(
    backend: S3Backend, server: S3Server, way: str
) -> None:
    data = os.urandom(10 * RANGE)
    server.client().put_object(Bucket=backend.bucket, Key="gone.bin", Body=data)
    assert backend.stat("gone.bin").size == len(data)
    hasher = hashlib.sha256()
    with backend.open_read("gone.bin") as f:
        assert isinstance(f, RangedReader) and f.feed_hasher(hasher)
        server.client().delete_object(Bucket=backend.bucket, Key="gone.bin")
        with pytest.raises(Exception, match=r"gone\.bin"):
            if way == "readinto":
                f.read()
            while f.next_view():
                pass
    # The shared executor is free again: a later download still completes.
    server.client().put_object(Bucket=backend.bucket, Key="after.bin", Body=data)
    with backend.open_read("after.bin") as f:
        assert f.read() == data


def test_through_botocore_the_same_ranges_and_the_same_refusal(server: S3Server, bucket: str) -> None:
    backend = make_backend(server, bucket, lean=False, range_size=RANGE)  # AWS itself, or FERRY_S3_FAST=0
    try:
        assert backend.conn.lean is None
        data = os.urandom(7 * RANGE + 3)
        c = server.client()
        c.put_object(Bucket=bucket, Key="boto.bin", Body=data)
        assert backend.stat("boto.bin").size == len(data)
        hasher = hashlib.sha256()
        with backend.open_read("boto.bin") as f:
            assert isinstance(f, RangedReader) and f.feed_hasher(hasher)
            assert f.read() == data
        assert hasher.hexdigest() == hashlib.sha256(data).hexdigest()
        assert backend.stat("boto.bin").size == len(data)
        c.put_object(Bucket=bucket, Key="boto.bin", Body=os.urandom(len(data)))
        changed = pytest.raises(Transient, match="changed on the server during the download")
        with changed, backend.open_read("boto.bin") as f:
            f.read()
    finally:
        backend.close()


def test_a_download_of_lean_gets_never_loads_botocores_client(server: S3Server, bucket: str) -> None:
    data = os.urandom(5 * RANGE + 1)
    server.client().put_object(Bucket=bucket, Key="noclient.bin", Body=data)
    with aws_env(server):
        address = Address("s3", "", host=bucket)
        backend = S3Backend(address, replace(settings_for(address, os.environ), range_size=RANGE))
        try:
            assert backend.stat("noclient.bin").size == len(data)
            with backend.open_read("noclient.bin") as f:
                assert f.read() == data
            assert not backend.conn.has_client()  # its S3 model (~0.1 s of CPU) was never loaded
            lean = backend.conn.lean
            assert lean is not None and lean.netloc == server.endpoint.split("//", 1)[1]
            assert [e.name for e in backend.list("")] == ["noclient.bin"]  # listings go lean too
            assert not backend.conn.has_client()
            # Once a request needs botocore (head(), for a restore's state), the client is built
            # and agrees with the lean path.
            assert backend.head("noclient.bin")["ContentLength"] == len(data)
            assert backend.conn.has_client() and backend.conn.lean is lean
        finally:
            backend.close()
