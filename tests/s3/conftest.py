"""Fixtures for the S3 tests: both real servers on loopback, a fresh bucket per test, and the
``ferry`` command pointed at the server through the same environment variables a user sets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ferry.backends.s3 import S3Backend
from ferry.backends.s3.settings import settings_for
from ferry.core.address import Address
from ferry.transfers.store import Store, Task
from helpers import Ferry
from s3.servers import S3Server, aws_env, shared_server


@pytest.fixture(params=["moto", "rclone"])
def server(request: pytest.FixtureRequest) -> S3Server:
    try:
        return shared_server(request.param)
    except RuntimeError as exc:
        pytest.skip(f"{request.param} S3 server unavailable: {exc}")


@pytest.fixture
def moto() -> S3Server:
    return shared_server("moto")


@pytest.fixture
def rclone() -> S3Server:
    return shared_server("rclone")


@pytest.fixture
def bucket(server: S3Server) -> str:
    return server.new_bucket()


@pytest.fixture
def s3ferry(tmp_path: Path, server: S3Server) -> Ferry:
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env=server.env())


@pytest.fixture
def backend(server: S3Server, bucket: str) -> Iterator[S3Backend]:
    b = make_backend(server, bucket)
    yield b
    b.close()


def queue_tasks(ferry: Ferry, job_id: int | None = None) -> dict[str, Task]:
    """The file tasks of a job (the last one by default) by source, from the queue's typed columns."""
    store = Store(ferry.home / "data" / "queue.db")
    try:
        job = job_id if job_id is not None else max(j.id for j in store.jobs())
        return {t.src: t for t in store.tasks(job, kinds=["file"])}
    finally:
        store.close()


def make_backend(server: S3Server, bucket: str, endpoint: str | None = None, **knobs: Any) -> S3Backend:
    """A backend on ``bucket``, its botocore client built while the environment names the server
    (at ``endpoint``, e.g. a proxy in front of it). ``knobs`` are S3Settings fields given as
    values (``lean=False``, ``read_timeout=1``, ...), instead of FERRY_S3_* variables."""
    with aws_env(server, endpoint):
        address = Address("s3", "", host=bucket)
        b = S3Backend(address, replace(settings_for(address, os.environ), **knobs))
        _ = b.conn.client
    return b
