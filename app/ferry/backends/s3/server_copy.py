"""S3 to S3 within one endpoint, site to site: the store copies the bytes (CopyObject, and
UploadPartCopy for multipart sources and objects over 5 GiB); Ferry plans, applies the conflict
policy and checks every copy against the *source's own* evidence. No byte passes through Ferry.

:class:`ServerCopyDelegation` is the S3 backend's :class:`~ferry.backends.base.Delegator`: it
offers :class:`S3ServerCopy` for a pair of S3 backends on the same endpoint as the same account
(same endpoint URL and the same credentials), across buckets or within one.

Verification, strongest first, never called checked when it was not:

* the SHA-256 the store computed on the copy (``ChecksumAlgorithm='SHA256'``) against the
  source's stored full-object SHA-256 (evidence ``s3-checksum``), or against the SHA-256 Ferry
  stored with the source when it uploaded it (``s3-checksum`` + ``ferry-metadata``);
* the copy's ETag against the source's, where the source's is its MD5 (one PUT, not SSE-KMS or
  SSE-C: ``s3-etag-md5``) or a multipart ETag: a multipart source is copied part by part in its
  own layout, so the copy's multipart ETag (and composite SHA-256) is computed over the same parts
  (``s3-multipart-etag``);
* else sizes only, said so (the source keeps nothing to compare the copy with).

A copy that does not match its source fails (and is never left counted as copied).

A crash or a pause never duplicates or loses: the rows are recorded (queued) before any copy,
the job value ``planned`` says all are; before each copy the destination key (and a multipart
copy's UploadId) is saved as a job value, so the next run verifies what landed instead of
applying the conflict policy to its own copy (a ``rename`` would otherwise copy it twice), and
aborts an unfinished multipart copy. A copy is idempotent per key.

A store that cannot copy parts (``rclone serve s3`` answers UploadPartCopy with nothing) ends
the direct route with :class:`~ferry.backends.base.NoDirectRoute`: the engine relays the files
left (``--route auto``) or fails the job (``--route direct``).
"""

from __future__ import annotations

import base64
import json
import posixpath
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from ferry.backends.base import (
    Backend,
    DelegatedJob,
    DelegatedRow,
    DelegationSink,
    Entry,
    JobDelegate,
    Kind,
    NoDirectRoute,
)
from ferry.backends.s3.connection import S3Connection, key_of
from ferry.backends.s3.entries import attribute_metadata, stored_attributes
from ferry.backends.s3.errors import error_code, http_status
from ferry.backends.s3.multipart import COPY_PART, choose_part_size
from ferry.backends.s3.settings import MAX_SINGLE_COPY
from ferry.core.cancel import CancelToken
from ferry.core.errors import Cancelled, FerryError, NotFound, describe
from ferry.core.outcomes import FOLDER, Evidence, Level, TaskState, Verification

PLANNED_KEY = "planned"  # the engine's job value (ferry.transfers.delegated.PLANNED_KEY): all rows recorded
_COPYING = "s3-copy:"  # job value per row being copied: {"key": destination key, "upload": UploadId}
DIFFERENT_ACCOUNTS = "the buckets are on different endpoints or accounts (a server-side copy needs one)"
PART_COPY_REFUSED = "the store does not copy parts of objects (UploadPartCopy), which this object needs"
WORKERS = 8  # objects copied at once (each a request or a few: the store does the work)
single_copy_limit = MAX_SINGLE_COPY  # CopyObject's limit; above it UploadPartCopy (tests lower it)

_MD5_HEX = re.compile(r"[0-9a-fA-F]{32}")
_MULTIPART_ETAG = re.compile(r"[0-9a-fA-F]{32}-(\d+)")
_CONTENT_HEADERS = {  # kept on a copy whose metadata is replaced: HTTP header -> request field
    "content-type": "ContentType",
    "content-encoding": "ContentEncoding",
    "content-disposition": "ContentDisposition",
    "content-language": "ContentLanguage",
    "cache-control": "CacheControl",
}


def same_account(a: S3Connection, b: S3Connection) -> bool:
    """Whether two buckets' connections reach the same endpoint as the same account (so the
    destination's credentials may read the source in a CopyObject)."""
    if a.settings.endpoint_url != b.settings.endpoint_url or a.settings.profile != b.settings.profile:
        return False
    if a.client.meta.endpoint_url != b.client.meta.endpoint_url:
        return False
    ca, cb = a.session.get_credentials(), b.session.get_credentials()
    if ca is None or cb is None:
        return ca is cb
    fa, fb = ca.get_frozen_credentials(), cb.get_frozen_credentials()
    return bool(fa.access_key == fb.access_key and fa.secret_key == fb.secret_key)


class ServerCopyDelegation:
    """The S3 backend's Delegator (mixed into ``S3Backend``, which has ``conn``)."""

    conn: S3Connection

    def note_written(self, key: str) -> None:
        """(S3Backend's: ``key`` now exists, never answer "not found" for it.)"""

    def delegation(self, src: Backend, dst: Backend) -> JobDelegate | None:
        """S3 to S3 on one endpoint as one account: the store copies. None for any other pair;
        :class:`NoDirectRoute` for two buckets on different endpoints or accounts."""
        if not isinstance(src, ServerCopyDelegation) or not isinstance(dst, ServerCopyDelegation):
            return None
        if not src.conn.bucket or not dst.conn.bucket:
            return None
        if not same_account(src.conn, dst.conn):
            raise NoDirectRoute(DIFFERENT_ACCOUNTS)
        return S3ServerCopy(src, dst, src.conn, dst.conn, dst.note_written)


@dataclass(frozen=True)
class _Source:
    """What the source object is and keeps about its bytes (one HeadObject with checksums)."""

    size: int
    etag: str
    sha256: str  # base64 full-object SHA-256, "" if none
    composite_sha256: str  # base64 "…-N" of a multipart object, "" if none
    ferry_sha256: str  # hex, Ferry's stored SHA-256, "" if none
    etag_is_md5: bool
    parts: int  # of a multipart source (its ETag's -N), 0 for one part
    metadata: Mapping[str, str]
    content: Mapping[str, Any]
    kept_mtime: bool  # the metadata holds a modification time (Ferry's, rclone's, s3cmd's)
    last_modified: Any


def _source(head: Mapping[str, Any]) -> _Source:
    etag = str(head.get("ETag", "")).strip('"')
    sha = str(head.get("ChecksumSHA256") or "")
    meta = {str(k).lower(): str(v) for k, v in (head.get("Metadata") or {}).items()}
    encrypted = str(head.get("ServerSideEncryption") or "").startswith("aws:kms") or bool(
        head.get("SSECustomerAlgorithm")
    )
    multipart = _MULTIPART_ETAG.fullmatch(etag)
    mtime_ns, _mode = stored_attributes(head)
    return _Source(
        size=int(head.get("ContentLength") or 0),
        etag=etag,
        sha256="" if "-" in sha else sha,
        composite_sha256=sha if "-" in sha else "",
        ferry_sha256=meta.get("ferry-sha256", ""),
        etag_is_md5=bool(_MD5_HEX.fullmatch(etag)) and not encrypted,
        parts=int(multipart.group(1)) if multipart and not encrypted else 0,
        metadata=meta,
        content=_content(head),
        kept_mtime=mtime_ns is not None,
        last_modified=head.get("LastModified"),
    )


def _content(head: Mapping[str, Any]) -> dict[str, str]:
    """The content headers of a HeadObject answer (botocore's or the lean client's), as request fields."""
    headers = {
        str(k).lower(): str(v) for k, v in ((head.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}).items()
    }
    return {field: headers[name] for name, field in _CONTENT_HEADERS.items() if headers.get(name)}


@dataclass(frozen=True)
class _Landed:
    """What the store says about the copy it made."""

    size: int
    etag: str
    sha256: str  # base64, "…-N" for a multipart copy, "" if the store computed none


def verify(src: _Source, landed: _Landed, *, multipart_layout: bool) -> Verification | str:
    """How the copy compares with the source's own evidence: a Verification, or why it does not
    match (a sentence). ``multipart_layout``: copied part by part in the source's own layout."""
    if landed.size != src.size:
        return f"the copy has {landed.size:,} bytes, the source {src.size:,}"
    if landed.sha256 and "-" not in landed.sha256 and (src.sha256 or src.ferry_sha256):
        theirs_hex = base64.b64decode(landed.sha256).hex()
        if src.sha256:
            if landed.sha256 != src.sha256:
                return "the SHA-256 the store computed on the copy differs from the source's stored SHA-256"
            note = "sha256 the store computed on the copy matches the source's stored sha256"
            return Verification(Level.CHECKSUM, "sha256", (Evidence.S3_CHECKSUM,), note, theirs_hex)
        if theirs_hex != src.ferry_sha256.lower():
            return "the SHA-256 the store computed on the copy differs from the SHA-256 Ferry stored with the source"
        note = "sha256 the store computed on the copy matches the sha256 Ferry stored with the source"
        return Verification(Level.CHECKSUM, "sha256", (Evidence.S3_CHECKSUM, Evidence.FERRY_METADATA), note, theirs_hex)
    if multipart_layout and src.parts:
        if landed.sha256 and src.composite_sha256:
            if landed.sha256 != src.composite_sha256:
                return "the composite SHA-256 of the copy's parts differs from the source's"
            note = f"composite sha256 of {src.parts} parts matches the source's (copied in its part layout)"
            return Verification(Level.CHECKSUM, "sha256", (Evidence.S3_CHECKSUM,), note)
        if landed.etag != src.etag:
            return "the copy's multipart ETag differs from the source's (copied in the same part layout)"
        note = f"multipart ETag of {src.parts} parts matches the source's (MD5s of the same part layout)"
        return Verification(Level.CHECKSUM, "md5", (Evidence.S3_MULTIPART_ETAG,), note)
    if src.etag_is_md5 and _MD5_HEX.fullmatch(landed.etag):
        if landed.etag.lower() != src.etag.lower():
            return "the copy's MD5 ETag differs from the source's MD5 ETag"
        return Verification(
            Level.CHECKSUM, "md5", (Evidence.S3_ETAG_MD5,), "MD5 ETag of the copy matches the source's MD5 ETag"
        )
    return Verification(
        Level.SIZE,
        note="size only: the source keeps no SHA-256 and no MD5 ETag to compare the server's copy with",
    )


def _renamed(key: str, n: int) -> str:
    folder, name = posixpath.split(key)
    stem, dot, ext = name.partition(".") if not name.startswith(".") else (name, "", "")
    new = f"{stem} ({n}).{ext}" if dot else f"{stem} ({n})"
    return posixpath.join(folder, new) if folder else new


def _when_ns(e: Entry) -> int | None:
    if e.kept_mtime_ns is not None:
        return e.kept_mtime_ns
    return None if e.mtime is None else int(e.mtime.timestamp()) * 1_000_000_000


class S3ServerCopy:
    """One job copied by the store (a :class:`~ferry.backends.base.JobDelegate`)."""

    def __init__(
        self,
        src: Backend,
        dst: Backend,
        src_conn: S3Connection,
        dst_conn: S3Connection,
        note_written: Callable[[str], None],
    ) -> None:
        self.src, self.dst = src, dst
        self.src_conn, self.dst_conn = src_conn, dst_conn
        self.note_written = note_written
        self._lock = threading.Lock()

    # -- the job --
    def run_job(self, job: DelegatedJob, sink: DelegationSink) -> None:
        cancel = sink.cancel
        if sink.value(PLANNED_KEY) != "1":
            self._plan(job, sink, cancel)
            sink.set_value(PLANNED_KEY, "1")
        rows = list(sink.open_rows())
        files = [r for r in rows if r.kind == "file"]
        refused: list[NoDirectRoute] = []
        with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ferry-s3-copy") as pool:
            for failure in pool.map(lambda r: self._one_guarded(job, sink, r, refused), files):
                if failure is not None:
                    raise failure
        cancel.check()
        if refused:
            raise refused[0]
        for row in rows:
            if row.kind == "dir":
                cancel.check()
                self._folder(sink, row)

    def _one_guarded(
        self, job: DelegatedJob, sink: DelegationSink, row: DelegatedRow, refused: list[NoDirectRoute]
    ) -> BaseException | None:
        """Copy one row, recording how it ended; the exceptions that end the job are returned."""
        if sink.cancel.cancelled or refused:
            return None
        try:
            self._one(job, sink, row)
        except NoDirectRoute as exc:
            with self._lock:
                refused.append(exc)
        except Cancelled:
            return None
        except FerryError as exc:
            self._finish(sink, row, TaskState.FAILED, error=exc.message)
        except Exception as exc:  # a bug or an unmapped answer: this file fails, said plainly
            self._finish(sink, row, TaskState.FAILED, error=describe(exc))
        return None

    def _plan(self, job: DelegatedJob, sink: DelegationSink, cancel: CancelToken) -> None:
        """Record every file and folder of the job's roots as queued (before any copy)."""
        batch: list[DelegatedRow] = []
        for row in self._walk(job, cancel):
            batch.append(row)
            if len(batch) >= 1000:
                sink.finish_rows(batch, TaskState.QUEUED)
                batch = []
        sink.finish_rows(batch, TaskState.QUEUED)

    def _walk(self, job: DelegatedJob, cancel: CancelToken) -> Iterator[DelegatedRow]:
        for src_path, dst_path, rel in job.roots:
            try:
                entry = self.src.stat(src_path)
            except NotFound:
                yield DelegatedRow("file", src_path, dst_path, rel)
                continue
            if entry.kind is not Kind.DIR:
                yield DelegatedRow("file", src_path, dst_path, rel, entry.size, _us(entry))
                continue
            yield DelegatedRow("dir", src_path, dst_path, rel)
            for sub, e in self.src.walk(src_path, cancel):
                cancel.check()
                kind = "dir" if e.kind is Kind.DIR else "file"
                yield DelegatedRow(
                    kind,
                    e.path,
                    self.dst.join(dst_path, sub),
                    f"{rel}/{sub}" if rel else sub,
                    e.size if kind == "file" else None,
                    _us(e) if kind == "file" else None,
                )

    def _folder(self, sink: DelegationSink, row: DelegatedRow) -> None:
        try:
            self.dst.mkdir(row.dst, parents=True, exist_ok=True)
        except FerryError as exc:
            sink.finish_rows([row], TaskState.FAILED, error=exc.message)
            return
        sink.finish_rows([row], TaskState.DONE, verification=FOLDER)

    # -- one file --
    def _one(self, job: DelegatedJob, sink: DelegationSink, row: DelegatedRow) -> None:
        sink.cancel.check()
        src_key = key_of(row.src)
        head = self._head(self.src_conn, src_key)
        if head is None:
            self._finish(sink, row, TaskState.FAILED, error=f"Source not found: {self.src.display(row.src)}")
            return
        source = _source(head)
        slot = _COPYING + row.src
        saved = sink.value(slot)
        if saved is not None:  # a run before this one was copying it: finish that copy
            state = json.loads(saved)
            dst_key = str(state["key"])
            if state.get("upload"):
                self._abort(dst_key, str(state["upload"]))
        else:
            target = self._target(job, sink, row, source)
            if target is None:
                return
            dst_key = target
            sink.set_value(slot, json.dumps({"key": dst_key}))
        how = self._copy(job, sink, slot, src_key, dst_key, source)
        done_row = replace(row, dst=dst_key if dst_key != key_of(row.dst) else row.dst)
        if isinstance(how, str):
            self._finish(sink, done_row, TaskState.FAILED, error=f"{self.dst.display(dst_key)}: {how}")
        else:
            sink.accounting.add_bytes(source.size)
            self._finish(sink, done_row, TaskState.DONE, verification=how)
        sink.set_value(slot, None)

    def _target(self, job: DelegatedJob, sink: DelegationSink, row: DelegatedRow, source: _Source) -> str | None:
        """The key to copy to under the conflict policy, or None when the row ended (skipped, failed)."""
        key = key_of(row.dst)
        try:
            existing = self.dst.stat(row.dst)
        except NotFound:
            return key
        if existing.kind is Kind.DIR:
            self._finish(sink, row, TaskState.FAILED, error=f"{self.dst.display(row.dst)} is a folder")
            return None
        policy = job.on_conflict
        if policy in ("overwrite", "resume"):
            return key
        if policy == "rename":
            n = 1
            while self._head(self.dst_conn, _renamed(key, n)) is not None:
                n += 1
            return _renamed(key, n)
        src_entry = self.src.stat(row.src)
        ours, theirs = _when_ns(src_entry), _when_ns(existing)
        same_time = ours is not None and theirs is not None and abs(ours - theirs) < 1_000_000_000
        identical = existing.size == source.size and same_time
        if policy == "newer" and ours is not None and theirs is not None and ours > theirs and not same_time:
            return key
        if policy == "different" and not identical:
            return key
        if policy == "ask" and not identical:
            self._finish(
                sink,
                row,
                TaskState.FAILED,
                error=f"{self.dst.display(row.dst)} already exists and differs; choose with --on-conflict "
                "skip|overwrite|newer|different|rename",
            )
            return None
        why = "identical to the file already there" if identical else "kept the existing file"
        self._finish(sink, row, TaskState.SKIPPED, error=why, size=source.size)
        return None

    def _copy(
        self, job: DelegatedJob, sink: DelegationSink, slot: str, src_key: str, dst_key: str, source: _Source
    ) -> Verification | str:
        """Copy and check; a Verification, or why the copy does not match its source."""
        copy_source = {"Bucket": self.src_conn.bucket, "Key": src_key}
        meta_kw = self._metadata(job, source)
        self.note_written(dst_key)  # before: a failed copy may still have landed
        layout = self._layout(src_key, source) if source.parts else None
        if layout is None and source.size <= single_copy_limit:
            res = self.dst_conn.call(
                f"copying {self.src.display(src_key)} to {self.dst.display(dst_key)}",
                self.dst_conn.client.copy_object,
                Key=dst_key,
                CopySource=copy_source,
                ChecksumAlgorithm="SHA256",
                **meta_kw,
            )
            result = res.get("CopyObjectResult") or {}
            landed = self._landed(dst_key, str(result.get("ETag", "")), str(result.get("ChecksumSHA256") or ""))
            return verify(source, landed, multipart_layout=False)
        if layout is None:
            part = choose_part_size(source.size, COPY_PART)
            layout = [(lo, min(lo + part, source.size)) for lo in range(0, source.size, part)]
        landed = self._part_copy(sink, slot, copy_source, dst_key, layout, meta_kw)
        return verify(source, landed, multipart_layout=bool(source.parts))

    def _part_copy(
        self,
        sink: DelegationSink,
        slot: str,
        copy_source: Mapping[str, str],
        dst_key: str,
        layout: list[tuple[int, int]],
        meta_kw: Mapping[str, Any],
    ) -> _Landed:
        conn = self.dst_conn
        what = f"copying {self.src.display(copy_source['Key'])} to {self.dst.display(dst_key)} in parts"
        kw = {k: v for k, v in meta_kw.items() if k != "MetadataDirective"}
        up = conn.call(what, conn.client.create_multipart_upload, Key=dst_key, ChecksumAlgorithm="SHA256", **kw)
        upload_id = str(up["UploadId"])
        sink.set_value(slot, json.dumps({"key": dst_key, "upload": upload_id}))
        try:
            parts = []
            for n, (lo, hi) in enumerate(layout, start=1):
                sink.cancel.check()
                parts.append(self._part(what, dst_key, upload_id, n, copy_source, lo, hi))
            done = conn.call(
                what,
                conn.client.complete_multipart_upload,
                Key=dst_key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            self._abort(dst_key, upload_id)
            raise
        return self._landed(dst_key, str(done.get("ETag", "")), str(done.get("ChecksumSHA256") or ""))

    def _part(
        self, what: str, key: str, upload_id: str, n: int, copy_source: Mapping[str, str], lo: int, hi: int
    ) -> dict[str, Any]:
        conn = self.dst_conn
        try:
            r = conn.client.upload_part_copy(
                Bucket=conn.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=n,
                CopySource=dict(copy_source),
                CopySourceRange=f"bytes={lo}-{hi - 1}",
            )
        except Exception as exc:
            if error_code(exc) in ("NotImplemented", "NotSupported") or http_status(exc) == 501:
                raise NoDirectRoute(PART_COPY_REFUSED) from None
            raise conn.err(exc, what) from exc
        result = r.get("CopyPartResult") or {}
        if not result.get("ETag"):
            raise NoDirectRoute(PART_COPY_REFUSED)
        part = {"PartNumber": n, "ETag": result["ETag"]}
        if result.get("ChecksumSHA256"):
            part["ChecksumSHA256"] = result["ChecksumSHA256"]
        return part

    def _layout(self, key: str, source: _Source) -> list[tuple[int, int]] | None:
        """The source's own part layout ((start, end) per part, from HeadObject PartNumber), or
        None when the store does not tell it."""
        sizes: list[int] = []
        for n in range(1, source.parts + 1):
            try:
                head = self.src_conn.head_object(key, part_number=n)
            except Exception:
                return None
            size = int(head.get("ContentLength") or 0)
            if not size:
                return None
            sizes.append(size)
        if sum(sizes) != source.size:
            return None
        layout, lo = [], 0
        for size in sizes:
            layout.append((lo, lo + size))
            lo += size
        return layout

    def _metadata(self, job: DelegatedJob, source: _Source) -> dict[str, Any]:
        """MetadataDirective COPY where the source's metadata is what the copy should keep, else
        REPLACE with it merged: its modification time added (or dropped with --no-preserve-times)."""
        if job.preserve_mtime and source.kept_mtime:
            return {"MetadataDirective": "COPY"}
        meta = {k: v for k, v in source.metadata.items() if not (k == "mtime" and not job.preserve_mtime)}
        if job.preserve_mtime and source.last_modified is not None:
            meta.update(attribute_metadata(source.last_modified, None, None))
        return {"MetadataDirective": "REPLACE", "Metadata": meta, **source.content}

    def _landed(self, key: str, etag: str, sha256: str) -> _Landed:
        """The copy as the store answered the copy request (its ETag and the SHA-256 it computed
        as asked) and its size from a HEAD. A checksum the HEAD shows but the copy's answer did
        not may be the source's, carried over unread (``rclone serve s3`` does so): never used."""
        head = self._head(self.dst_conn, key) or {}
        return _Landed(
            size=int(head.get("ContentLength") or 0),
            etag=(etag or str(head.get("ETag", ""))).strip('"'),
            sha256=sha256,
        )

    # -- plumbing --
    @staticmethod
    def _head(conn: S3Connection, key: str) -> Mapping[str, Any] | None:
        try:
            return conn.head_object(key, checksum_mode=True)
        except Exception as exc:
            if isinstance(exc, NotFound) or http_status(exc) == 404 or error_code(exc) in ("404", "NoSuchKey"):
                return None
            raise conn.err(exc, f"checking {conn.display(key)}") from exc

    def _abort(self, key: str, upload_id: str) -> None:
        try:
            self.dst_conn.client.abort_multipart_upload(Bucket=self.dst_conn.bucket, Key=key, UploadId=upload_id)
        except Exception:  # already completed or aborted: nothing left to clean
            return

    def _finish(
        self,
        sink: DelegationSink,
        row: DelegatedRow,
        state: TaskState,
        *,
        verification: Verification | None = None,
        error: str | None = None,
        size: int = 0,
    ) -> None:
        sink.finish_rows([row], state, verification=verification, error=error)
        sink.accounting.file_finished(state.value, size)


def _us(e: Entry) -> int | None:
    return None if e.mtime is None else int(e.mtime.timestamp() * 1_000_000)


__all__ = ["DIFFERENT_ACCOUNTS", "PART_COPY_REFUSED", "S3ServerCopy", "ServerCopyDelegation", "same_account", "verify"]
