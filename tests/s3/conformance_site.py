"""S3 buckets as conformance-suite sites: a fresh bucket per test on each real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ferry.backends.s3 import S3Backend
from ferry.core.address import Address
from s3.servers import aws_env, shared_server


def s3_site(kind: str, tmp_path: Path, site_cls: Any) -> Iterator[Any]:
    server = shared_server(kind)
    bucket = server.new_bucket()
    with aws_env(server):
        backend = S3Backend(Address("s3", "", host=bucket))
        _ = backend.conn.client  # built while the environment names the server
    yield site_cls(backend, "")
    backend.close()
