"""The lean S3 client: the one adapter module for Ferry's own SigV4 signer and HTTP/1.1 client.

Why it exists: botocore spends ~1-1.5 ms of CPU on every request (event hooks, serialisation, the
request and response models, urllib3), and on a 2-core machine every worker shares one GIL: with
one request per small file that was most of a small-file transfer's CPU time. Here the requests a
small or medium object costs (PutObject, UploadPart, ranged GetObject, HeadObject, DeleteObject,
ListObjectsV2) are signed with SigV4 directly (:class:`SigV4`, a few HMACs) and sent on a
keep-alive connection per thread (:class:`LeanConnection`, leaner than ``http.client``), about a
fifth of the CPU. Everything here re-implements what botocore does, so this module is all a
botocore upgrade needs reviewed, and nothing else in the package signs or speaks HTTP:

* ``tests/s3/test_lean_contract.py`` signs the requests this client sends with botocore's own
  ``S3SigV4Auth`` and with :class:`SigV4`, and compares them (path, query, headers, signature):
  a botocore that signs differently, or a bug here, fails it;
* ``pyproject.toml`` allows only the botocore and boto3 versions that test was run against
  (:data:`CHECKED_WITH`; the test fails when the pins and this constant disagree);
* ``FERRY_S3_FAST=0`` (:attr:`S3Settings.lean`) switches this client off, and CI runs the
  conformance suite a second time that way (``.ci/run``), so botocore's own path stays correct.

Only the happy path is ours. Anything else goes back to botocore, which repeats the request with
its retries, redirects and error parsing, so errors, throttling (503 SlowDown), expired or wrong
credentials and clock skew are handled and worded exactly as botocore's:

* any answer other than 2xx, except a 404 whose error code we can read (``NoSuchKey``,
  ``NoSuchBucket``) and a refused condition, raised as :class:`LeanError` in botocore's
  ``response`` shape so ``errors.map_error`` words it;
* any exception (connection refused or reset, a timeout, TLS, an answer that is not HTTP/1.x as
  expected): the request is repeated through botocore, and after a few such failures this client
  switches itself off for the backend.

Used only where the client is addressed path-style (custom endpoints: MinIO, Ceph, rclone, moto)
with credentials and a region, and no proxy; AWS itself keeps botocore.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlsplit

from ferry.backends.s3.errors import DIGEST_REFUSALS
from ferry.backends.s3.settings import S3Settings

if TYPE_CHECKING:  # ssl is imported when an https endpoint is first reached (~9 ms of start-up)
    import ssl

# The versions tests/s3/test_lean_contract.py compared this module with: pyproject.toml allows
# from these up to the next minor release (the test checks that the pins say exactly that).
CHECKED_WITH = {"botocore": "1.44.8", "boto3": "1.44.8"}

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED = "UNSIGNED-PAYLOAD"
MAX_FAILURES = 3  # connection-level failures before this client gives up for the backend
MAX_LINE = 65536
MAX_HEADERS = 200
_ONE_WRITE = 64 << 10  # bodies up to this go in the same sendall as the headers
_RESPONSE_HEADERS = {
    "etag": "ETag",
    "content-range": "ContentRange",
    "x-amz-storage-class": "StorageClass",
    "x-amz-restore": "Restore",
    "x-amz-server-side-encryption": "ServerSideEncryption",
    "x-amz-checksum-sha256": "ChecksumSHA256",
    "x-amz-checksum-sha1": "ChecksumSHA1",
    "x-amz-checksum-crc32": "ChecksumCRC32",
    "x-amz-checksum-crc32c": "ChecksumCRC32C",
    "x-amz-checksum-crc64nvme": "ChecksumCRC64NVME",
    "x-amz-version-id": "VersionId",
    "x-amz-checksum-type": "ChecksumType",
    "x-amz-mp-parts-count": "PartsCount",
    "x-amz-server-side-encryption-customer-algorithm": "SSECustomerAlgorithm",
}


class LeanError(Exception):
    """An S3 error answer, in the ``response`` shape botocore's ClientError has (map_error reads it)."""

    def __init__(self, code: str, status: int, message: str = "") -> None:
        super().__init__(f"{code} ({status}){': ' + message if message else ''}")
        self.response: dict[str, Any] = {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }


class Fallback(Exception):
    """Not ours to answer: the caller repeats the request through botocore."""


class ProtocolError(Exception):
    """The answer is not HTTP/1.x as expected: the request goes to botocore instead."""


def _error_code(body: bytes) -> tuple[str, str]:
    text = body.decode("utf-8", "replace")

    def tag(name: str) -> str:
        lo = text.find(f"<{name}>")
        hi = text.find(f"</{name}>")
        return text[lo + len(name) + 2 : hi] if lo >= 0 and hi > lo else ""

    return tag("Code"), tag("Message")


def lean_client_at(
    endpoint_url: str, region: str | None, credentials: Any, settings: S3Settings, ca_bundle: str | None = None
) -> LeanClient | None:
    """A :class:`LeanClient` for a path-style endpoint, or None where it does not apply: switched
    off (``FERRY_S3_FAST=0``), no region or credentials, not plain http(s), or reached through a
    proxy (botocore's proxy handling, and its exceptions, stay in charge). ``credentials`` are
    botocore's (refreshable ones refresh themselves) or anything with ``get_frozen_credentials``."""
    if not settings.lean or not region or credentials is None:
        return None
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        return None
    if _proxied(parts.scheme, parts.hostname, settings):
        return None
    return LeanClient(
        parts.scheme,
        parts.netloc,
        parts.path.rstrip("/"),
        region,
        credentials,
        timeout=settings.read_timeout,
        ca_bundle=ca_bundle or settings.aws.ca_bundle,
    )


class SigV4:
    """AWS Signature Version 4 for S3 path-style requests, as botocore's ``S3SigV4Auth`` signs
    them: the canonical request (method, path as sent, canonical query, the headers given plus
    ``host``, ``x-amz-date``, ``x-amz-content-sha256`` and the session token, lower-cased and
    sorted, their values trimmed and runs of spaces made one), the string to sign and the HMAC
    chain. One day's signing key is kept."""

    def __init__(self, region: str) -> None:
        self.region = region
        self._keys: dict[tuple[str, str], bytes] = {}

    def _signing_key(self, secret: str, day: str) -> bytes:
        key = self._keys.get((secret, day))
        if key is None:
            k = hmac.new(("AWS4" + secret).encode(), day.encode(), hashlib.sha256).digest()
            for part in (self.region, "s3", "aws4_request"):
                k = hmac.new(k, part.encode(), hashlib.sha256).digest()
            key = k
            self._keys = {(secret, day): key}  # one day's key is all that is ever needed
        return key

    def sign(
        self,
        method: str,
        host: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        payload: str,
        credentials: Any,
        amz_date: str,
    ) -> dict[str, str]:
        """The headers to send (lower-cased), ``authorization`` included. ``path`` and ``query``
        are as they go on the wire: already URI-encoded, the query in canonical order.
        ``credentials`` has ``access_key``, ``secret_key`` and ``token`` (frozen)."""
        day = amz_date[:8]
        h = {k.lower(): v.strip() for k, v in headers.items()}
        h["host"] = host
        h["x-amz-date"] = amz_date
        h["x-amz-content-sha256"] = payload
        if credentials.token:
            h["x-amz-security-token"] = credentials.token
        names = sorted(h)
        signed = ";".join(names)
        # Values signed as SigV4 canonicalises them (runs of spaces as one), sent as they are.
        lines = "".join(f"{n}:{' '.join(h[n].split())}\n" for n in names)
        canonical = "\n".join([method, path, query, lines, signed, payload])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        sig = hmac.new(self._signing_key(credentials.secret_key, day), to_sign.encode(), hashlib.sha256).hexdigest()
        h["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, SignedHeaders={signed}, Signature={sig}"
        )
        return h


def object_path(base_path: str, bucket: str, key: str) -> str:
    """The path of a path-style request, URI-encoded as botocore encodes it."""
    return base_path + "/" + quote(bucket, safe="") + ("/" + quote(key, safe="/~") if key else "")


def canonical_query(params: Mapping[str, str]) -> str:
    """A query string in SigV4's canonical form: names sorted, names and values encoded but -_.~"""
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items()))


class LeanClient:
    """The lean requests against one path-style endpoint, each answered in botocore's shape."""

    def __init__(
        self,
        scheme: str,
        netloc: str,
        base_path: str,
        region: str,
        creds: Any,
        *,
        timeout: float,
        ca_bundle: str | None = None,
    ) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.base_path = base_path
        self.region = region
        self._creds = creds  # botocore Credentials (refreshable ones refresh themselves)
        self._signer = SigV4(region)
        self._timeout = timeout
        self._local = threading.local()
        self._failures = 0
        self.enabled = True
        self.sent: Callable[[str, str], None] | None = None  # (method, key) of each request answered
        self._ssl: ssl.SSLContext | None = None
        self._ca_bundle = ca_bundle

    @property
    def where(self) -> tuple[str, str, str, str]:
        """Scheme, host, base path and region: two clients with the same reach the same store."""
        return self.scheme, self.netloc, self.base_path, self.region

    # -- connections: one keep-alive connection per thread --
    def _conn(self) -> LeanConnection:
        conn: LeanConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self.scheme == "https" and self._ssl is None:
                self._ssl = _ssl_context(self._ca_bundle)
            conn = LeanConnection(self.scheme, self.netloc, self._timeout, self._ssl)
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def signed(
        self, method: str, bucket: str, key: str, headers: dict[str, str], payload: str, query: str = ""
    ) -> tuple[str, dict[str, str]]:
        """The request target and the signed headers, as :meth:`_request` sends them."""
        path = object_path(self.base_path, bucket, key)
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        h = self._signer.sign(
            method, self.netloc, path, query, headers, payload, self._creds.get_frozen_credentials(), amz_date
        )
        return (f"{path}?{query}" if query else path), h

    def _request(
        self,
        method: str,
        bucket: str,
        key: str,
        headers: dict[str, str],
        body: bytes,
        payload: str,
        query: str = "",
        into: memoryview | None = None,
    ) -> tuple[int, dict[str, str], bytes | int]:
        if not self.enabled:
            raise Fallback("off")
        target, h = self.signed(method, bucket, key, headers, payload, query)
        reused = getattr(self._local, "conn", None) is not None
        try:
            conn = self._conn()
            if into is not None:  # a successful body lands in the caller's buffer: data is its length
                status, got, data, will_close = conn.request_into(method, target, h, into)
            else:
                status, got, data, will_close = conn.request(method, target, h, body if method == "PUT" else None)
            if will_close:
                self._drop()
        except Exception as exc:
            # A stale keep-alive connection, a reset, a timeout, TLS trouble: botocore repeats
            # the request (with its retries); a few of these and this client stands aside.
            # (A kept-alive connection the server has since closed is no sign of trouble.)
            self._drop()
            if not reused:
                self._failures += 1
                if self._failures >= MAX_FAILURES:
                    self.enabled = False
            raise Fallback(type(exc).__name__) from exc
        if self.sent is not None:
            self.sent(method, key)
        return status, got, data

    def _answer(self, status: int, headers: Mapping[str, str], data: bytes | int, *, digest: bool = False) -> None:
        if 200 <= status < 300:
            return
        if status in (400, 404, 412) and isinstance(data, bytes):
            code, message = _error_code(data)
            # "No such key" and a refused condition (If-None-Match, If-Match) are answers, not
            # trouble: worded as botocore's would be, without repeating the request through it.
            # With ``digest``, so is a body refused as damaged: a part is sent again by its writer,
            # which knows that rclone serve s3 drops the whole upload after such a refusal.
            if code in ("NoSuchKey", "NoSuchBucket", "PreconditionFailed") or (digest and code in DIGEST_REFUSALS):
                raise LeanError(code, status, message)
        raise Fallback(str(status))  # botocore words it (and retries what it should)

    def probe(
        self, method: str, bucket: str, key: str, headers: dict[str, str], body: bytes = b"", query: str = ""
    ) -> tuple[int, str, str]:
        """One request whose answer the caller judges itself (the checksum probe of
        :mod:`ferry.backends.s3.checksums`): the status, the error code of an answer that is no
        success, and the version id a versioned bucket gave what was stored ("" if none). Raises
        :class:`Fallback` only for connection trouble."""
        status, got, data = self._request(method, bucket, key, headers, body, hashlib.sha256(body).hexdigest(), query)
        code = _error_code(data)[0] if status >= 300 and isinstance(data, bytes) else ""
        return status, code, str(got.get("x-amz-version-id", ""))

    # -- the requests --
    def put_object(self, bucket: str, key: str, body: bytes, kw: Mapping[str, Any]) -> dict[str, Any]:
        """PutObject with the subset of botocore's parameters Ferry's single PUT uses."""
        headers, payload = put_headers(kw, body)
        status, got, data = self._request("PUT", bucket, key, headers, body, payload)
        self._answer(status, got, data)
        return _shape(got, len(body))

    def upload_part(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        number: int,
        body: bytes | bytearray,
        content_md5: str | None,
        checksum_sha256: bytes | None = None,
        unsigned: bool = False,
    ) -> dict[str, Any]:
        """UploadPart. With an additional SHA-256 checksum, that same digest is SigV4's payload hash
        (one SHA-256 pass per part for both). With Content-MD5 alone (a signed header, checked by
        the server before it stores anything), or with ``unsigned`` (the caller compares the part's
        ETag with its own MD5), the payload goes unsigned, so the part is not hashed once more for
        SigV4, as botocore does over TLS; otherwise the payload's SHA-256 is signed."""
        headers: dict[str, str] = {}
        if content_md5:
            headers["Content-MD5"] = content_md5
        if checksum_sha256 is not None:
            headers["x-amz-checksum-sha256"] = base64.b64encode(checksum_sha256).decode("ascii")
            payload = checksum_sha256.hex()
        elif content_md5 or unsigned:
            payload = UNSIGNED
        else:
            payload = hashlib.sha256(body).hexdigest()
        # Canonical query: names sorted (partNumber < uploadId), values encoded as SigV4 wants.
        query = f"partNumber={number}&uploadId={quote(upload_id, safe='-_.~')}"
        # A writer's reused part buffer (bytearray) goes to sendall as it is: no copy into bytes.
        status, got, data = self._request("PUT", bucket, key, headers, cast(bytes, body), payload, query)
        self._answer(status, got, data, digest=True)
        return _shape(got, len(body))

    def get_object(
        self, bucket: str, key: str, byte_range: str | None, *, checksum_mode: bool = False
    ) -> dict[str, Any]:
        """GetObject (optionally ranged); the body is read whole (callers ask at most one range).
        With ``checksum_mode`` the store is asked for the object's additional checksums (some
        answer them on a ranged GET too, e.g. ``rclone serve s3``; AWS and moto only on HEAD or a
        whole GET). Nothing here validates them against a range: the caller only records them."""
        headers = {"Range": byte_range} if byte_range else {}
        if checksum_mode:
            headers["x-amz-checksum-mode"] = "ENABLED"
        status, got, data = self._request("GET", bucket, key, headers, b"", EMPTY_SHA256)
        if status == 416:
            raise Fallback("416")  # botocore's InvalidRange, which the callers handle
        self._answer(status, got, data)
        assert isinstance(data, bytes)  # no buffer was given: the body comes whole
        resp = _shape(got, len(data))
        resp["Body"] = _Body(data)
        return resp

    def head_object(
        self, bucket: str, key: str, *, checksum_mode: bool = False, part_number: int | None = None
    ) -> dict[str, Any]:
        """HeadObject. A 404 is "no such key" as botocore words a HEAD's (its answer has no body:
        code "404"); any other unhappy answer goes to botocore. ``checksum_mode`` asks for the
        additional checksums, ``part_number`` for one part of a multipart object (its size)."""
        headers = {"x-amz-checksum-mode": "ENABLED"} if checksum_mode else {}
        query = f"partNumber={part_number}" if part_number is not None else ""
        status, got, data = self._request("HEAD", bucket, key, headers, b"", EMPTY_SHA256, query)
        if status == 404:
            raise LeanError("404", 404, "Not Found")
        self._answer(status, got, data)
        return _shape(got, 0)

    def delete_object(self, bucket: str, key: str) -> None:
        """DeleteObject (S3 answers 204 whether or not the key existed)."""
        status, got, data = self._request("DELETE", bucket, key, {}, b"", EMPTY_SHA256)
        self._answer(status, got, data)

    def list_objects_v2(
        self, bucket: str, prefix: str, delimiter: str | None, max_keys: int, token: str | None
    ) -> dict[str, Any]:
        """One page of ListObjectsV2 in botocore's shape (the fields Ferry reads). Keys are asked
        URL-encoded and decoded as botocore does (a control character cannot travel in XML 1.0).
        Why here: a recursive download lists, and building botocore's client for that alone
        (loading its S3 model and endpoint rules) was ~0.1 s of single-threaded start-up, a fifth
        of a 200 x 1 MiB download."""
        status, got, data = self._request(
            "GET", bucket, "", {}, b"", EMPTY_SHA256, list_query(prefix, delimiter, max_keys, token)
        )
        self._answer(status, got, data)
        assert isinstance(data, bytes)
        return _list_page(data)

    def get_range_into(self, bucket: str, key: str, lo: int, into: memoryview, etag: str | None) -> dict[str, Any]:
        """A ranged GetObject of ``len(into)`` bytes from ``lo``, read straight into ``into`` (a
        large download's reused buffer). With ``etag``, ``If-Match`` makes a replaced object fail
        the range (412, through botocore) instead of mixing two versions in one file."""
        headers = {"Range": f"bytes={lo}-{lo + len(into) - 1}"}
        if etag:
            headers["If-Match"] = etag
        status, got, data = self._request("GET", bucket, key, headers, b"", EMPTY_SHA256, into=into)
        self._answer(status, got, data)
        if isinstance(data, bytes):  # a chunked or oversized answer came whole: copy what fits
            if len(data) > len(into):
                raise Fallback("range too long")
            into[: len(data)] = data
            data = len(data)
        resp = _shape(got, data)
        resp["ContentLength"] = data
        return resp


def put_headers(kw: Mapping[str, Any], body: bytes) -> tuple[dict[str, str], str]:
    """A single PUT's headers for botocore's parameters (the subset Ferry uses), and the payload
    hash to sign. Any other parameter is botocore's to send."""
    headers: dict[str, str] = {}
    sha_hex = ""
    for name, value in kw.items():
        if name == "ContentMD5":
            headers["Content-MD5"] = str(value)
        elif name == "ChecksumSHA256":
            headers["x-amz-checksum-sha256"] = str(value)
            sha_hex = base64.b64decode(str(value)).hex()
        elif name == "IfNoneMatch":
            headers["If-None-Match"] = str(value)
        elif name == "IfMatch":
            headers["If-Match"] = str(value)
        elif name == "Metadata":
            for mk, mv in dict(value).items():
                if not str(mv).isascii():
                    raise Fallback("metadata")  # botocore's encoding rules, not ours
                headers[f"x-amz-meta-{mk}"] = str(mv)
        else:
            raise Fallback(name)
    if sha_hex:
        return headers, sha_hex  # the additional checksum is the payload hash too: one pass for both
    if "Content-MD5" in headers:
        # The signed Content-MD5 covers the body (the store checks it, or the caller compares
        # the ETag with it): no SHA-256 pass just for SigV4, as for parts.
        return headers, UNSIGNED
    return headers, hashlib.sha256(body).hexdigest()


def list_query(prefix: str, delimiter: str | None, max_keys: int, token: str | None) -> str:
    """ListObjectsV2's query, keys asked URL-encoded, in canonical order."""
    params = {"encoding-type": "url", "list-type": "2", "max-keys": str(max_keys), "prefix": prefix}
    if delimiter:
        params["delimiter"] = delimiter
    if token:
        params["continuation-token"] = token
    return canonical_query(params)


class _Body:
    """The body of a GetObject answer, read already: ``read()`` and ``close()`` as botocore's."""

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def read(self, n: int = -1) -> bytes:
        data = self._data or b""
        if n is None or n < 0 or n >= len(data):
            self._data = b""
            return data
        self._data = data[n:]
        return data[:n]

    def close(self) -> None:
        self._data = None


def _shape(headers: Mapping[str, str], length: int) -> dict[str, Any]:
    """The response dict botocore would give for these headers (the fields Ferry reads)."""
    out: dict[str, Any] = {"ContentLength": int(headers.get("content-length", length))}
    for name, field in _RESPONSE_HEADERS.items():
        if name in headers:
            out[field] = headers[name]
    meta = {k[len("x-amz-meta-") :]: v for k, v in headers.items() if k.startswith("x-amz-meta-")}
    out["Metadata"] = meta
    lm = headers.get("last-modified")
    if lm:
        try:
            out["LastModified"] = _http_date(lm)
        except (TypeError, ValueError):
            pass
    if isinstance(out.get("LastModified"), datetime) and out["LastModified"].tzinfo is None:
        out["LastModified"] = out["LastModified"].replace(tzinfo=UTC)
    out["ResponseMetadata"] = {"HTTPStatusCode": 200, "HTTPHeaders": dict(headers)}
    return out


_MONTHS = {
    m: i for i, m in enumerate(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1)
}


def _http_date(text: str) -> datetime:
    """An HTTP date. The form every server sends ("Mon, 23 Nov 2026 14:02:40 GMT") is read here;
    any other goes to the email package, whose import (~3 ms of start-up) it then costs."""
    parts = text.split()
    if len(parts) == 6 and parts[5] == "GMT" and parts[2] in _MONTHS and parts[4].count(":") == 2:
        hh, mm, ss = parts[4].split(":")
        return datetime(int(parts[3]), _MONTHS[parts[2]], int(parts[1]), int(hh), int(mm), int(ss), tzinfo=UTC)
    from email.utils import parsedate_to_datetime

    return parsedate_to_datetime(text)


def _list_page(body: bytes) -> dict[str, Any]:
    """A ListBucketResult (V2) as botocore parses it; anything unexpected goes to botocore."""
    from urllib.parse import unquote_plus
    from xml.etree import ElementTree

    try:
        root = ElementTree.fromstring(body)
        ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
        if root.tag != ns + "ListBucketResult":
            raise Fallback("not a listing")
        decode: Callable[[str], str] = unquote_plus if root.findtext(ns + "EncodingType") == "url" else str
        out = _list_fields(root, ns, decode)
        contents = [_list_object(el, ns, decode) for el in root.iterfind(ns + "Contents")]
        if contents:
            out["Contents"] = contents
        prefixes = [{"Prefix": decode(el.findtext(ns + "Prefix") or "")} for el in root.iterfind(ns + "CommonPrefixes")]
        if prefixes:
            out["CommonPrefixes"] = prefixes
    except (ElementTree.ParseError, ValueError) as exc:
        raise Fallback("listing unreadable") from exc
    return out


def _list_fields(root: Any, ns: str, decode: Callable[[str], str]) -> dict[str, Any]:
    """A listing's own fields (truncation, continuation, prefix, count)."""
    out: dict[str, Any] = {"IsTruncated": root.findtext(ns + "IsTruncated", "").strip() == "true"}
    for name in ("Prefix", "Delimiter", "StartAfter"):
        text = root.findtext(ns + name)
        if text is not None:
            out[name] = decode(text)
    for name in ("NextContinuationToken", "ContinuationToken", "EncodingType"):
        text = root.findtext(ns + name)
        if text is not None:
            out[name] = text
    count = root.findtext(ns + "KeyCount")
    if count is not None:
        out["KeyCount"] = int(count)
    return out


def _list_object(el: Any, ns: str, decode: Callable[[str], str]) -> dict[str, Any]:
    """One ``Contents`` element: key, size, modification time, ETag, storage class."""
    obj: dict[str, Any] = {"Key": decode(el.findtext(ns + "Key") or "")}
    size = el.findtext(ns + "Size")
    if size is not None:
        obj["Size"] = int(size)
    when = el.findtext(ns + "LastModified")
    if when:
        stamp = datetime.fromisoformat(when.strip())
        obj["LastModified"] = stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
    for name in ("ETag", "StorageClass"):
        text = el.findtext(ns + name)
        if text is not None:
            obj[name] = text
    return obj


def _proxied(scheme: str, host: str, settings: S3Settings) -> bool:
    """Whether botocore would reach this endpoint through a proxy from the environment (a proxy in
    the client's config is the caller's to check)."""
    if sys.platform.startswith("linux") and not settings.proxy_variables:
        return False  # Linux takes proxies from these variables only: urllib.request costs ~5 ms
    import urllib.request

    if urllib.request.proxy_bypass(host):
        return False
    return bool(urllib.request.getproxies().get(scheme))


def _ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """Certificates as botocore finds them: the profile's ca_bundle or AWS_CA_BUNDLE, else certifi's
    bundle, else the system's."""
    import ssl

    bundle = ca_bundle
    if not bundle:
        try:
            import certifi

            bundle = certifi.where()
        except ImportError:
            bundle = None
    return ssl.create_default_context(cafile=bundle)


# -- HTTP/1.1 --
class LeanConnection:
    """A minimal keep-alive HTTP/1.1 connection.

    Why not ``http.client``: on small objects its response parsing was the largest single cost
    left per request (``parse_headers`` hands every header block to ``email.parser``: a tenth of
    the upload's GIL time on 4 KiB files), and it writes the headers and the body in separate
    ``send`` calls. This reads the status line and headers with plain ``bytes`` operations and
    sends a small request in one ``sendall``. It speaks only what S3 answers need:
    ``Content-Length`` and chunked bodies, bodies read to the close otherwise, ``Connection:
    close``; anything malformed raises, and the caller hands the request to botocore.

    A successful body can also be read straight into the caller's buffer (:meth:`request_into`):
    a large download's ranges then land in buffers that are reused range after range, instead of
    a fresh 16 MiB ``bytes`` per range (whose pages the kernel must fault in and zero each time).
    """

    def __init__(self, scheme: str, netloc: str, timeout: float, context: ssl.SSLContext | None) -> None:
        host, _, port = netloc.rpartition(":") if netloc.rpartition(":")[2].isdigit() else (netloc, "", "")
        self._host = host.strip("[]")  # an IPv6 literal comes bracketed
        self._port = int(port) if port else (443 if scheme == "https" else 80)
        sock = socket.create_connection((self._host, self._port), timeout=timeout)
        # Nagle plus delayed ACKs would stall each small request by tens of milliseconds.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            assert context is not None
            sock = context.wrap_socket(sock, server_hostname=self._host)
        self._sock = sock
        self._rfile = sock.makefile("rb")

    def close(self) -> None:
        try:
            self._rfile.close()
        finally:
            self._sock.close()

    def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, dict[str, str], bytes, bool]:
        """Send one request, read its whole answer: (status, lower-cased headers, body, will_close)."""
        self._send(method, target, headers, body)
        status, got, data, will_close = self._response(method, None)
        assert isinstance(data, bytes)
        return status, got, data, will_close

    def request_into(
        self, method: str, target: str, headers: dict[str, str], into: memoryview
    ) -> tuple[int, dict[str, str], bytes | int, bool]:
        """As :meth:`request` for a body-less request, but a successful (2xx) answer whose
        ``Content-Length`` fits ``into`` is read straight into it: its body is then the byte count.
        Any other answer's body comes back as ``bytes``, read whole as before."""
        self._send(method, target, headers, None)
        return self._response(method, into)

    def _send(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> None:
        lines = [f"{method} {target} HTTP/1.1"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        lines.append("Accept-Encoding: identity")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if body and len(body) <= _ONE_WRITE:
            self._sock.sendall(head + body)
        else:
            self._sock.sendall(head)
            if body:
                self._sock.sendall(body)

    def _line(self) -> bytes:
        line = self._rfile.readline(MAX_LINE + 1)
        if not line:
            raise ProtocolError("connection closed")
        if len(line) > MAX_LINE:
            raise ProtocolError("line too long")
        return line

    def _head(self) -> tuple[bytes, int, dict[str, str]]:
        """The status line's version and status, and the lower-cased headers; a stray
        ``100 Continue`` (never asked for) is skipped as ``http.client`` does."""
        while True:
            status_line = self._line()
            parts = status_line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise ProtocolError(f"bad status line {status_line[:40]!r}")
            status = int(parts[1])
            got = self._headers()
            if status != 100:
                return parts[0], status, got

    def _headers(self) -> dict[str, str]:
        got: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = self._line()
            if line in (b"\r\n", b"\n"):
                return got
            name, sep, value = line.partition(b":")
            if not sep:
                raise ProtocolError("bad header line")
            key = name.strip().lower().decode("latin-1")
            text = value.strip().decode("latin-1")
            got[key] = f"{got[key]}, {text}" if key in got else text
        raise ProtocolError("too many headers")

    def _response(self, method: str, into: memoryview | None) -> tuple[int, dict[str, str], bytes | int, bool]:
        version, status, got = self._head()
        will_close = version == b"HTTP/1.0" or "close" in got.get("connection", "").lower()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, got, b"", will_close
        if "chunked" in got.get("transfer-encoding", "").lower():
            return status, got, self._chunked(), will_close
        length = got.get("content-length")
        if length is None:
            return status, got, self._rfile.read(), True  # delimited by the close
        if not length.isdigit():
            raise ProtocolError("bad Content-Length")
        if into is not None and 200 <= status < 300 and int(length) <= len(into):
            return status, got, self._read_into(into[: int(length)]), will_close
        data = self._rfile.read(int(length))
        if len(data) != int(length):
            raise ProtocolError("body cut short")
        return status, got, data, will_close

    def _read_into(self, into: memoryview) -> int:
        # BufferedReader.readinto hands what it holds, then lets the socket fill the rest of the
        # caller's buffer directly: one copy from the kernel, no allocation.
        if self._rfile.readinto(into) != len(into):
            raise ProtocolError("body cut short")
        return len(into)

    def _chunked(self) -> bytes:
        out = bytearray()
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError("bad chunk size") from None
            if size == 0:
                while self._line() not in (b"\r\n", b"\n"):
                    pass  # trailers
                return bytes(out)
            chunk = self._rfile.read(size)
            if len(chunk) != size:
                raise ProtocolError("chunk cut short")
            out += chunk
            self._line()  # the CRLF after each chunk
