"""Dropped connections and throttling between Ferry and the server, through a proxy the test
controls: botocore's standard retries (with backoff) carry the transfer through."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

from ferry.core.errors import AuthError, NotFound, PermissionDenied, Transient, UsageError
from s3.conftest import make_backend
from s3.servers import FaultProxy, S3Server


@pytest.fixture
def proxy(server: S3Server) -> Iterator[FaultProxy]:
    p = FaultProxy(server.port)
    yield p
    p.close()


def _upload(backend, key: str, data: bytes) -> str:  # type: ignore[no-untyped-def]
    w = backend.open_write(key, size=len(data), token="1", readback="sha256")
    w.write(data)
    got = w.finish()
    w.commit(overwrite=False)
    return str(got)


def test_connection_reset_mid_part_is_retried(server: S3Server, bucket: str, proxy: FaultProxy) -> None:
    backend = make_backend(server, bucket, proxy.endpoint, part_size=5 << 20)
    data = os.urandom(11 * 1024 * 1024)  # 3 parts
    proxy.reset_after(2 * 1024 * 1024)  # the first request to carry 2 MiB is cut in the middle
    try:
        assert _upload(backend, "reset.bin", data) == hashlib.sha256(data).hexdigest()
        assert proxy.resets == 1
        with backend.open_read("reset.bin") as f:
            assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()
    finally:
        backend.close()


def test_slowdown_503_is_retried_with_backoff(server: S3Server, bucket: str, proxy: FaultProxy) -> None:
    backend = make_backend(server, bucket, proxy.endpoint)
    proxy.slowdown(2)
    try:
        _upload(backend, "slow.txt", b"patience")
        assert proxy.slowdowns_sent == 2
        with backend.open_read("slow.txt") as f:
            assert f.read() == b"patience"
    finally:
        backend.close()


def test_slowdown_that_never_ends_is_a_transient_error(server: S3Server, bucket: str, proxy: FaultProxy) -> None:
    # FERRY_S3_MAX_ATTEMPTS: the scheduler retries the task later on
    backend = make_backend(server, bucket, proxy.endpoint, max_attempts=2)
    proxy.slowdown(100)
    try:
        with pytest.raises(Transient, match="busy"):
            backend.stat("anything")
    finally:
        backend.close()


def test_server_that_never_answers_is_retried_not_waited_on(server: S3Server, bucket: str, proxy: FaultProxy) -> None:
    # The hang seen under load: a request the server accepted and never answered. A short read
    # timeout (FERRY_S3_READ_TIMEOUT) turns it into a retry on a fresh connection, and the
    # transfer goes on. The proxy sees a request start only on a new connection: a fresh backend
    # (fresh pool) each.
    proxy.stall(1)
    backend = make_backend(server, bucket, proxy.endpoint, read_timeout=1)
    try:
        _upload(backend, "stalled.txt", b"still arrives")
        assert proxy.stalls_done == 1
    finally:
        backend.close()
    proxy.stall(1)
    backend = make_backend(server, bucket, proxy.endpoint, read_timeout=1)
    try:
        with backend.open_read("stalled.txt") as f:
            assert f.read() == b"still arrives"
        assert proxy.stalls_done == 2
    finally:
        backend.close()


def test_server_that_never_answers_at_all_is_a_clear_transient_error(
    server: S3Server, bucket: str, proxy: FaultProxy
) -> None:
    backend = make_backend(server, bucket, proxy.endpoint, read_timeout=1, max_attempts=2)
    proxy.stall(100)
    try:
        with pytest.raises(Transient, match="did not answer within 1 s"):
            backend.stat("anything")
        assert proxy.stalls_done >= 2  # every attempt was swallowed, then a clear error (the queue retries later)
    finally:
        backend.close()


def test_unreachable_endpoint_is_transient(server: S3Server, bucket: str) -> None:
    from s3.servers import free_port

    backend = make_backend(server, bucket, f"http://127.0.0.1:{free_port()}", max_attempts=1)
    try:
        with pytest.raises(Transient, match="Cannot reach"):
            backend.stat("x")
    finally:
        backend.close()


# -- one check per mapping of the service's error codes (the ones loopback servers cannot produce) --
def _client_error(code: str, status: int, headers: dict[str, str] | None = None) -> Exception:
    from botocore.exceptions import ClientError

    answer: Any = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers or {}},
    }
    return ClientError(answer, "GetObject")


@pytest.mark.parametrize(
    ("code", "status", "cls", "words"),
    [
        ("RequestTimeTooSkewed", 403, AuthError, "clock"),
        ("ExpiredToken", 400, AuthError, "temporary AWS credentials"),
        ("InvalidAccessKeyId", 403, AuthError, "access key is not known"),
        ("SignatureDoesNotMatch", 403, AuthError, "secret key does not match"),
        ("AccessDenied", 403, PermissionDenied, "Permission denied"),
        ("NoSuchBucket", 404, UsageError, "No such bucket"),  # bad input: refused before queueing
        ("NoSuchKey", 404, NotFound, "No such object"),
        ("SlowDown", 503, Transient, "busy"),
        ("InternalError", 500, Transient, "busy"),
    ],
)
def test_error_mapping(code: str, status: int, cls: type, words: str) -> None:
    from ferry.backends.s3.errors import map_error

    err = map_error(_client_error(code, status), "s3://b/k", bucket="b")
    assert isinstance(err, cls) and words in err.message


def test_wrong_region_names_the_right_one() -> None:
    from ferry.backends.s3.errors import map_error

    err = map_error(_client_error("PermanentRedirect", 301, {"x-amz-bucket-region": "eu-west-2"}), "x", bucket="b")
    assert isinstance(err, UsageError) and "eu-west-2" in err.message


def test_expired_sso_session() -> None:
    from botocore.exceptions import UnauthorizedSSOTokenError

    from ferry.backends.s3.errors import map_error

    err = map_error(UnauthorizedSSOTokenError(), "x")
    assert isinstance(err, AuthError) and "aws sso login" in err.message
