"""A process-wide cap on the bytes of multipart parts in flight, across every file being uploaded."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from ferry.backends.s3 import S3Backend
from ferry.backends.s3 import writer as s3_write
from ferry.backends.s3.writer import PartBudget, S3Writer
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


def test_parallel_big_uploads_stay_within_the_budget(
    server: S3Server, backend: S3Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = PartBudget(12 << 20)  # two 5 MiB parts, not three
    monkeypatch.setattr(s3_write, "BUDGET", budget)
    backend.use_part_size(PART)
    files = {f"b/{i}.bin": os.urandom(4 * PART + i) for i in range(3)}  # 5 parts each, 4 in flight allowed
    errors: list[BaseException] = []

    def one(key: str, data: bytes) -> None:
        try:
            _upload(backend, key, data)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=item) for item in files.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert PART < budget.peak <= 12 << 20  # parallel parts, never more than the budget
    assert budget.used == 0
    c = server.client()
    for key, data in files.items():
        assert c.get_object(Bucket=backend.bucket, Key=key)["Body"].read() == data


def test_a_part_bigger_than_the_budget_still_goes_and_an_abort_gives_the_budget_back(
    server: S3Server, backend: S3Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = PartBudget(1 << 20)
    monkeypatch.setattr(s3_write, "BUDGET", budget)
    backend.use_part_size(PART)
    data = os.urandom(2 * PART + 3)
    _upload(backend, "one.bin", data)
    assert budget.peak == PART and budget.used == 0  # one part at a time, but it went
    w = backend.open_write("aborted.bin", size=len(data), token="1", readback="sha256")
    w.write(data[: 2 * PART])
    w.abort()
    assert budget.used == 0
