"""Requests per small file: what the engine's calls for one file cost on the wire.

Counted with botocore's own ``before-send`` event, so every request (retries included) counts,
and with the lean client's own hook (``ferry.backends.s3.lean``), which sends small PUTs and GETs
itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from ferry.backends.s3 import S3Backend
from ferry.backends.s3.checksums import support
from ferry.core.errors import AlreadyExists, NotFound
from s3.servers import S3Server


class _Count:
    def __init__(self, backend: S3Backend) -> None:
        self.calls: list[str] = []
        backend.conn.client.meta.events.register("before-send.s3", self._seen)
        if backend.conn.lean is not None:
            backend.conn.lean.sent = self._lean

    def _seen(self, request: Any, **_: Any) -> None:
        self.calls.append(f"{request.method} {request.url.split('?')[0].rsplit('/', 1)[-1]}")

    def _lean(self, method: str, key: str) -> None:
        self.calls.append(f"{method} {key.rsplit('/', 1)[-1]}")

    def take(self) -> list[str]:
        calls, self.calls = self.calls, []
        return calls


def _copy_in(backend: S3Backend, key: str, data: bytes) -> None:
    """What transfers/copy.py does for one small file: stat the destination, write, commit."""
    with pytest.raises(NotFound):
        backend.stat(key)
    w = backend.open_write(key, size=len(data), token="1", readback="sha256")
    w.write(data)
    w.finish()
    w.commit(overwrite=False)


def test_small_uploads_into_a_new_folder_cost_one_put_each(server: S3Server, backend: S3Backend) -> None:
    count = _Count(backend)
    support(backend.conn)  # what the store checks, probed once per backend (checksums.py)
    with pytest.raises(NotFound):
        backend.stat("new/folder")  # the folder's own task: HEAD + listing, once
    count.take()
    # The first no-overwrite upload tells whether the store honours If-None-Match (probes.py):
    # HEAD, PUT, then the same PUT once more, which such a store refuses.
    _copy_in(backend, "new/folder/first.txt", b"x" * 100)
    assert count.take() == ["HEAD first.txt", "PUT first.txt", "PUT first.txt"]
    assert backend.conditional_known()
    for i in range(3):
        _copy_in(backend, f"new/folder/f{i}.txt", b"x" * 100)
    calls = count.take()
    if backend.conditional_writes():  # moto, AWS: If-None-Match guards the PUT itself
        assert calls == ["PUT f0.txt", "PUT f1.txt", "PUT f2.txt"]
    else:  # rclone ignores If-None-Match: one HEAD just before each PUT keeps the guarantee
        assert calls == ["HEAD f0.txt", "PUT f0.txt", "HEAD f1.txt", "PUT f1.txt", "HEAD f2.txt", "PUT f2.txt"]
    # What we wrote is known to exist: stat asks the server again.
    assert backend.stat("new/folder/f1.txt").size == 100
    assert backend.stat("new/folder").is_dir


def test_a_key_written_meanwhile_by_someone_else_is_never_overwritten(server: S3Server, backend: S3Backend) -> None:
    with pytest.raises(NotFound):
        backend.stat("fresh")
    server.client().put_object(Bucket=backend.bucket, Key="fresh/theirs.txt", Body=b"theirs")
    w = backend.open_write("fresh/theirs.txt", size=4, token="1")
    w.write(b"ours")
    w.finish()
    with pytest.raises(AlreadyExists):
        w.commit(overwrite=False)  # the stat said "absent" from memory; the commit still checks
    w.abort()
    got = server.client().get_object(Bucket=backend.bucket, Key="fresh/theirs.txt")["Body"].read()
    assert got == b"theirs"


def test_small_download_is_one_get(server: S3Server, backend: S3Backend) -> None:
    server.client().put_object(Bucket=backend.bucket, Key="d/small.bin", Body=b"s" * 5000, Metadata={"k": "v"})
    count = _Count(backend)
    entry = backend.stat("d/small.bin")  # what the copy does first: size, ETag, metadata
    assert entry.size == 5000 and entry.meta["etag"]
    with backend.open_read("d/small.bin") as f:
        assert f.read() == b"s" * 5000
    assert count.take() == ["GET small.bin"]
    with backend.open_read("d/small.bin", 10, 5) as f:  # a second read asks the server again
        assert f.read() == b"sssss"
    assert count.take() == ["GET small.bin"]


def test_stat_of_a_large_object_then_a_full_read(server: S3Server, backend: S3Backend) -> None:
    import os

    data = os.urandom(300 * 1024)  # more than stat's first GET carries
    server.client().put_object(Bucket=backend.bucket, Key="big.bin", Body=data)
    count = _Count(backend)
    assert backend.stat("big.bin").size == len(data)
    with backend.open_read("big.bin") as f:
        assert f.read() == data
    assert count.take() == ["GET big.bin", "GET big.bin"]  # the second asks only for the rest


def test_empty_and_rewritten_objects_are_not_read_from_memory(server: S3Server, backend: S3Backend) -> None:
    server.client().put_object(Bucket=backend.bucket, Key="e", Body=b"")
    assert backend.stat("e").size == 0
    server.client().put_object(Bucket=backend.bucket, Key="r", Body=b"old")
    assert backend.stat("r").size == 3
    w = backend.open_write("r", size=3, token="1")
    w.write(b"new")
    w.finish()
    w.commit(overwrite=True)
    with backend.open_read("r") as f:
        assert f.read() == b"new"
