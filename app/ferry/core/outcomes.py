"""Outcomes as values: what happened to a file, how far it was checked, and on what evidence.

Every decision in Ferry (the exit code, Move, delete-after-verify, the window's columns, the
manifest, ``queue list``) reads these values. The English ``note`` beside them is for people and
is never parsed. The string values are what the queue database stores, so they never change
meaning; new members may be added.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum


class TaskState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"  # copied (with its Verification)
    SKIPPED = "skipped"  # with a SkipReason
    FAILED = "failed"  # with an error kind
    CANCELLED = "cancelled"


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Level(StrEnum):
    """How far a copied file was checked, strongest first.

    ``checksum``: independent evidence that what landed equals what was read, and that what was
    read is what the source holds (a read-back, the destination host's hash tool, the store's own
    checksum or ETag). ``service``: a service that checks itself moved the bytes (Globus).
    ``size``: only the size could be compared. ``none``: nothing was compared.
    """

    CHECKSUM = "checksum"
    SERVICE = "service"
    SIZE = "size"
    NONE = "none"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def at_least(self, other: Level) -> bool:
        return self.rank >= other.rank


_RANK = {Level.NONE: 0, Level.SIZE: 1, Level.SERVICE: 2, Level.CHECKSUM: 3}


class Evidence(StrEnum):
    """What a verification rests on (a file may rest on several, e.g. the store's ETag for the
    bytes read and a read-back for the bytes that landed)."""

    READBACK = "read-back"  # what landed was read again (or compared write by write) and hashed here
    HOST_TOOL = "host-tool"  # the SSH host's own sha256sum/b3sum over the file it holds
    S3_ETAG_MD5 = "s3-etag-md5"  # a single-part ETag, which is the object's MD5
    S3_MULTIPART_ETAG = "s3-multipart-etag"  # the multipart ETag, recomputed from the part layout
    S3_CHECKSUM = "s3-checksum"  # an S3 additional checksum (CRC64NVME, CRC32C, CRC32, SHA-1, SHA-256)
    S3_CONTENT_MD5 = "s3-content-md5"  # the store refused anything but the body whose MD5 was sent
    FERRY_METADATA = "ferry-metadata"  # the SHA-256 Ferry stored with the object when it uploaded it
    SOURCE_RECORD = "source-record"  # the source's own recorded hash matched the bytes read
    GLOBUS = "globus"  # Globus compared checksums of both ends itself
    AFTER_RESTART = "after-restart"  # found already in place after a crash; both ends hashed again


class SkipReason(StrEnum):
    IDENTICAL = "identical"  # the destination already holds the same file
    POLICY = "policy"  # the conflict policy (or the person's answer) kept the existing file
    UNSAFE_NAME = "unsafe-name"  # the name would escape the destination
    UNREPRESENTABLE = "unrepresentable"  # the name cannot exist at the destination (key also a prefix, ...)
    UNSUPPORTED_TYPE = "unsupported-type"  # fifo, socket, device


@dataclass(frozen=True, slots=True)
class Verification:
    """How one copied file was checked. ``note`` is for people only."""

    level: Level
    algo: str | None = None
    evidence: tuple[Evidence, ...] = ()
    note: str = ""
    # The checksum itself (hex, of ``algo``) where the check learnt it without Ferry hashing the
    # bytes (a store's SHA-256 of a server-side copy): recorded with the file, for manifests.
    digest: str = ""

    @property
    def checksum(self) -> bool:
        return self.level is Level.CHECKSUM

    def evidence_text(self) -> str:
        return encode_evidence(self.evidence)

    def with_evidence(self, *more: Evidence) -> Verification:
        merged = self.evidence + tuple(e for e in more if e not in self.evidence)
        return Verification(self.level, self.algo, merged, self.note)

    def with_note(self, note: str) -> Verification:
        if not note:
            return self
        return Verification(self.level, self.algo, self.evidence, f"{self.note}; {note}" if self.note else note)

    def capped(self, level: Level, why: str) -> Verification:
        """At most ``level`` (a part of the check could not be done), saying why."""
        if self.level.rank <= level.rank:
            return self.with_note(why)
        return Verification(level, self.algo, self.evidence, f"{self.note}; {why}" if self.note else why)


NOT_VERIFIED = Verification(Level.NONE, note="not verified")
SIZE_ONLY = Verification(Level.SIZE, note="size only")
FOLDER = Verification(Level.NONE, note="folder")


def encode_evidence(evidence: Iterable[Evidence]) -> str:
    return ",".join(e.value for e in evidence)


def decode_evidence(text: str | None) -> tuple[Evidence, ...]:
    if not text:
        return ()
    out = []
    for part in text.split(","):
        try:
            out.append(Evidence(part))
        except ValueError:
            continue  # written by a newer Ferry: ignore what this one does not know
    return tuple(out)


def level_of(value: str | None) -> Level | None:
    if value is None:
        return None
    try:
        return Level(value)
    except ValueError:
        return None


@dataclass
class OutcomeCounts:
    """Planned files by how they ended: the summary, ``--json``, the exit code and the window's
    job row are all made from this."""

    copied: dict[Level, int] = field(default_factory=dict)
    skipped: dict[SkipReason, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)  # by error kind
    open: int = 0  # queued or running
    cancelled: int = 0

    @property
    def copied_total(self) -> int:
        return sum(self.copied.values())

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    @property
    def failed_total(self) -> int:
        return sum(self.failed.values())

    @property
    def total(self) -> int:
        return self.copied_total + self.skipped_total + self.failed_total + self.open + self.cancelled

    def add(self, other: OutcomeCounts) -> None:
        for lv, n in other.copied.items():
            self.copied[lv] = self.copied.get(lv, 0) + n
        for r, n in other.skipped.items():
            self.skipped[r] = self.skipped.get(r, 0) + n
        for k, n in other.failed.items():
            self.failed[k] = self.failed.get(k, 0) + n
        self.open += other.open
        self.cancelled += other.cancelled

    def below(self, level: Level) -> int:
        """Copied files checked less than ``level``."""
        return sum(n for lv, n in self.copied.items() if lv.rank < level.rank)

    def to_json(self) -> dict[str, object]:
        return {
            "copied": self.copied_total,
            "copied_by_level": {lv.value: n for lv, n in sorted(self.copied.items(), key=lambda x: -x[0].rank)},
            "skipped": self.skipped_total,
            "skipped_by_reason": {r.value: n for r, n in sorted(self.skipped.items())},
            "failed": self.failed_total,
            "failed_by_kind": dict(sorted(self.failed.items())),
            "cancelled": self.cancelled,
            "open": self.open,
        }


_SKIP_WORDS = {
    SkipReason.IDENTICAL: "identical",
    SkipReason.POLICY: "kept by the conflict policy",
    SkipReason.UNSAFE_NAME: "unsafe name",
    SkipReason.UNREPRESENTABLE: "name not possible at the destination",
    SkipReason.UNSUPPORTED_TYPE: "not a regular file",
}

_LEVEL_WORDS = {
    Level.CHECKSUM: "checksum-checked",
    Level.SERVICE: "checked by the transfer service",
    Level.SIZE: "size only",
    Level.NONE: "not checked",
}


def describe_counts(c: OutcomeCounts, algo: str | None = None) -> str:
    """One line for people, e.g. ``1,998 copied: 1,990 sha256-checked, 8 size only; 2 skipped
    (identical)``. Nothing below checksum level is ever called checked."""
    parts: list[str] = []
    if c.copied_total or not (c.skipped_total or c.failed_total):
        levels = [lv for lv in (Level.CHECKSUM, Level.SERVICE, Level.SIZE, Level.NONE) if c.copied.get(lv)]
        words = []
        for lv in levels:
            w = f"{algo}-checked" if lv is Level.CHECKSUM and algo else _LEVEL_WORDS[lv]
            words.append(f"{c.copied[lv]:,} {w}")
        head = f"{c.copied_total:,} copied"
        parts.append(f"{head}: {', '.join(words)}" if words else head)
    if c.skipped_total:
        why = ", ".join(f"{n:,} {_SKIP_WORDS[r]}" for r, n in sorted(c.skipped.items()) if n)
        parts.append(f"{c.skipped_total:,} skipped ({why})")
    if c.failed_total:
        parts.append(f"{c.failed_total:,} failed")
    if c.cancelled:
        parts.append(f"{c.cancelled:,} cancelled")
    if c.open:
        parts.append(f"{c.open:,} not finished")
    return "; ".join(parts)
