"""Writing one S3 object: a single PUT for small ones, parallel multipart for the rest.

Nothing appears under the final key before :meth:`S3Writer.commit` (PutObject or
CompleteMultipartUpload happen there), so a failed or unverified copy never replaces an object.

Verification, per endpoint (:mod:`ferry.backends.s3.checksums` finds out what a store really
checks), whatever ``--verify`` says: every PutObject and UploadPart carries a checksum that a store
which checks anything checks, so a body damaged on the way is refused before it is stored. Where
the store checks S3 additional checksums (AWS; any store seen to refuse a wrong one), a single PUT
sends ``x-amz-checksum-sha256`` (the copy's stream hash, no extra pass; on the lean path also
SigV4's payload hash) and a multipart upload is created with ``ChecksumAlgorithm=SHA256``: each
part goes with its SHA-256 (one pass per part, also signed as SigV4's payload hash),
CompleteMultipartUpload lists them and the composite checksum the server returns is compared with
the one computed here. No MD5 then. Elsewhere each body's MD5 goes as ``Content-MD5`` (the payload
then unsigned: the signed header covers the body) and the returned ETags are compared with the
MD5s computed here (per part, then the multipart ETag from the parts' MD5s; SSE-KMS objects have
no MD5 ETags and rely on Content-MD5 alone): a store that checks nothing (moto) is caught there.
A single PUT whose ETag then disagrees is deleted at once (it went straight to its key), so a
retry finds the key free. Single PUTs also store the SHA-256 as ``x-amz-meta-ferry-sha256`` for
later downloads.

What was confirmed is :attr:`S3Writer.evidence` (values the copy records) and, for people,
``verified_note``: what the server itself was seen to check ("server checked ...") and what Ferry
compared ("... matched").

Resume: the UploadId and finished parts go to a :class:`~ferry.backends.base.ResumeSlot` (the
queue's ``task_resume`` row) after every part. A new writer for the same task re-checks them with
ListParts and continues after the longest run of parts the server holds, from part 1.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from concurrent.futures import Future
from datetime import datetime
from typing import Any, Protocol

from ferry.backends.base import ResumeSlot, Writer
from ferry.backends.s3.checksums import Support, composite_sha256, same_composite, support
from ferry.backends.s3.connection import S3Connection
from ferry.backends.s3.entries import attribute_metadata
from ferry.backends.s3.errors import UploadGone
from ferry.backends.s3.evidence import Facts
from ferry.backends.s3.multipart import choose_part_size, list_parts, multipart_etag
from ferry.core.errors import AlreadyExists, ChecksumMismatch, FerryError, Transient, UsageError
from ferry.core.hashing import new_hasher
from ferry.core.outcomes import Evidence

_KMS = ("aws:kms", "aws:kms:dsse")
_LEARN_MAX = 1 << 20  # the repeated PUT that tells whether If-None-Match is honoured: small bodies only


class Bucket(Protocol):
    """What a writer uses of its backend beyond the connection (``S3Backend`` is one; this module
    never imports it, so the package's imports run one way)."""

    @property
    def conn(self) -> S3Connection: ...

    def note_written(self, key: str) -> None: ...

    def exists(self, path: str) -> bool: ...

    def conditional_writes(self) -> bool: ...

    def conditional_known(self) -> bool: ...

    def learn_conditional(self, honoured: bool) -> None: ...

    def copy_object(self, src_key: str, dst_key: str, size: int) -> None: ...


class PartBudget:
    """Bytes of multipart part buffers handed to the part threads (queued or being sent) by every
    upload in this process. Each file already keeps at most ``part_concurrency`` parts in flight,
    but sixteen workers on big files at 16 MiB x 4 parts each would hold over 1 GiB; this caps the
    total (``FERRY_S3_UPLOAD_MEMORY``, default 512 MiB). A part always goes when nothing else is
    in flight, so a part larger than the budget is slow, never stuck."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._cond = threading.Condition()

    def acquire(self, n: int) -> None:
        with self._cond:
            while self.used and self.used + n > self.limit:
                self._cond.wait()
            self.used += n
            self.peak = max(self.peak, self.used)

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify_all()


_BUDGETS: dict[int, PartBudget] = {}
_BUDGETS_LOCK = threading.Lock()


def part_budget(limit: int) -> PartBudget:
    """The process's budget for ``limit`` bytes (``FERRY_S3_UPLOAD_MEMORY``): every backend built
    with the same settings shares one, so the cap holds across all of them."""
    with _BUDGETS_LOCK:
        budget = _BUDGETS.get(limit)
        if budget is None:
            budget = _BUDGETS[limit] = PartBudget(limit)
        return budget


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def _note(checked: list[str], matched: list[str]) -> str:
    """The note "server checked A + B; C + D matched": what the server verified itself, then what Ferry
    compared with digests the server computed (ETags, the composite checksum)."""
    out = [f"server checked {' + '.join(checked)}"] if checked else []
    if matched:
        out.append(f"{' + '.join(matched)} matched")
    return "; ".join(out)


def _etag(resp: dict[str, Any]) -> str:
    return str(resp.get("ETag", "")).strip('"')


# Keys ("s3://bucket/key") whose PutObject or CompleteMultipartUpload this process sent and never
# heard the answer of (the connection broke after the request went): the store may have acted on
# it. The copy's next attempt at the same key is then a retry of our own write (see _unanswered).
_UNANSWERED: set[str] = set()
_UNANSWERED_MAX = 10_000


def _retried(exc: BaseException) -> bool:
    """Whether botocore sent the request that ended in ``exc`` more than once (its own retries):
    an earlier try may have reached the store and lost only its answer."""
    meta = (getattr(exc, "response", None) or {}).get("ResponseMetadata") or {}
    return int(meta.get("RetryAttempts") or 0) > 0


_LOST_NOTE = "answer lost, retried: the store's object checked by HEAD"


class S3Writer(Writer):
    def __init__(
        self,
        backend: Bucket,
        key: str,
        *,
        size: int | None,
        resume: bool,
        readback: str | None,
        slot: ResumeSlot | None,
    ) -> None:
        self._b = backend
        self._c = backend.conn
        self._budget = part_budget(self._c.settings.upload_memory)
        self.final_path = key
        self.temp_path = key  # S3 has no temporary name: an object appears only at commit
        self.offset = 0
        self._size = size
        self._slot = slot
        self._hasher = new_hasher(readback) if readback else None
        # Set when the copy lends its own hash of the stream (see share_stream_hasher): the same
        # bytes are then hashed once, not by the copy and again here.
        self._lent: Any = None
        self._fed = False  # any byte handed to write() or feed_prefix() yet
        self._readback = readback
        self._part_size = choose_part_size(size, self._c.settings.part_size)
        self._buf = bytearray()  # a single PUT's body
        # Multipart: the part being filled, and emptied part buffers to fill again (at most the
        # parts in flight plus one): each byte is copied once, into its part, and sent from there.
        self._part: bytearray | None = None
        self._fill = 0
        self._free: list[bytearray] = []
        self._multipart = size is None or size > self._part_size
        self._upload_id: str | None = None
        # number -> (etag, size, md5 hex or "", base64 SHA-256 or "")
        self._parts: dict[int, tuple[str, int, str, str]] = {}
        self._next_part = 1
        self._lock = threading.Lock()
        self._futures: list[Future[None]] = []
        # Made by the first part: a single PUT never needs it, and a semaphore (a Condition
        # underneath) per small file was a measurable part of the writer's set-up.
        self._inflight: threading.BoundedSemaphore | None = None
        self._failed: BaseException | None = None
        # The first part the store refused as damaged on the way: what the file fails as, whatever
        # the other parts met afterwards (see _send_part).
        self._refusal: ChecksumMismatch | None = None
        self._done = False
        self._copy_source: tuple[str, int] | None = None
        # What the store confirmed for this upload, set by commit (base.Writer): empty until then.
        self.evidence: tuple[Evidence, ...] = ()
        self.verified_note = ""
        self._prefix_md5: Any = None
        self._prefix_sha: Any = None
        self._prefix_part = 1
        self._prefix_fill = 0
        self._sse: str | None = None
        self._resumed_parts = 0
        self._support: Support | None = None
        self._part_sha = False  # the multipart upload was created with ChecksumAlgorithm=SHA256
        self._part_md5_header = False  # parts go with Content-MD5
        self._mtime: datetime | None = None  # for CreateMultipartUpload's metadata (set_mtime)
        self._mtime_ns: int | None = None  # the same, exactly, where the source knows it
        self._mode: int | None = None  # permission bits kept as metadata (set_mode)
        # Whether the queue holds (or held) a row for this task: only then is there a row to clear
        # at the end. A small file sent in one PUT never writes one, so it costs the queue no write
        # transaction (one per file was a quarter of a small-file upload's time, serialised on the
        # store's lock).
        self._stateful = False
        self._load_state(resume)

    def _checks(self) -> Support:
        """What this endpoint checks (probed once per backend, on the first upload that verifies)."""
        if self._support is None:
            self._support = support(self._c, self.final_path)
        return self._support

    # -- resume --
    def _load_state(self, resume: bool) -> None:
        state = self._slot.load() if self._slot is not None else None
        if not state:
            return
        self._stateful = True
        upload_id = str(state.get("upload_id", ""))
        if not resume or state.get("key") != self.final_path or not upload_id:
            self._abort_upload(upload_id)
            self._save_state(None)
            return
        part_size = int(str(state.get("part_size", 0)))
        raw_parts = state.get("parts") or {}
        assert isinstance(raw_parts, dict)
        ours = {
            int(n): (str(v[0]), int(v[1]), str(v[2]), str(v[3]) if len(v) > 3 else "") for n, v in raw_parts.items()
        }
        try:
            server = list_parts(self._c, self.final_path, upload_id)
        except FerryError:
            self._save_state(None)  # gone (aborted, cleaned up, expired): start afresh
            return
        n = 1
        while n in ours and n in server and ours[n][1] == part_size:
            etag, size, checksum = server[n]
            if (etag, size) != (ours[n][0], part_size) or (checksum and ours[n][3] and checksum != ours[n][3]):
                break
            n += 1
        # A part checksum the server lists (AWS does, for uploads created with one) is what the
        # re-read source must match; ours is kept where the server lists none.
        kept = {i: (*ours[i][:3], server[i][2] or ours[i][3]) for i in range(1, n)}
        self._multipart = True
        self._upload_id = upload_id
        self._part_size = part_size
        self._part_sha = state.get("checksum") == "sha256"
        self._part_md5_header = bool(state.get("content_md5", not self._part_sha))
        self._parts = kept
        self._next_part = n
        self.offset = part_size * (n - 1)
        self._resumed_parts = n - 1
        self._save_state_locked()

    def _state(self) -> dict[str, object]:
        return {
            "upload_id": self._upload_id,
            "key": self.final_path,
            "part_size": self._part_size,
            "checksum": "sha256" if self._part_sha else "",
            "content_md5": self._part_md5_header,
            "parts": {str(n): list(v) for n, v in sorted(self._parts.items())},
        }

    def _save_state(self, data: dict[str, object] | None) -> None:
        if self._slot is not None and (data is not None or self._stateful):
            self._slot.save(data)
            self._stateful = data is not None

    def _save_state_locked(self) -> None:
        if self._slot is not None and self._upload_id:
            self._slot.save(self._state())
            self._stateful = True

    def share_stream_hasher(self, hasher: Any) -> None:
        """Take the copy's hash of the stream instead of hashing every byte a second time.

        The copy updates ``hasher`` with exactly the bytes it then hands to :meth:`feed_prefix` and
        :meth:`write`, so a hash kept here would be the same digest at twice the CPU (SHA-256 of a
        big upload was most of what verification cost). What checks the *destination* is unchanged:
        the server verifies each body's checksum or Content-MD5, and commit compares what the server
        returns with what was computed here. Only before the first byte: a hash half-fed here would
        be wrong.
        """
        if self._hasher is None or self._fed:
            return  # not verifying, or bytes already went through our own hasher: keep it
        self._lent, self._hasher = hasher, None

    def set_mtime(self, mtime: datetime | None, mtime_ns: int | None = None) -> None:
        """The source's modification time, before the first byte: a multipart upload carries it as
        ``mtime`` metadata from CreateMultipartUpload on, as a single PUT does at commit."""
        self._mtime, self._mtime_ns = mtime, mtime_ns

    def set_mode(self, mode: int, *, umask: bool = False) -> bool:
        """Permission bits, kept as ``mode`` metadata (octal with the file type, as rclone's
        ``--metadata`` writes it) and restored on download. With ``umask`` nothing is stored: a
        download then gets the bits a new file gets there."""
        if not umask:
            self._mode = mode
        return True

    def _attributes(self, mtime: datetime | None) -> dict[str, str]:
        """The ``mtime`` and ``mode`` metadata (see :func:`~ferry.backends.s3.entries.attribute_metadata`)."""
        ns = self._mtime_ns if self._mtime_ns is not None and mtime is not None else None
        return attribute_metadata(mtime, ns, self._mode)

    def _stream_digest(self) -> str | None:
        if self._lent is not None:
            return str(self._lent.hexdigest())
        return self._hasher.hexdigest() if self._hasher is not None else None

    def feed_prefix(self, data: bytes | bytearray | memoryview) -> None:
        """Resuming: the source's bytes for the parts already uploaded, re-read by the copy. Each
        part must still match the part the server holds (else the source changed): by its SHA-256
        checksum where the upload has part checksums, else by its MD5."""
        view = memoryview(data).cast("B")
        self._fed = True
        if self._hasher is not None:
            self._hasher.update(view)
        while view:
            if self._prefix_fill == 0:
                known_sha = self._parts.get(self._prefix_part, ("", 0, "", ""))[3]
                self._prefix_sha = hashlib.sha256() if known_sha else None
                self._prefix_md5 = None if known_sha else hashlib.md5()
            take = min(len(view), self._part_size - self._prefix_fill)
            for h in (self._prefix_md5, self._prefix_sha):
                if h is not None:
                    h.update(view[:take])
            self._prefix_fill += take
            view = view[take:]
            if self._prefix_fill == self._part_size:
                n = self._prefix_part
                etag, _, stored, sha = self._parts.get(n, ("", 0, "", ""))
                if self._prefix_sha is not None:
                    ok = _b64(self._prefix_sha.digest()) == sha
                    md5 = stored
                else:
                    md5 = self._prefix_md5.hexdigest()
                    ok = md5 in (etag, stored)
                if not ok:
                    raise ChecksumMismatch(
                        f"The source changed since part {n} of {self._c.display(self.final_path)} was uploaded"
                    )
                self._parts[n] = (etag, self._part_size, md5, sha)
                self._prefix_part += 1
                self._prefix_fill = 0

    # -- writing --
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._done:
            raise ValueError("write to a committed or aborted writer")
        if self._failed is not None:
            self._wait_parts()  # the parts still in flight may say better why (see _upload_part)
        self._fed = True
        if self._hasher is not None:
            self._hasher.update(data)
        if not self._multipart:
            self._buf += data
            if len(self._buf) <= self._part_size:
                return
            self._multipart = True  # the source grew past the single-PUT size: switch over
            data, self._buf = self._buf, bytearray()
        view = memoryview(data).cast("B")
        while view:
            part = self._part
            if part is None:
                with self._lock:
                    part = self._free.pop() if self._free else bytearray(self._part_size)
                self._part, self._fill = part, 0
            n = min(len(view), self._part_size - self._fill)
            part[self._fill : self._fill + n] = view[:n]
            self._fill += n
            view = view[n:]
            if self._fill == self._part_size:
                self._part, self._fill = None, 0
                self._submit(part)  # the buffer itself: no copy (it comes back to _free when sent)

    def _start_upload(self) -> None:
        kw: dict[str, Any] = {}
        checks = self._checks()
        self._part_sha = checks.multipart_sha256
        if self._part_sha:
            kw["ChecksumAlgorithm"] = "SHA256"
        attributes = self._attributes(self._mtime)
        if attributes:
            kw["Metadata"] = attributes
        try:
            resp = self._c.client.create_multipart_upload(Bucket=self._c.bucket, Key=self.final_path, **kw)
        except Exception as exc:
            raise self._c.err(exc, f"starting the upload of {self._c.display(self.final_path)}")
        self._upload_id = str(resp["UploadId"])
        self._sse = resp.get("ServerSideEncryption")
        # Content-MD5 on every part whose SHA-256 checksum the store does not check: a part damaged
        # on the way is then refused by a store that checks it (rclone serve s3, AWS under SSE-KMS)
        # and sent again, instead of failing the whole file at the ETag comparison below. The MD5
        # is computed for that comparison anyway; the store hashes each part a second time to test
        # the header (measured on rclone: see docs/s3.md).
        self._part_md5_header = not (self._part_sha and checks.checks_sha256)
        self._save_state_locked()

    def _submit(self, chunk: bytes | bytearray) -> None:
        if self._upload_id is None:
            self._start_upload()
        n = self._next_part
        self._next_part += 1
        if self._inflight is None:
            self._inflight = threading.BoundedSemaphore(self._c.settings.part_concurrency)
        self._inflight.acquire()  # bounds memory: at most part_concurrency parts queued per file
        if self._failed is not None:
            self._inflight.release()
            self._wait_parts()
        size = len(chunk)
        self._budget.acquire(size)  # and across all files: see PartBudget
        try:
            future = self._c.executor.submit(self._upload_part, n, chunk)
        except BaseException:
            self._budget.release(size)
            self._inflight.release()
            raise

        def cancelled(f: Future[None]) -> None:
            if f.cancelled():  # abort() cancelled it before it ran: _upload_part never releases
                self._budget.release(size)

        future.add_done_callback(cancelled)
        self._futures.append(future)

    def _upload_part(self, n: int, chunk: bytes | bytearray) -> None:
        try:
            if self._failed is not None:
                return
            sha = hashlib.sha256(chunk).digest() if self._part_sha else None
            md5 = b""
            if sha is None or not self._checks().checks_sha256:
                md5 = hashlib.md5(chunk).digest()
            what = f"part {n} of {self._c.display(self.final_path)}"
            resp = self._send_part(n, chunk, md5, sha, what)
            etag = _etag(resp)
            md5_hex = md5.hex()
            if md5_hex and etag != md5_hex and resp.get("ServerSideEncryption") not in _KMS:
                raise ChecksumMismatch(f"S3 stored {what} with ETag {etag}, expected MD5 {md5_hex}")
            sha_b64 = _b64(sha) if sha is not None else ""
            echoed = resp.get("ChecksumSHA256")
            if sha_b64 and echoed and echoed != sha_b64:
                raise ChecksumMismatch(f"S3 stored {what} with SHA-256 checksum {echoed}, expected {sha_b64}")
            with self._lock:
                self._parts[n] = (etag, len(chunk), md5_hex, sha_b64)
                self._save_state_locked()
                # Sent: the next part fills it again. Two are enough (the writer waits for a part to
                # finish before it needs another buffer); more would sit outside the PartBudget.
                if isinstance(chunk, bytearray) and len(chunk) == self._part_size and len(self._free) < 2:
                    self._free.append(chunk)
        except BaseException as exc:
            # The first failure wins, but a damaged part outranks what follows from it (rclone
            # serve s3 drops the whole upload after refusing a part: the other parts then meet
            # NoSuchUpload, which would hide why the file failed).
            if self._failed is None or (
                isinstance(exc, ChecksumMismatch) and not isinstance(self._failed, ChecksumMismatch)
            ):
                self._failed = exc
            raise
        finally:
            self._budget.release(len(chunk))
            assert self._inflight is not None
            self._inflight.release()

    def _send_part(self, n: int, chunk: bytes | bytearray, md5: bytes, sha: bytes | None, what: str) -> Any:
        """UploadPart; a part the store refuses as damaged on the way is sent once more. rclone
        serve s3 drops the whole upload after such a refusal: the second try then meets
        NoSuchUpload (or a closed connection), and the part fails as the checksum refusal it was
        (the copy starts the file over), not as an upload that vanished. The other parts in flight
        meet the same; :meth:`_wait_parts` reports the refusal for them too."""
        refused: FerryError | None = None
        for _ in range(2):
            try:
                return self._c.upload_part(
                    self.final_path,
                    str(self._upload_id),
                    n,
                    chunk,
                    _b64(md5) if md5 and self._part_md5_header else None,
                    checksum_sha256=sha,
                    unsigned=bool(md5),  # its ETag is compared with this MD5: no SHA-256 pass for SigV4
                )
            except Exception as exc:
                err = self._c.err(exc, f"uploading {what}")
                if refused is not None:
                    raise refused from exc  # what follows a refusal comes from it
                if not isinstance(err, ChecksumMismatch):
                    raise err from exc
                refused = err
                with self._lock:
                    if self._refusal is None:
                        self._refusal = err
        assert refused is not None
        raise refused

    def _wait_parts(self) -> None:
        futures, self._futures = self._futures, []
        for f in futures:
            try:
                f.result()
            except BaseException:
                pass
        if self._failed is not None:
            if self._refusal is not None and not isinstance(self._failed, ChecksumMismatch):
                # A part refused as damaged, and the store then dropped the upload: other parts
                # met NoSuchUpload or a closed connection first. The refusal is why the file failed.
                self._failed = self._refusal
            raise self._failed

    def set_copy_source(self, key: str, size: int) -> None:
        """Server-side copy: commit copies ``key`` instead of uploading bytes."""
        self._copy_source = (key, size)

    def finish(self) -> str | None:
        if self._copy_source is not None:
            return None
        if self._multipart:
            if self._fill or self._upload_id is None or (not self._parts and not self._futures):
                chunk = bytes(self._part[: self._fill]) if self._part is not None else b""
                self._part, self._fill = None, 0
                self._submit(chunk)
            self._free.clear()
            self._wait_parts()
        return self._stream_digest()

    # -- landing --
    def commit(self, *, overwrite: bool, mtime: datetime | None = None) -> None:
        if self._done:
            raise ValueError("commit of a committed or aborted writer")
        cond: dict[str, Any] = {} if overwrite else {"IfNoneMatch": "*"}
        what = self._c.display(self.final_path)
        self._b.note_written(self.final_path)  # before the request: a timed-out PUT may have landed
        try:
            if self._copy_source is not None:
                if not overwrite and self._b.exists(self.final_path):
                    raise AlreadyExists(f"Already exists: {what}")
                self._b.copy_object(self._copy_source[0], self.final_path, self._copy_source[1])
                self.verified_note = "server-side copy"
            else:
                if not overwrite and not self._b.conditional_writes() and self._c.object_exists(self.final_path):
                    # If-None-Match is sent too, but not every S3-compatible store honours it.
                    raise AlreadyExists(f"Already exists: {what}")
                if self._multipart:
                    self._complete(cond)
                else:
                    self._put(cond, mtime)
        except FerryError as exc:
            self._unanswered(lost=isinstance(exc, Transient))
            raise
        except Exception as exc:
            err = self._c.err(exc, f"writing {what}")
            self._unanswered(lost=isinstance(err, Transient))
            raise err from exc
        self._unanswered(lost=False)
        self._done = True
        self._save_state(None)

    def _unanswered(self, *, lost: bool | None = None) -> bool:
        """Whether an earlier write of this key by this process went unanswered; with ``lost``,
        record (True) or forget (False) that the write just sent went unanswered."""
        name = self._c.display(self.final_path)
        before = name in _UNANSWERED
        if lost:
            if len(_UNANSWERED) >= _UNANSWERED_MAX:
                _UNANSWERED.clear()
            _UNANSWERED.add(name)
        elif lost is not None:
            _UNANSWERED.discard(name)
        return before

    def _stored(self) -> tuple[dict[str, Any], Facts] | None:
        """What the store holds under the key now (HEAD, with its additional checksums), or None."""
        try:
            head = dict(self._c.head_object(self.final_path, checksum_mode=True))
        except Exception:
            return None  # nothing there, or no answer: no evidence that it is ours
        return head, Facts.from_head(head, int(head.get("ContentLength") or -1))

    def _put(self, cond: dict[str, Any], mtime: datetime | None) -> None:
        body = bytes(self._buf)
        kw: dict[str, Any] = dict(cond)
        meta: dict[str, str] = {}
        md5 = ""
        checked: list[str] = []
        evidence: list[Evidence] = []
        checks = self._checks()
        stream = self._stream_digest()
        sha: bytes | None = None
        if self._readback == "sha256":
            # The stream hasher saw exactly these bytes (a single PUT has no resumed prefix):
            # its digest is the body's, no second pass over it.
            sha = bytes.fromhex(stream) if stream is not None else hashlib.sha256(body).digest()
            meta["ferry-sha256"] = sha.hex()
        elif stream is not None:
            meta[f"ferry-{self._readback}"] = stream
        if checks.checks_sha256:
            # The store checks it: no MD5 pass. Without a stream SHA-256 (--verify none, blake3)
            # this is one SHA-256 of the body, which the lean path signs as the payload hash too.
            sha = sha if sha is not None else hashlib.sha256(body).digest()
            kw["ChecksumSHA256"] = _b64(sha)
            checked.append("x-amz-checksum-sha256")
            evidence.append(Evidence.S3_CHECKSUM)
        else:
            if sha is not None and checks.send_sha256:
                kw["ChecksumSHA256"] = _b64(sha)  # kept by the store for later downloads, not checked
            digest = hashlib.md5(body).digest()
            md5 = digest.hex()
            kw["ContentMD5"] = _b64(digest)
            if checks.checks_md5:
                checked.append("Content-MD5")
                evidence.append(Evidence.S3_CONTENT_MD5)
        meta.update(self._attributes(mtime))  # rclone's conventions: mtime in seconds, mode in octal
        if meta:
            kw["Metadata"] = meta
        resp, recovered = self._send_put(body, kw, md5)
        matched: list[str] = []
        what = self._c.display(self.final_path)
        wrong = ""
        if md5 and resp.get("ServerSideEncryption") not in _KMS:
            etag = _etag(resp)
            if etag != md5:
                wrong = f"S3 stored {what} with ETag {etag}, expected {md5}: it received other bytes than were sent"
            else:
                matched.append("MD5 ETag")
                evidence.append(Evidence.S3_ETAG_MD5)
        echoed = resp.get("ChecksumSHA256")
        if not wrong and echoed and kw.get("ChecksumSHA256") and echoed != kw["ChecksumSHA256"]:
            wrong = f"S3 stored {what} with SHA-256 checksum {echoed}, expected {kw['ChecksumSHA256']}"
        if wrong:
            # A single PUT goes straight to its key: never leave the wrong bytes there (and the
            # retry must find the key free, not fail on "already exists").
            self._remove_landed()
            raise ChecksumMismatch(wrong)
        self.evidence = tuple(evidence)
        self.verified_note = _note(checked, matched)
        if recovered:
            self.verified_note = f"{self.verified_note}; {_LOST_NOTE}" if self.verified_note else _LOST_NOTE
            return  # the store refused the repeat (412): it honours If-None-Match, nothing to learn
        self._learn_conditional(cond, body, kw)

    def _send_put(self, body: bytes, kw: dict[str, Any], md5: str) -> tuple[dict[str, Any], bool]:
        """PutObject; and whether its answer is what the store holds after a retry of ours.

        A no-overwrite PUT whose answer was lost is sent again (botocore's retries, the lean
        client's fall-back to botocore, or the copy's next attempt); the store then refuses it
        (412) because of the object the first one made. Only then, and only if that object is this
        body by the store's own digests (ETag = our MD5, its SHA-256 checksum or Ferry's SHA-256
        metadata = ours, same size), it counts as written: its HEAD stands for the lost answer.
        Anything else stays the conflict it is."""
        resent = [self._unanswered()]
        try:
            return dict(self._c.put_object(self.final_path, body, kw, resent=lambda: resent.append(True))), False
        except Exception as exc:
            err = self._c.err(exc, f"writing {self._c.display(self.final_path)}")
            if isinstance(err, AlreadyExists) and "IfNoneMatch" in kw and (any(resent) or _retried(exc)):
                found = self._stored()
                if found is not None and self._same_single(found[1], len(body), kw, md5):
                    return found[0], True
            raise err from exc

    @staticmethod
    def _same_single(facts: Facts, size: int, kw: dict[str, Any], md5: str) -> bool:
        """Whether the object HEAD described is the body a single PUT sent (``kw``, its ``md5``):
        the same size and every digest the store kept equal to ours, at least one of them."""
        if facts.size != size:
            return False
        pairs: list[tuple[str, str]] = []
        if md5 and facts.etag_is_md5:
            pairs.append((facts.etag, md5))
        sha = str(kw.get("ChecksumSHA256") or "")
        if sha and facts.checksums.get("SHA256"):
            pairs.append((facts.checksums["SHA256"], sha))
        sent_sha = str((kw.get("Metadata") or {}).get("ferry-sha256") or "")
        if sent_sha and facts.ferry_sha256:
            pairs.append((facts.ferry_sha256, sent_sha))
        return bool(pairs) and all(got == want for got, want in pairs)

    def _learn_conditional(self, cond: dict[str, Any], body: bytes, kw: dict[str, Any]) -> None:
        """A no-overwrite PUT (``cond``) once more, onto the object it just made, until the store
        has shown whether it honours If-None-Match (see :mod:`~ferry.backends.s3.probes`): refused
        (412), it does; stored, it does not, and holds the same bytes as before. No throw-away
        object anywhere."""
        if not cond or self._b.conditional_known() or len(body) > _LEARN_MAX:
            return
        try:
            self._c.put_object(self.final_path, body, kw)
        except Exception as exc:
            if isinstance(self._c.err(exc, self._c.display(self.final_path)), AlreadyExists):
                self._b.learn_conditional(True)
            return  # anything else tells nothing: HEAD before the next commits, as until now
        self._b.learn_conditional(False)

    def _remove_landed(self) -> None:
        """Delete what this writer just put under its key (it failed the after-check)."""
        try:
            self._c.delete_object(self.final_path)
        except Exception as exc:
            what = f"removing {self._c.display(self.final_path)}, which the store holds with the wrong bytes"
            raise self._c.err(exc, what) from exc

    def _complete(self, cond: dict[str, Any]) -> None:
        parts = sorted(self._parts.items())
        expected_numbers = list(range(1, len(parts) + 1))
        what = self._c.display(self.final_path)
        if [n for n, _ in parts] != expected_numbers:
            raise ChecksumMismatch(f"Parts missing from the upload of {what}")
        listed: list[dict[str, Any]] = []
        for n, v in parts:
            item: dict[str, Any] = {"PartNumber": n, "ETag": f'"{v[0]}"'}
            if self._part_sha:
                if not v[3]:
                    raise ChecksumMismatch(f"Part {n} of {what} has no SHA-256 checksum recorded")
                item["ChecksumSHA256"] = v[3]
            listed.append(item)
        resp, recovered = self._send_complete(listed, parts, cond)
        if recovered == "read-back":
            # The store's HEAD had no digest to compare (rclone: the whole object's MD5 as ETag):
            # each part was read back and matched its MD5. Nothing else to compare.
            self.evidence, self.verified_note = (Evidence.READBACK,), f"{_LOST_NOTE}; {len(parts)} parts read back"
            return
        try:
            note, evidence = self._check_assembled(resp, parts)
        except ChecksumMismatch:
            # Already under the final name, and wrong: never leave it there.
            self._remove_landed()
            raise
        if self._resumed_parts:
            how = " (SHA-256 part checksums)" if self._part_sha else ""
            resumed = f"resumed: {self._resumed_parts} part(s) already on the server, checked with ListParts{how}"
            note = f"{note}; {resumed}" if note else resumed
        if recovered:
            note = f"{note}; {_LOST_NOTE}" if note else _LOST_NOTE
        self.evidence, self.verified_note = evidence, note

    def _send_complete(
        self, listed: list[dict[str, Any]], parts: list[tuple[int, tuple[str, int, str, str]]], cond: dict[str, Any]
    ) -> tuple[dict[str, Any], str]:
        """CompleteMultipartUpload; and, after a retry, how the object found stands for the answer
        ("" when the store answered: "head" or "read-back").

        A complete whose answer was lost has assembled the object already: sent again, it meets
        NoSuchUpload (the upload is gone) or, with If-None-Match, 412. Only on such a retry of
        ours, and only if the object under the key has this upload's multipart ETag (from the
        parts' MD5s) or composite SHA-256 checksum and its size, does it count as assembled; its
        HEAD then stands for the lost answer and is checked as that answer would have been. Where
        the HEAD shows neither (rclone serve s3 keeps the whole object's MD5 as its ETag), each part
        is read back and compared with its MD5: the object is ours only if every one matches."""
        earlier = self._unanswered()
        try:
            return dict(
                self._c.client.complete_multipart_upload(
                    Bucket=self._c.bucket,
                    Key=self.final_path,
                    UploadId=self._upload_id,
                    MultipartUpload={"Parts": listed},
                    **cond,
                )
            ), ""
        except Exception as exc:
            err = self._c.err(exc, f"writing {self._c.display(self.final_path)}")
            if isinstance(err, (UploadGone, AlreadyExists)) and (earlier or _retried(exc)):
                found = self._stored()
                same = self._same_assembled(found[1], parts) if found is not None else False
                if found is not None and same:
                    return found[0], "head"
                if found is not None and same is None and self._parts_read_back(parts, str(found[0].get("ETag") or "")):
                    return found[0], "read-back"
            raise err from exc

    def _parts_read_back(self, parts: list[tuple[int, tuple[str, int, str, str]]], etag: str) -> bool:
        """Read the object back part by part (If-Match its ETag): every part's MD5 equals ours."""
        if not all(v[2] for _, v in parts):
            return False
        buf = bytearray(max(v[1] for _, v in parts))
        lo = 0
        try:
            for _, v in parts:
                view = memoryview(buf)[: v[1]]
                self._c.fetch_range(self.final_path, lo, view, etag)
                if hashlib.md5(view).hexdigest() != v[2]:
                    return False
                lo += v[1]
        except FerryError:
            return False  # could not read it all: no evidence, the original error stands
        return True

    def _same_assembled(self, facts: Facts, parts: list[tuple[int, tuple[str, int, str, str]]]) -> bool | None:
        """Whether the object HEAD described is what these parts assemble to: the same size, and
        the multipart ETag or the composite SHA-256 checksum the parts make (None: the same size,
        but the HEAD shows neither)."""
        if facts.size != sum(v[1] for _, v in parts):
            return False
        if facts.parts != len(parts) and not facts.checksums.get("SHA256"):
            return None  # no multipart ETag (rclone: the whole object's MD5), no checksum
        pairs: list[bool] = []
        md5s = [v[2] for _, v in parts]
        if all(md5s) and facts.etag_is_md5 and facts.parts and self._sse not in _KMS:
            pairs.append(facts.etag == multipart_etag(md5s))
        answered = facts.checksums.get("SHA256", "")
        if self._part_sha and answered and all(v[3] for _, v in parts):
            pairs.append(same_composite(answered, composite_sha256([base64.b64decode(v[3]) for _, v in parts])))
        return bool(pairs) and all(pairs)

    def _check_assembled(
        self, resp: dict[str, Any], parts: list[tuple[int, tuple[str, int, str, str]]]
    ) -> tuple[str, tuple[Evidence, ...]]:
        """Compare what CompleteMultipartUpload answered with what the parts add up to: the note,
        and the evidence it rests on."""
        checks = self._checks()
        what = self._c.display(self.final_path)
        checked: list[str] = []
        matched: list[str] = []
        evidence: list[Evidence] = []
        n = len(parts)
        if self._part_sha and checks.checks_sha256:
            checked.append(f"x-amz-checksum-sha256 of {n} parts")
            evidence.append(Evidence.S3_CHECKSUM)
        md5s = [v[2] for _, v in parts]
        if all(md5s):
            if self._part_md5_header and checks.checks_md5:
                checked.append(f"Content-MD5 of {n} parts")
                evidence.append(Evidence.S3_CONTENT_MD5)
            if self._sse not in _KMS and resp.get("ServerSideEncryption") not in _KMS:
                expected = multipart_etag(md5s)
                etag = _etag(resp)
                if etag != expected:
                    raise ChecksumMismatch(f"S3 assembled {what} with ETag {etag}, expected {expected}")
                matched.append(f"MD5 ETags of {n} parts + multipart ETag")
                evidence.append(Evidence.S3_MULTIPART_ETAG)
        answered = str(resp.get("ChecksumSHA256") or "")
        if self._part_sha and answered:
            expected = composite_sha256([base64.b64decode(v[3]) for _, v in parts])
            if not same_composite(answered, expected):
                raise ChecksumMismatch(f"S3 assembled {what} with SHA-256 checksum {answered}, expected {expected}")
            matched.append("composite SHA-256 checksum")
        return _note(checked, matched), tuple(evidence)

    @property
    def part_count(self) -> int:
        """How many parts the object was sent in (1 for a single PUT)."""
        return len(self._parts) if self._multipart else 1

    def _abort_upload(self, upload_id: str | None) -> None:
        if not upload_id:
            return
        try:
            self._c.client.abort_multipart_upload(Bucket=self._c.bucket, Key=self.final_path, UploadId=upload_id)
        except Exception:
            pass

    def abort(self, *, keep_partial: bool = False) -> None:
        if self._done:
            return
        self._done = True
        if self._failed is None:
            self._failed = UsageError("upload aborted")  # stop queued parts from starting
        for f in self._futures:
            f.cancel()
        for f in self._futures:
            try:
                f.result()
            except BaseException:
                pass
        if keep_partial and self._upload_id and self._slot is not None:
            return  # the queue holds the UploadId: the next attempt continues it
        self._abort_upload(self._upload_id)
        self._save_state(None)
