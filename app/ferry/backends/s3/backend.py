"""S3 buckets (AWS and S3-compatible stores) through boto3: ``s3://bucket/key``.

Paths are keys without a leading slash; ``""`` is the bucket's root. Folders are prefixes ending
in ``/`` (listed with ``/`` as the delimiter, a page at a time) and, for "new folder", zero-byte
``prefix/`` marker objects. ``s3://`` with no bucket lists the buckets.

One backend serves one bucket (the engine's endpoint for ``s3://bucket``); all of its threads
share one thread-safe boto3 client whose connection pool is sized to the concurrency, and one
executor for multipart parts and ranged downloads. See :mod:`ferry.backends.s3.client` for how
credentials and endpoints resolve, :mod:`ferry.backends.s3.writer` for uploads and their
verification and resume, :mod:`ferry.backends.s3.names` for keys that cannot be file names.
"""

from __future__ import annotations

import base64
import builtins
import io
import os
import posixpath
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ferry.backends.base import Backend, Capabilities, Entry, EvidenceCheck, Kind, Reader, ResumeSlot, Writer
from ferry.backends.s3.client import (
    MAX_SINGLE_COPY,
    MIN_PART,
    Archived,
    EnvOnly,
    NoSuchBucket,
    S3Settings,
    _configured_endpoint,
    _is_aws,
    environment_only,
    make_client,
    make_session,
    map_error,
    read_timeout,
    settings_for,
)
from ferry.backends.s3.evidence import Facts, NoEvidence, candidates, no_evidence_note, uniform_layout
from ferry.backends.s3.lean import Fallback, FastS3, fast_path_at, fast_path_for
from ferry.backends.s3.names import encode_name
from ferry.backends.s3.reader import RangedReader
from ferry.backends.s3.writer import S3Writer, choose_part_size
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import (
    AlreadyExists,
    FerryError,
    IsADirectory,
    NotADirectory,
    NotFound,
    Transient,
    Unsupported,
    UsageError,
)
from ferry.core.hashing import HASH_ALGORITHMS
from ferry.core.outcomes import SkipReason
from ferry.sharing.types import Link, ShareRequest

MAX_PRESIGN = timedelta(days=7)  # SigV4's limit on X-Amz-Expires
DEFAULT_PRESIGN = timedelta(hours=1)
DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys
# How long a prefix seen empty answers "not found" for the keys under it without a request. The
# answer only steers the conflict policy (skip/rename); the no-overwrite guarantee itself is the
# commit's If-None-Match or its HEAD just before the PUT, which are always sent.
ABSENT_TTL = 30.0
# stat() asks with a GET of the first bytes instead of a HEAD: the same headers (size, ETag,
# metadata), and a small object's whole body, kept briefly for the open_read that follows (a small
# download is then one request, not HEAD + GET). Larger objects cost this many bytes more per stat.
STAT_GET = 256 << 10
BODY_TTL = 30.0
READ_RANGE = 16 << 20  # bytes per ranged GET when downloading a large object in parallel
ARCHIVE_CLASSES = ("GLACIER", "DEEP_ARCHIVE")
# Up to this size a download is checked with what stat() already saw (an MD5 ETag, Ferry's
# SHA-256, a checksum the GET carried): hashing 1 MiB with MD5 costs ~1.6 ms here, about what one
# more request costs. A larger object gets one HEAD asking for the store's checksums, which may
# name a cheaper one (CRC32: ~0.45 ms per MiB; CRC64NVME with awscrt: ~0.1 ms).
EVIDENCE_HEAD = 1 << 20
MAX_PART_HEADS = 1000  # part sizes asked one HEAD each, only for multipart objects of unequal parts
REVOKE_NOTE = (
    "S3 pre-signed links cannot be revoked early: they stop working when they expire, or when the "
    "access key that signed them is deactivated or rotated"
)
_RESTORE_RE = re.compile(r'ongoing-request="(true|false)"')


def restore_state(head: Mapping[str, Any]) -> str:
    """Where an object stands for reading: ``available`` (not archived), ``archived`` (no restore
    asked), ``restoring`` (asked, not done) or ``restored`` (a temporary copy is readable)."""
    cls = head.get("StorageClass") or "STANDARD"
    if cls not in ARCHIVE_CLASSES:
        return "available"
    m = _RESTORE_RE.search(str(head.get("Restore") or ""))
    if m is None:
        return "archived"
    return "restoring" if m.group(1) == "true" else "restored"


def wait_for_restore(
    head: Callable[[], Mapping[str, Any]],
    what: str,
    *,
    poll: float,
    max_wait: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Block until an archived object is readable, re-checking every ``poll`` seconds: the staging
    an overnight queue must survive. Returns the final state; raises :class:`Archived` when no
    restore was requested, or when ``max_wait`` passes first."""
    deadline = clock() + max_wait
    while True:
        state = restore_state(head())
        if state in ("available", "restored"):
            return state
        if state == "archived":
            raise Archived(
                f"{what} is archived and no restore was requested: run 'ferry s3 restore {what}', then retry "
                "(the queue waits while the restore runs)"
            )
        if clock() >= deadline:
            raise Archived(f"{what} is still being restored after {max_wait / 3600:.1f} h; retry later")
        sleep(poll)


class _BodyReader(io.RawIOBase):
    """A GetObject body as a raw binary file with ``readinto`` (what the copy loop uses)."""

    def __init__(self, body: Any, first: bytes = b"") -> None:
        self._body = body
        self._pending = memoryview(first)

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        if self._pending:
            n = min(len(view), len(self._pending))
            view[:n] = self._pending[:n]
            self._pending = self._pending[n:]
            return n
        if self._body is None:
            return 0
        data = self._body.read(len(view))
        if not data:
            return 0
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None
        super().close()


class _RestReader(io.RawIOBase):
    """An object whose first bytes came with stat(): those, then the rest in one ranged GET made on
    the first ``readinto`` whose buffer has room for all of it, read from the socket straight into
    that buffer (behind the first bytes). A 1 MiB download then reaches the copy as one 1 MiB
    chunk (one write, one hash update) instead of a 768 KiB ``bytes`` per file, allocated,
    page-faulted and copied again: those faults were ~0.2 ms of CPU per 1 MiB file. The GET carries
    ``If-Match`` on the stat's ETag, so the two halves are one version of the object. A smaller
    buffer gets the rest as a stream, as before."""

    def __init__(self, backend: S3Backend, path: str, first: bytes, total: int, etag: str) -> None:
        self._b, self._path, self._etag = backend, path, etag
        self._pending = memoryview(first)
        self._lo, self._hi = len(first), total
        self._rest: Reader | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        n = min(len(view), len(self._pending))
        if n:
            view[:n] = self._pending[:n]
            self._pending = self._pending[n:]
        left = self._hi - self._lo
        if self._pending or not left:
            return n
        if self._rest is None and len(view) - n >= left:
            self._b._fetch_range(self._b._key(self._path), self._lo, view[n : n + left], self._etag)
            self._lo = self._hi
            return n + left
        if n:
            return n
        if self._rest is None:
            self._rest = self._b.open_read(self._path, self._lo, left)
        return self._rest.readinto(view) or 0

    def close(self) -> None:
        if self._rest is not None:
            self._rest.close()
            self._rest = None
        super().close()


def _mtime_from(head: Mapping[str, Any]) -> datetime | None:
    meta = {k.lower(): v for k, v in (head.get("Metadata") or {}).items()}
    raw = meta.get("mtime")
    if raw:
        try:
            return datetime.fromtimestamp(float(raw), UTC)
        except (ValueError, OverflowError):
            pass
    lm = head.get("LastModified")
    return lm.astimezone(UTC) if isinstance(lm, datetime) else None


class S3Backend(Backend):
    scheme = "s3"
    capabilities = Capabilities(
        range_read=True,
        resume_write=True,  # multipart uploads continue from the parts the server holds
        atomic_commit=True,  # an object appears only at PutObject/CompleteMultipartUpload
        multipart_write=True,  # parallel parts above the part size (use_part_size is the knob)
        server_side_copy=True,  # within the bucket; rename is copy + delete
        presign=True,  # share(): SigV4 pre-signed GET/PUT links and POST policies
        hashes=HASH_ALGORITHMS,  # from Ferry's metadata when it stored one, else by reading
        slow_hash=True,
        readback=True,  # the server checks Content-MD5 and returns MD5 ETags we compare
        source_evidence=True,  # downloads are compared with the store's checksums or ETags
        empty_dirs=True,  # zero-byte "prefix/" markers
        set_mtime=False,  # kept as metadata at upload only (S3 cannot change it afterwards)
        mtime_precision=1.0,
    )
    keeps_resume_state = True

    def __init__(self, address: Address) -> None:
        super().__init__(address)
        self.bucket = address.host
        self.settings: S3Settings = settings_for(address)
        self._lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self._client: Any = None
        self._session: Any = None
        self._fast: FastS3 | None = None  # the lean PUT/GET path (s3_fast), where it applies
        self._fast_known = False  # whether _fast is decided (from the settings, or by the client)
        workers = max(8, self.settings.part_concurrency * 4)
        self._executor: ThreadPoolExecutor | None = None
        self._conditional: bool | None = None  # does the store honour If-None-Match? (probed once)
        self._markers: bool | None = None  # does the store keep "prefix/" folder markers? (probed once)
        self._absent: dict[str, float] = {}  # "a/b/" -> when it was seen holding no key at all
        self._touched: set[str] = set()  # keys written through this backend, and their "a/", "a/b/"
        self._bodies: dict[str, tuple[float, bytes, int, str]] = {}  # stat()'s first bytes, size, ETag
        self._layouts: dict[tuple[str, str], builtins.list[int]] = {}  # (key, ETag) -> part sizes asked
        self._workers = workers
        # Restore waits: tests shorten these through the environment.
        self.restore_poll = float(os.environ.get("FERRY_S3_RESTORE_POLL", "300"))
        self.restore_max_wait = float(os.environ.get("FERRY_S3_RESTORE_MAX_WAIT", str(48 * 3600)))

    # -- plumbing --
    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    if self._session is None:
                        self._session = make_session(self.settings)
                    # Scheduler workers + our part/range threads, so no request waits for a socket.
                    client = make_client(self._session, self.settings, pool_size=64 + self._workers)
                    lean = fast_path_for(client, self._session)
                    known = self._fast
                    if lean is None or known is None or _where(lean) != _where(known):
                        self._fast = lean  # botocore's answer wins over the guess made without it
                    self._fast_known = True
                    self._client = client
        return self._client

    @property
    def fast(self) -> FastS3 | None:
        """The lean path for small PUTs and GETs (:mod:`ferry.backends.s3.lean`), or None.

        Where the settings alone say it applies (a custom endpoint, path-style, a region) it is made
        without botocore's client: loading the S3 model is ~0.1 s of CPU, a tenth of a 256 MiB
        download here, and a download made of lean GETs never needs it. Anything else builds the
        client and asks it, as every botocore request does anyway."""
        if not self._fast_known:
            with self._lock:
                if not self._fast_known and self._client is None:
                    env = environment_only(self.settings)
                    if env is not None:
                        self._fast = self._lean_from_env(env)
                    else:
                        if self._session is None:
                            self._session = make_session(self.settings)
                        self._fast = self._lean_from_settings()
                    self._fast_known = self._fast is not None
        if not self._fast_known:
            _ = self.client
        return self._fast

    def _lean_from_env(self, env: EnvOnly) -> FastS3 | None:
        """As :meth:`_lean_from_settings` where the environment alone decides (no botocore session:
        it is made only if botocore's client is needed after all)."""
        if self.settings.addressing not in (None, "path") or not env.endpoint_url or _is_aws(env.endpoint_url):
            return None
        return fast_path_at(env.endpoint_url, env.region, None, read_timeout(), env=env)

    def _lean_from_settings(self) -> FastS3 | None:
        settings = self.settings
        if settings.addressing not in (None, "path"):
            return None
        endpoint = settings.endpoint_url or _configured_endpoint(self._session)
        if not endpoint or _is_aws(endpoint):
            return None  # AWS itself keeps botocore; make_client addresses custom endpoints path-style
        try:
            region = settings.region or self._session.get_config_variable("region")
        except Exception:
            return None
        return fast_path_at(endpoint, region, self._session, read_timeout())

    def get_object(self, key: str, byte_range: str | None, *, checksum_mode: bool = False) -> Any:
        """GetObject of one range (read whole by the caller): the lean path, else botocore.
        ``checksum_mode`` asks for the stored checksums on the lean path only (botocore would
        validate a whole-object checksum against the range and fail)."""
        fast = self.fast
        if fast is not None and fast.enabled:
            try:
                return fast.get_object(self.bucket, key, byte_range, checksum_mode=checksum_mode)
            except Fallback:
                pass
        kw = {"Range": byte_range} if byte_range else {}
        return self.client.get_object(Bucket=self.bucket, Key=key, **kw)

    def head_object(
        self, key: str, *, checksum_mode: bool = False, part_number: int | None = None
    ) -> Mapping[str, Any]:
        """HeadObject: the lean path, else botocore. ``checksum_mode`` asks for the additional
        checksums, ``part_number`` for one part of a multipart object."""
        fast = self.fast
        if fast is not None and fast.enabled:
            try:
                return fast.head_object(self.bucket, key, checksum_mode=checksum_mode, part_number=part_number)
            except Fallback:
                pass
        kw: dict[str, Any] = {"ChecksumMode": "ENABLED"} if checksum_mode else {}
        if part_number is not None:
            kw["PartNumber"] = part_number
        head: Mapping[str, Any] = self.client.head_object(Bucket=self.bucket, Key=key, **kw)
        return head

    def delete_object(self, key: str) -> None:
        """DeleteObject: the lean path, else botocore."""
        fast = self.fast
        if fast is not None and fast.enabled:
            try:
                fast.delete_object(self.bucket, key)
                return
            except Fallback:
                pass
        self.client.delete_object(Bucket=self.bucket, Key=key)

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
        """One part of a multipart upload: the lean path, else botocore."""
        fast = self.fast
        if fast is not None and fast.enabled:
            try:
                return fast.upload_part(
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

    def put_object(self, key: str, body: bytes, kw: Mapping[str, Any]) -> Any:
        """PutObject in one request: the lean path, else botocore (which also words every error)."""
        fast = self.fast
        if fast is not None and fast.enabled:
            try:
                return fast.put_object(self.bucket, key, body, kw)
            except Fallback:
                pass
        return self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **kw)

    # -- what this backend knows without asking: a new folder's keys do not exist yet --
    def _known_absent(self, key: str) -> bool:
        k = key.rstrip("/")
        if not self._absent or k in self._touched or k + "/" in self._touched:
            return False
        now = time.monotonic()
        p = k
        while "/" in p:
            p = p.rsplit("/", 1)[0]
            seen = self._absent.get(p + "/")
            if seen is not None and now - seen < ABSENT_TTL:
                return True
        return False

    def _note_absent(self, key: str) -> None:
        if len(self._absent) > 10_000:
            self._absent.clear()
        self._absent[key.rstrip("/") + "/"] = time.monotonic()

    def note_written(self, key: str) -> None:
        """``key`` now exists (we wrote it): never answer "not found" for it or its folders."""
        parts = key.split("/")
        self._bodies.pop(key, None)
        with self._lock:
            self._touched.add(key)
            for i in range(1, len(parts)):
                self._touched.add("/".join(parts[:i]) + "/")

    def use_part_size(self, size: int) -> int:
        """Upload parts of ``size`` bytes from now on (at least S3's 5 MiB floor); the size used.
        The same knob as FERRY_S3_PART_SIZE or a site's part_size option."""
        used = max(MIN_PART, size)
        self.settings = replace(self.settings, part_size=used)
        return used

    @property
    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="ferry-s3")
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def display(self, path: str) -> str:
        return str(replace(self.address, path=path, site=None, trailing_slash=False))

    def _need_bucket(self) -> None:
        if not self.bucket:
            raise UsageError("Name a bucket: s3://BUCKET/key ('ferry ls s3://' lists your buckets)")

    def _err(self, exc: BaseException, what: str) -> FerryError:
        return map_error(exc, what, bucket=self.bucket)

    def _call(self, what: str, fn: Callable[..., Any], **kw: Any) -> Any:
        try:
            return fn(Bucket=self.bucket, **kw)
        except Exception as exc:
            raise self._err(exc, what) from exc

    @staticmethod
    def _key(path: str) -> str:
        return path.lstrip("/") if path.startswith("/") and not path.startswith("//") else path

    def _prefix(self, path: str) -> str:
        path = self._key(path)
        if not path:
            return ""
        return path if path.endswith("/") else path + "/"

    # -- listing --
    def list(self, path: str, cancel: CancelToken | None = None) -> Iterator[Entry]:
        if not self.bucket:
            if self._key(path):
                raise UsageError("Name a bucket: s3://BUCKET/key")
            return self._list_buckets()
        prefix = self._prefix(path)
        try:
            it = self._pages(prefix, "/")
            first = next(it, None)  # fail now (no bucket, no access), not half way through a walk
        except Exception as exc:
            raise self._err(exc, f"listing {self.display(path)}") from exc
        if first is not None and prefix and not first.get("Contents") and not first.get("CommonPrefixes"):
            # Nothing under the prefix: a file (not a folder) or nothing at all.
            entry = self.stat(path.rstrip("/")) if path.rstrip("/") else None
            if entry is not None and entry.is_file:
                raise NotADirectory(f"Not a folder: {self.display(path)}")
            if entry is None or not entry.is_dir:
                raise NotFound(f"No such folder: {self.display(path)}")
        return self._entries(prefix, first, it, cancel, path)

    def _list_page(self, prefix: str, delimiter: str | None, max_keys: int, token: str | None) -> Mapping[str, Any]:
        """One page of ListObjectsV2: the lean path, else botocore."""
        fast = self.fast
        if fast is not None and fast.enabled:
            try:
                return fast.list_objects_v2(self.bucket, prefix, delimiter, max_keys, token)
            except Fallback:
                pass
        kw: dict[str, Any] = {"Delimiter": delimiter} if delimiter else {}
        if token:
            kw["ContinuationToken"] = token
        page: Mapping[str, Any] = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=max_keys, **kw)
        return page

    def _pages(self, prefix: str, delimiter: str | None = None, page_size: int = 1000) -> Iterator[Mapping[str, Any]]:
        """Every page under ``prefix``, as botocore's paginator walks them (continuation tokens)."""
        token: str | None = None
        while True:
            page = self._list_page(prefix, delimiter, page_size, token)
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def _entries(
        self, prefix: str, first: Any, pages: Iterator[Any], cancel: CancelToken | None, path: str
    ) -> Iterator[Entry]:
        """The entries of one folder, page by page. An object whose key is also a folder prefix
        (``run/x`` beside ``run/x/y``) is refused (the folder is listed): a file and a folder
        cannot share a name at a destination. S3 lists in key order, so the prefix ``run/x/``
        arrives after ``run/x`` (keys like ``run/x.txt`` may come between, even pages later): a
        file is held back until the listing has passed where its prefix would be."""
        seen: dict[str, str] = {}  # casefolded name -> first name, for case-insensitive disks
        folders: set[str] = set()  # prefixes listed so far ("run/x/")
        held: list[Entry] = []  # files whose prefix may still come
        page = first
        while page is not None:
            if cancel is not None:
                cancel.check()
            last = ""  # the greatest key or prefix on this page: nothing after it comes before it
            for obj in page.get("Contents") or ():
                key = obj["Key"]
                last = max(last, key)
                if key == prefix:
                    if obj.get("Size", 0) == 0:
                        continue  # the folder's own marker
                    # "dir/" holding data: both a file and a folder; it cannot be downloaded as either.
                    yield Entry(
                        path=key,
                        name="",
                        kind=Kind.FILE,
                        size=obj.get("Size"),
                        mtime=obj.get("LastModified"),
                        meta={
                            "name_note": f"refused: the object {key!r} ends in '/' but holds data: it would have "
                            "to be a file and a folder at once",
                            "skip": SkipReason.UNREPRESENTABLE.value,
                        },
                    )
                    continue
                held.append(
                    self._named(
                        key,
                        key[len(prefix) :],
                        Kind.FILE,
                        seen,
                        size=obj.get("Size"),
                        mtime=obj.get("LastModified"),
                        etag=str(obj.get("ETag", "")).strip('"'),
                        storage_class=obj.get("StorageClass") or "STANDARD",
                    )
                )
            held_keys = {e.path for e in held}
            for cp in page.get("CommonPrefixes") or ():
                p = cp["Prefix"]
                folders.add(p)
                last = max(last, p)
                entry = self._folder(p, p[len(prefix) : -1], seen)
                if p[:-1] in held_keys:
                    # Also an object's key (listed before it): the folder's path keeps its "/" so
                    # that the two stay two items (the file is refused below).
                    entry = replace(entry, path=p)
                yield entry
            try:
                page = next(pages, None)
            except Exception as exc:
                raise self._err(exc, f"listing {self.display(path)}") from exc
            done = page is None
            keep: list[Entry] = []
            for e in held:
                if done or e.path + "/" <= last:
                    yield _also_folder(e) if e.path + "/" in folders else e
                else:
                    keep.append(e)
            held = keep

    def _folder(self, p: str, raw: str, seen: dict[str, str]) -> Entry:
        """A CommonPrefix as a folder entry. A segment that cannot be a folder name (empty, from a
        leading '/' or '//'; '.', '..') is refused: its path is then the prefix itself, so it is
        never mistaken for the folder that holds it (``"/"`` is not the bucket's root)."""
        entry = self._named(p[:-1], raw, Kind.DIR, seen)
        if raw not in ("", ".", ".."):
            return entry
        why = "an empty folder name (a key with a leading '/' or '//')" if raw == "" else f"a {raw!r} folder name"
        meta = dict(entry.meta)
        meta["name_note"] = f"refused: the keys under {p!r} have {why}, which no destination can hold"
        meta["skip"] = (SkipReason.UNREPRESENTABLE if raw == "" else SkipReason.UNSAFE_NAME).value
        return replace(entry, path=p, meta=meta)

    def _named(
        self,
        key: str,
        raw: str,
        kind: Kind,
        seen: dict[str, str],
        *,
        size: int | None = None,
        mtime: datetime | None = None,
        etag: str = "",
        storage_class: str = "",
        extra: Mapping[str, str] | None = None,
        hashes: Mapping[str, str] | None = None,
    ) -> Entry:
        name, note = encode_name(raw)
        meta: dict[str, str] = dict(extra or {})
        if raw in (".", ".."):
            meta["skip"] = SkipReason.UNSAFE_NAME.value  # would climb out of (or collapse into) its folder
        elif not name:
            meta["skip"] = SkipReason.UNREPRESENTABLE.value  # no name can stand for it
        if etag:
            meta["etag"] = etag
        if storage_class:
            meta["storage_class"] = storage_class
            if storage_class in ARCHIVE_CLASSES:
                meta["archived"] = storage_class
        folded = name.casefold()
        if folded in seen and seen[folded] != name:
            note = (note + "; " if note else "") + (
                f"differs from {seen[folded]!r} only in case: on a case-insensitive disk the two collide "
                "(never overwritten silently: the conflict policy decides)"
            )
        else:
            seen.setdefault(folded, name)
        if note:
            meta["name_note"] = note
        return Entry(
            path=key,
            name=name,
            kind=kind,
            size=size if kind is Kind.FILE else None,
            # Whole seconds: listings carry milliseconds, HEAD's Last-Modified does not.
            mtime=mtime.astimezone(UTC).replace(microsecond=0) if mtime else None,
            hashes=dict(hashes or {}),
            meta=meta,
        )

    def _list_buckets(self) -> Iterator[Entry]:
        try:
            resp = self.client.list_buckets()
        except Exception as exc:
            raise map_error(exc, "listing buckets") from exc
        for b in resp.get("Buckets") or ():
            created = b.get("CreationDate")
            yield Entry(
                path=b["Name"], name=b["Name"], kind=Kind.DIR, mtime=created.astimezone(UTC) if created else None
            )

    def stat(self, path: str) -> Entry:
        key = self._key(path)
        if not self.bucket:
            if key:
                raise UsageError("Name a bucket: s3://BUCKET/key")
            return Entry(path="", name="", kind=Kind.DIR)
        if not key:
            try:
                self.client.head_bucket(Bucket=self.bucket)
            except Exception as exc:
                raise self._explain(exc, self.display(""), "") from exc
            return Entry(path="", name=self.bucket, kind=Kind.DIR)
        if self._known_absent(key):
            # A parent prefix held no key moments ago and we wrote nothing here since: the
            # destination of a fresh upload costs no HEAD and no listing.
            raise NotFound(f"No such file or folder: {self.display(key)}")
        seen: dict[str, str] = {}
        if not key.endswith("/"):
            try:
                head = self._head_by_get(key)
            except Exception as exc:
                err = self._explain(exc, self.display(key), key)
                if not isinstance(err, NotFound) or isinstance(err, NoSuchBucket):
                    raise err from exc
            else:
                return self._head_entry(key, head, seen)
        if self._prefix_exists(key.rstrip("/") + "/"):
            return self._named(key.rstrip("/"), posixpath.basename(key.rstrip("/")), Kind.DIR, seen)
        self._note_absent(key)
        raise NotFound(f"No such file or folder: {self.display(key)}")

    def _head_by_get(self, key: str) -> Mapping[str, Any]:
        """HeadObject's answer, from a GET of the first STAT_GET bytes where the store allows."""
        try:
            resp = self.get_object(key, f"bytes=0-{STAT_GET - 1}", checksum_mode=True)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "NoSuchBucket", "404", "NotFound"):
                raise
            # An empty object (416 InvalidRange), an archived one (InvalidObjectState: HEAD shows
            # its restore state) or anything else: HEAD as before.
            head: Mapping[str, Any] = self.client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
            return head
        try:
            body: bytes = resp["Body"].read()
        except Exception as exc:
            raise self._err(exc, f"reading {self.display(key)}") from exc
        total = _total_size(resp.get("ContentRange"), 0, len(body))
        if len(self._bodies) > 256:
            self._bodies.clear()  # stats nobody read from: never hold more than ~64 MiB
        self._bodies[key] = (time.monotonic(), body, total, str(resp.get("ETag") or ""))
        return {**resp, "ContentLength": total}

    def _take_body(self, key: str) -> tuple[bytes, int, str] | None:
        got = self._bodies.pop(key, None)
        if got is None or time.monotonic() - got[0] > BODY_TTL:
            return None
        return got[1], got[2], got[3]

    def object_exists(self, key: str) -> bool:
        """One HEAD: is there an object under exactly ``key``? (The commit's no-overwrite check on
        stores that ignore If-None-Match; folders were the destination stat's business.)"""
        try:
            self.head_object(key)
        except Exception as exc:
            err = self._err(exc, self.display(key))
            if isinstance(err, NotFound):
                return False
            raise err from exc
        return True

    def _head_entry(self, key: str, head: Mapping[str, Any], seen: dict[str, str]) -> Entry:
        meta = {k.lower(): v for k, v in (head.get("Metadata") or {}).items()}
        hashes = {algo: meta[f"ferry-{algo}"] for algo in HASH_ALGORITHMS if meta.get(f"ferry-{algo}")}
        extra: dict[str, str] = {}
        for field, name in (
            ("ChecksumSHA256", "checksum_sha256"),
            ("ChecksumSHA1", "checksum_sha1"),
            ("ChecksumCRC32", "checksum_crc32"),
            ("ChecksumCRC32C", "checksum_crc32c"),
            ("ChecksumCRC64NVME", "checksum_crc64nvme"),
            ("ChecksumType", "checksum_type"),
            ("ServerSideEncryption", "sse"),
            ("SSECustomerAlgorithm", "sse_c"),
        ):
            if head.get(field):
                extra[name] = str(head[field])
        state = restore_state(head)
        if state != "available":
            extra["restore"] = state
        return self._named(
            key,
            posixpath.basename(key),
            Kind.FILE,
            seen,
            size=int(head.get("ContentLength", 0)),
            mtime=_mtime_from(head),
            etag=str(head.get("ETag", "")).strip('"'),
            storage_class=head.get("StorageClass") or "STANDARD",
            extra=extra,
            hashes=hashes,
        )

    def _explain(self, exc: BaseException, what: str, key: str) -> FerryError:
        """HEAD answers carry no error body, so a 403 or 404 cannot say *why* (wrong key? wrong
        secret? no bucket? clock?). A one-key listing returns the service's own error code."""
        err = self._err(exc, what)
        if isinstance(err, NotFound) and key:
            return err  # a missing key in an existing bucket is the common case: no extra request
        if err.kind == "transient":
            return err  # a server that is down or stuck would only stall the explaining request too
        try:
            self.client.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
        except Exception as exc2:
            better = self._err(exc2, what)
            return better if better.kind != "error" else err
        if not key and isinstance(err, NotFound):
            return NoSuchBucket(f"No such bucket: s3://{self.bucket}")
        return err

    def _prefix_exists(self, prefix: str) -> bool:
        try:
            resp = self._list_page(prefix, None, 1, None)
        except Exception as exc:
            raise self._err(exc, f"checking {self.display(prefix)}") from exc
        return bool(resp.get("KeyCount") or resp.get("Contents"))

    # -- reading --
    def head(self, path: str) -> dict[str, Any]:
        key = self._key(path)
        result: dict[str, Any] = self._call(self.display(key), self.client.head_object, Key=key)
        return result

    def _fetch_range(self, key: str, lo: int, into: memoryview, etag: str) -> None:
        """Fill ``into`` with the object's bytes from ``lo``: the lean path reads the socket straight
        into it, botocore's answer is copied in. ``If-Match`` on the first answer's ETag: an object
        replaced during the download fails the file (and the queue retries it) instead of leaving
        a mix of two versions that the stream hash and the read-back would both call consistent."""
        hi = lo + len(into)
        resp: Mapping[str, Any] | None = None
        fast = self.fast
        try:
            if fast is not None and fast.enabled:
                try:
                    resp = fast.get_range_into(self.bucket, key, lo, into, etag or None)
                except Fallback:
                    resp = None
            if resp is None:
                kw = {"IfMatch": etag} if etag else {}
                answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={lo}-{hi - 1}", **kw)
                data: bytes = answer["Body"].read()
                if len(data) <= len(into):
                    into[: len(data)] = data
                resp = {**answer, "ContentLength": len(data)}
        except Exception as exc:
            err = getattr(exc, "response", {}) or {}
            if err.get("Error", {}).get("Code") == "PreconditionFailed" or (
                err.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412
            ):
                raise Transient(f"{self.display(key)} changed on the server during the download") from exc
            raise self._err(exc, f"reading {self.display(key)}") from exc
        if etag and resp.get("ETag") and resp["ETag"] != etag:
            # Stores that ignore If-Match (rclone serve s3) still name the version they answered with.
            raise Transient(f"{self.display(key)} changed on the server during the download")
        got = int(resp.get("ContentLength", -1))
        if got != hi - lo or not str(resp.get("ContentRange", f"bytes {lo}-")).startswith(f"bytes {lo}-"):
            raise Transient(f"Short read of {self.display(key)} ({got} of {hi - lo} bytes at {lo})")

    def _ranged(self, key: str, start: int, end: int, head: bytes, etag: str) -> Reader:
        """Bytes ``[start, end)`` of a large object: ``head`` (already here), then parallel ranges."""
        return RangedReader(
            lambda lo, into: self._fetch_range(key, lo, into, etag),
            start,
            end,
            head=head,
            range_size=READ_RANGE,
            depth=self.settings.part_concurrency,
            executor=self.executor,
        )

    def open_read(self, path: str, offset: int = 0, length: int | None = None) -> Reader:
        self._need_bucket()
        key = self._key(path)
        if offset < 0 or (length is not None and length < 0):
            raise UsageError(f"Negative offset or length reading {self.display(key)}")
        if length == 0:
            return io.BytesIO(b"")
        cached = self._take_body(key)
        if cached is not None:
            first, total, etag = cached
            if len(first) == total:
                # The whole object came with stat() moments ago (the copy stats its source first).
                return io.BytesIO(first[offset : None if length is None else offset + length])
            if offset == 0 and length is None and first:
                # Its first bytes did: ask only for the rest (its length known), in one request or,
                # for a large object, in parallel ranges.
                if total - len(first) > READ_RANGE:
                    return self._ranged(key, 0, total, first, etag)
                return _RestReader(self, path, first, total, etag)
        # The first request asks for one range, read whole: a small object (or a short range)
        # arrives in one GET; for a large one the Content-Range of the answer gives the size for
        # the parallel ranges that follow.
        first_end = offset + (length if length is not None and length <= READ_RANGE else STAT_GET)
        try:
            resp = self.get_object(key, f"bytes={offset}-{first_end - 1}")  # the lean path may serve it
        except Exception as exc:
            err = self._err(exc, self.display(key))
            if isinstance(err, Archived):
                wait_for_restore(
                    lambda: self.head(key),
                    self.display(key),
                    poll=self.restore_poll,
                    max_wait=self.restore_max_wait,
                )
                return self.open_read(path, offset, length)
            if getattr(exc, "response", {}).get("Error", {}).get("Code") == "InvalidRange":
                return io.BytesIO(b"")  # offset at or past the end (an empty object)
            if isinstance(err, NotFound) and not isinstance(err, NoSuchBucket) and self._prefix_exists(key + "/"):
                raise IsADirectory(f"Is a folder: {self.display(key)}") from exc
            raise err from exc
        total = _total_size(resp.get("ContentRange"), offset, int(resp.get("ContentLength", 0)))
        end = total if length is None else min(total, offset + length)
        if end <= first_end:
            return _BodyReader(resp["Body"])
        try:
            head: bytes = resp["Body"].read()
        except Exception as exc:
            raise self._err(exc, f"reading {self.display(key)}") from exc
        if len(head) != first_end - offset:
            raise Transient(f"Short read of {self.display(key)} ({len(head)} of {first_end - offset} bytes)")
        return self._ranged(key, offset, end, head, str(resp.get("ETag") or ""))

    def hash(self, path: str, algo: str, cancel: CancelToken | None = None) -> str:
        entry = self.stat(path)
        if algo in entry.hashes:
            return entry.hashes[algo]  # Ferry stored it at upload, checked by the server then
        return super().hash(path, algo, cancel)

    # -- what the store keeps about an object's bytes (base.SourceEvidence) --
    def evidence_for(self, entry: Entry) -> EvidenceCheck:
        """A check of ``entry``'s bytes (fed by the copy from byte 0) against the cheapest evidence
        the store keeps (:mod:`ferry.backends.s3.evidence`). Small objects use what stat() saw;
        larger ones cost one HEAD with ``ChecksumMode=ENABLED`` (and, for a multipart ETag or a
        composite checksum, one or two HEADs with ``PartNumber`` for the part layout)."""
        key = self._key(entry.path)
        size = entry.size or 0
        facts = Facts.from_entry(entry.meta, entry.hashes, size)
        found, _ = candidates(facts, None)
        if size > EVIDENCE_HEAD or not any(not c.layout for c in found):
            head = self._call_head(key, checksum_mode=True)
            etag = str(head.get("ETag") or "").strip('"')
            if facts.etag and etag and etag != facts.etag:
                raise Transient(f"{self.display(key)} changed on the server during the download")
            if int(head.get("ContentLength", size)) != size:
                raise Transient(f"{self.display(key)} changed on the server during the download")
            facts = Facts.from_head(head, size)
        count = facts.parts
        found, why = candidates(facts, lambda: self._part_sizes(key, facts.etag, count))
        found.sort(key=lambda c: (c.cost, c.layout))
        for c in found:
            if not c.layout:
                return c.build(None, False)
            layout, assumed, note = self._layout(key, facts, c.parts)
            if layout is None:
                why.append(note)
                continue
            return c.build(layout, assumed)
        return NoEvidence(no_evidence_note(why))

    def _call_head(self, key: str, **kw: Any) -> Mapping[str, Any]:
        try:
            return self.head_object(key, **kw)
        except Exception as exc:
            raise self._err(exc, self.display(key)) from exc

    def _head_part(self, key: str, number: int) -> tuple[int, int] | None:
        """(size of part ``number``, the part count the store says or 0), or None where the store
        does not answer for parts."""
        try:
            head = self.head_object(key, part_number=number)
        except Exception as exc:
            err = self._err(exc, self.display(key))
            if err.kind in ("auth", "transient") and not isinstance(err, NotFound):
                raise err from exc
            return None  # an error answer for a part number: the store does not serve parts
        told = head.get("PartsCount")
        try:
            count = int(told) if told is not None else 0
        except (TypeError, ValueError):
            count = 0
        return int(head.get("ContentLength", -1)), count

    def _layout(self, key: str, facts: Facts, count: int) -> tuple[builtins.list[int] | None, bool, str]:
        """The part sizes of a multipart object: (sizes, assumed uniform, why not). Part 1's size
        and the last part's are asked; when they fit equal parts, the layout is assumed uniform (a
        mismatch then asks every part before calling the bytes wrong); otherwise every part's size
        is asked, up to MAX_PART_HEADS parts."""
        cached = self._layouts.get((key, facts.etag))
        if cached is not None and len(cached) == count:
            return cached, False, ""
        unsupported = (
            f"the store does not tell the sizes of the {count} parts (HeadObject with PartNumber), which the "
            "multipart ETag and a composite checksum are computed from"
        )
        first = self._head_part(key, 1)
        if first is None or first[0] <= 0 or (count > 1 and first[0] >= facts.size):
            return None, False, unsupported  # rclone serve s3 answers the whole object for any part
        if first[1] and first[1] != count:
            return None, False, f"the store says {first[1]} parts, its ETag {count}"
        layout = uniform_layout(facts.size, count, first[0])
        if layout is not None:
            if count == 1:
                return layout, False, ""
            last = self._head_part(key, count)
            if last is not None and last[0] == layout[-1]:
                return layout, True, ""
        sizes = self._part_sizes(key, facts.etag, count)
        if sizes is None or sum(sizes) != facts.size:
            return None, False, unsupported if sizes is None else "the parts' sizes do not add up to the object's"
        return sizes, False, ""

    def _part_sizes(self, key: str, etag: str, count: int) -> builtins.list[int] | None:
        """Every part's size, one HEAD each (in parallel), kept for the next download of the same
        version; None when the store does not tell them, or there are too many to ask."""
        if count > MAX_PART_HEADS:
            return None
        found = builtins.list(self.executor.map(lambda n: self._head_part(key, n), range(1, count + 1)))
        if any(f is None or f[0] < 0 for f in found):
            return None
        sizes = [f[0] for f in found if f is not None]
        if len(self._layouts) > 1000:
            self._layouts.clear()
        self._layouts[(key, etag)] = sizes
        return sizes

    # -- writing --
    def open_write(
        self,
        path: str,
        *,
        size: int | None,
        token: str,
        resume: bool = False,
        readback: str | None = None,
        resume_slot: ResumeSlot | None = None,
    ) -> Writer:
        self._need_bucket()
        key = self._key(path)
        if not key or key.endswith("/"):
            raise UsageError(f"Cannot write an object named {self.display(key)!r}: give a key that does not end in '/'")
        return S3Writer(self, key, size=size, resume=resume, readback=readback, slot=resume_slot)

    def list_parts(self, key: str, upload_id: str) -> dict[int, tuple[str, int]]:
        """The parts the server holds for an upload: number -> (ETag, size)."""
        parts: dict[int, tuple[str, int]] = {}
        try:
            for page in self.client.get_paginator("list_parts").paginate(
                Bucket=self.bucket, Key=key, UploadId=upload_id
            ):
                for p in page.get("Parts") or ():
                    parts[int(p["PartNumber"])] = (str(p["ETag"]).strip('"'), int(p["Size"]))
        except Exception as exc:
            raise self._err(exc, self.display(key)) from exc
        return parts

    def server_copy(
        self,
        src_path: str,
        writer: Writer,
        on_bytes: Callable[[int], None],
        cancel: CancelToken,
        chunk: int = 0,  # LocalBackend's shape; the server copies in one request (or 5 GiB parts)
    ) -> None:
        """Same bucket: the server copies; the writer's commit issues CopyObject (or part copies)."""
        assert isinstance(writer, S3Writer)
        cancel.check()
        entry = self.stat(src_path)
        writer.set_copy_source(self._key(src_path), entry.size or 0)
        on_bytes(entry.size or 0)

    def copy_object(self, src_key: str, dst_key: str, size: int) -> None:
        """Server-side copy; above 5 GiB (CopyObject's limit) as a multipart copy."""
        source = {"Bucket": self.bucket, "Key": src_key}
        what = f"copying {self.display(src_key)} to {self.display(dst_key)}"
        self.note_written(dst_key)  # before: a failed copy may still have landed
        if size <= MAX_SINGLE_COPY:
            self._call(what, self.client.copy_object, Key=dst_key, CopySource=source)
            return
        part = choose_part_size(size, 512 << 20)
        up = self._call(what, self.client.create_multipart_upload, Key=dst_key)
        upload_id = up["UploadId"]
        try:
            ranges = [(n + 1, lo, min(lo + part, size)) for n, lo in enumerate(range(0, size, part))]

            def one(n: int, lo: int, hi: int) -> dict[str, Any]:
                r = self._call(
                    what,
                    self.client.upload_part_copy,
                    Key=dst_key,
                    UploadId=upload_id,
                    PartNumber=n,
                    CopySource=source,
                    CopySourceRange=f"bytes={lo}-{hi - 1}",
                )
                return {"PartNumber": n, "ETag": r["CopyPartResult"]["ETag"]}

            parts = list(self.executor.map(lambda t: one(*t), ranges))
            self._call(
                what,
                self.client.complete_multipart_upload,
                Key=dst_key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=dst_key, UploadId=upload_id)
            raise

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        self._need_bucket()
        key = self._key(path).rstrip("/")
        if not key:
            self.make_bucket(exist_ok=exist_ok)
            return
        try:
            existing: Entry | None = self.stat(key)
        except NotFound:
            existing = None
        if existing is not None:
            if existing.is_dir and exist_ok:
                return
            raise AlreadyExists(f"Already exists: {self.display(key)}")
        if not self._keeps_markers():
            return  # this store keeps no folder markers: a folder exists once something is in it
        self.note_written(key + "/")
        try:
            try:
                self.put_object(key + "/", b"", {})
            except Exception as exc:
                raise self._err(exc, f"creating folder {self.display(key)}") from exc
        except FerryError:
            if exist_ok and self._prefix_exists(key + "/"):
                return  # filled meanwhile by a parallel upload
            raise

    def conditional_writes(self) -> bool:
        """Whether the store refuses a PUT with ``If-None-Match: *`` onto an existing key (AWS and
        moto do, rclone serve s3 does not). Probed once with a throw-away key; where it holds, a
        no-overwrite commit needs no HEAD first (one request less per file)."""
        if self._conditional is None:
            with self._probe_lock:  # once per backend, not once per worker that gets here first
                if self._conditional is None:
                    self._conditional = self._probe_conditional()
        return self._conditional

    def _probe_conditional(self) -> bool:
        import uuid

        probe = f".ferry-probe-{uuid.uuid4().hex[:12]}"
        try:
            self.put_object(probe, b"", {})
            try:
                self.put_object(probe, b"", {"IfNoneMatch": "*"})
            except Exception as exc:
                conditional = getattr(exc, "response", {}).get("Error", {}).get("Code") in ("PreconditionFailed", "412")
            else:
                conditional = False
            self.delete_object(probe)
        except Exception:
            return False  # cannot tell (no write access?): check with a HEAD
        return conditional

    def _keeps_markers(self) -> bool:
        """Whether "prefix/" marker objects stay markers. Stores backed by a file system (rclone
        serve s3) turn "name/" into a file "name", which would then block every key under it, so
        the first mkdir probes with a throw-away key."""
        if self._markers is None:
            import uuid

            probe = f".ferry-marker-probe-{uuid.uuid4().hex[:12]}"
            # Lean requests where they serve: an upload then never builds botocore's client just
            # for this probe (~0.15 s of CPU: its import and S3 model, on a worker thread).
            try:
                self.put_object(probe + "/", b"", {})
            except Exception as exc:
                raise self._err(exc, "checking folder markers") from exc
            try:
                self.head_object(probe)
            except Exception:
                self._markers = True
            else:
                self._markers = False
            for k in (probe + "/", probe):
                try:
                    self.delete_object(k)
                except Exception:
                    pass
        return self._markers

    def make_bucket(self, *, exist_ok: bool = False, region: str | None = None) -> None:
        region = region or self.settings.region or self.client.meta.region_name
        kw: dict[str, Any] = {}
        if region and region not in ("us-east-1", "aws-global"):
            kw["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self._call(f"creating bucket s3://{self.bucket}", self.client.create_bucket, **kw)
        except AlreadyExists:
            if not exist_ok:
                raise

    def _keys_under(self, prefix: str) -> Iterator[str]:
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents") or ():
                    yield obj["Key"]
        except Exception as exc:
            raise self._err(exc, f"listing {self.display(prefix)}") from exc

    def delete_keys(self, keys: Iterable[str]) -> int:
        """Delete in batches of up to 1,000 keys (DeleteObjects); raise if any key was refused."""
        batch: builtins.list[str] = []
        count = 0

        def flush() -> None:
            nonlocal count
            if not batch:
                return
            for k in batch:
                self._bodies.pop(k, None)  # a deleted object must not be read from memory
            resp = self._call(
                f"deleting {len(batch)} objects",
                self.client.delete_objects,
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            errors = resp.get("Errors") or []
            if errors:
                first = errors[0]
                raise map_error(
                    _FakeClientError(first.get("Code", ""), 0),
                    f"deleting {self.display(first.get('Key', ''))} ({len(errors)} of {len(batch)} refused)",
                    bucket=self.bucket,
                )
            count += len(batch)
            batch.clear()

        for k in keys:
            batch.append(k)
            if len(batch) >= DELETE_BATCH:
                flush()
        flush()
        return count

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._need_bucket()
        entry = self.stat(path)
        key = entry.path
        if entry.is_file:
            self._call(f"deleting {self.display(key)}", self.client.delete_object, Key=key)
            return
        prefix = self._prefix(key)
        if not prefix:
            raise UsageError("Removing a whole bucket is not done by Ferry; use the provider's console or 'aws s3 rb'")
        if recursive:
            self.delete_keys(self._keys_under(prefix))
            return
        inside = [k for _, k in zip(range(2), self._keys_under(prefix), strict=False)]
        if any(k != prefix for k in inside):
            raise AlreadyExists(f"Folder not empty: {self.display(key)}")
        self.delete_keys(inside)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Server-side copy, then delete (S3 has no rename); folders key by key."""
        self._need_bucket()
        entry = self.stat(src)
        dst_key = self._key(dst).rstrip("/")
        if not overwrite and self.exists(dst_key):
            raise AlreadyExists(f"Already exists: {self.display(dst_key)}")
        if entry.is_file:
            self.copy_object(entry.path, dst_key, entry.size or 0)
            self._call(f"deleting {self.display(entry.path)}", self.client.delete_object, Key=entry.path)
            return
        prefix, new_prefix = self._prefix(entry.path), dst_key + "/"
        moved: builtins.list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents") or ():
                self.copy_object(obj["Key"], new_prefix + obj["Key"][len(prefix) :], int(obj.get("Size", 0)))
                moved.append(obj["Key"])
        self.delete_keys(moved)

    # -- archive restore --
    def restore(self, path: str, *, days: int = 7, tier: str = "Standard") -> str:
        """Ask for a temporary restored copy of an archived object; returns the state afterwards."""
        key = self._key(path)
        head = self.head(key)
        state = restore_state(head)
        if state == "available":
            raise UsageError(f"{self.display(key)} is not archived ({head.get('StorageClass') or 'STANDARD'})")
        if state in ("restoring", "restored") and state == "restoring":
            return state
        self._call(
            f"requesting a restore of {self.display(key)}",
            self.client.restore_object,
            Key=key,
            RestoreRequest={"Days": days, "GlacierJobParameters": {"Tier": tier}},
        )
        return restore_state(self.head(key))

    # -- multipart housekeeping --
    def multipart_uploads(self, prefix: str = "") -> builtins.list[dict[str, Any]]:
        uploads: builtins.list[dict[str, Any]] = []
        try:
            for page in self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=self._key(prefix)
            ):
                uploads.extend(page.get("Uploads") or ())
        except Exception as exc:
            if getattr(exc, "response", {}).get("Error", {}).get("Code") == "NoSuchUpload":
                return []  # rclone serve s3's answer when there are none
            raise self._err(exc, f"listing unfinished uploads in {self.display(prefix)}") from exc
        return uploads

    def abort_upload(self, key: str, upload_id: str) -> None:
        self._call(
            f"aborting the upload of {self.display(key)}",
            self.client.abort_multipart_upload,
            Key=key,
            UploadId=upload_id,
        )

    # -- share links (ferry.sharing.types.Sharer) --
    def temporary_credentials(self) -> bool:
        _ = self.client
        creds = self._session.get_credentials() if self._session is not None else None
        return bool(creds is not None and getattr(creds, "token", None))

    def share(self, path: str, request: ShareRequest) -> Link:
        self._need_bucket()
        key = self._key(path)
        expires = request.expires if request.expires is not None else DEFAULT_PRESIGN
        seconds = int(expires.total_seconds())
        if seconds <= 0:
            raise UsageError("A link's expiry must be in the future (e.g. --expires 2h)")
        if expires > MAX_PRESIGN:
            raise UsageError(
                "S3 pre-signed links last at most 7 days: the signature (SigV4) carries its own expiry and "
                "S3 refuses longer ones. Use --expires 7d or less."
            )
        if not key or key.endswith("/"):
            raise UsageError(f"Share one object, not a folder: {self.display(key)} (give its key)")
        target = self.display(key)
        warnings: builtins.list[str] = []
        if self.temporary_credentials():
            warnings.append(
                "these credentials are temporary (SSO or an assumed role): the link stops working when "
                "they expire, which may be before the expiry asked for"
            )
        name = posixpath.basename(key)
        extra: dict[str, str] = {}
        try:
            if request.upload and request.max_size is not None:
                post = self.client.generate_presigned_post(
                    Bucket=self.bucket,
                    Key=key,
                    Conditions=[["content-length-range", 0, request.max_size]],
                    ExpiresIn=seconds,
                )
                url = post["url"]
                fields = " ".join(f"-F {_sh(f'{k}={v}')}" for k, v in post["fields"].items())
                extra["curl"] = f"curl -f {fields} -F file=@{_sh(name)} {_sh(url)}"
                extra["fields"] = __import__("json").dumps(post["fields"])
                kind = "upload"
            elif request.upload:
                url = self.client.generate_presigned_url(
                    "put_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=seconds
                )
                extra["curl"] = f"curl -f -T {_sh(name)} {_sh(url)}"
                kind = "upload"
            else:
                self.head(key)  # a link to nothing helps no one: fail now with "No such object"
                url = self.client.generate_presigned_url(
                    "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=seconds
                )
                extra["curl"] = f"curl -f -o {_sh(name)} {_sh(url)}"
                kind = "download"
        except FerryError:
            raise
        except Exception as exc:
            raise self._err(exc, f"signing a link for {target}") from exc
        return Link(
            kind=kind,
            target=target,
            url=url,
            scheme="s3",
            expires=datetime.now(UTC) + timedelta(seconds=seconds),
            revocable=False,
            revoke_note=REVOKE_NOTE,
            warnings=tuple(warnings),
            extra=extra,
        )

    def revoke(self, link: Link) -> None:
        raise Unsupported(REVOKE_NOTE)


def _also_folder(e: Entry) -> Entry:
    """A file whose key is also a folder prefix: refused, saying so (the folder is listed)."""
    meta = dict(e.meta)
    meta["name_note"] = (
        f"refused: {e.path!r} is an object and also a folder ({e.path + '/'!r} holds keys): a file and a folder "
        "cannot have one name at the destination (the folder is copied)"
    )
    meta["skip"] = SkipReason.UNREPRESENTABLE.value
    return replace(e, meta=meta)


def _where(fast: FastS3) -> tuple[str, str, str, str]:
    return fast.scheme, fast.netloc, fast.base_path, fast.region


def _sh(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _total_size(content_range: str | None, offset: int, length: int) -> int:
    if content_range and "/" in content_range:
        tail = content_range.rsplit("/", 1)[1]
        if tail.isdigit():
            return int(tail)
    return offset + length


class _FakeClientError(Exception):
    """A DeleteObjects per-key error in the shape map_error reads."""

    def __init__(self, code: str, status: int) -> None:
        super().__init__(code)
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
