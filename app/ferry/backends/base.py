"""The Backend interface: a handful of required methods, honest capabilities, typed entries.

Shape borrowed from rclone's ``fs.Fs`` + ``Features``: every backend implements the same small
set of operations and *declares* what else it can do in :class:`Capabilities`. The conformance
suite (``tests/conformance``) checks that the declarations tell the truth.

Paths handed to a backend are its own paths: native absolute paths for ``local``, POSIX paths for
remote backends. Path arithmetic goes through :meth:`Backend.join` / :meth:`Backend.split` so the
engine never assumes a separator.
"""

from __future__ import annotations

import hashlib
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from types import TracebackType
from typing import Any, ClassVar, Protocol, Self, cast

from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import Unsupported
from ferry.core.hashing import Hasher
from ferry.core.outcomes import Evidence, TaskState, Verification
from ferry.core.progress import Accounting


class Kind(StrEnum):
    FILE = "file"
    DIR = "dir"
    LINK = "link"
    SPECIAL = "special"  # fifo, socket, device: listed, never transferred


@dataclass(frozen=True, slots=True)
class Entry:
    """One listed item. ``size`` is None when unknown, never a made-up 0; ``mtime`` is aware UTC."""

    path: str
    name: str
    kind: Kind
    size: int | None = None
    mtime: datetime | None = None
    link_target: str | None = None
    mode: int | None = None
    hashes: Mapping[str, str] = field(default_factory=dict)
    meta: Mapping[str, str] = field(default_factory=dict)
    # The modification time in nanoseconds where the backend knows it more exactly than ``mtime``
    # (a datetime holds microseconds): local disks, S3 objects with Ferry's or rclone's metadata.
    mtime_ns: int | None = None
    # The file's own time where a store keeps it apart from its own (S3: ``mtime`` metadata, to
    # the nanosecond; then ``mtime`` is the store's Last-Modified, as every listing shows it).
    # None elsewhere. A download restores it; conflict policies compare it where known.
    kept_mtime_ns: int | None = None
    # Local files: (device, inode) and the number of names the file has, so one job keeps hard
    # links as links; and whether it has holes (fewer blocks allocated than its size).
    inode: tuple[int, int] | None = None
    nlink: int = 1
    sparse: bool = False

    @property
    def exact_mtime_ns(self) -> int | None:
        """The modification time in nanoseconds: exact where known, else from ``mtime``."""
        if self.mtime_ns is not None:
            return self.mtime_ns
        return datetime_ns(self.mtime) if self.mtime is not None else None

    @property
    def own_mtime_ns(self) -> int | None:
        """The file's own modification time in nanoseconds: the kept one where the store keeps
        one apart from its own (S3 metadata), else :attr:`exact_mtime_ns`."""
        return self.kept_mtime_ns if self.kept_mtime_ns is not None else self.exact_mtime_ns

    @property
    def own_mtime(self) -> datetime | None:
        """:attr:`own_mtime_ns` as a datetime (``mtime`` where no time is kept apart)."""
        return ns_datetime(self.kept_mtime_ns) if self.kept_mtime_ns is not None else self.mtime

    @property
    def is_dir(self) -> bool:
        return self.kind is Kind.DIR

    @property
    def is_file(self) -> bool:
        return self.kind is Kind.FILE


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def datetime_ns(when: datetime) -> int:
    """``when`` in nanoseconds since the epoch, through integer microseconds: float seconds would
    round wrongly for dates far from 1970."""
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def ns_datetime(ns: int) -> datetime:
    """Nanoseconds since the epoch as an aware UTC datetime (microseconds: what a datetime holds)."""
    return _EPOCH + timedelta(microseconds=ns // 1000)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the required operations. Every flag is checked by tests."""

    streaming: bool = True  # open_read/open_write move bytes through this process
    range_read: bool = False  # open_read(offset=..., length=...) without reading the prefix
    resume_write: bool = False  # open_write(resume=True) continues a partial temporary file
    atomic_commit: bool = True  # data appears under the final name only on commit
    multipart_write: bool = False
    server_side_copy: bool = False
    delegated_transfer: bool = False  # the service moves the bytes (Globus)
    presign: bool = False
    acl_share: bool = False
    hashes: tuple[str, ...] = ()  # algorithms hash() supports
    slow_hash: bool = True  # hash() reads the whole object (vs. metadata the server keeps)
    readback: bool = False  # a Writer can hash what actually landed, independently of the source
    symlinks: bool = False
    empty_dirs: bool = True
    set_mtime: bool = False
    mtime_precision: float = 1.0  # seconds
    # Folders keep permission bits (set_mode). Files say so per file (Writer.set_mode: set on
    # the file, or stored with it as S3 metadata); a destination that cannot keep them says so.
    modes: bool = False
    # Folders are only the prefixes of keys (S3): nothing of their own (no permissions, no time,
    # no attributes) to keep, so a copy says nothing about them; files still say what they lost.
    prefix_folders: bool = False
    hard_links: bool = False  # hard_link(): one job's hard links stay links
    sparse: bool = False  # writes runs of zeros of a sparse source as holes
    xattrs: bool = False  # get_xattrs()/set_xattrs() and Writer.set_xattrs (local disks)
    case_insensitive: bool = False
    max_connections: int | None = None  # None: no limit of the backend's own
    # The store keeps evidence about its objects' bytes (S3 ETags and checksums): the backend is a
    # SourceEvidence, and a download is compared with that evidence, not only with its own stream.
    source_evidence: bool = False


@dataclass(frozen=True)
class SourceCheck:
    """The bytes read from a source compared with what the source's server holds about them.

    ``evidence`` is None when the server keeps nothing comparable (``note`` says why); then a
    download can be checked by size only, whatever the destination's check."""

    evidence: Evidence | None
    matched: bool
    note: str = ""


class EvidenceCheck(Protocol):
    """Fed exactly the bytes of one object, in order from its first byte (like a hasher), then
    asked for the result once."""

    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...

    def result(self) -> SourceCheck: ...


class SourceEvidence(Protocol):
    """Declared by backends with ``capabilities.source_evidence``."""

    def evidence_for(self, entry: Entry) -> EvidenceCheck:
        """A check of ``entry``'s bytes against the strongest evidence the store keeps: its own
        additional checksum, a single-part ETag (MD5), the multipart ETag recomputed from the part
        layout, or the SHA-256 Ferry stored with the object. May ask the server (a HEAD)."""
        ...


class Writer(ABC):
    """A file being written under a temporary name, renamed into place by :meth:`commit`.

    ``offset`` is how many bytes the temporary file already holds (non-zero only when resuming).
    A Writer is a context manager: leaving the block with an exception aborts and keeps the
    partial file only if resuming is possible, so no truncated file ever sits under the final name.
    """

    final_path: str
    temp_path: str
    offset: int = 0
    # What the hash returned by finish() (or the check made by commit()) rests on: a read-back
    # here, the host's own hash tool, the store's ETag or checksum. Read after commit(); empty
    # means the destination confirmed nothing, so the file is checked by size only.
    evidence: tuple[Evidence, ...] = (Evidence.READBACK,)
    # For people: what the server confirmed, or why it could not (never read by code).
    verified_note: str = ""
    # Read after commit(): non-empty when the destination refused to set the time and permission
    # bits it was given (the file is in place all the same); for people, why.
    attributes_refused: str = ""

    @abstractmethod
    def write(self, data: bytes | bytearray | memoryview) -> None: ...

    def feed_prefix(self, data: bytes | bytearray | memoryview) -> None:  # noqa: B027 - optional override
        """Resuming: the source's bytes for the ``offset`` already written, re-read by the copy, so a
        writer that verifies what it holds (S3 part MD5s, a read-back hash) can include them."""

    def compare_writes(self, hasher: Hasher) -> bool:
        """Before anything is written: the caller hashes into ``hasher`` exactly the buffers it
        passes to :meth:`write`, before writing each. A writer that reads back may then compare
        each write with what the file holds instead of hashing the file a second time, and
        :meth:`finish` returns ``hasher``'s digest only if every byte matched and the file holds
        nothing more. False where not taken: :meth:`finish` reads back and hashes as usual."""
        return False

    def finish(self) -> str | None:
        """All data written: flush it, and return the read-back hash if one was asked for."""
        return None

    def share_stream_hasher(self, hasher: Any) -> None:  # noqa: B027 - optional override
        """Before anything is written: the copy's own hash of the stream, for a writer whose
        destination check is its own (S3: Content-MD5 and ETags), so the bytes are hashed once."""

    def set_mtime(self, mtime: datetime | None, mtime_ns: int | None = None) -> None:  # noqa: B027
        """Before anything is written: the time to store with the data (``mtime_ns`` when known
        to the nanosecond), for a writer whose metadata goes with its first request (an S3
        multipart upload) or that sets it more exactly than ``commit``'s datetime (local disks)."""

    def set_mode(self, mode: int, *, umask: bool = False) -> bool:
        """Before anything is written: the permission bits (``stat.S_IMODE``) the file gets under
        its final name, set at commit or stored as metadata; with ``umask`` as a new file made
        there with those bits gets them (less the destination's umask, no setuid, setgid or
        sticky bit). False where this destination cannot keep them (the copy says so)."""
        return False

    def set_sparse(self) -> bool:
        """Before anything is written: the source has holes; runs of zero blocks are written as
        holes. False where this destination cannot (the copy says so)."""
        return False

    def set_xattrs(self, attrs: Mapping[str, bytes]) -> list[str]:
        """Before commit: extended attributes (POSIX ACLs among them) to set on the file. Returns
        the names that could not be kept (every one where the destination has none)."""
        return sorted(attrs)

    @abstractmethod
    def commit(self, *, overwrite: bool, mtime: datetime | None = None) -> None:
        """Rename into place; raise AlreadyExists if ``overwrite`` is False and the name is taken."""

    @abstractmethod
    def abort(self, *, keep_partial: bool = False) -> None: ...

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if et is not None:
            self.abort(keep_partial=True)


def temp_name(name: str, token: str) -> str:
    """The partial-file name for ``name``: hidden, tagged, deterministic so a restart finds it,
    and short enough for 255-byte name limits."""
    base = f".{name}.{token}.ferry-part"
    if len(base.encode("utf-8", "surrogateescape")) <= 240:
        return base
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f".{name[:80]}~{digest}.{token}.ferry-part"


PARTIAL_SUFFIX = ".ferry-part"


class BatchData(Protocol):
    """A small file's bytes in a batch upload (``write_batch``), read only when the batch sends
    that file, so a batch of many megabytes is never held in memory at once."""

    def __len__(self) -> int: ...

    def read(self) -> bytes:
        """Exactly ``len(self)`` bytes."""
        ...


class ResumeSlot(Protocol):
    """Where a writer keeps protocol state (an S3 UploadId and finished parts) in the queue, so an
    interrupted upload continues after a crash. Handed to ``open_write(resume_slot=...)`` by the
    copy only for backends whose ``keeps_resume_state`` is True."""

    def load(self) -> dict[str, object] | None: ...

    def save(self, data: dict[str, object] | None) -> None: ...


# ---- optional capabilities: declared here, resolved once per backend (rclone's Features.Fill) ----


class Reader(Protocol):
    """What ``open_read`` returns: a binary stream the copy reads with ``readinto``, used as a
    context manager."""

    def readinto(self, buffer: bytearray | memoryview, /) -> int | None: ...

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> Any: ...


class HashFeedingReader(Protocol):
    """A reader that hashes what it returns, in order, on threads of its own (S3's parallel
    ranges): handed the copy's hasher, hashing overlaps the copy's writes."""

    def feed_hasher(self, hasher: Hasher) -> bool:
        """Take ``hasher`` for every byte this reader returns; False if it cannot."""
        ...


class LendingReader(Protocol):
    """A reader that lends its own buffers, each valid until the next call; empty at the end."""

    def next_view(self) -> memoryview: ...


class QuickStat(Protocol):
    """``stat`` that answers None for a missing path instead of raising (cheap on local disks)."""

    def stat_or_none(self, path: str) -> Entry | None: ...


class ServerCopier(Protocol):
    """Copies within one endpoint without the bytes passing through Ferry (copy_file_range, S3
    CopyObject); used only when no checksum is asked, since nothing is hashed on the way."""

    def server_copy(
        self, src_path: str, writer: Writer, on_bytes: Callable[[int], None], cancel: CancelToken
    ) -> None: ...


class Batches(Protocol):
    """Many small files in one stream (SFTP tar batches), driven by ``ferry.transfers.batch``."""

    def batch_usable(self, direction: str, algo: str | None) -> bool: ...

    def write_batch(
        self, items: Sequence[tuple[str, bytes | BatchData, str, datetime | None]], algo: str | None
    ) -> Sequence[str | BaseException]: ...

    def commit_batch(self, items: Sequence[tuple[str, str, bool, int]]) -> Sequence[BaseException | None]: ...

    def read_batch(self, paths: Sequence[str]) -> Sequence[tuple[Entry, bytes | bytearray] | BaseException]: ...


class Delegator(Protocol):
    """A backend whose service can move a whole job's bytes itself (Globus). Asking costs no
    service call (a Globus backend's capabilities may need one)."""

    def delegation(self, src: Backend, dst: Backend) -> JobDelegate | None:
        """A delegate for this pair, None when the pair is not one this backend moves directly,
        or :class:`NoDirectRoute` when it is but cannot be now (the reason goes to the user)."""
        ...


class NoDirectRoute(Exception):
    """The pair could go direct (site to site) but this one cannot, for ``reason``: one sentence
    for people ("the host has no curl", "the host cannot reach the endpoint"). The route choice
    reads the type; nothing reads the sentence but people."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SignedRequest:
    """One pre-signed HTTP request for another site's host to send (site to site): the URL and
    the headers signed into it. The URL is a bearer secret: never log it, store it or put it on
    a command line; ``repr`` leaves it out."""

    method: str
    url: str = field(repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def endpoint(self) -> str:
        """``scheme://host:port`` of the URL: what a sentence may name."""
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class StoredObject:
    """What a store keeps about one object's bytes, read back after another host sent them (or
    before a host fetches them). Digests are lowercase hex; empty where the store keeps none."""

    size: int
    sha256: str = ""  # the store's own SHA-256 checksum of the whole object
    md5: str = ""  # a single-part ETag that is the object's MD5 (not SSE-KMS, not multipart)
    ferry_sha256: str = ""  # the SHA-256 Ferry stored with the object when it uploaded it
    etag: str = ""  # the ETag as the store gives it, without quotes ("hex-N" for a multipart upload)
    # A multipart object's part sizes, in order, where the store tells them (the first part's size,
    # the rest alike but the last): its ETag is then the MD5 of the parts' MD5s, "-N".
    parts: tuple[int, ...] = ()


@dataclass(frozen=True)
class StoreChecks:
    """Which checks a store makes on a body it receives (probed, see ``backends/s3/checksums``)."""

    send_sha256: bool  # the store takes x-amz-checksum-sha256 on a PUT
    checks_sha256: bool  # ... and refuses a body that does not match it
    checks_md5: bool  # it refuses a body that does not match Content-MD5


class UrlSigner(Protocol):
    """Declared by stores that sign short-lived URLs for one object (S3), so another site's host
    can move the bytes itself: ``ferry.backends.sftp.direct`` (SSH host <-> S3). Signing happens
    here, on this computer: no store credential reaches the host."""

    def sign_put(
        self,
        path: str,
        seconds: int,
        *,
        sha256: str | None,
        md5: str | None,
        mtime_ns: int | None = None,
        send_checksum: bool = True,
    ) -> SignedRequest:
        """A PUT of one whole object at ``path``, with the SHA-256 and MD5 (hex) of the body signed
        into it as ``x-amz-checksum-sha256`` (unless ``send_checksum`` is False: a store that
        refuses the header) and ``Content-MD5`` where given; the SHA-256 and the file's time
        (``mtime_ns``) are stored with the object as metadata (signed headers too)."""
        ...

    def sign_get(self, path: str, seconds: int) -> SignedRequest:
        """A GET of the object at ``path``."""
        ...

    def sign_probe(self, seconds: int) -> SignedRequest:
        """A HEAD on the bucket: can a host reach the store, and does the store take our signature."""
        ...

    def sign_list(self, path: str, seconds: int) -> SignedRequest:
        """A listing of at most one key under ``path`` (ListObjectsV2 with that prefix): what
        credentials limited to a prefix may do where a HEAD on the bucket is refused."""
        ...

    def stored_object(self, path: str) -> StoredObject | None:
        """What the store keeps about the object at ``path`` (a HEAD), None when there is none."""
        ...

    def store_checks(self, path: str) -> StoreChecks:
        """Which body checks the store makes on a PUT near ``path`` (probed once)."""
        ...

    def start_upload(self, path: str, sha256: str | None, mtime_ns: int | None = None) -> str:
        """A multipart upload of ``path`` begun (with ``sha256``, hex, kept as Ferry's SHA-256 of
        the object, and the file's time); returns its upload id."""
        ...

    def sign_part(self, path: str, upload_id: str, number: int, seconds: int, *, md5: str) -> SignedRequest:
        """A PUT of part ``number`` (from 1) of that upload, its MD5 (hex) signed in as ``Content-MD5``."""
        ...

    def uploaded_parts(self, path: str, upload_id: str) -> dict[int, tuple[str, int]]:
        """The parts the store holds for that upload (ListParts): number -> (ETag, lower-case hex
        without quotes, size). :class:`~ferry.core.errors.NotFound` when the upload is gone."""
        ...

    def complete_upload(self, path: str, upload_id: str, md5s: Sequence[str]) -> None:
        """End the upload: the parts in order, each named by its MD5 (hex: a part's ETag)."""
        ...

    def abort_upload(self, path: str, upload_id: str) -> None:
        """Abandon the upload and the parts the store holds for it."""
        ...


@dataclass(frozen=True)
class Features:
    """A backend's optional capabilities as typed handles (None where it has none)."""

    delegator: Delegator | None = None
    quick_stat: QuickStat | None = None
    server_copier: ServerCopier | None = None
    batches: Batches | None = None
    source_evidence: SourceEvidence | None = None
    url_signer: UrlSigner | None = None


@dataclass(frozen=True)
class ReaderFeatures:
    feeds_hasher: bool = False
    lends_buffers: bool = False


_READER_FEATURES: dict[type, ReaderFeatures] = {}

# The methods each optional protocol declares. Checked on the object's class by name rather than
# with isinstance(): a runtime-checkable Protocol remembers a class it once matched (ABC caching)
# even after the class changed, and these lists say exactly what an implementation must have.
_MEMBERS: dict[type, tuple[str, ...]] = {
    HashFeedingReader: ("feed_hasher",),
    LendingReader: ("next_view",),
    QuickStat: ("stat_or_none",),
    ServerCopier: ("server_copy",),
    Batches: ("batch_usable", "write_batch", "commit_batch", "read_batch"),
    SourceEvidence: ("evidence_for",),
    Delegator: ("delegation",),
    UrlSigner: (
        "sign_put",
        "sign_get",
        "sign_probe",
        "sign_list",
        "stored_object",
        "store_checks",
        "start_upload",
        "sign_part",
        "uploaded_parts",
        "complete_upload",
        "abort_upload",
    ),
}


def implements(obj: object, protocol: type) -> bool:
    """Whether ``obj``'s class has every method ``protocol`` declares."""
    members = _MEMBERS.get(protocol, ())
    cls = type(obj)
    return bool(members) and all(callable(getattr(cls, name, None)) for name in members)


def reader_features(reader: object) -> ReaderFeatures:
    """What a reader's class declares, resolved once per class (a copy opens one reader a file)."""
    cls = type(reader)
    found = _READER_FEATURES.get(cls)
    if found is None:
        found = ReaderFeatures(implements(reader, HashFeedingReader), implements(reader, LendingReader))
        _READER_FEATURES[cls] = found
    return found


class Backend(ABC):
    """Required operations. Errors are raised as :mod:`ferry.core.errors` types, mapped in one
    ``_map_error`` function per backend."""

    scheme: ClassVar[str]
    capabilities: Capabilities = Capabilities()
    keeps_resume_state: ClassVar[bool] = False  # open_write takes resume_slot= (see ResumeSlot)

    def __init__(self, address: Address) -> None:
        self.address = address

    @property
    def endpoint(self) -> str:
        return self.address.endpoint

    # -- path arithmetic (POSIX by default; local overrides) --
    def join(self, base: str, *names: str) -> str:
        return posixpath.join(base, *names)

    def split(self, path: str) -> tuple[str, str]:
        return posixpath.split(path.rstrip("/") or "/")

    def display(self, path: str) -> str:
        from dataclasses import replace

        return str(replace(self.address, path=path, site=None))

    # -- required --
    @abstractmethod
    def list(self, path: str, cancel: CancelToken | None = None) -> Iterator[Entry]:
        """Entries of a folder, lazily (pages for remote backends), without '.' and '..'."""

    @abstractmethod
    def stat(self, path: str) -> Entry:
        """The entry itself, not following a final symlink."""

    @abstractmethod
    def open_read(self, path: str, offset: int = 0, length: int | None = None) -> Reader: ...

    @abstractmethod
    def open_write(
        self, path: str, *, size: int | None, token: str, resume: bool = False, readback: str | None = None
    ) -> Writer:
        """Start writing ``path`` under a temporary name tagged ``token``.

        With ``resume`` an existing partial file for the same token is continued (Writer.offset).
        With ``readback=algo`` the writer hashes what lands on the destination, independently of
        the bytes it was handed, and returns it from :meth:`Writer.finish`.
        """

    @abstractmethod
    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None: ...

    @abstractmethod
    def remove(self, path: str, *, recursive: bool = False) -> None: ...

    @abstractmethod
    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None: ...

    def hash(self, path: str, algo: str, cancel: CancelToken | None = None) -> str:
        """Checksum of a stored file (reads it unless the server keeps the hash)."""
        from ferry.core.hashing import hash_stream

        if algo not in self.capabilities.hashes:
            raise Unsupported(f"{self.scheme} cannot compute {algo} checksums")
        with self.open_read(path) as f:
            return hash_stream(f, algo, cancel)[0]

    def close(self) -> None:  # noqa: B027 - optional override
        """Release connections."""

    @property
    def features(self) -> Features:
        """The optional protocols this backend implements, resolved once."""
        found: Features | None = self.__dict__.get("_features")
        if found is None:
            caps = self.capabilities
            found = Features(
                delegator=cast(Delegator, self) if implements(self, Delegator) else None,
                quick_stat=cast(QuickStat, self) if implements(self, QuickStat) else None,
                server_copier=(
                    cast(ServerCopier, self) if caps.server_side_copy and implements(self, ServerCopier) else None
                ),
                batches=cast(Batches, self) if implements(self, Batches) else None,
                source_evidence=(
                    cast(SourceEvidence, self) if caps.source_evidence and implements(self, SourceEvidence) else None
                ),
                url_signer=cast(UrlSigner, self) if caps.presign and implements(self, UrlSigner) else None,
            )
            self.__dict__["_features"] = found
        return found

    # -- optional, guarded by capabilities --
    def symlink(self, target: str, path: str) -> None:
        raise Unsupported(f"{self.scheme} cannot create symbolic links")

    def set_mtime(self, path: str, mtime: datetime, mtime_ns: int | None = None) -> None:
        """Set the modification time (``mtime_ns`` where it is known to the nanosecond and the
        backend keeps that much: ``mtime_precision`` below a microsecond)."""
        raise Unsupported(f"{self.scheme} cannot set modification times")

    def set_mode(self, path: str, mode: int) -> None:
        """Permission bits of a folder (``capabilities.modes``); never through a link."""
        raise Unsupported(f"{self.scheme} cannot set permissions")

    def hard_link(self, existing: str, path: str, *, overwrite: bool = False) -> None:
        """``path`` as another name of the file at ``existing`` (``capabilities.hard_links``)."""
        raise Unsupported(f"{self.scheme} cannot make hard links")

    def get_xattrs(self, path: str) -> dict[str, bytes]:
        """Extended attributes of ``path``, not following a link (``capabilities.xattrs``)."""
        raise Unsupported(f"{self.scheme} has no extended attributes")

    def set_xattrs(self, path: str, attrs: Mapping[str, bytes]) -> Sequence[str]:
        """Set extended attributes on a folder; returns the names not kept."""
        raise Unsupported(f"{self.scheme} has no extended attributes")

    def stream_plan(self) -> str | None:
        """How the last big file to or from this backend was moved, for people (``queue show``,
        the window): e.g. ``4 TCP connections x 2 streams (RTT 153 ms, 6 MiB window: …)``. None
        where there is nothing to say (one stream, decided by nothing measured)."""
        return None

    def partial_kept(self, path: str, file_size: int | None) -> int | None:
        """How many bytes of the partial file at ``path`` (for a file of ``file_size``) a resume
        keeps, or None when there is none: all of it here; less where the writer resumes below
        the partial's end (SFTP after parallel streams, which may leave holes near it)."""
        from ferry.core.errors import NotFound

        try:
            return self.stat(path).size
        except NotFound:
            return None

    def confined(self, roots: Sequence[str]) -> Backend:
        """This backend as one job writes through it, ``roots`` being the job's destination
        folders. Where a path can lead through links (local disks, SFTP hosts), a view that never
        writes, creates, renames or deletes through a link below a root; elsewhere (S3, Globus,
        memory) the backend itself."""
        return self

    def exists(self, path: str) -> bool:
        from ferry.core.errors import NotFound

        try:
            self.stat(path)
        except NotFound:
            return False
        return True

    def walk(self, path: str, cancel: CancelToken | None = None) -> Iterator[tuple[str, Entry]]:
        """Depth-first (relative path, entry) pairs under ``path``; never follows links."""
        stack = [("", path)]
        while stack:
            rel, folder = stack.pop()
            subdirs = []
            for e in self.list(folder, cancel):
                r = f"{rel}/{e.name}" if rel else e.name
                yield r, e
                if e.kind is Kind.DIR:
                    subdirs.append((r, e.path))
            stack.extend(reversed(subdirs))


Prompter = Callable[[str, bool], str]
"""Asks the person a question (prompt text, echo) and returns the answer; used for passwords,
one-time codes and host-key decisions by the remote backends."""


# ---- delegation: a service moves a whole job's bytes (Globus); the engine implements the sink ----


@dataclass(frozen=True)
class DelegatedJob:
    """A Ferry job as a delegation sees it: what to copy and the choices the service must honour."""

    id: int
    roots: tuple[tuple[str, str, str], ...]  # (source path, destination path, path within the job)
    checksums: bool  # verification was asked for: the service compares checksums
    on_conflict: str  # ask, skip, overwrite, newer, different, resume or rename
    preserve_mtime: bool
    label: str | None


@dataclass(frozen=True)
class DelegatedRow:
    """One file or folder of a delegated job, as the job's list records it."""

    kind: str  # file, dir
    src: str
    dst: str
    rel: str
    size: int | None = None
    mtime_us: int | None = None


class DelegationSink(Protocol):
    """Where a delegation reports one job. The engine implements it over the queue
    (``ferry.transfers.delegated``): a backend never sees the queue itself."""

    @property
    def accounting(self) -> Accounting:
        """Files and bytes as the service reports them."""
        ...

    @property
    def cancel(self) -> CancelToken:
        """Fires on cancel (then cancel the service's task), pause or shutdown (detach: it goes on)."""
        ...

    def value(self, key: str) -> str | None:
        """A value saved with the job (a submission or task id); it survives a crash."""
        ...

    def set_value(self, key: str, value: str | None) -> None: ...

    def open_rows(self) -> Iterator[DelegatedRow]:
        """The job's rows that have not ended (queued, or put back by a retry)."""
        ...

    def finish_rows(
        self,
        rows: list[DelegatedRow],
        state: TaskState,
        *,
        verification: Verification | None = None,
        error: str | None = None,
        error_kind: str | None = None,
    ) -> None:
        """Record ``rows`` (added where missing) and end the open ones among them: done as
        ``verification`` says, or failed or cancelled with ``error`` (the service's words) and
        ``error_kind`` (a :class:`~ferry.core.errors.FerryError` ``kind``; else "error")."""
        ...

    def job_changed(self, message: str) -> None:
        """A sentence for people about the running job (a warning line, the window's status)."""
        ...


class JobDelegate(Protocol):
    """What ``delegation(src, dst)`` on a backend offers: a service that moves a whole job."""

    def run_job(self, job: DelegatedJob, sink: DelegationSink) -> None:
        """Submit (or reattach to) the service's task for ``job``, follow it until it ends or
        ``sink.cancel`` fires, and record its rows through ``sink``."""
        ...
