"""S3 additional checksums: what each store really checks, what Ferry sends, and what it claims.

Neither test server checks ``x-amz-checksum-sha256`` (the first test proves it, so that a moto or
rclone that starts checking shows up here). A store that does, as AWS does, is the
:class:`~s3.checking_proxy.CheckingProxy` in front of moto: it refuses a PUT whose body does not
match its checksum with AWS's ``BadDigest``.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import botocore.exceptions
import pytest

from ferry.backends.s3 import S3Backend
from ferry.backends.s3.checksums import composite_sha256, support
from ferry.backends.s3.writer import S3Writer
from ferry.core.address import Address
from ferry.core.errors import ChecksumMismatch
from helpers import Ferry
from s3.checking_proxy import CheckingProxy
from s3.conftest import make_backend
from s3.servers import S3Server, aws_env

PART = 5 << 20


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


class _Slot:
    """The queue's resume row, in memory."""

    def __init__(self) -> None:
        self.data: dict[str, object] | None = None

    def load(self) -> dict[str, object] | None:
        return self.data

    def save(self, data: dict[str, object] | None) -> None:
        self.data = data


def _upload(
    backend: S3Backend, key: str, data: bytes, *, mtime: datetime | None = None, chunk: int = 1 << 20
) -> tuple[str, S3Writer]:
    w = backend.open_write(key, size=len(data), token="1", readback="sha256")
    assert isinstance(w, S3Writer)
    w.set_mtime(mtime)
    with w:  # as the copy does: a failure aborts the upload
        for i in range(0, len(data), chunk):
            w.write(data[i : i + chunk])
        digest = w.finish()
        assert digest == hashlib.sha256(data).hexdigest()
        w.commit(overwrite=True, mtime=mtime)
    return w.verified_note, w


@pytest.fixture
def checking(moto: S3Server) -> Iterator[tuple[CheckingProxy, S3Backend]]:
    """moto behind a proxy that checks x-amz-checksum-sha256 as AWS does."""
    proxy = CheckingProxy(moto.port)
    backend = make_backend(moto, moto.new_bucket(), proxy.endpoint)
    backend.use_part_size(PART)
    try:
        yield proxy, backend
    finally:
        backend.close()
        proxy.close()


def test_the_test_servers_do_not_check_additional_checksums_and_the_probe_says_so(
    server: S3Server, backend: S3Backend
) -> None:
    c = server.client()
    body = b"some bytes"
    wrong = _b64(hashlib.sha256(b"other bytes").digest())
    c.put_object(Bucket=backend.bucket, Key="wrong-sha", Body=body, ChecksumSHA256=wrong)  # stored, not refused
    head = c.head_object(Bucket=backend.bucket, Key="wrong-sha", ChecksumMode="ENABLED")
    # rclone keeps the wrong checksum as given (and boto3's default GET then fails on it), moto
    # drops it: neither compared it with the body.
    assert head.get("ChecksumSHA256") == (wrong if server.kind == "rclone" else None)
    wrong_md5 = _b64(hashlib.md5(b"other bytes").digest())
    if server.kind == "rclone":
        with pytest.raises(botocore.exceptions.ClientError, match="BadDigest"):
            c.put_object(Bucket=backend.bucket, Key="wrong-md5", Body=body, ContentMD5=wrong_md5)
    else:
        c.put_object(Bucket=backend.bucket, Key="wrong-md5", Body=body, ContentMD5=wrong_md5)  # moto: stored
    found = support(backend.conn)
    assert not found.checks_sha256 and not found.multipart_sha256
    assert found.send_sha256  # the header is accepted (and stored): single PUTs still carry it
    assert found.checks_md5 == (server.kind == "rclone")
    keys = [o["Key"] for o in c.list_objects_v2(Bucket=backend.bucket).get("Contents", [])]
    assert not [k for k in keys if k.startswith(".ferry-probe-")]  # the probes left nothing behind
    note, _ = _upload(backend, "plain.bin", os.urandom(1000))
    assert "x-amz-checksum-sha256" not in note  # never claimed where it is not checked
    assert "MD5 ETag matched" in note


def test_the_probe_object_goes_next_to_the_upload_not_to_the_bucket_root(
    checking: tuple[CheckingProxy, S3Backend],
) -> None:
    # Bucket policies often allow writes under one prefix only: the probe writes where the user does.
    proxy, backend = checking
    _upload(backend, "inbox/run42/data.bin", os.urandom(1000))
    probes = [p[":target"] for p in proxy.puts if ".ferry-probe-" in p[":target"]]
    assert probes and all(f"/{backend.bucket}/inbox/run42/.ferry-probe-" in t for t in probes)
    keys = [o["Key"] for o in backend.conn.client.list_objects_v2(Bucket=backend.bucket).get("Contents", [])]
    assert keys == ["inbox/run42/data.bin"]  # the probes left nothing behind


def test_a_store_that_checks_gets_sha256_checksums_and_no_md5(
    moto: S3Server, checking: tuple[CheckingProxy, S3Backend]
) -> None:
    proxy, backend = checking
    found = support(backend.conn)
    assert found.checks_sha256 and found.multipart_sha256 and not found.checks_md5
    assert proxy.refused == 1  # the probe's deliberately wrong checksum, and nothing else
    small = os.urandom(70_000)
    note, _ = _upload(backend, "small.bin", small)
    assert note == "server checked x-amz-checksum-sha256"
    put = proxy.puts[-1]
    assert put["x-amz-checksum-sha256"] == _b64(hashlib.sha256(small).digest())
    assert "content-md5" not in put  # no MD5 pass where the server checks the SHA-256
    assert put["x-amz-content-sha256"] == hashlib.sha256(small).hexdigest()  # the same digest, signed

    when = datetime(2023, 1, 2, 3, 4, 5, tzinfo=UTC)
    data = os.urandom(2 * PART + 4321)  # three parts
    proxy.puts.clear()
    note, w = _upload(backend, "big.bin", data, mtime=when)
    assert w.part_count == 3
    assert note.startswith("server checked x-amz-checksum-sha256 of 3 parts")
    parts = [data[i : i + PART] for i in range(0, len(data), PART)]
    sent = sorted(p["x-amz-checksum-sha256"] for p in proxy.puts)  # parts go in parallel, in any order
    assert sent == sorted(_b64(hashlib.sha256(p).digest()) for p in parts)
    assert all("content-md5" not in p for p in proxy.puts)
    head = moto.client().head_object(Bucket=backend.bucket, Key="big.bin", ChecksumMode="ENABLED")
    expected = composite_sha256([hashlib.sha256(p).digest() for p in parts])
    assert head["ChecksumSHA256"].split("-")[0] == expected.split("-")[0]  # what a later download can check
    assert float(head["Metadata"]["mtime"]) == when.timestamp()  # multipart keeps mtimes too
    assert backend.stat("big.bin").own_mtime == when  # the kept time (metadata)
    got = moto.client().get_object(Bucket=backend.bucket, Key="big.bin")["Body"].read()
    assert got == data


def test_bytes_damaged_on_the_way_are_refused_by_the_server_and_never_land(
    moto: S3Server, checking: tuple[CheckingProxy, S3Backend]
) -> None:
    proxy, backend = checking
    support(backend.conn)
    c = moto.client()
    # Damaged once: the server refuses the body, the request is sent again, the right bytes land.
    data = os.urandom(2 * PART + 10)
    proxy.corrupt(1)
    before = proxy.refused
    _upload(backend, "once.bin", data)
    assert proxy.refused == before + 1
    assert c.get_object(Bucket=backend.bucket, Key="once.bin")["Body"].read() == data
    # Damaged every time: the upload fails as a checksum mismatch, and nothing is left behind.
    for key, size in (("single.bin", 1000), ("multi.bin", 2 * PART + 10)):
        proxy.corrupt(1000)
        with pytest.raises(ChecksumMismatch, match="do not match their checksum"):
            _upload(backend, key, os.urandom(size))
        proxy.corrupt(0)
        with pytest.raises(botocore.exceptions.ClientError):
            c.head_object(Bucket=backend.bucket, Key=key)
    assert c.list_multipart_uploads(Bucket=backend.bucket).get("Uploads") in (None, [])


def test_resume_checks_the_parts_already_there_by_their_checksums(
    moto: S3Server, checking: tuple[CheckingProxy, S3Backend]
) -> None:
    proxy, backend = checking
    data = os.urandom(3 * PART + 99)
    slot = _Slot()
    w = backend.open_write("resumed.bin", size=len(data), token="1", readback="sha256", resume_slot=slot)
    assert isinstance(w, S3Writer)
    w.write(data[: 2 * PART])  # two parts sent, then the run dies
    w._wait_parts()
    w.abort(keep_partial=True)
    assert slot.data is not None and slot.data["checksum"] == "sha256"
    saved = slot.data["parts"]
    assert isinstance(saved, dict)
    assert [v[3] for _, v in sorted(saved.items())] == [
        _b64(hashlib.sha256(data[i : i + PART]).digest()) for i in (0, PART)
    ]

    # A source that changed in the first part: its checksum no longer matches, the resume stops.
    changed = bytearray(data)
    changed[10] ^= 1
    w2 = backend.open_write("resumed.bin", size=len(data), token="1", readback="sha256", resume=True, resume_slot=slot)
    assert isinstance(w2, S3Writer) and w2.offset == 2 * PART
    with pytest.raises(ChecksumMismatch, match="source changed since part 1"):
        w2.feed_prefix(bytes(changed[: 2 * PART]))

    # The same source: the two parts are kept, only the rest is sent.
    w3 = backend.open_write("resumed.bin", size=len(data), token="1", readback="sha256", resume=True, resume_slot=slot)
    assert isinstance(w3, S3Writer) and w3.offset == 2 * PART
    proxy.puts.clear()
    w3.feed_prefix(data[: 2 * PART])
    w3.write(data[2 * PART :])
    assert w3.finish() == hashlib.sha256(data).hexdigest()
    w3.commit(overwrite=True)
    assert len(proxy.puts) == 2  # parts 3 and 4 only
    assert "server checked x-amz-checksum-sha256 of 4 parts" in w3.verified_note
    assert "resumed: 2 part(s) already on the server, checked with ListParts (SHA-256 part checksums)" in (
        w3.verified_note
    )
    assert moto.client().get_object(Bucket=backend.bucket, Key="resumed.bin")["Body"].read() == data
    assert slot.data is None


def test_checksums_on_sends_part_checksums_to_a_store_that_only_stores_them(moto: S3Server) -> None:
    backend = make_backend(moto, moto.new_bucket(), checksums="on")  # FERRY_S3_CHECKSUMS=on
    backend.use_part_size(PART)
    try:
        data = os.urandom(PART + 5)
        note, w = _upload(backend, "on.bin", data)
        assert w.part_count == 2
        # Both kinds of hash, and the claim is only what was compared: moto checks neither.
        assert note == "MD5 ETags of 2 parts + multipart ETag matched"
        head = moto.client().head_object(Bucket=backend.bucket, Key="on.bin", ChecksumMode="ENABLED")
        parts = [data[:PART], data[PART:]]
        expected = composite_sha256([hashlib.sha256(p).digest() for p in parts])
        assert head["ChecksumSHA256"].split("-")[0] == expected.split("-")[0]
    finally:
        backend.close()


def test_the_site_option_checksums_off_sends_no_checksum_header(moto: S3Server) -> None:
    proxy = CheckingProxy(moto.port)
    backend = make_backend(moto, moto.new_bucket(), proxy.endpoint)
    backend.settings = replace(backend.settings, checksums="off")  # --option checksums=off on a site
    backend.use_part_size(PART)
    try:
        for key, size in (("one.bin", 1000), ("two.bin", PART + 1)):
            note, _ = _upload(backend, key, os.urandom(size))
            assert "x-amz-checksum-sha256" not in note and "MD5 ETag" in note
        assert proxy.puts and all("x-amz-checksum-sha256" not in p for p in proxy.puts)
        single = [p for p in proxy.puts if p.get("content-length") == "1000"]
        assert len(single) == 1 and "content-md5" in single[0]  # a PUT is refused before it replaces anything
        # Parts go with Content-MD5 too (a store that checks it refuses a damaged part), and each
        # part's ETag (the MD5 of what the server received) is compared before
        # CompleteMultipartUpload: on a store that checks nothing, a damaged part is caught there.
        assert all("content-md5" in p for p in proxy.puts if int(p.get("content-length", 0)) > 1000)
        proxy.corrupt(1)
        with pytest.raises(ChecksumMismatch, match=r"stored part \d of .* with ETag"):
            _upload(backend, "damaged.bin", os.urandom(PART + 1), chunk=PART + 1)
        with pytest.raises(botocore.exceptions.ClientError):
            moto.client().head_object(Bucket=backend.bucket, Key="damaged.bin")
    finally:
        backend.close()
        proxy.close()


def test_ferry_cp_keeps_the_mtime_of_a_multipart_upload(
    s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path
) -> None:
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(PART + 100))  # two parts
    os.utime(src, (1_600_000_000.5, 1_600_000_000.5))
    s3ferry.extra_env["FERRY_S3_PART_SIZE"] = "5M"
    s3ferry.ok("cp", src, f"s3://{bucket}/m/")
    head = server.client().head_object(Bucket=bucket, Key="m/big.bin")
    assert head["ETag"].strip('"').endswith("-2") or server.kind == "rclone"  # rclone shows the whole MD5
    assert float({k.lower(): v for k, v in head["Metadata"].items()}["mtime"]) == 1_600_000_000.5


def test_the_probe_goes_by_the_lean_path_without_building_botocore(server: S3Server, bucket: str) -> None:
    # A small-file upload to a custom endpoint may never need botocore's client (its S3 model is
    # ~0.1 s of CPU to load): the probe must not build it either.
    with aws_env(server):
        b = S3Backend(Address("s3", "", host=bucket))
        try:
            found = support(b.conn)
            assert not b.conn.has_client()
            assert found.checks_md5 == (server.kind == "rclone") and not found.checks_sha256
        finally:
            b.close()
