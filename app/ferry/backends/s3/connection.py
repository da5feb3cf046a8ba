"""One bucket's connection: botocore's client, the lean client where it applies, and each request
sent through the lean client first, through botocore otherwise.

Every module of the package reaches S3 through :class:`S3Connection`, never through the backend:
the backend is built on top of it, so the package's imports run one way.

All threads share one thread-safe botocore client whose connection pool is sized to the
concurrency, and one executor for multipart parts, ranged downloads and part-size HEADs. The lean
client (:mod:`ferry.backends.s3.lean`) is made without botocore where the settings alone say it
applies (a custom endpoint, path-style, a region): loading botocore's S3 model is ~0.1 s of CPU,
a tenth of a 256 MiB download here, and a download made of lean GETs never needs it.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from ferry.backends.s3.client import (
    EnvOnly,
    configured_endpoint,
    environment_only,
    is_aws,
    lean_where,
    make_client,
    make_session,
)
from ferry.backends.s3.errors import ServiceAnswer, error_code, http_status, map_error
from ferry.backends.s3.lean import Fallback, LeanClient, canonical_query, lean_client_at
from ferry.backends.s3.settings import S3Settings
from ferry.core.address import Address
from ferry.core.errors import FerryError, NotFound, Transient


def key_of(path: str) -> str:
    """The S3 key of a backend path: a leading ``/`` dropped (not a ``//``: that is a key too)."""
    return path.lstrip("/") if path.startswith("/") and not path.startswith("//") else path


class S3Connection:
    def __init__(self, address: Address, settings: S3Settings) -> None:
        self.address = address
        self.bucket = address.host
        self.settings = settings
        self._lock = threading.Lock()
        self._client: Any = None
        self._session: Any = None
        self._lean: LeanClient | None = None  # the lean requests, where they apply
        self._lean_known = False  # whether _lean is decided (from the settings, or by the client)
        self._executor: ThreadPoolExecutor | None = None
        self._workers = max(8, settings.part_concurrency * 4)

    # -- the clients --
    @property
    def client(self) -> Any:
        """botocore's S3 client, built on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    if self._session is None:
                        self._session = make_session(self.settings)
                    # Scheduler workers + our part/range threads, so no request waits for a socket.
                    # (--parallel auto may run up to 128 files at once: transfers.tuning.AUTO_MAX)
                    client = make_client(self._session, self.settings, pool_size=128 + self._workers)
                    lean = self._lean_from_client(client)
                    known = self._lean
                    if lean is None or known is None or lean.where != known.where:
                        self._lean = lean  # botocore's answer wins over the guess made without it
                    self._lean_known = True
                    self._client = client
        return self._client

    def has_client(self) -> bool:
        """Whether botocore's client has been built (a download of lean GETs never builds it)."""
        return self._client is not None

    @property
    def session(self) -> Any:
        """botocore's session (the client is built first: it resolves the credentials)."""
        _ = self.client
        return self._session

    @property
    def lean(self) -> LeanClient | None:
        """The lean client (:mod:`ferry.backends.s3.lean`), or None where it does not apply.

        Where the settings alone say it applies it is made without botocore's client; anything
        else builds the client and asks it, as every botocore request does anyway."""
        if not self._lean_known:
            with self._lock:
                if not self._lean_known and self._client is None:
                    env = environment_only(self.settings)
                    if env is not None:
                        self._lean = self._lean_from_env(env)
                    else:
                        if self._session is None:
                            self._session = make_session(self.settings)
                        self._lean = self._lean_from_settings()
                    self._lean_known = self._lean is not None
        if not self._lean_known:
            _ = self.client
        return self._lean

    def _lean_from_env(self, env: EnvOnly) -> LeanClient | None:
        """As :meth:`_lean_from_settings` where the environment alone decides (no botocore session:
        it is made only if botocore's client is needed after all)."""
        if self.settings.addressing not in (None, "path") or not env.endpoint_url or is_aws(env.endpoint_url):
            return None
        return lean_client_at(env.endpoint_url, env.region, env.credentials, self.settings, env.ca_bundle)

    def _lean_from_settings(self) -> LeanClient | None:
        settings = self.settings
        if settings.addressing not in (None, "path"):
            return None
        endpoint = settings.endpoint_url or configured_endpoint(self._session)
        if not endpoint or is_aws(endpoint):
            return None  # AWS itself keeps botocore; make_client addresses custom endpoints path-style
        try:
            region = settings.region or self._session.get_config_variable("region")
        except Exception:
            return None
        return self._lean_on_session(endpoint, region)

    def _lean_from_client(self, client: Any) -> LeanClient | None:
        where = lean_where(client) if self.settings.lean else None
        return self._lean_on_session(*where) if where is not None else None

    def _lean_on_session(self, endpoint: str, region: str | None) -> LeanClient | None:
        if not self.settings.lean:
            return None
        try:
            creds = self._session.get_credentials() if self._session is not None else None
        except Exception:
            return None
        ca_bundle = None
        try:
            ca_bundle = self._session.get_config_variable("ca_bundle")
        except Exception:
            pass
        return lean_client_at(endpoint, region, creds, self.settings, ca_bundle)

    def _usable_lean(self) -> LeanClient | None:
        lean = self.lean
        return lean if lean is not None and lean.enabled else None

    @property
    def executor(self) -> ThreadPoolExecutor:
        """Threads for multipart parts, ranged downloads and part-size HEADs."""
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="ferry-s3")
        return self._executor

    def use_part_size(self, size: int) -> None:
        self.settings = replace(self.settings, part_size=size)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- words --
    def display(self, path: str) -> str:
        """``path`` as the person would write it (``s3://bucket/key``)."""
        return str(replace(self.address, path=path, site=None, trailing_slash=False))

    def err(self, exc: BaseException, what: str) -> FerryError:
        return map_error(exc, what, bucket=self.bucket, read_timeout=self.settings.read_timeout)

    def call(self, what: str, fn: Callable[..., Any], **kw: Any) -> Any:
        """``fn(Bucket=..., **kw)`` (a botocore client method), its errors as Ferry's."""
        try:
            return fn(Bucket=self.bucket, **kw)
        except Exception as exc:
            raise self.err(exc, what) from exc

    # -- requests: the lean client first, botocore otherwise --
    def get_object(self, key: str, byte_range: str | None, *, checksum_mode: bool = False) -> Any:
        """GetObject of one range (read whole by the caller). ``checksum_mode`` asks for the stored
        checksums on the lean client only (botocore would validate a whole-object checksum against
        the range and fail)."""
        lean = self._usable_lean()
        if lean is not None:
            try:
                return lean.get_object(self.bucket, key, byte_range, checksum_mode=checksum_mode)
            except Fallback:
                pass
        kw = {"Range": byte_range} if byte_range else {}
        return self.client.get_object(Bucket=self.bucket, Key=key, **kw)

    def head_object(
        self, key: str, *, checksum_mode: bool = False, part_number: int | None = None
    ) -> Mapping[str, Any]:
        """HeadObject. ``checksum_mode`` asks for the additional checksums, ``part_number`` for one
        part of a multipart object."""
        lean = self._usable_lean()
        if lean is not None:
            try:
                return lean.head_object(self.bucket, key, checksum_mode=checksum_mode, part_number=part_number)
            except Fallback:
                pass
        kw: dict[str, Any] = {"ChecksumMode": "ENABLED"} if checksum_mode else {}
        if part_number is not None:
            kw["PartNumber"] = part_number
        head: Mapping[str, Any] = self.client.head_object(Bucket=self.bucket, Key=key, **kw)
        return head

    def head(self, key: str) -> dict[str, Any]:
        """botocore's HeadObject, errors as Ferry's (restore states, share links)."""
        result: dict[str, Any] = self.call(self.display(key), self.client.head_object, Key=key)
        return result

    def object_exists(self, key: str) -> bool:
        """One HEAD: is there an object under exactly ``key``? (The commit's no-overwrite check on
        stores that ignore If-None-Match; folders were the destination stat's business.)"""
        try:
            self.head_object(key)
        except Exception as exc:
            err = self.err(exc, self.display(key))
            if isinstance(err, NotFound):
                return False
            raise err from exc
        return True

    def delete_object(self, key: str, version: str = "") -> None:
        """DeleteObject; with ``version`` (not "null") that version for good, leaving no delete
        marker in a versioned bucket."""
        version = "" if version == "null" else version
        lean = self._usable_lean()
        if lean is not None:
            try:
                if not version:
                    lean.delete_object(self.bucket, key)
                    return
                status, code, _ = lean.probe(
                    "DELETE", self.bucket, key, {}, query=canonical_query({"versionId": version})
                )
                if 200 <= status < 300:
                    return
                raise ServiceAnswer(code, status)
            except Fallback:
                pass
        self.client.delete_object(Bucket=self.bucket, Key=key, **({"VersionId": version} if version else {}))

    def discard_object(self, key: str, version: str = "") -> None:
        """Remove a throw-away object, best effort: by ``version`` (nothing left in a versioned
        bucket), else, where deleting a version is refused, hidden behind a delete marker rather
        than left in sight."""
        try:
            self.delete_object(key, version)
            return
        except Exception:
            if not version or version == "null":
                return
        try:
            self.delete_object(key)
        except Exception:
            pass

    def upload_part(
        self,
        key: str,
        upload_id: str,
        number: int,
        body: bytes | bytearray,
        content_md5: str | None,
        checksum_sha256: bytes | None = None,
        unsigned: bool = False,
    ) -> Any:
        """One part of a multipart upload."""
        lean = self._usable_lean()
        if lean is not None:
            try:
                return lean.upload_part(
                    self.bucket, key, upload_id, number, body, content_md5, checksum_sha256, unsigned
                )
            except Fallback:
                pass
        kw = {"ContentMD5": content_md5} if content_md5 else {}
        if checksum_sha256 is not None:
            kw["ChecksumSHA256"] = base64.b64encode(checksum_sha256).decode("ascii")
        return self.client.upload_part(
            Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body, **kw
        )

    def put_object(self, key: str, body: bytes, kw: Mapping[str, Any], resent: Callable[[], None] | None = None) -> Any:
        """PutObject in one request (botocore also words every error). ``resent`` is called when
        the lean client's attempt broke off after it may have reached the store (no answer read),
        before botocore sends the same request again: a no-overwrite PUT may then meet the object
        that attempt made (see ``S3Writer``)."""
        lean = self._usable_lean()
        if lean is not None:
            try:
                return lean.put_object(self.bucket, key, body, kw)
            except Fallback as exc:
                if resent is not None and exc.__cause__ is not None:
                    resent()
        return self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **kw)

    def list_page(self, prefix: str, delimiter: str | None, max_keys: int, token: str | None) -> Mapping[str, Any]:
        """One page of ListObjectsV2."""
        lean = self._usable_lean()
        if lean is not None:
            try:
                return lean.list_objects_v2(self.bucket, prefix, delimiter, max_keys, token)
            except Fallback:
                pass
        kw: dict[str, Any] = {"Delimiter": delimiter} if delimiter else {}
        if token:
            kw["ContinuationToken"] = token
        page: Mapping[str, Any] = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=max_keys, **kw)
        return page

    def fetch_range(self, key: str, lo: int, into: memoryview, etag: str) -> None:
        """Fill ``into`` with the object's bytes from ``lo``: the lean client reads the socket
        straight into it, botocore's answer is copied in. ``If-Match`` on the first answer's ETag:
        an object replaced during the download fails the file (and the queue retries it) instead of
        leaving a mix of two versions that the stream hash and the read-back would both call
        consistent."""
        hi = lo + len(into)
        try:
            resp = self._range_into(key, lo, into, etag)
        except Exception as exc:
            if error_code(exc) == "PreconditionFailed" or http_status(exc) == 412:
                raise Transient(f"{self.display(key)} changed on the server during the download") from exc
            raise self.err(exc, f"reading {self.display(key)}") from exc
        if etag and resp.get("ETag") and resp["ETag"] != etag:
            # Stores that ignore If-Match (rclone serve s3) still name the version they answered with.
            raise Transient(f"{self.display(key)} changed on the server during the download")
        got = int(resp.get("ContentLength", -1))
        if got != hi - lo or not str(resp.get("ContentRange", f"bytes {lo}-")).startswith(f"bytes {lo}-"):
            raise Transient(f"Short read of {self.display(key)} ({got} of {hi - lo} bytes at {lo})")

    def _range_into(self, key: str, lo: int, into: memoryview, etag: str) -> Mapping[str, Any]:
        lean = self._usable_lean()
        if lean is not None:
            try:
                return lean.get_range_into(self.bucket, key, lo, into, etag or None)
            except Fallback:
                pass
        kw = {"IfMatch": etag} if etag else {}
        answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={lo}-{lo + len(into) - 1}", **kw)
        data: bytes = answer["Body"].read()
        if len(data) <= len(into):
            into[: len(data)] = data
        return {**answer, "ContentLength": len(data)}
