"""Site to site: an SSH host and an S3 bucket move the bytes between them, not this computer.

The SFTP backend's delegation for (sftp, s3) and (s3, sftp) pairs (:func:`direct_route`). Ferry
lists the source and decides each file here; the host runs ``curl`` over the SSH session Ferry
already holds, with a URL Ferry signed for that one object (through the store's declared
:class:`~ferry.backends.base.UrlSigner`: no store credential reaches the host). Each URL lasts
:func:`url_ttl` seconds (ten minutes by default, ``FERRY_DIRECT_URL_TTL``) and is signed just
before its file starts. The URL and its headers go to ``curl -K -`` on **standard input**: never
on a command line (the host's process list), in a log, the queue or an exception.

Upload (host to S3), per file: the host hashes the file (``sha256sum`` or ``shasum -a 256``, and
``md5sum``); Ferry signs a PUT with both digests signed in (``x-amz-checksum-sha256`` where the
store takes it, ``Content-MD5``); ``curl --fail -T FILE`` sends it; then Ferry reads back what
the store keeps (HeadObject with checksums) and compares it with the host's digests: a
single-part ETag is the MD5 of what the store received; a stored SHA-256 counts only where the
store was seen to refuse a wrong one (``backends/s3/checksums.py``), since some stores keep
whatever they are sent. Files over 5 GiB (a single PUT's limit) go up as multipart uploads: the
host hashes each part (MD5) and sends it with a URL signed for that part alone (the part on
curl's standard input, the URL on descriptor 3), and the store's multipart ETag is compared with
the one the host's part digests give. The upload's id is saved with the job, so a run after a
crash or a dropped session keeps the parts the store holds (ListParts, each part's ETag against
the host's MD5 of it) and sends only the rest.

Download (S3 to host), per file: ``curl --fail -o`` into a partial name beside the file (created
fresh with ``set -C``, never through a link), the host hashes what landed, Ferry compares with the
store's SHA-256, else the SHA-256 Ferry stored with the object, else a single-part ETag (MD5),
else the size only (said so); then the partial file is renamed into place by the SFTP backend's
confined view under the job's conflict policy.

The host and its reach are probed once per host and endpoint per process (:func:`probe`); a host
that cannot go direct raises :class:`~ferry.backends.base.NoDirectRoute` with one sentence. A
store that refuses the probe's HEAD on the bucket (HTTP 403: keys limited to a prefix) is asked
again per job, with a signed listing under the job's own path.

Under ``--on-conflict ask`` no one can be asked on the host's behalf: a file that differs from
the one at the destination fails as :class:`~ferry.core.errors.ConflictUnanswered` (kind
``conflict``), as on the relay with no one to ask. Every failure is recorded with its error's kind.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import shlex
import threading
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from ferry.backends.base import (
    Backend,
    DelegatedJob,
    DelegatedRow,
    DelegationSink,
    Entry,
    Kind,
    NoDirectRoute,
    SignedRequest,
    StoreChecks,
    StoredObject,
    UrlSigner,
    ns_datetime,
    temp_name,
)
from ferry.backends.sftp.shell import RemoteShell
from ferry.core.errors import (
    AlreadyExists,
    Cancelled,
    ChecksumMismatch,
    ConflictUnanswered,
    FerryError,
    NotFound,
    Transient,
    Unsupported,
)
from ferry.core.outcomes import FOLDER, Evidence, Level, TaskState, Verification

DEFAULT_TTL = 600  # seconds a signed URL lasts
_IN_PLACE = "already in place: the same checksum"
PLANNED = "planned"  # job value: "1" once every row of the job is recorded (transfers/delegated.py)
UPLOAD = "upload:"  # job value "upload:<key>": the multipart upload in progress for that object (JSON)
MAX_SINGLE_PUT = 5 << 30  # S3's limit for one PUT
_URL = re.compile(r"(https?://[^\s/?#'\"]+)[^\s'\"]*")


def multipart_over() -> int:
    """Files bigger than this go up as multipart uploads (``FERRY_DIRECT_MULTIPART_OVER``, bytes;
    else one PUT's limit, 5 GiB)."""
    try:
        return int(os.environ.get("FERRY_DIRECT_MULTIPART_OVER", MAX_SINGLE_PUT))
    except ValueError:
        return MAX_SINGLE_PUT


def part_size(size: int) -> int:
    """Part size for a ``size``-byte file: ``FERRY_DIRECT_PART_SIZE`` (bytes, else 512 MiB), and
    big enough that there are at most 10,000 parts (S3's limit)."""
    try:
        part = max(5 << 20, int(os.environ.get("FERRY_DIRECT_PART_SIZE", 512 << 20)))
    except ValueError:
        part = 512 << 20
    return max(part, -(-size // 10_000))


def url_ttl() -> int:
    """Seconds a signed URL lasts: ``FERRY_DIRECT_URL_TTL``, else ten minutes."""
    try:
        return max(1, int(os.environ.get("FERRY_DIRECT_URL_TTL", DEFAULT_TTL)))
    except ValueError:
        return DEFAULT_TTL


def streams() -> int:
    """Files moved at once (each a ``curl`` on its own SSH channel): ``FERRY_DIRECT_STREAMS``, else 4."""
    try:
        return max(1, int(os.environ.get("FERRY_DIRECT_STREAMS", "4")))
    except ValueError:
        return 4


def redact(text: str) -> str:
    """``text`` with every URL cut to its scheme and host (curl's words may quote one)."""
    return _URL.sub(r"\1/…", text)


def curl_config(req: SignedRequest) -> bytes:
    """``req`` as a curl config file (``curl -K -`` reads it from standard input)."""

    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"url = {quoted(req.url)}"]
    lines += [f"header = {quoted(f'{k}: {v}')}" for k, v in req.headers.items()]
    if req.method == "HEAD":
        lines.append("head")
    return ("\n".join(lines) + "\n").encode()


# ---------------------------------------------------------------- the probe


@dataclass(frozen=True)
class HostTools:
    """What the host has for the direct route (all found by one probe)."""

    sha256: str  # the command that prints a SHA-256 of its standard input
    md5: str | None  # md5sum, where the host has it
    # The store refused the probe's HEAD on the bucket (HTTP 403): credentials limited to a prefix
    # may not ask about the bucket itself; each job then lists under its own prefix first.
    bucket_refused: bool = False


_probed: dict[tuple[str, str], HostTools | str] = {}
_probe_lock = threading.Lock()

_PROBE = (
    # Whatever the answer, the config sent on standard input is read to its end: a command that
    # ends with its input unread races the EOF Ferry sends, and sshd may drop the connection.
    "echo probe=ferry; command -v curl >/dev/null 2>&1 || { cat >/dev/null; echo no-curl; exit 0; }; "
    "if command -v sha256sum >/dev/null 2>&1; then echo sha=sha256sum; "
    "elif command -v shasum >/dev/null 2>&1; then echo sha=shasum; fi; "
    "command -v md5sum >/dev/null 2>&1 && echo md5=md5sum; "
    "curl -sS -o /dev/null -w 'http=%{http_code}\\n' --max-time 20 -K - 2>/dev/null; echo rc=$?"
)


def probe(host: Backend, shell: RemoteShell, signer: UrlSigner) -> HostTools:
    """The host's tools, once it is known to have curl and a SHA-256 tool and to reach the
    store (a signed HEAD on the bucket, run on the host); else :class:`NoDirectRoute`."""
    req = signer.sign_probe(60)
    key = (host.endpoint, req.endpoint)
    with _probe_lock:
        found = _probed.get(key)
        if found is None:
            try:
                found = _probe_once(host, shell, req)
            except FerryError as exc:  # the session failed: not cached, asked again next time
                name = host.address.host or host.endpoint
                raise NoDirectRoute(f"the host {name} runs no commands for Ferry ({exc.message})") from exc
            _probed[key] = found
    if isinstance(found, str):
        raise NoDirectRoute(found)
    return found


def forget_probes() -> None:
    """Probe again on next use (tests; a host whose software changed)."""
    with _probe_lock:
        _probed.clear()


def _probe_once(host: Backend, shell: RemoteShell, req: SignedRequest) -> HostTools | str:
    name = host.address.host or host.endpoint
    _rc, out, _err = shell.run(_PROBE, timeout=60, stdin=curl_config(req))
    words = dict(line.split("=", 1) for line in out.decode(errors="replace").split() if "=" in line)
    if words.get("probe") != "ferry":  # an sftp-only account, a server without a shell
        return f"the host {name} runs no shell commands for Ferry"
    if b"no-curl" in out.split():
        return f"the host {name} has no curl"
    if "sha" not in words:
        return f"the host {name} has no sha256sum (or shasum) to check what it sends and receives"
    status = words.get("http", "000")
    if words.get("rc") != "0" and status == "000":
        return f"the host {name} cannot reach {req.endpoint}"
    if not status.startswith("2") and status != "403":
        return f"the host {name} reaches {req.endpoint}, but the store answered HTTP {status} to a signed request"
    sha = "shasum -a 256" if words["sha"] == "shasum" else "sha256sum"
    return HostTools(sha256=sha, md5=words.get("md5"), bucket_refused=status == "403")


def direct_route(host: Backend, shell: RemoteShell, src: Backend, dst: Backend) -> HostS3Route | None:
    """The direct route between the SSH ``host`` (one of ``src`` and ``dst``, its commands run by
    ``shell``) and an S3 bucket, either way; None for any other pair; :class:`NoDirectRoute` when
    the host cannot go direct now."""
    if src is host and dst.scheme == "s3":
        store, upload = dst, True
    elif dst is host and src.scheme == "s3":
        store, upload = src, False
    else:
        return None
    signer = store.features.url_signer
    if signer is None:
        return None
    tools = probe(host, shell, signer)
    return HostS3Route(host, shell, store, signer, tools, upload=upload)


# ---------------------------------------------------------------- the job


@dataclass
class _Outcome:
    row: DelegatedRow
    state: TaskState
    verification: Verification | None = None
    error: str | None = None
    moved: int = 0  # bytes the host sent or received
    error_kind: str | None = None  # the FerryError's kind, for a failure


@dataclass
class _Plan:
    """One job's walk: rows to do, in order."""

    files: list[tuple[DelegatedRow, Entry]] = field(default_factory=list)


class HostS3Route:
    """One Ferry job moved by the SSH host's ``curl`` (see the module's docstring)."""

    def __init__(
        self, host: Backend, shell: RemoteShell, store: Backend, signer: UrlSigner, tools: HostTools, *, upload: bool
    ) -> None:
        self.host = host
        self.shell = shell
        self.store = store
        self.signer = signer
        self.tools = tools
        self.upload = upload
        self.src: Backend = host if upload else store
        self.dst: Backend = store if upload else host
        self._checks: StoreChecks | None = None

    @property
    def route(self) -> str:
        """For people: "direct: host → s3://bucket"."""
        if self.upload:
            return f"direct: {self.host.address.host} → {self.store.display('')}"
        return f"direct: {self.store.display('')} → {self.host.address.host}"

    # ---- the job ----
    def run_job(self, job: DelegatedJob, sink: DelegationSink) -> None:
        if self.tools.bucket_refused:
            self._check_prefix(job)
        sink.job_changed(self.route)
        writer: Backend = self.host.confined(self._dst_folders(job)) if not self.upload else self.store
        seen: set[str] = set()
        planned = sink.value(PLANNED) == "1"
        plan = self._plan(job, sink, writer, seen, planned)
        unstarted: list[DelegatedRow] = []
        with ThreadPoolExecutor(max_workers=streams(), thread_name_prefix=f"ferry-direct-{job.id}") as pool:
            running: set[Future[_Outcome]] = set()
            for i, (row, entry) in enumerate(plan):
                if sink.cancel.cancelled:
                    unstarted += [r for r, _e in plan[i:]]
                    break
                running.add(pool.submit(self._one_file, job, writer, row, entry, sink))
                if len(running) >= 2 * streams():
                    done, running = _wait_some(running)
                    unstarted += self._record(sink, done)
            while running:
                done, running = _wait_some(running)
                unstarted += self._record(sink, done)
        if sink.cancel.cancelled:
            if sink.cancel.reason == "cancel":
                rows = unstarted + [r for r in sink.open_rows() if r.src not in {u.src for u in unstarted}]
                for r in rows if self.upload else ():
                    self._drop_upload(sink, r.dst)  # parts kept for a next run that will not come
                sink.finish_rows(rows, TaskState.CANCELLED, error="cancelled")
            return  # paused or stopped: finished files stay; the next run continues
        if not planned:
            left = [r for r in sink.open_rows() if r.src not in seen]
            if left:
                sink.finish_rows(left, TaskState.FAILED, error="no longer at the source")

    def _check_prefix(self, job: DelegatedJob) -> None:
        """Where the store refused the probe's HEAD on the bucket: a signed listing under the job's
        first path in the store, run on the host; :class:`NoDirectRoute` (the scheduler relays the
        job, or fails it under ``--route direct``) unless the store allows it."""
        path = job.roots[0][1] if self.upload else job.roots[0][0]
        req = self.signer.sign_list(path, 60)
        command = "curl -sS -o /dev/null -w 'http=%{http_code}' --max-time 20 -K -"
        _rc, out, _err = self._run(command, stdin=curl_config(req), timeout=60)
        status = out.strip().rpartition("http=")[2][:3] or "000"
        if not status.startswith("2"):
            raise NoDirectRoute(
                f"the host {self.host.address.host or self.host.endpoint} reaches {req.endpoint}, but the store "
                f"refused signed requests on the bucket (HTTP 403) and under {self.store.display(path)} (HTTP {status})"
            )

    def _plan(
        self, job: DelegatedJob, sink: DelegationSink, writer: Backend, seen: set[str], planned: bool
    ) -> list[tuple[DelegatedRow, Entry]]:
        if planned:
            # Continued (after a pause, a stop or 'queue retry'): the rows still open, nothing else.
            return [(row, _entry_of(row)) for row in sink.open_rows() if row.kind == "file"]
        # The whole walk first, recorded as queued rows before any transfer starts: a session
        # dropped later fails files, never the plan, and a pause leaves the rest open.
        plan = list(self._walk(job, sink, writer, seen))
        sink.finish_rows([row for row, _entry in plan], TaskState.QUEUED)
        if not sink.cancel.cancelled:
            sink.set_value(PLANNED, "1")
        return plan

    def _dst_folders(self, job: DelegatedJob) -> list[str]:
        out = []
        for src_path, dst_path, _rel in job.roots:
            try:
                is_dir = self.src.stat(src_path).is_dir
            except FerryError:
                is_dir = False
            out.append(dst_path if is_dir else posixpath.dirname(dst_path.rstrip("/")) or "/")
        return out

    def _walk(
        self, job: DelegatedJob, sink: DelegationSink, writer: Backend, seen: set[str]
    ) -> Iterator[tuple[DelegatedRow, Entry]]:
        """Each file under the job's roots; folders are made (downloads) and recorded on the way."""
        for src_path, dst_path, rel in job.roots:
            try:
                root = self.src.stat(src_path)
            except FerryError as exc:
                failed = DelegatedRow("file", src_path, dst_path, rel)
                sink.finish_rows([failed], TaskState.FAILED, error=exc.message, error_kind=exc.kind)
                continue
            try:
                items = [("", root)] if not root.is_dir else [("", root), *self.src.walk(src_path, sink.cancel)]
            except Cancelled:
                return
            except FerryError as exc:
                failed = DelegatedRow("dir", src_path, dst_path, rel)
                sink.finish_rows([failed], TaskState.FAILED, error=exc.message, error_kind=exc.kind)
                continue
            for sub, entry in items:
                if sink.cancel.cancelled:
                    return
                target = self.dst.join(dst_path, sub) if sub else dst_path
                row_rel = posixpath.join(rel, sub) if sub else rel
                row = DelegatedRow(
                    "dir" if entry.is_dir else "file", entry.path, target, row_rel, entry.size, _mtime_us(entry)
                )
                seen.add(entry.path)
                if entry.is_dir:
                    self._folder(writer, sink, row)
                elif entry.kind is Kind.FILE:
                    yield row, entry
                else:
                    sink.finish_rows([row], TaskState.SKIPPED, error="not a regular file")

    def _folder(self, writer: Backend, sink: DelegationSink, row: DelegatedRow) -> None:
        try:
            # Made on the host; on the store, as the relay makes it (a folder marker where the
            # store keeps them, so an empty folder is not lost).
            writer.mkdir(row.dst, parents=True, exist_ok=True)
        except FerryError as exc:
            sink.finish_rows([row], TaskState.FAILED, error=exc.message, error_kind=exc.kind)
            return
        sink.finish_rows([row], TaskState.DONE, verification=FOLDER)

    def _record(self, sink: DelegationSink, done: set[Future[_Outcome]]) -> list[DelegatedRow]:
        """Record finished files; return the rows that never started (cancelled or paused first)."""
        unstarted = []
        for fut in done:
            out = fut.result()
            if out.state is TaskState.QUEUED:
                unstarted.append(out.row)
                continue
            sink.finish_rows(
                [out.row], out.state, verification=out.verification, error=out.error, error_kind=out.error_kind
            )
            if out.state is TaskState.DONE:
                sink.accounting.add_bytes(out.row.size or out.moved)
            skipped = out.row.size or 0 if out.state is TaskState.SKIPPED else 0
            sink.accounting.file_finished(out.state.value, skipped)
        return unstarted

    def _one_file(
        self, job: DelegatedJob, writer: Backend, row: DelegatedRow, entry: Entry, sink: DelegationSink
    ) -> _Outcome:
        if sink.cancel.cancelled:
            return _Outcome(row, TaskState.QUEUED)  # not started: the next run does it
        try:
            if self.upload:
                return self._upload(job, sink, row, entry)
            return self._download(job, writer, row, entry)
        except FerryError as exc:
            return _Outcome(row, TaskState.FAILED, error=redact(exc.message), error_kind=exc.kind)
        except Exception as exc:  # a bug or a library's surprise: this file fails, the job goes on
            return _Outcome(row, TaskState.FAILED, error=redact(f"{type(exc).__name__}: {exc}"))

    # ---- host commands ----
    def _run(self, command: str, stdin: bytes | None = None, timeout: float = 24 * 3600) -> tuple[int, str, str]:
        rc, out, err = self.shell.run(command, timeout=timeout, stdin=stdin)
        return rc, out.decode(errors="replace"), redact(err.decode(errors="replace").strip())

    def _hashes(self, path: str, *, md5: bool) -> tuple[int, str, str | None]:
        """(size, sha256, md5) of the regular file ``path`` on the host, by the host's tools."""
        tools = [self.tools.sha256] + ([self.tools.md5] if md5 and self.tools.md5 else [])
        q = shlex.quote(path)
        command = f'f={q}; [ -f "$f" ] && [ ! -L "$f" ] || exit 3; wc -c < "$f"' + "".join(
            f' && {t} < "$f"' for t in tools
        )
        rc, out, err = self._run(command, timeout=3600)
        words = out.split()
        if rc == 3:
            raise NotFound(f"Not a regular file on the host: {self.host.display(path)}")
        if rc != 0 or len(words) < 1 + 2 * len(tools):
            raise Transient(f"The host could not hash {self.host.display(path)}: {err or f'exit {rc}'}")
        return int(words[0]), words[1].lower(), (words[3].lower() if len(tools) > 1 else None)

    def _curl(self, req: SignedRequest, args: str, what: str, *, prefix: str = "", config_fd: bool = False) -> None:
        """Run the host's curl for ``req``, its URL and headers on standard input (with
        ``config_fd``, on descriptor 3 instead, ``prefix`` opening a group whose pipe feeds curl)."""
        config = "/dev/fd/3" if config_fd else "-"
        # A stalled transfer ends (under 1 KiB/s for two minutes); a file is retried by curl on a
        # passing error, a part read from a pipe is not (it cannot be read again).
        retry = "" if config_fd else "--retry 2 "
        stall = "--speed-limit 1024 --speed-time 120"
        command = f"{prefix}curl --fail -sS {retry}{stall} -w '%{{http_code}}' -K {config} {args}"
        if config_fd:
            command += "; } 3<&0"
        rc, out, err = self._run(command, stdin=curl_config(req))
        if rc == 0:
            return
        status = out.strip()[-3:]
        if status.isdigit() and status != "000":
            raise Transient(
                f"The store refused the host's request for {what} (HTTP {status}); "
                f"a signed URL lasts {url_ttl()} s (FERRY_DIRECT_URL_TTL)"
            )
        raise Transient(f"The host's curl failed for {what} (exit {rc}): {err or 'no message'}")

    # ---- upload: host to S3 ----
    def _upload(self, job: DelegatedJob, sink: DelegationSink, row: DelegatedRow, entry: Entry) -> _Outcome:
        shown = self.store.display(row.dst)
        parts = (entry.size or 0) > multipart_over()
        size, sha, md5 = self._hashes(row.src, md5=not parts)
        existing = self.signer.stored_object(row.dst)
        if existing is not None:
            kept = self._existing(job, row, existing, size, sha, md5)
            if kept is not None:
                return kept
        mtime_ns = entry.own_mtime_ns if job.preserve_mtime else None
        if parts:
            return _Outcome(row, TaskState.DONE, self._upload_parts(sink, row, size, sha, mtime_ns), moved=size)
        checks = self.store_checks(row.dst)
        req = self.signer.sign_put(
            row.dst, url_ttl(), sha256=sha, md5=md5, mtime_ns=mtime_ns, send_checksum=checks.send_sha256
        )
        self._curl(req, f"-o /dev/null -T {shlex.quote(row.src)}", shown)
        stored = self.signer.stored_object(row.dst)
        if stored is None:
            raise Transient(f"The store holds no object at {shown} after the host's upload")
        v = upload_verification(stored, size, sha, md5, checks)
        return _Outcome(row, TaskState.DONE, v, moved=size)

    def _upload_parts(
        self, sink: DelegationSink, row: DelegatedRow, size: int, sha: str, mtime_ns: int | None
    ) -> Verification:
        """A file over one PUT's limit as a multipart upload: the host hashes each part (MD5) and
        sends it with a URL signed for that part alone; the store's multipart ETag, computed from
        the parts it received, is compared with the one the host's MD5s give.

        The upload's id is saved with the job (``UPLOAD``) before any part goes: after a crash,
        a dropped session or a failed part, the next run continues that upload, keeping each part
        the store holds whose ETag is the host's MD5 of that part (ListParts), as S3 resume does
        on the relay. Any other failure aborts the upload."""
        part = part_size(size)
        q = shlex.quote(row.src)
        upload_id, held = self._resumable(sink, row.dst, size, sha, part)
        if upload_id is None:
            upload_id = self.signer.start_upload(row.dst, sha, mtime_ns)
            saved = {"id": upload_id, "size": size, "sha256": sha, "part": part}
            sink.set_value(UPLOAD + row.dst, json.dumps(saved))
        md5s: list[str] = []
        kept = 0
        try:
            for number, offset in enumerate(range(0, size, part), 1):
                length = min(part, size - offset)
                piece = f"tail -c +{offset + 1} {q} | head -c {length}"
                rc, out, err = self._run(f"{piece} | {self.tools.md5 or 'md5sum'}", timeout=3600)
                if rc != 0 or not out.split():
                    raise Transient(f"The host could not hash part {number} of {self.host.display(row.src)}: {err}")
                md5s.append(out.split()[0].lower())
                if held.get(number) == (md5s[-1], length):
                    kept += 1  # the store holds this very part already
                    continue
                self._send_part(row, upload_id, number, md5s[-1], piece, length)
            self.signer.complete_upload(row.dst, upload_id, md5s)
        except Transient:
            raise  # the upload and its parts stay (saved with the job): a retry or restart continues it
        except BaseException:
            self._drop_upload(sink, row.dst)
            raise
        sink.set_value(UPLOAD + row.dst, None)
        stored = self.signer.stored_object(row.dst)
        if stored is None or stored.size != size:
            raise ChecksumMismatch(f"the store does not hold {size:,} bytes at {self.store.display(row.dst)}")
        if stored.etag != multipart_etag(md5s):
            raise ChecksumMismatch("the store's multipart ETag differs from the one the host's part MD5s give")
        return Verification(
            Level.CHECKSUM,
            "md5",
            (Evidence.HOST_TOOL, Evidence.S3_MULTIPART_ETAG),
            f"multipart ETag match ({len(md5s)} parts hashed on the host"
            + (f"; {kept} kept from an earlier run, checked with ListParts)" if kept else ")"),
        )

    def _resumable(
        self, sink: DelegationSink, path: str, size: int, sha: str, part: int
    ) -> tuple[str | None, dict[int, tuple[str, int]]]:
        """The upload an earlier run began for ``path`` and the parts the store holds for it, if
        it was for these very bytes in parts of this size; else (None, {}), any such upload aborted."""
        saved = sink.value(UPLOAD + path)
        if not saved:
            return None, {}
        try:
            info = json.loads(saved)
            upload_id, same = str(info["id"]), (info["size"], info["sha256"], info["part"]) == (size, sha, part)
        except (ValueError, KeyError, TypeError):
            sink.set_value(UPLOAD + path, None)
            return None, {}
        if same:
            try:
                return upload_id, self.signer.uploaded_parts(path, upload_id)
            except NotFound:  # aborted, completed, or cleaned up by the store's lifecycle rule
                sink.set_value(UPLOAD + path, None)
                return None, {}
        self._drop_upload(sink, path)  # the file changed, or the part size: its parts are of no use
        return None, {}

    def _drop_upload(self, sink: DelegationSink, path: str) -> None:
        """Abort the multipart upload saved with the job for ``path`` (if any) and forget it."""
        saved = sink.value(UPLOAD + path)
        if not saved:
            return
        try:
            self.signer.abort_upload(path, str(json.loads(saved)["id"]))
        except (FerryError, ValueError, KeyError, TypeError):
            pass  # what cannot be aborted now shows in 'ferry s3 uploads' (unfinished uploads)
        sink.set_value(UPLOAD + path, None)

    def _parts_verification(self, path: str, stored: StoredObject, size_only: Verification) -> Verification:
        """A multipart object with no whole-object checksum: the host hashes what landed part by
        part (the store's layout) and the multipart ETag those MD5s give is compared with the
        store's. ``size_only`` where the host has no md5sum."""
        if not self.tools.md5:
            return size_only
        first = stored.parts[0]
        command = (
            f"f={shlex.quote(path)}; i=0; while [ $i -lt {len(stored.parts)} ]; do "
            f'tail -c +$((i * {first} + 1)) "$f" | head -c {first} | {self.tools.md5} || exit 1; i=$((i + 1)); done'
        )
        rc, out, err = self._run(command, timeout=3600)
        md5s = [line.split()[0].lower() for line in out.splitlines() if line.split()]
        if rc != 0 or len(md5s) != len(stored.parts):
            raise Transient(f"The host could not hash the parts of {self.host.display(path)}: {err or f'exit {rc}'}")
        if multipart_etag(md5s) != stored.etag:
            raise ChecksumMismatch("the store's multipart ETag differs from the one the host's part MD5s give")
        return Verification(
            Level.CHECKSUM,
            "md5",
            (Evidence.HOST_TOOL, Evidence.S3_MULTIPART_ETAG),
            f"multipart ETag match ({len(md5s)} parts hashed on the host)",
        )

    def _send_part(self, row: DelegatedRow, upload_id: str, number: int, md5: str, piece: str, length: int) -> None:
        """One part, read by ``piece`` on the host; tried up to three times, each with a new URL
        (curl cannot retry a body it read from a pipe)."""
        for attempt in range(3):
            req = self.signer.sign_part(row.dst, upload_id, number, url_ttl(), md5=md5)
            try:
                # curl reads the part on its standard input, so its config comes on descriptor 3.
                self._curl(
                    req,
                    f"-o /dev/null -T - -H 'Content-Length: {length}' -H 'Transfer-Encoding:'",  # not chunked
                    f"part {number} of {self.store.display(row.dst)}",
                    prefix=f"{{ {piece} | ",
                    config_fd=True,
                )
                return
            except Transient:
                if attempt == 2:
                    raise

    def store_checks(self, path: str) -> StoreChecks:
        if self._checks is None:
            self._checks = self.signer.store_checks(path)
        return self._checks

    def _existing(
        self, job: DelegatedJob, row: DelegatedRow, stored: StoredObject, size: int, sha: str, md5: str | None
    ) -> _Outcome | None:
        """An object already at the destination: done if it holds the same bytes, else what the
        conflict policy says (None: replace it)."""
        if stored.size == size and sha in (stored.sha256, stored.ferry_sha256):
            evidence = Evidence.S3_CHECKSUM if stored.sha256 == sha else Evidence.FERRY_METADATA
            v = Verification(Level.CHECKSUM, "sha256", (Evidence.HOST_TOOL, evidence), _IN_PLACE, digest=sha)
            return _Outcome(row, TaskState.DONE, v)
        if stored.size == size and md5 and stored.md5 == md5:
            v = Verification(Level.CHECKSUM, "md5", (Evidence.HOST_TOOL, Evidence.S3_ETAG_MD5), _IN_PLACE)
            return _Outcome(row, TaskState.DONE, v)
        return self._policy(job, row)

    def _policy(self, job: DelegatedJob, row: DelegatedRow) -> _Outcome | None:
        policy = job.on_conflict
        if policy == "overwrite" or policy in ("different", "resume"):
            return None
        if policy == "newer":
            dst_mtime = self.dst.stat(row.dst).own_mtime_ns or 0
            if row.mtime_us is not None and row.mtime_us * 1000 > dst_mtime:
                return None
        if policy == "rename":
            raise Unsupported("the direct route cannot keep both copies under a new name (--on-conflict rename)")
        if policy == "ask":
            # The host runs the copy, and Ferry's run has no one to ask on its behalf: as the relay
            # does with no one to ask, the file fails by this kind (counted, said once) and stays.
            raise ConflictUnanswered(
                f"{self.dst.display(row.dst)} exists and differs from the source, and a direct copy cannot stop "
                "to ask (retry with --on-conflict skip|overwrite|newer|different)"
            )
        return _Outcome(row, TaskState.SKIPPED, error=f"kept: {self.dst.display(row.dst)} already exists")

    # ---- download: S3 to host ----
    def _download(self, job: DelegatedJob, writer: Backend, row: DelegatedRow, entry: Entry) -> _Outcome:
        stored = self.signer.stored_object(row.src)
        if stored is None:
            raise NotFound(f"Not found: {self.store.display(row.src)}")
        need_md5 = not (stored.sha256 or stored.ferry_sha256) and bool(stored.md5)
        folder, name = posixpath.split(row.dst)
        try:
            there = writer.stat(row.dst)
        except NotFound:
            there = None
        if there is not None:
            size, sha, md5 = self._hashes(row.dst, md5=need_md5)
            found = download_verification(stored, size, sha, md5)
            if found.level is Level.CHECKSUM:
                v = Verification(Level.CHECKSUM, found.algo, found.evidence, _IN_PLACE, digest=found.digest)
                return _Outcome(row, TaskState.DONE, v)
            kept = self._policy(job, row)
            if kept is not None:
                return kept
        writer.mkdir(folder, parents=True, exist_ok=True)
        partial = posixpath.join(folder, temp_name(name, f"direct{job.id}"))
        q = shlex.quote(partial)
        req = self.signer.sign_get(row.src, url_ttl())
        # A fresh partial file: an old one (or a link of that name) is removed, never followed.
        self._run(f"rm -f {q} && (set -C; : > {q})", timeout=60)
        try:
            self._curl(req, f"-o {q}", self.store.display(row.src))
            size, sha, md5 = self._hashes(partial, md5=need_md5)
            v = download_verification(stored, size, sha, md5)
            if v.level is Level.SIZE and stored.parts:
                v = self._parts_verification(partial, stored, v)
            if v.level is Level.NONE:
                raise ChecksumMismatch(f"{self.host.display(row.dst)}: {v.note}")
            try:
                writer.rename(partial, row.dst, overwrite=there is not None)
            except AlreadyExists:
                return _Outcome(row, TaskState.SKIPPED, error=f"kept: {self.host.display(row.dst)} appeared meanwhile")
        except BaseException:
            self._run(f"rm -f {q}", timeout=60)
            raise
        if job.preserve_mtime and entry.own_mtime is not None:
            try:
                writer.set_mtime(row.dst, entry.own_mtime, entry.own_mtime_ns)
            except FerryError as exc:
                v = v.with_note(f"time not kept: {exc.message}")
        return _Outcome(row, TaskState.DONE, v, moved=size)


def multipart_etag(md5s: list[str]) -> str:
    """The ETag S3 gives a multipart upload of parts with these MD5s (hex)."""
    joined = b"".join(bytes.fromhex(m) for m in md5s)
    return f"{hashlib.md5(joined, usedforsecurity=False).hexdigest()}-{len(md5s)}"


def upload_verification(
    stored: StoredObject, size: int, sha: str, md5: str | None, checks: StoreChecks
) -> Verification:
    """What the store's own record of an uploaded object proves about the host's file.

    Raises :class:`ChecksumMismatch` when the store holds other bytes than the host hashed."""
    if stored.size != size:
        raise ChecksumMismatch(f"the store holds {stored.size:,} bytes, the host's file {size:,}")
    evidence: list[Evidence] = [Evidence.HOST_TOOL]
    algo = None
    if stored.md5 and md5:
        if stored.md5 != md5:
            raise ChecksumMismatch("the store's ETag (MD5 of what it received) differs from the host's md5sum")
        evidence.append(Evidence.S3_ETAG_MD5)
        algo = "md5"
    if checks.checks_sha256 and stored.sha256:
        if stored.sha256 != sha:
            raise ChecksumMismatch("the store's SHA-256 differs from the host's sha256sum")
        evidence.append(Evidence.S3_CHECKSUM)
        algo = "sha256"
    if checks.checks_md5 and md5:
        evidence.append(Evidence.S3_CONTENT_MD5)
        algo = algo or "md5"
    if algo is None:
        return Verification(
            Level.SIZE,
            None,
            (Evidence.HOST_TOOL,),
            "size only: the store keeps no checksum it computed itself (no MD5 ETag, no SHA-256 it checks)",
        )
    return Verification(
        Level.CHECKSUM,
        algo,
        tuple(evidence),
        f"{algo} match: the store's record of what it received",
        digest=sha if algo == "sha256" else "",
    )


def download_verification(stored: StoredObject, size: int, sha: str, md5: str | None) -> Verification:
    """What landed on the host (its size and the host's digests) against what the store keeps.
    Level NONE (with the reason) when they differ."""
    if size != stored.size:
        return Verification(Level.NONE, None, (), f"{size:,} bytes landed, the store has {stored.size:,}")
    for expected, evidence, algo, got in (
        (stored.sha256, Evidence.S3_CHECKSUM, "sha256", sha),
        (stored.ferry_sha256, Evidence.FERRY_METADATA, "sha256", sha),
        (stored.md5, Evidence.S3_ETAG_MD5, "md5", md5),
    ):
        if expected and got:
            if expected != got:
                return Verification(Level.NONE, algo, (), f"the host's {algo} differs from the store's")
            digest = got if algo == "sha256" else ""  # recorded as the file's hash (manifests)
            return Verification(Level.CHECKSUM, algo, (Evidence.HOST_TOOL, evidence), f"{algo} match", digest=digest)
    return Verification(
        Level.SIZE, None, (), "size only: the store keeps no checksum for this object (multipart, none added)"
    )


def _wait_some(running: set[Future[_Outcome]]) -> tuple[set[Future[_Outcome]], set[Future[_Outcome]]]:
    done, rest = wait(running, return_when=FIRST_COMPLETED)
    return set(done), set(rest)


def _entry_of(row: DelegatedRow) -> Entry:
    """A recorded row as the entry the walk once gave (its size and time)."""
    ns = row.mtime_us * 1000 if row.mtime_us is not None else None
    return Entry(
        path=row.src,
        name=posixpath.basename(row.src),
        kind=Kind.FILE,
        size=row.size,
        mtime=ns_datetime(ns) if ns is not None else None,
        mtime_ns=ns,
    )


def _mtime_us(entry: Entry) -> int | None:
    ns = entry.own_mtime_ns
    return ns // 1000 if ns is not None else None
