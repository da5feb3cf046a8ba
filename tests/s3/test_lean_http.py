"""The lean client's own HTTP/1.1 connection (ferry.backends.s3.lean.LeanConnection) against both real servers: one
kept-alive connection per thread carries request after request, bodies of every size come back
whole, error answers are read to their end (the connection stays usable), and a connection the
server has closed is replaced without the caller noticing."""

from __future__ import annotations

import os

import pytest

from ferry.backends.s3 import S3Backend
from ferry.backends.s3.lean import LeanConnection, LeanError
from s3.conftest import make_backend
from s3.servers import S3Server


def test_one_connection_carries_many_requests(server: S3Server, backend: S3Backend) -> None:
    lean = backend.conn.lean
    assert lean is not None
    first: LeanConnection | None = None
    for i, size in enumerate([0, 1, 100, 4096, 65_535, 65_536, 65_537, 300_000]):
        data = os.urandom(size)
        lean.put_object(backend.bucket, f"lean/{i}", data, {})
        got = lean.get_object(backend.bucket, f"lean/{i}", None)
        assert got["Body"].read() == data
        assert got["ContentLength"] == size
        conn = lean._local.conn
        if server.kind == "rclone":  # moto (werkzeug) may close after an answer; rclone keeps it open
            first = first or conn
            assert conn is not None and conn is first  # kept alive, not reopened per request
    got = lean.get_object(backend.bucket, "lean/7", "bytes=10-19")
    assert got["Body"].read() == server.client().get_object(Bucket=backend.bucket, Key="lean/7")["Body"].read()[10:20]


def test_an_error_answer_is_read_whole_and_the_connection_kept(backend: S3Backend) -> None:
    lean = backend.conn.lean
    assert lean is not None
    lean.put_object(backend.bucket, "lean/there", b"x", {})
    with pytest.raises(LeanError) as err:
        lean.get_object(backend.bucket, "lean/missing", None)
    assert err.value.response["Error"]["Code"] == "NoSuchKey"
    assert lean.get_object(backend.bucket, "lean/there", None)["Body"].read() == b"x"


def test_a_connection_the_server_closed_is_replaced(rclone: S3Server) -> None:
    backend = make_backend(rclone, rclone.new_bucket())
    try:
        lean = backend.conn.lean
        assert lean is not None
        lean.put_object(backend.bucket, "lean/a", b"abc", {})
        conn = lean._local.conn
        assert conn is not None
        conn._sock.shutdown(2)  # as an idle keep-alive connection cut by the server
        assert backend.conn.get_object("lean/a", None)["Body"].read() == b"abc"  # botocore repeated it
        assert lean.get_object(backend.bucket, "lean/a", None)["Body"].read() == b"abc"
        assert lean._local.conn is not conn and lean.enabled
    finally:
        backend.close()
