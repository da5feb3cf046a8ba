"""S3 buckets (AWS and S3-compatible stores) through botocore and the lean client: ``s3://bucket/key``.

Paths are keys without a leading slash; ``""`` is the bucket's root. Folders are prefixes ending
in ``/`` (listed with ``/`` as the delimiter, a page at a time) and, for "new folder", zero-byte
``prefix/`` marker objects. ``s3://`` with no bucket lists the buckets.

One backend serves one bucket (the engine's endpoint for ``s3://bucket``). :class:`S3Backend`
keeps the backend protocol (listing, stat, reading, writing, folders, removing, renaming, server
copy) and hands the rest to the package's role modules: requests go through its
:class:`~ferry.backends.s3.connection.S3Connection`, uploads through
:class:`~ferry.backends.s3.writer.S3Writer`, the store's evidence for downloads through
:mod:`~ferry.backends.s3.evidence`, archive restores, share links and multipart housekeeping
through :mod:`~ferry.backends.s3.restore`, :mod:`~ferry.backends.s3.share` and
:mod:`~ferry.backends.s3.multipart`, the stores' habits through :mod:`~ferry.backends.s3.probes`.
"""

from __future__ import annotations

import builtins
import io
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from ferry.backends.base import (
    Backend,
    Capabilities,
    Entry,
    EvidenceCheck,
    Kind,
    Reader,
    ResumeSlot,
    Writer,
    ns_datetime,
)
from ferry.backends.s3.connection import S3Connection, key_of
from ferry.backends.s3.entries import bucket_entries, folder_entries, head_entry, named, store_time
from ferry.backends.s3.errors import Archived, NoSuchBucket, ServiceAnswer, error_code
from ferry.backends.s3.evidence import StoreEvidence
from ferry.backends.s3.known import STAT_GET, KnownKeys
from ferry.backends.s3.multipart import abort_upload, copy_object, unfinished_uploads
from ferry.backends.s3.probes import StoreProbes
from ferry.backends.s3.reader import BodyReader, RangedReader, RestReader, total_size
from ferry.backends.s3.restore import request_restore, wait_until_readable
from ferry.backends.s3.server_copy import ServerCopyDelegation
from ferry.backends.s3.settings import MIN_PART, S3Settings, settings_for
from ferry.backends.s3.share import REVOKE_NOTE, DirectUrls, presign
from ferry.backends.s3.writer import S3Writer
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
from ferry.sharing.types import Link, ShareRequest

DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys


class S3Backend(DirectUrls, ServerCopyDelegation, Backend):
    scheme = "s3"
    capabilities = Capabilities(
        range_read=True,
        resume_write=True,  # multipart uploads continue from the parts the server holds
        atomic_commit=True,  # an object appears only at PutObject/CompleteMultipartUpload
        multipart_write=True,  # parallel parts above the part size (use_part_size is the knob)
        server_side_copy=True,  # within the bucket; rename is copy + delete
        delegated_transfer=True,  # bucket to bucket on one endpoint: the store copies (server_copy.py)
        presign=True,  # share(): SigV4 pre-signed GET/PUT links and POST policies
        hashes=HASH_ALGORITHMS,  # from Ferry's metadata when it stored one, else by reading
        slow_hash=True,
        readback=True,  # the server checks Content-MD5 and returns MD5 ETags we compare
        source_evidence=True,  # downloads are compared with the store's checksums or ETags
        empty_dirs=True,  # zero-byte "prefix/" markers
        prefix_folders=True,  # a folder is a key prefix: no permissions or time of its own
        set_mtime=False,  # kept as metadata at upload only (S3 cannot change it afterwards)
        mtime_precision=1.0,
    )
    keeps_resume_state = True

    def __init__(self, address: Address, settings: S3Settings | None = None) -> None:
        """``settings`` default to the address's saved site and this process's environment,
        read here, once."""
        super().__init__(address)
        self.bucket = address.host
        self.conn = S3Connection(address, settings if settings is not None else settings_for(address, os.environ))
        self.known = KnownKeys()
        # Whether this store's listings show an object's kept time (metadata) as its Last-Modified
        # where HEAD shows the upload time (rclone serve s3 lists its files' modification times):
        # learnt from the first object with a kept time that stat meets; None until then.
        self._lists_kept_time: bool | None = None
        self.probes = StoreProbes(self.conn)
        self._evidence = StoreEvidence(self.conn)

    @property
    def settings(self) -> S3Settings:
        return self.conn.settings

    @settings.setter
    def settings(self, value: S3Settings) -> None:
        self.conn.settings = value

    # -- plumbing --
    def use_part_size(self, size: int) -> int:
        """Upload parts of ``size`` bytes from now on (at least S3's 5 MiB floor); the size used.
        The same knob as FERRY_S3_PART_SIZE or a site's part_size option."""
        used = max(MIN_PART, size)
        self.conn.use_part_size(used)
        return used

    def note_written(self, key: str) -> None:
        """``key`` now exists (we wrote it): never answer "not found" for it or its folders."""
        self.known.note_written(key)

    def conditional_writes(self) -> bool:
        """Whether the store is known to refuse a PUT with ``If-None-Match: *`` onto an existing
        key (:mod:`~ferry.backends.s3.probes`): where it does, a no-overwrite commit needs no HEAD
        first."""
        return self.probes.conditional_writes()

    def conditional_known(self) -> bool:
        return self.probes.conditional_known()

    def learn_conditional(self, honoured: bool) -> None:
        self.probes.learn_conditional(honoured)

    def object_exists(self, key: str) -> bool:
        return self.conn.object_exists(key)

    def close(self) -> None:
        self.conn.close()

    def display(self, path: str) -> str:
        return self.conn.display(path)

    def _need_bucket(self) -> None:
        if not self.bucket:
            raise UsageError("Name a bucket: s3://BUCKET/key ('ferry ls s3://' lists your buckets)")

    def _err(self, exc: BaseException, what: str) -> FerryError:
        return self.conn.err(exc, what)

    def _call(self, what: str, fn: Callable[..., Any], **kw: Any) -> Any:
        return self.conn.call(what, fn, **kw)

    @staticmethod
    def _key(path: str) -> str:
        key = key_of(path)
        if not key.isascii():
            try:
                key.encode("utf-8")
            except UnicodeEncodeError:
                # A local name's undecodable bytes (surrogate escapes): no S3 key can hold them.
                raise UsageError(f"S3 keys are UTF-8 text, and {os.fsencode(key)!r} is not valid UTF-8") from None
        return key

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
        return folder_entries(prefix, first, it, cancel, lambda exc: self._err(exc, f"listing {self.display(path)}"))

    def _pages(self, prefix: str, delimiter: str | None = None, page_size: int = 1000) -> Iterator[Mapping[str, Any]]:
        """Every page under ``prefix``, as botocore's paginator walks them (continuation tokens)."""
        token: str | None = None
        while True:
            page = self.conn.list_page(prefix, delimiter, page_size, token)
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def _list_buckets(self) -> Iterator[Entry]:
        try:
            resp = self.conn.client.list_buckets()
        except Exception as exc:
            raise self._err(exc, "listing buckets") from exc
        yield from bucket_entries(resp)

    def stat(self, path: str) -> Entry:
        key = self._key(path)
        if not self.bucket:
            if key:
                raise UsageError("Name a bucket: s3://BUCKET/key")
            return Entry(path="", name="", kind=Kind.DIR)
        if not key:
            try:
                self.conn.client.head_bucket(Bucket=self.bucket)
            except Exception as exc:
                raise self._explain(exc, self.display(""), "") from exc
            return Entry(path="", name=self.bucket, kind=Kind.DIR)
        if self.known.absent(key):
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
                return self._as_listed(key, head_entry(key, head, seen))
        if self._prefix_exists(key.rstrip("/") + "/"):
            return named(key.rstrip("/"), posixpath.basename(key.rstrip("/")), Kind.DIR, seen)
        self.known.note_absent(key)
        raise NotFound(f"No such file or folder: {self.display(key)}")

    def _as_listed(self, key: str, entry: Entry) -> Entry:
        """A single object's entry with the time a folder listing shows for it: the store's
        Last-Modified, which on a store whose listing shows the kept time (metadata) instead of
        its HEAD's is that kept time, in whole seconds. Learnt once per backend, with one
        one-key listing of the first object that has a kept time."""
        if entry.kept_mtime_ns is None:
            return entry
        if self._lists_kept_time is None:
            try:
                page = self.conn.list_page(key, None, 1, None)
            except Exception:
                return entry  # the HEAD's time stands; asked again with the next object
            listed = next((o for o in page.get("Contents") or () if o.get("Key") == key), None)
            shown = store_time(listed.get("LastModified")) if listed is not None else None
            kept = store_time(ns_datetime(entry.kept_mtime_ns))
            if shown is not None and shown == entry.mtime:
                self._lists_kept_time = False  # the store lists its own time, as HEAD shows it
            elif shown is not None and shown == kept:
                self._lists_kept_time = True
            else:
                return entry  # rewritten meanwhile (or not listed): decided by a later object
        if self._lists_kept_time:
            return replace(entry, mtime=store_time(ns_datetime(entry.kept_mtime_ns)))
        return entry

    def _head_by_get(self, key: str) -> Mapping[str, Any]:
        """HeadObject's answer, from a GET of the first STAT_GET bytes where the store allows (the
        bytes are kept for the open_read that follows)."""
        try:
            resp = self.conn.get_object(key, f"bytes=0-{STAT_GET - 1}", checksum_mode=True)
        except Exception as exc:
            if error_code(exc) in ("NoSuchKey", "NoSuchBucket", "404", "NotFound"):
                raise
            # An empty object (416 InvalidRange), an archived one (InvalidObjectState: HEAD shows
            # its restore state) or anything else: HEAD as before.
            head: Mapping[str, Any] = self.conn.client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
            return head
        try:
            body: bytes = resp["Body"].read()
        except Exception as exc:
            raise self._err(exc, f"reading {self.display(key)}") from exc
        total = total_size(resp.get("ContentRange"), 0, len(body))
        self.known.keep_body(key, body, total, str(resp.get("ETag") or ""))
        return {**resp, "ContentLength": total}

    def _explain(self, exc: BaseException, what: str, key: str) -> FerryError:
        """HEAD answers carry no error body, so a 403 or 404 cannot say *why* (wrong key? wrong
        secret? no bucket? clock?). A one-key listing returns the service's own error code."""
        err = self._err(exc, what)
        if isinstance(err, NotFound) and key:
            return err  # a missing key in an existing bucket is the common case: no extra request
        if err.kind == "transient":
            return err  # a server that is down or stuck would only stall the explaining request too
        try:
            self.conn.client.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
        except Exception as exc2:
            better = self._err(exc2, what)
            return better if better.kind != "error" else err
        if not key and isinstance(err, NotFound):
            return NoSuchBucket(f"No such bucket: s3://{self.bucket}")
        return err

    def _prefix_exists(self, prefix: str) -> bool:
        try:
            resp = self.conn.list_page(prefix, None, 1, None)
        except Exception as exc:
            raise self._err(exc, f"checking {self.display(prefix)}") from exc
        return bool(resp.get("KeyCount") or resp.get("Contents"))

    # -- reading --
    def head(self, path: str) -> dict[str, Any]:
        return self.conn.head(self._key(path))

    def _ranged(self, key: str, start: int, end: int, head: bytes, etag: str) -> Reader:
        """Bytes ``[start, end)`` of a large object: ``head`` (already here), then parallel ranges."""
        return RangedReader(
            lambda lo, into: self.conn.fetch_range(key, lo, into, etag),
            start,
            end,
            head=head,
            range_size=self.settings.range_size,
            depth=self.settings.part_concurrency,
            executor=self.conn.executor,
        )

    def open_read(self, path: str, offset: int = 0, length: int | None = None) -> Reader:
        self._need_bucket()
        key = self._key(path)
        if offset < 0 or (length is not None and length < 0):
            raise UsageError(f"Negative offset or length reading {self.display(key)}")
        if length == 0:
            return io.BytesIO(b"")
        return self._from_stat(path, key, offset, length) or self._get(path, key, offset, length)

    def _from_stat(self, path: str, key: str, offset: int, length: int | None) -> Reader | None:
        """The object's bytes that came with stat() moments ago (the copy stats its source first),
        or None where they do not serve this read."""
        cached = self.known.take_body(key)
        if cached is None:
            return None
        first, total, etag = cached
        if len(first) == total:
            return io.BytesIO(first[offset : None if length is None else offset + length])  # all of it
        if offset != 0 or length is not None or not first:
            return None
        # Its first bytes did: ask only for the rest (its length known), in one request or, for a
        # large object, in parallel ranges.
        if total - len(first) > self.settings.range_size:
            return self._ranged(key, 0, total, first, etag)
        return RestReader(
            lambda lo, into: self.conn.fetch_range(key, lo, into, etag),
            lambda lo, n: self.open_read(path, lo, n),
            first,
            total,
        )

    def _get(self, path: str, key: str, offset: int, length: int | None) -> Reader:
        """The first request asks for one range, read whole: a small object (or a short range)
        arrives in one GET; for a large one the Content-Range of the answer gives the size for
        the parallel ranges that follow."""
        range_size = self.settings.range_size
        first_end = offset + (length if length is not None and length <= range_size else STAT_GET)
        try:
            resp = self.conn.get_object(key, f"bytes={offset}-{first_end - 1}")
        except Exception as exc:
            return self._unreadable(exc, path, key, offset, length)
        total = total_size(resp.get("ContentRange"), offset, int(resp.get("ContentLength", 0)))
        end = total if length is None else min(total, offset + length)
        if end <= first_end:
            return BodyReader(resp["Body"])
        try:
            head: bytes = resp["Body"].read()
        except Exception as exc:
            raise self._err(exc, f"reading {self.display(key)}") from exc
        if len(head) != first_end - offset:
            raise Transient(f"Short read of {self.display(key)} ({len(head)} of {first_end - offset} bytes)")
        return self._ranged(key, offset, end, head, str(resp.get("ETag") or ""))

    def _unreadable(self, exc: Exception, path: str, key: str, offset: int, length: int | None) -> Reader:
        """The first GET failed: wait for an archived object's restore and read it then, read
        nothing past the end, or say why (a folder, not an object)."""
        err = self._err(exc, self.display(key))
        if isinstance(err, Archived):
            wait_until_readable(self.conn, key)
            return self.open_read(path, offset, length)
        if error_code(exc) == "InvalidRange":
            return io.BytesIO(b"")  # offset at or past the end (an empty object)
        if isinstance(err, NotFound) and not isinstance(err, NoSuchBucket) and self._prefix_exists(key + "/"):
            raise IsADirectory(f"Is a folder: {self.display(key)}") from exc
        raise err from exc

    def hash(self, path: str, algo: str, cancel: CancelToken | None = None) -> str:
        entry = self.stat(path)
        if algo in entry.hashes:
            return entry.hashes[algo]  # Ferry stored it at upload, checked by the server then
        return super().hash(path, algo, cancel)

    # -- what the store keeps about an object's bytes (base.SourceEvidence) --
    def evidence_for(self, entry: Entry) -> EvidenceCheck:
        """A check of ``entry``'s bytes (fed by the copy from byte 0) against the cheapest evidence
        the store keeps (:class:`~ferry.backends.s3.evidence.StoreEvidence`)."""
        return self._evidence.check(entry)

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
        self.note_written(dst_key)  # before: a failed copy may still have landed
        copy_object(self.conn, src_key, dst_key, size)

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
        if not self.probes.keeps_markers(posixpath.dirname(key)):
            return  # this store keeps no folder markers: a folder exists once something is in it
        self.note_written(key + "/")
        try:
            try:
                self.conn.put_object(key + "/", b"", {})
            except Exception as exc:
                raise self._err(exc, f"creating folder {self.display(key)}") from exc
        except FerryError:
            if exist_ok and self._prefix_exists(key + "/"):
                return  # filled meanwhile by a parallel upload
            raise

    def make_bucket(self, *, exist_ok: bool = False, region: str | None = None) -> None:
        client = self.conn.client
        region = region or self.settings.region or client.meta.region_name
        kw: dict[str, Any] = {}
        if region and region not in ("us-east-1", "aws-global"):
            kw["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self._call(f"creating bucket s3://{self.bucket}", client.create_bucket, **kw)
        except AlreadyExists:
            if not exist_ok:
                raise

    def _keys_under(self, prefix: str) -> Iterator[str]:
        try:
            for page in self.conn.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents") or ():
                    yield obj["Key"]
        except Exception as exc:
            raise self._err(exc, f"listing {self.display(prefix)}") from exc

    def delete_keys(self, keys: Iterable[str]) -> int:
        """Delete in batches of up to 1,000 keys (DeleteObjects); raise if any key was refused."""
        batch: builtins.list[str] = []
        count = 0
        for k in keys:
            batch.append(k)
            if len(batch) >= DELETE_BATCH:
                count += self._delete_batch(batch)
                batch = []
        if batch:
            count += self._delete_batch(batch)
        return count

    def _delete_batch(self, batch: builtins.list[str]) -> int:
        for k in batch:
            self.known.forget_body(k)  # a deleted object must not be read from memory
        resp = self._call(
            f"deleting {len(batch)} objects",
            self.conn.client.delete_objects,
            Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
        )
        errors = resp.get("Errors") or []
        if errors:
            first = errors[0]
            raise self._err(
                ServiceAnswer(first.get("Code", ""), 0),
                f"deleting {self.display(first.get('Key', ''))} ({len(errors)} of {len(batch)} refused)",
            )
        return len(batch)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._need_bucket()
        entry = self.stat(path)
        key = entry.path
        if entry.is_file:
            self._call(f"deleting {self.display(key)}", self.conn.client.delete_object, Key=key)
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
        client = self.conn.client
        if entry.is_file:
            self.copy_object(entry.path, dst_key, entry.size or 0)
            self._call(f"deleting {self.display(entry.path)}", client.delete_object, Key=entry.path)
            return
        prefix, new_prefix = self._prefix(entry.path), dst_key + "/"
        moved: builtins.list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents") or ():
                self.copy_object(obj["Key"], new_prefix + obj["Key"][len(prefix) :], int(obj.get("Size", 0)))
                moved.append(obj["Key"])
        self.delete_keys(moved)

    # -- beyond the protocol: ferry s3 restore and cleanup, share links (sharing.types.Sharer) --
    def restore(self, path: str, *, days: int = 7, tier: str = "Standard") -> str:
        """Ask for a temporary restored copy of an archived object; returns the state afterwards."""
        return request_restore(self.conn, self._key(path), days=days, tier=tier)

    def multipart_uploads(self, prefix: str = "") -> builtins.list[dict[str, Any]]:
        """Unfinished multipart uploads under ``prefix`` (``ferry s3 cleanup``)."""
        return unfinished_uploads(self.conn, prefix)

    def abort_upload(self, key: str, upload_id: str) -> None:
        abort_upload(self.conn, key, upload_id)

    def share(self, path: str, request: ShareRequest) -> Link:
        self._need_bucket()
        return presign(self.conn, self._key(path), request)

    def revoke(self, link: Link) -> None:
        raise Unsupported(REVOKE_NOTE)
