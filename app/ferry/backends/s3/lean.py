"""A lean path for the two requests a small object costs: one PutObject, one (ranged) GetObject.

Why: botocore spends ~1-1.5 ms of CPU on every request (event hooks, serialisation, the request
and response models, urllib3), and on a 2-core machine every worker shares one GIL: with one
request per small file that was most of a small-file transfer's CPU time. Here the same request is
signed with SigV4 directly (a few HMACs) and sent on a keep-alive connection per thread
(:mod:`ferry.backends.s3.http`, leaner than ``http.client``), about a fifth of the CPU.

Only the happy path is ours. Anything else goes back to botocore, which repeats the request with
its retries, redirects and error parsing, so errors, throttling (503 SlowDown), expired or wrong
credentials and clock skew are handled and worded exactly as before:

* any answer other than 2xx, except a 404 whose error code we can read (``NoSuchKey``,
  ``NoSuchBucket``, raised in botocore's ``response`` shape so :func:`map_error` words it);
* any exception (connection refused or reset, a timeout, TLS): the request is repeated through
  botocore, and after a few such failures this path switches itself off for the backend.

Used only where the client is addressed path-style (custom endpoints: MinIO, Ceph, rclone, moto)
with credentials and a region; AWS itself keeps botocore. ``FERRY_S3_FAST=0`` switches it off.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlsplit

from ferry.backends.s3.client import DIGEST_REFUSALS
from ferry.backends.s3.http import LeanConnection

if TYPE_CHECKING:  # ssl is imported when an https endpoint is first reached (~9 ms of start-up)
    import ssl

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED = "UNSIGNED-PAYLOAD"
MAX_FAILURES = 3  # connection-level failures before this path gives up for the backend
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


class FastError(Exception):
    """An S3 error answer, in the ``response`` shape botocore's ClientError has (map_error reads it)."""

    def __init__(self, code: str, status: int, message: str = "") -> None:
        super().__init__(f"{code} ({status}){': ' + message if message else ''}")
        self.response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}


class Fallback(Exception):
    """Not ours to answer: the caller repeats the request through botocore."""


def _error_code(body: bytes) -> tuple[str, str]:
    text = body.decode("utf-8", "replace")

    def tag(name: str) -> str:
        lo = text.find(f"<{name}>")
        hi = text.find(f"</{name}>")
        return text[lo + len(name) + 2 : hi] if lo >= 0 and hi > lo else ""

    return tag("Code"), tag("Message")


def _switched_off() -> bool:
    return os.environ.get("FERRY_S3_FAST", "1").strip().lower() in ("0", "no", "false", "off")


def fast_path_for(client: Any, session: Any) -> FastS3 | None:
    """A :class:`FastS3` for this botocore client, or None where the lean path does not apply."""
    if _switched_off():
        return None
    try:
        s3cfg = client.meta.config.s3 or {}
        region = client.meta.region_name
    except Exception:
        return None
    if s3cfg.get("addressing_style") != "path" or getattr(client.meta.config, "proxies", None):
        return None  # botocore's proxy handling (and its exceptions) stay in charge
    return fast_path_at(client.meta.endpoint_url, region, session, client.meta.config.read_timeout)


def fast_path_at(endpoint_url: str, region: str | None, session: Any, timeout: float, env: Any = None) -> FastS3 | None:
    """A :class:`FastS3` for a path-style endpoint, or None where the lean path does not apply.
    Also used before (or instead of) building botocore's client: loading its S3 model is ~0.1 s of
    CPU that a download made of lean GETs alone never needs. ``env`` (an
    :class:`~ferry.backends.s3.client.EnvOnly`) stands in for the session where the environment
    alone decides the keys and CA bundle."""
    if _switched_off():
        return None
    try:
        creds = env.credentials if env is not None else session.get_credentials() if session is not None else None
    except Exception:
        return None
    if not region or creds is None:
        return None
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        return None
    if _proxied(parts.scheme, parts.hostname):
        return None  # botocore's proxy handling (and its exceptions) stay in charge
    ca_bundle = None
    try:
        ca_bundle = env.ca_bundle if env is not None else session.get_config_variable("ca_bundle")
    except Exception:
        pass
    return FastS3(
        parts.scheme,
        parts.netloc,
        parts.path.rstrip("/"),
        region,
        creds,
        timeout=timeout,
        ca_bundle=ca_bundle,
    )


class FastS3:
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
        self._timeout = timeout
        self._local = threading.local()
        self._keys: dict[tuple[str, str], bytes] = {}
        self._failures = 0
        self.enabled = True
        self.sent: Callable[[str, str], None] | None = None  # (method, key) of each request answered
        self._ssl: ssl.SSLContext | None = None
        self._ca_bundle = ca_bundle

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

    # -- signing (SigV4, as botocore's S3SigV4Auth does it for path-style requests) --
    def _signing_key(self, secret: str, day: str) -> bytes:
        key = self._keys.get((secret, day))
        if key is None:
            k = hmac.new(("AWS4" + secret).encode(), day.encode(), hashlib.sha256).digest()
            for part in (self.region, "s3", "aws4_request"):
                k = hmac.new(k, part.encode(), hashlib.sha256).digest()
            key = k
            self._keys = {(secret, day): key}  # one day's key is all that is ever needed
        return key

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
        frozen = self._creds.get_frozen_credentials()
        now = time.gmtime()
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", now)
        day = amz_date[:8]
        path = self.base_path + "/" + quote(bucket, safe="") + ("/" + quote(key, safe="/~") if key else "")
        h = {k.lower(): v.strip() for k, v in headers.items()}
        h["host"] = self.netloc
        h["x-amz-date"] = amz_date
        h["x-amz-content-sha256"] = payload
        if frozen.token:
            h["x-amz-security-token"] = frozen.token
        names = sorted(h)
        signed = ";".join(names)
        canonical = "\n".join([method, path, query, "".join(f"{n}:{h[n]}\n" for n in names), signed, payload])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        sig = hmac.new(self._signing_key(frozen.secret_key, day), to_sign.encode(), hashlib.sha256).hexdigest()
        h["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={frozen.access_key}/{scope}, SignedHeaders={signed}, Signature={sig}"
        )
        reused = getattr(self._local, "conn", None) is not None
        try:
            conn = self._conn()
            target = f"{path}?{query}" if query else path
            if into is not None:  # a successful body lands in the caller's buffer: data is its length
                status, got, data, will_close = conn.request_into(method, target, h, into)
            else:
                status, got, data, will_close = conn.request(method, target, h, body if method == "PUT" else None)
            if will_close:
                self._drop()
        except Exception as exc:
            # A stale keep-alive connection, a reset, a timeout, TLS trouble: botocore repeats
            # the request (with its retries); a few of these and this path stands aside.
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
                raise FastError(code, status, message)
        raise Fallback(str(status))  # botocore words it (and retries what it should)

    def probe(self, method: str, bucket: str, key: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, str]:
        """One request whose answer the caller judges itself (the checksum probe of
        :mod:`ferry.backends.s3.checksums`): the status, and the error code of an answer that is no
        success. Raises :class:`Fallback` only for connection trouble."""
        status, _, data = self._request(method, bucket, key, headers, body, hashlib.sha256(body).hexdigest())
        code = _error_code(data)[0] if status >= 300 and isinstance(data, bytes) else ""
        return status, code

    # -- the two requests --
    def put_object(self, bucket: str, key: str, body: bytes, kw: Mapping[str, Any]) -> dict[str, Any]:
        """PutObject with the subset of botocore's parameters Ferry's single PUT uses."""
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
            elif name == "Metadata":
                for mk, mv in dict(value).items():
                    if not str(mv).isascii():
                        raise Fallback("metadata")  # botocore's encoding rules, not ours
                    headers[f"x-amz-meta-{mk}"] = str(mv)
            else:
                raise Fallback(name)
        if sha_hex:
            payload = sha_hex  # the additional checksum is the payload hash too: one pass for both
        elif "Content-MD5" in headers:
            # The signed Content-MD5 covers the body (the store checks it, or the caller compares
            # the ETag with it): no SHA-256 pass just for SigV4, as for parts.
            payload = UNSIGNED
        else:
            payload = hashlib.sha256(body).hexdigest()
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
            raise FastError("404", 404, "Not Found")
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
        params = {"encoding-type": "url", "list-type": "2", "max-keys": str(max_keys), "prefix": prefix}
        if delimiter:
            params["delimiter"] = delimiter
        if token:
            params["continuation-token"] = token
        # SigV4's canonical query: names sorted, names and values encoded but for -_.~
        query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items()))
        status, got, data = self._request("GET", bucket, "", {}, b"", EMPTY_SHA256, query)
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
        decode = unquote_plus if root.findtext(ns + "EncodingType") == "url" else str
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
        contents = []
        for el in root.iterfind(ns + "Contents"):
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
            contents.append(obj)
        if contents:
            out["Contents"] = contents
        prefixes = [{"Prefix": decode(el.findtext(ns + "Prefix") or "")} for el in root.iterfind(ns + "CommonPrefixes")]
        if prefixes:
            out["CommonPrefixes"] = prefixes
    except (ElementTree.ParseError, ValueError) as exc:
        raise Fallback("listing unreadable") from exc
    return out


def _proxied(scheme: str, host: str) -> bool:
    """Whether botocore would reach this endpoint through a proxy from the environment (a proxy in
    the client's config is the caller's to check)."""
    if sys.platform.startswith("linux") and not any(k.lower().endswith("_proxy") for k in os.environ):
        return False  # Linux takes proxies from these variables only: urllib.request costs ~5 ms
    import urllib.request

    if urllib.request.proxy_bypass(host):
        return False
    return bool(urllib.request.getproxies().get(scheme))


def _ssl_context(ca_bundle: str | None = None) -> ssl.SSLContext:
    """Certificates as botocore finds them: the profile's ca_bundle or AWS_CA_BUNDLE, else certifi's
    bundle, else the system's."""
    import ssl

    bundle = ca_bundle or os.environ.get("AWS_CA_BUNDLE")
    if not bundle:
        try:
            import certifi

            bundle = certifi.where()
        except ImportError:
            bundle = None
    return ssl.create_default_context(cafile=bundle)
