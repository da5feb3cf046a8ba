"""Downloads compared with what the store keeps: S3Backend.evidence_for, against moto and rclone.

Objects are written by boto3 as other tools write them (single PUTs with and without additional
checksums, multipart uploads with odd part sizes), then read back and fed to the check exactly as
the copy feeds it (every byte, in order, from the first). A byte flipped on the way must never be
called matched; an object whose store keeps nothing comparable must say why.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.config import Config

from ferry.backends.base import SourceCheck
from ferry.backends.s3 import S3Backend
from ferry.backends.s3.evidence import Facts, NoEvidence, PartsCheck, candidates, uniform_layout
from ferry.core.outcomes import Evidence
from s3.servers import ACCESS_KEY, SECRET_KEY, S3Server

MiB = 1 << 20


def _plain_client(server: S3Server) -> Any:
    """boto3 sending no additional checksum (as older SDKs and many tools do)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def _check(backend: S3Backend, key: str, *, flip: int | None = None, chunk: int = 1 << 20) -> SourceCheck:
    """Read ``key`` as the copy does and feed the source check; ``flip`` damages one byte first."""
    entry = backend.stat(key)
    check = backend.evidence_for(entry)
    with backend.open_read(key) as f:
        data = bytearray(f.read())
    if flip is not None:
        data[flip] ^= 0x01
    view = memoryview(data)
    for i in range(0, len(view), chunk):
        check.update(view[i : i + chunk])
    return check.result()


def _multipart(client: Any, bucket: str, key: str, parts: list[bytes], algo: str | None = None) -> None:
    kw = {"ChecksumAlgorithm": algo} if algo else {}
    up = client.create_multipart_upload(Bucket=bucket, Key=key, **kw)
    done = []
    for n, body in enumerate(parts, 1):
        r = client.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=n, Body=body, **kw)
        item = {"PartNumber": n, "ETag": r["ETag"]}
        for field in ("ChecksumCRC32", "ChecksumSHA256", "ChecksumSHA1"):
            if r.get(field):
                item[field] = r[field]
        done.append(item)
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up["UploadId"], MultipartUpload={"Parts": done})


@pytest.fixture
def objects(server: S3Server, bucket: str) -> Iterator[dict[str, bytes]]:
    """Objects as boto3 and other tools leave them; key -> content."""
    c = server.client()  # boto3's defaults: a CRC32 on every PUT
    plain = _plain_client(server)
    made: dict[str, bytes] = {}
    made["default-crc32.bin"] = os.urandom(3000)
    c.put_object(Bucket=bucket, Key="default-crc32.bin", Body=made["default-crc32.bin"])
    made["sha1.bin"] = os.urandom(5000)
    c.put_object(Bucket=bucket, Key="sha1.bin", Body=made["sha1.bin"], ChecksumAlgorithm="SHA1")
    made["sha256-big.bin"] = os.urandom(2 * MiB + 7)  # past EVIDENCE_HEAD: a HEAD asks for checksums
    c.put_object(Bucket=bucket, Key="sha256-big.bin", Body=made["sha256-big.bin"], ChecksumAlgorithm="SHA256")
    made["no-checksum.bin"] = os.urandom(4000)
    plain.put_object(Bucket=bucket, Key="no-checksum.bin", Body=made["no-checksum.bin"])
    made["no-checksum-big.bin"] = os.urandom(3 * MiB)
    plain.put_object(Bucket=bucket, Key="no-checksum-big.bin", Body=made["no-checksum-big.bin"])
    made["empty.bin"] = b""
    plain.put_object(Bucket=bucket, Key="empty.bin", Body=b"")
    uniform = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1234)]
    odd = [os.urandom(5 * MiB), os.urandom(6 * MiB + 3), os.urandom(999)]
    _multipart(plain, bucket, "mp-uniform.bin", uniform)
    _multipart(plain, bucket, "mp-odd.bin", odd)
    _multipart(c, bucket, "mp-crc32.bin", odd, "CRC32")
    _multipart(c, bucket, "mp-sha256.bin", uniform, "SHA256")
    made["mp-uniform.bin"] = b"".join(uniform)
    made["mp-odd.bin"] = made["mp-crc32.bin"] = b"".join(odd)
    made["mp-sha256.bin"] = b"".join(uniform)
    yield made


# What each object is checked against, per server. rclone serve s3 keeps a whole-object MD5 as
# the ETag of a multipart upload and no checksum for it; moto keeps multipart ETags and composite
# checksums (without their "-N").
EXPECTED = {
    "default-crc32.bin": (Evidence.S3_CHECKSUM, Evidence.S3_CHECKSUM),
    "sha1.bin": (Evidence.S3_CHECKSUM, Evidence.S3_CHECKSUM),
    "sha256-big.bin": (Evidence.S3_CHECKSUM, Evidence.S3_CHECKSUM),
    "no-checksum.bin": (Evidence.S3_ETAG_MD5, Evidence.S3_ETAG_MD5),
    "no-checksum-big.bin": (Evidence.S3_ETAG_MD5, Evidence.S3_ETAG_MD5),
    "empty.bin": (Evidence.S3_ETAG_MD5, Evidence.S3_ETAG_MD5),
    "mp-uniform.bin": (Evidence.S3_MULTIPART_ETAG, Evidence.S3_ETAG_MD5),
    "mp-odd.bin": (Evidence.S3_MULTIPART_ETAG, Evidence.S3_ETAG_MD5),
    "mp-crc32.bin": (Evidence.S3_CHECKSUM, Evidence.S3_ETAG_MD5),
    "mp-sha256.bin": (Evidence.S3_CHECKSUM, Evidence.S3_ETAG_MD5),
}


def test_objects_written_by_boto3_are_checked_against_the_store(
    server: S3Server, backend: S3Backend, objects: dict[str, bytes]
) -> None:
    for key, content in objects.items():
        want = EXPECTED[key][0 if server.kind == "moto" else 1]
        got = _check(backend, key)
        assert got.matched and got.evidence is want, (key, got)
        assert "matched" in got.note, (key, got.note)
        if content:
            for flip in (0, len(content) // 2, len(content) - 1):
                bad = _check(backend, key, flip=flip)
                assert not bad.matched and bad.evidence is want, (key, flip, bad)
                assert "do not match" in bad.note


def test_odd_part_sizes_are_asked_and_said(moto: S3Server) -> None:
    bucket = moto.new_bucket()
    _multipart(_plain_client(moto), bucket, "odd.bin", [os.urandom(5 * MiB), os.urandom(6 * MiB + 3), b"x" * 999])
    from s3.conftest import make_backend

    b = make_backend(moto, bucket)
    try:
        got = _check(b, "odd.bin", chunk=777_777)  # chunks that straddle the part boundaries
        assert got.matched and got.evidence is Evidence.S3_MULTIPART_ETAG
        assert "3 parts of unequal sizes" in got.note
        assert _check(b, "odd.bin", flip=5 * MiB).evidence is Evidence.S3_MULTIPART_ETAG  # a wrong byte: evidence kept
    finally:
        b.close()


def test_a_short_read_is_never_a_match(server: S3Server, backend: S3Backend, objects: dict[str, bytes]) -> None:
    entry = backend.stat("no-checksum.bin")
    check = backend.evidence_for(entry)
    check.update(objects["no-checksum.bin"][:-1])
    got = check.result()
    assert not got.matched and "read 3,999 bytes" in got.note


def test_object_replaced_after_stat_is_transient(server: S3Server, backend: S3Backend) -> None:
    from ferry.core.errors import Transient

    c = _plain_client(server)
    c.put_object(Bucket=backend.bucket, Key="moving.bin", Body=os.urandom(2 * MiB))
    entry = backend.stat("moving.bin")
    c.put_object(Bucket=backend.bucket, Key="moving.bin", Body=os.urandom(2 * MiB))
    with pytest.raises(Transient, match="changed on the server"):
        backend.evidence_for(entry)


# -- choosing, without a server --
def _feed(check: Any, data: bytes) -> SourceCheck:
    check.update(data)
    return check.result()  # type: ignore[no-any-return]


def test_the_cheapest_evidence_is_used() -> None:
    data = os.urandom(10_000)
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    facts = Facts(
        size=len(data),
        etag=hashlib.md5(data).hexdigest(),
        checksums={"CRC32": crc, "SHA256": base64.b64encode(hashlib.sha256(data).digest()).decode()},
        ferry_sha256=hashlib.sha256(data).hexdigest(),
    )
    found, _ = candidates(facts, None)
    best = min(found, key=lambda c: c.cost)
    got = _feed(best.build(None, False), data)
    assert got.matched and got.evidence is Evidence.S3_CHECKSUM and "CRC32" in got.note


def test_ferry_metadata_stands_in_where_the_etag_is_no_md5() -> None:
    data = os.urandom(10_000)
    facts = Facts(size=len(data), etag="0" * 32 + "-3", sse="aws:kms", ferry_sha256=hashlib.sha256(data).hexdigest())
    found, why = candidates(facts, None)
    assert len(found) == 1 and "SSE-KMS" in why[0]
    got = _feed(found[0].build(None, False), data)
    assert got.matched and got.evidence is Evidence.FERRY_METADATA


def test_nothing_comparable_says_why() -> None:
    found, why = candidates(Facts(size=10, etag="a" * 32 + "-2", sse="aws:kms"), None)
    assert not found and why == ["its multipart ETag is no MD5 (SSE-KMS encryption)"]
    found, why = candidates(Facts(size=10, etag="a" * 32, sse_c=True), None)
    assert not found and "SSE-C" in why[0]
    found, why = candidates(Facts(size=10, etag="W/whatever"), None)
    assert not found and "neither an MD5" in why[0]
    check = NoEvidence("the store keeps no checksum for this object (multipart ETag under SSE-KMS)")
    res = _feed(check, b"x")
    assert res.evidence is None and not res.matched and "SSE-KMS" in res.note


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def test_crc32c_needs_awscrt_and_says_so_without_it() -> None:
    from ferry.backends.s3.evidence import ALGORITHMS

    data = os.urandom(3000)
    value = base64.b64encode(_crc32c(data).to_bytes(4, "big")).decode()
    found, why = candidates(Facts(size=len(data), checksums={"CRC32C": value}), None)
    if ALGORITHMS["CRC32C"].new is None:
        assert not found and "awscrt" in why[0]
    else:
        got = _feed(found[0].build(None, False), data)
        assert got.matched and got.evidence is Evidence.S3_CHECKSUM


def test_a_wrongly_assumed_part_layout_is_not_called_a_mismatch() -> None:
    parts = [b"a" * 100, b"b" * 120, b"c" * 30]
    data = b"".join(parts)
    etag = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).digest()
    assumed = uniform_layout(len(data), 3, 100)
    assert assumed == [100, 100, 50]
    check = PartsCheck(
        len(data), hashlib.md5, assumed, etag, Evidence.S3_MULTIPART_ETAG, "multipart ETag",
        assumed=True, recheck=lambda: [100, 120, 30],
    )  # fmt: skip
    got = _feed(check, data)
    assert got.evidence is None and not got.matched and "could not be recomputed" in got.note
    # With the real layout the same bytes match, and a damaged byte does not.
    real = PartsCheck(len(data), hashlib.md5, [100, 120, 30], etag, Evidence.S3_MULTIPART_ETAG, "multipart ETag",
                      assumed=False)  # fmt: skip
    assert _feed(real, data).matched
    wrong = PartsCheck(
        len(data), hashlib.md5, assumed, etag, Evidence.S3_MULTIPART_ETAG, "multipart ETag",
        assumed=True, recheck=lambda: [100, 100, 50],
    )  # fmt: skip
    got = _feed(wrong, data)
    assert got.evidence is Evidence.S3_MULTIPART_ETAG and not got.matched
