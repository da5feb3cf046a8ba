"""Which body checks an S3 endpoint really performs, found out once per connection.

Why a probe: a store that *accepts* a header has not necessarily *checked* it. Measured with the
test servers (moto 5.2.5, ``rclone serve s3`` 1.75): moto stores any ``Content-MD5`` and any
``x-amz-checksum-sha256`` without looking at the body, and even echoes the checksum it was sent;
rclone refuses a wrong ``Content-MD5`` (``BadDigest``) but stores a wrong ``x-amz-checksum-sha256``
as given and does not check SigV4's ``x-amz-content-sha256`` either. AWS checks both. So Ferry
claims "server checked ..." only for what an endpoint has been seen to refuse when wrong: one
throw-away PUT with a deliberately wrong checksum (and one with a wrong Content-MD5), whose answer
decides. A refused probe stores nothing; an accepted one is deleted at once.

Modes (site option ``checksums`` or ``FERRY_S3_CHECKSUMS``): ``auto`` (AWS is known to check and is
not probed; any other endpoint is probed), ``on`` (send SHA-256 additional checksums on every
upload, multipart too, even where the store only stores them), ``off`` (never send
``x-amz-checksum-*``: for stores that refuse the header).
"""

from __future__ import annotations

import base64
import hashlib
import threading
import uuid
import weakref
from dataclasses import dataclass

from ferry.backends.s3.client import is_aws
from ferry.backends.s3.connection import S3Connection
from ferry.backends.s3.errors import DIGEST_REFUSALS, error_code
from ferry.backends.s3.lean import Fallback
from ferry.backends.s3.probes import NO_ETAG


@dataclass(frozen=True)
class Support:
    """What to send and what may be claimed for one endpoint."""

    send_sha256: bool  # x-amz-checksum-sha256 on single PUTs (free: it is the stream hash)
    multipart_sha256: bool  # per-part checksums (ChecksumAlgorithm=SHA256): one SHA-256 pass per part
    checks_sha256: bool  # seen to refuse a wrong x-amz-checksum-sha256 (or AWS)
    checks_md5: bool  # seen to refuse a wrong Content-MD5 (or AWS)


_cache: weakref.WeakKeyDictionary[S3Connection, Support] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def composite_sha256(part_digests: list[bytes]) -> str:
    """The checksum S3 gives a multipart object uploaded with SHA-256 part checksums: SHA-256 of
    the parts' binary SHA-256s, base64, dash, part count."""
    return f"{b64(hashlib.sha256(b''.join(part_digests)).digest())}-{len(part_digests)}"


def same_composite(answer: str, expected: str) -> bool:
    """Compare a composite checksum with or without its ``-N`` suffix (moto leaves it off)."""
    return answer.split("-", 1)[0] == expected.split("-", 1)[0] and bool(answer)


def support(conn: S3Connection, near: str = "") -> Support:
    """The endpoint's :class:`Support`, probed on first use (once per connection, under a lock so
    parallel workers wait for one probe rather than each sending their own). ``near`` is the key
    being uploaded: the probe object goes into its folder, where the user is known to be writing
    (policies often allow writes under a prefix only, and a bucket-root object would surprise)."""
    found = _cache.get(conn)
    if found is not None:
        return found
    with _lock:
        found = _cache.get(conn)
        if found is None:
            found = _decide(conn, near.rpartition("/")[0])
            _cache[conn] = found
    return found


def _decide(conn: S3Connection, folder: str) -> Support:
    mode = conn.settings.checksum_mode
    if mode == "off":
        return Support(False, False, False, _probe_md5(conn, folder))
    lean = conn.lean
    # The lean client serves custom endpoints only: where it applies, no botocore client is built
    # just to ask where the endpoint is (a small-file upload may never need one).
    endpoint = f"{lean.scheme}://{lean.netloc}" if lean is not None else conn.client.meta.endpoint_url
    if is_aws(endpoint):
        # AWS documents both checks (and has for years): no probe requests against it.
        return Support(True, True, True, True)
    checks = _probe(conn, "ChecksumSHA256", folder)
    if checks is None:
        # The store refused the header itself (not a digest error): it does not take additional
        # checksums at all, so send none.
        return Support(False, False, False, _probe_md5(conn, folder))
    return Support(True, checks or mode == "on", checks, _probe_md5(conn, folder))


def _probe_md5(conn: S3Connection, folder: str) -> bool:
    return bool(_probe(conn, "ContentMD5", folder))


# The probe PUT carries ``If-Match`` with an ETag no object has: a store that honours it (AWS,
# moto, MinIO) stores nothing whatever the checksum says, so a probe that got past the checksum
# leaves no object, no version and no delete marker behind, even in a versioned bucket where the
# user may not delete versions. Its answer then is "no such key" (or "precondition failed").
_PASSED_CHECKSUM = ("NoSuchKey", "PreconditionFailed")


def _probe(conn: S3Connection, param: str, folder: str = "") -> bool | None:
    """PUT a throw-away object with a deliberately wrong ``param``: True when refused as a digest
    mismatch (the store checks it), False when it got past the checksum (stopped by the If-Match
    no object satisfies, or stored and deleted again at once: by its version where the bucket
    keeps versions), None when refused for any other reason (the header itself is not
    understood, no write permission, ...). A store that weighs the condition before the checksum
    is judged not to check: Ferry then claims less, never more."""
    body = b"ferry checksum probe"
    wrong = hashlib.sha256(b"not " + body).digest() if param == "ChecksumSHA256" else hashlib.md5(b"not").digest()
    key = f"{folder + '/' if folder else ''}.ferry-probe-{uuid.uuid4().hex[:12]}"
    lean = conn.lean
    if lean is not None and lean.enabled:
        header = "x-amz-checksum-sha256" if param == "ChecksumSHA256" else "Content-MD5"
        try:
            status, code, version = lean.probe("PUT", conn.bucket, key, {header: b64(wrong), "If-Match": NO_ETAG}, body)
        except Fallback:
            status, code, version = 0, "", ""  # connection trouble: botocore below, with its retries
        if 200 <= status < 300:
            _delete_probe(conn, key, version)
            return False
        if 300 <= status < 500:  # else (busy, redirected, no answer) botocore retries and decides
            return _judge(code)
    try:
        resp = conn.client.put_object(Bucket=conn.bucket, Key=key, Body=body, IfMatch=NO_ETAG, **{param: b64(wrong)})
    except Exception as exc:
        return _judge(error_code(exc))
    _delete_probe(conn, key, str(resp.get("VersionId") or ""))
    return False


def _judge(code: str) -> bool | None:
    if code in DIGEST_REFUSALS:
        return True
    return False if code in _PASSED_CHECKSUM else None


def _delete_probe(conn: S3Connection, key: str, version: str) -> None:
    """Remove a probe the store kept (it ignored If-Match): by its version where it has one, so a
    versioned bucket keeps neither the probe nor a delete marker."""
    conn.discard_object(key, version)
