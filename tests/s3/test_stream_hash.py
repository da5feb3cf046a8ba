"""The copy lends its stream hash to the S3 writer (each byte hashed with SHA-256 once, not twice):
what the writer reports and records must still be the hash of exactly the bytes stored, and the
server's own checks (Content-MD5, ETags) must still run."""

from __future__ import annotations

import hashlib
import os

from ferry.backends.s3 import S3Backend
from ferry.backends.s3.writer import S3Writer
from s3.servers import S3Server


def _upload(backend: S3Backend, key: str, data: bytes, *, lend: bool, chunk: int = 1 << 20) -> tuple[str, str]:
    """Write ``data`` as the copy does: hash each chunk, then hand it to the writer."""
    w = backend.open_write(key, size=len(data), token="1", readback="sha256")
    assert isinstance(w, S3Writer)
    stream = hashlib.sha256()
    if lend:
        w.share_stream_hasher(stream)
    for i in range(0, len(data), chunk):
        piece = data[i : i + chunk]
        stream.update(piece)
        w.write(piece)
    digest = w.finish()
    assert digest is not None
    w.commit(overwrite=True)
    assert digest == stream.hexdigest()
    return digest, w.verified_note


def test_a_lent_hash_is_recorded_for_a_single_put(server: S3Server, backend: S3Backend) -> None:
    data = os.urandom(300_000)
    digest, note = _upload(backend, "lent/one.bin", data, lend=True, chunk=64 << 10)
    assert digest == hashlib.sha256(data).hexdigest()
    assert "MD5 ETag matched" in note and ("server checked Content-MD5" in note) == (server.kind == "rclone")
    head = server.client().head_object(Bucket=backend.bucket, Key="lent/one.bin")
    assert {k.lower(): v for k, v in head["Metadata"].items()}["ferry-sha256"] == digest


def test_a_lent_hash_covers_a_multipart_upload(server: S3Server, backend: S3Backend) -> None:
    backend.use_part_size(5 << 20)
    data = os.urandom((11 << 20) + 7)  # three parts
    digest, note = _upload(backend, "lent/multi.bin", data, lend=True)
    assert digest == hashlib.sha256(data).hexdigest()
    assert "MD5 ETags of 3 parts + multipart ETag matched" in note
    assert ("server checked Content-MD5 of 3 parts" in note) == (server.kind == "rclone")  # and their ETags
    assert server.client().get_object(Bucket=backend.bucket, Key="lent/multi.bin")["Body"].read() == data


def test_a_hash_lent_after_the_first_byte_is_refused(server: S3Server, backend: S3Backend) -> None:
    # The writer's own hasher has seen bytes the lent one has not: it must keep its own.
    data = b"abc" * 1000
    w = backend.open_write("lent/late.bin", size=len(data), token="1", readback="sha256")
    assert isinstance(w, S3Writer)
    w.write(data[:10])
    late = hashlib.sha256()
    w.share_stream_hasher(late)
    late.update(data[10:])
    w.write(data[10:])
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.abort()


def test_without_verification_nothing_is_lent(backend: S3Backend) -> None:
    w = backend.open_write("lent/none.bin", size=3, token="1", readback=None)
    assert isinstance(w, S3Writer)
    w.share_stream_hasher(hashlib.sha256())
    w.write(b"abc")
    assert w.finish() is None
    w.abort()
