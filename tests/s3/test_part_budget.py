"""A process-wide cap on the bytes of multipart parts in flight, across every file being uploaded."""

from __future__ import annotations

import hashlib
import os
import threading

from ferry.backends.s3 import S3Backend
from ferry.backends.s3.writer import S3Writer, part_budget
from s3.conftest import make_backend
from s3.servers import S3Server

PART = 5 << 20


def _upload(backend: S3Backend, key: str, data: bytes) -> None:
    w = backend.open_write(key, size=len(data), token="1", readback="sha256")
    assert isinstance(w, S3Writer)
    with w:
        for i in range(0, len(data), 1 << 20):
            w.write(data[i : i + (1 << 20)])
        assert w.finish() == hashlib.sha256(data).hexdigest()
        w.commit(overwrite=True)


def test_parallel_big_uploads_stay_within_the_budget(server: S3Server, bucket: str) -> None:
    limit = 12 << 20  # two 5 MiB parts, not three (FERRY_S3_UPLOAD_MEMORY)
    backend = make_backend(server, bucket, upload_memory=limit, part_size=PART)
    budget = part_budget(limit)  # the process's budget for this limit: every such backend shares it
    budget.peak = budget.used  # measured from here
    files = {f"b/{i}.bin": os.urandom(4 * PART + i) for i in range(3)}  # 5 parts each, 4 in flight allowed
    errors: list[BaseException] = []

    def one(key: str, data: bytes) -> None:
        try:
            _upload(backend, key, data)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    try:
        threads = [threading.Thread(target=one, args=item) for item in files.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        backend.close()
    assert not errors
    assert PART < budget.peak <= limit  # parallel parts, never more than the budget
    assert budget.used == 0
    c = server.client()
    for key, data in files.items():
        assert c.get_object(Bucket=bucket, Key=key)["Body"].read() == data


def test_a_part_bigger_than_the_budget_still_goes_and_an_abort_gives_the_budget_back(
    server: S3Server, bucket: str
) -> None:
    limit = 1 << 20  # less than one part
    backend = make_backend(server, bucket, upload_memory=limit, part_size=PART)
    budget = part_budget(limit)
    budget.peak = budget.used  # measured from here
    data = os.urandom(2 * PART + 3)
    try:
        _upload(backend, "one.bin", data)
        assert budget.peak == PART and budget.used == 0  # one part at a time, but it went
        w = backend.open_write("aborted.bin", size=len(data), token="1", readback="sha256")
        w.write(data[: 2 * PART])
        w.abort()
        assert budget.used == 0
    finally:
        backend.close()
