"""The lean client (ferry.backends.s3.lean) against both real servers: it must store and
read exactly what botocore would, under exactly the same keys, and hand every unhappy answer back
to botocore so errors read as before."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ferry.backends.s3 import S3Backend
from ferry.backends.s3.checksums import support
from ferry.backends.s3.writer import S3Writer
from ferry.core.address import Address
from ferry.core.errors import AlreadyExists, AuthError, NotFound, UsageError
from s3.conftest import make_backend
from s3.servers import S3Server, aws_env

# Keys whose signing and URL encoding are easy to get wrong; a wrongly encoded key would land under
# another name on moto, which does not check signatures, so each is read back by name with boto3.
AWKWARD = [
    "plain.txt",
    "with space.txt",
    "plus+sign.txt",
    "percent%41.txt",
    "tilde~and-dash_.txt",
    "question?mark.txt",
    "hash#mark.txt",
    "équipe/données ünï.txt",
    "a=b&c=d;e,f.txt",
    "deep/er/path/x.bin",
]


class _Sent:
    def __init__(self, backend: S3Backend) -> None:
        self.lean: list[str] = []
        self.boto: list[str] = []
        assert backend.conn.lean is not None
        support(backend.conn)  # the endpoint's one-off checksum probe (botocore PUTs) before counting
        backend.conn.lean.sent = lambda method, key: self.lean.append(f"{method} {key}")
        backend.conn.client.meta.events.register("before-send.s3", self._boto)

    def _boto(self, request: Any, **_: Any) -> None:
        self.boto.append(request.method)


def _put(backend: S3Backend, key: str, data: bytes, *, overwrite: bool = True, mtime: datetime | None = None) -> str:
    w = backend.open_write(key, size=len(data), token="1", readback="sha256")
    w.write(data)
    digest = w.finish()
    w.commit(overwrite=overwrite, mtime=mtime)
    assert digest is not None
    assert isinstance(w, S3Writer)
    return w.verified_note


def test_small_objects_go_by_the_lean_path_and_read_back_the_same(server: S3Server, backend: S3Backend) -> None:
    sent = _Sent(backend)
    c = server.client()
    when = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    for i, key in enumerate(AWKWARD):
        if server.kind == "rclone" and "?" in key:
            continue  # a file-system store: '?' is fine, but keep the list to what both accept
        data = os.urandom(100 + i)
        note = _put(backend, key, data, mtime=when)
        # moto stores a wrong Content-MD5 without complaint (the probe found it), rclone refuses one
        assert "MD5 ETag matched" in note and ("server checked Content-MD5" in note) == (server.kind == "rclone")
        got = c.get_object(Bucket=backend.bucket, Key=key)  # boto3, by the very same key
        assert got["Body"].read() == data
        meta = {k.lower(): v for k, v in got["Metadata"].items()}  # rclone capitalises the names
        assert meta["ferry-sha256"] == hashlib.sha256(data).hexdigest()
        entry = backend.stat(key)  # the lean GET: the same fields botocore's answer gives
        assert entry.size == len(data)
        assert entry.hashes["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry.meta["etag"] == hashlib.md5(data).hexdigest()
        assert entry.own_mtime == when  # the kept time (metadata); entry.mtime is the store's
        with backend.open_read(key) as f:
            assert f.read() == data
    assert sent.lean and all(s.split(" ", 1)[0] in ("PUT", "GET") for s in sent.lean)
    assert "PUT" not in sent.boto and "GET" not in sent.boto  # botocore sent no object PUT/GET


def test_a_medium_object_is_read_in_two_lean_gets(server: S3Server, backend: S3Backend) -> None:
    data = os.urandom(700 * 1024)
    server.client().put_object(Bucket=backend.bucket, Key="m.bin", Body=data)
    sent = _Sent(backend)
    assert backend.stat("m.bin").size == len(data)
    with backend.open_read("m.bin") as f:
        assert f.read() == data
    assert sent.lean == ["GET m.bin", "GET m.bin"]
    with backend.open_read("m.bin", 1000, 5000) as f:
        assert f.read() == data[1000:6000]


def test_errors_come_back_through_botocore_worded_as_before(server: S3Server, backend: S3Backend) -> None:
    with pytest.raises(NotFound):
        backend.stat("nothing/here.txt")
    _put(backend, "taken.txt", b"first")
    if backend.conditional_writes():  # moto: If-None-Match refused by the server (412)
        w = backend.open_write("taken.txt", size=6, token="2", readback="sha256")
        w.write(b"second")
        w.finish()
        with pytest.raises(AlreadyExists):
            w.commit(overwrite=False)
        w.abort()
    assert server.client().get_object(Bucket=backend.bucket, Key="taken.txt")["Body"].read() == b"first"
    # An empty object: a ranged GET is refused (416) and stat falls back to HEAD.
    _put(backend, "empty", b"")
    assert backend.stat("empty").size == 0
    with backend.open_read("empty") as f:
        assert f.read() == b""


def test_a_wrong_secret_is_reported_as_before(rclone: S3Server) -> None:
    bucket = rclone.new_bucket()
    with aws_env(rclone):  # restores the environment afterwards
        os.environ["AWS_SECRET_ACCESS_KEY"] = "not-the-secret-0123456789"
        b = S3Backend(Address("s3", "", host=bucket))
        try:
            with pytest.raises(AuthError, match="secret key"):
                _put(b, "x.txt", b"data")
        finally:
            b.close()


def test_a_dead_connection_falls_back_and_the_path_stands_aside(server: S3Server, bucket: str) -> None:
    b = make_backend(server, bucket)
    try:
        lean = b.conn.lean
        assert lean is not None
        lean.netloc = "127.0.0.1:1"  # nothing listens there: every lean request fails to connect
        for i in range(5):
            _put(b, f"k{i}", b"via botocore")  # each one still lands, through botocore
        assert not lean.enabled
        got = server.client().get_object(Bucket=bucket, Key="k4")["Body"].read()
        assert got == b"via botocore"
    finally:
        b.close()


def test_it_can_be_switched_off(server: S3Server, bucket: str) -> None:
    b = make_backend(server, bucket, lean=False)  # what FERRY_S3_FAST=0 sets
    try:
        assert b.conn.lean is None
        _put(b, "x", b"data")
        assert b.stat("x").size == 4
    finally:
        b.close()


def test_a_named_profile_reaches_its_endpoint(rclone: S3Server, tmp_path: Path) -> None:
    """Credentials and endpoint from ~/.aws files, as the AWS tools read them (no boto3 session)."""
    from s3.servers import ACCESS_KEY, SECRET_KEY

    bucket = rclone.new_bucket()
    config = tmp_path / "config"
    config.write_text(f"[profile lab]\nregion = us-east-1\nendpoint_url = {rclone.endpoint}\n")
    creds = tmp_path / "credentials"
    creds.write_text(f"[lab]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    with aws_env(rclone):
        for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            del os.environ[name]
        os.environ["AWS_CONFIG_FILE"] = str(config)
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(creds)
        b = S3Backend(Address("s3", "", host=bucket))
        b.settings = replace(b.settings, profile="lab")
        try:
            _put(b, "via-profile.txt", b"profile")
            assert b.stat("via-profile.txt").size == 7
        finally:
            b.close()
        nowhere = S3Backend(Address("s3", "", host=bucket))
        nowhere.settings = replace(nowhere.settings, profile="no-such-profile")
        with pytest.raises(UsageError, match="no-such-profile"):
            nowhere.stat("x")


def test_multipart_parts_go_by_the_lean_path_and_the_etag_still_checks(server: S3Server, backend: S3Backend) -> None:
    backend.use_part_size(5 << 20)
    data = os.urandom((11 << 20) + 123)  # three parts
    sent = _Sent(backend)
    note = _put(backend, "multi/part.bin", data)
    assert "MD5 ETags of 3 parts + multipart ETag matched" in note
    # Each part carries Content-MD5 (a store that checks it refuses a damaged part), and its ETag
    # (the server's MD5) is compared too: on moto, which checks no header, that is the check.
    assert ("server checked Content-MD5 of 3 parts" in note) == (server.kind == "rclone")
    assert sent.lean == ["PUT multi/part.bin"] * 3  # the parts; create and complete are botocore's
    got = server.client().get_object(Bucket=backend.bucket, Key="multi/part.bin")["Body"].read()
    assert got == data


def test_a_proxy_leaves_requests_to_botocore(server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    b = make_backend(server, bucket)
    try:
        assert b.conn.lean is None  # botocore would go through the proxy; the lean path never bypasses it
    finally:
        b.close()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # ... unless the endpoint is exempt, as for botocore
    b = make_backend(server, bucket)
    try:
        assert b.conn.lean is not None
        _put(b, "direct", b"data")
    finally:
        b.close()
