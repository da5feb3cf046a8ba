"""A download checked against what the S3 store itself keeps about the object's bytes.

The stream hash of a download only proves that what landed is what was *received*. Whether what
was received is what the store holds needs evidence the store keeps, compared with the bytes
as they were read (:meth:`StoreEvidence.check` builds the check for ``S3Backend.evidence_for``,
the copy feeds it every byte from the first). What an S3 store may keep, and what it costs here:

* an **additional checksum** (``x-amz-checksum-*``, asked for with ``ChecksumMode=ENABLED``):
  CRC64NVME and CRC32C need ``awscrt`` (used when installed; ~9 and ~5.5 GB/s here), CRC32 comes
  from zlib (~2 GB/s), SHA-1 and SHA-256 from hashlib (~1.3 GB/s with SHA-NI). Either over the
  whole object (``FULL_OBJECT``) or, for a multipart upload, over the parts' checksums
  (``COMPOSITE``: the checksum of the parts' binary checksums, ``-N``);
* the **SHA-256 Ferry stored** as ``x-amz-meta-ferry-sha256`` when it uploaded the object in one
  PUT (the server had checked that body then);
* the **ETag**: the MD5 of the bytes for an object written in one PUT (not under SSE-KMS or
  SSE-C, whose ETags are no MD5s); for a multipart upload the MD5 of the parts' binary MD5s,
  ``-N``, which needs the part layout (HeadObject ``PartNumber``). MD5 is the slowest (~0.6 GB/s).

The cheapest of those the store holds is used (all of them equally detect a corrupted transfer).
Where none can be checked the result says so, with the reason, and the copy records the file as
checked by size only.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ferry.backends.base import Entry, EvidenceCheck, SourceCheck
from ferry.backends.s3.connection import S3Connection, key_of
from ferry.core.errors import NotFound, Transient
from ferry.core.outcomes import Evidence

_KMS = ("aws:kms", "aws:kms:dsse")
_MD5_HEX = re.compile(r"[0-9a-fA-F]{32}")
_MULTIPART = re.compile(r"([0-9a-fA-F]{32})-(\d+)")


class _Running(Protocol):
    def update(self, data: Any, /) -> object: ...

    def digest(self) -> bytes: ...


class _Crc:
    """A CRC with hashlib's shape: ``update`` then ``digest`` (big-endian, as S3 encodes it)."""

    __slots__ = ("_fn", "_value", "_width")

    def __init__(self, fn: Callable[[Any, int], int], width: int) -> None:
        self._fn, self._value, self._width = fn, 0, width

    def update(self, data: Any) -> None:
        self._value = self._fn(data, self._value)

    def digest(self) -> bytes:
        return self._value.to_bytes(self._width, "big")


_crt_module: Any = None
_crt_tried = False


def _crt() -> Any:
    """awscrt's checksums (CRC32C, CRC64NVME in C with CPU instructions), where installed. Looked
    for only when an object has such a checksum: its import costs start-up time."""
    global _crt_module, _crt_tried
    if not _crt_tried:
        import importlib

        try:
            _crt_module = importlib.import_module("awscrt.checksums")
        except ImportError:
            _crt_module = None
        _crt_tried = True
    return _crt_module


@dataclass(frozen=True)
class Algorithm:
    """An S3 checksum algorithm as this process can compute it."""

    name: str  # as S3 spells it in ChecksumAlgorithm: CRC64NVME, CRC32C, CRC32, SHA1, SHA256
    cost: float  # seconds per GB here (measured): the cheapest available is used
    make: Callable[[], Callable[[], _Running] | None]  # the constructor, or None where not computable
    needs: str = ""  # what would make it computable

    @property
    def field(self) -> str:
        return f"Checksum{self.name}"

    @property
    def new(self) -> Callable[[], _Running] | None:
        return self.make()


def _crt_crc(name: str, width: int) -> Callable[[], Callable[[], _Running] | None]:
    def make() -> Callable[[], _Running] | None:
        crt = _crt()
        if crt is None:
            return None
        fn = getattr(crt, name)
        return lambda: _Crc(fn, width)

    return make


ALGORITHMS = {
    a.name: a
    for a in (
        Algorithm("CRC64NVME", 0.11, _crt_crc("crc64nvme", 8), "the awscrt package"),
        Algorithm("CRC32C", 0.18, _crt_crc("crc32c", 4), "the awscrt package"),
        Algorithm("CRC32", 0.45, lambda: lambda: _Crc(zlib.crc32, 4)),
        Algorithm("SHA1", 0.7, lambda: lambda: hashlib.sha1(usedforsecurity=False)),
        Algorithm("SHA256", 0.8, lambda: hashlib.sha256),
    )
}
MD5_COST = 1.6  # seconds per GB here
CHECKSUM_FIELDS = tuple(a.field for a in ALGORITHMS.values())


def _md5() -> _Running:
    return hashlib.md5(usedforsecurity=False)


# -- what the store says about an object --
@dataclass(frozen=True)
class Facts:
    """What a HEAD (or stat's GET) answered about one object, as far as evidence goes."""

    size: int
    etag: str = ""
    sse: str = ""  # x-amz-server-side-encryption
    sse_c: bool = False  # encrypted with a customer key: its ETag is no MD5
    checksums: Mapping[str, str] = field(default_factory=dict)  # algorithm name -> value as sent
    checksum_type: str = ""  # FULL_OBJECT | COMPOSITE | "" (not said: moto, older stores)
    ferry_sha256: str = ""  # hex, from Ferry's metadata

    @classmethod
    def from_head(cls, head: Mapping[str, Any], size: int) -> Facts:
        meta = {str(k).lower(): str(v) for k, v in (head.get("Metadata") or {}).items()}
        return cls(
            size=size,
            etag=str(head.get("ETag") or "").strip('"'),
            sse=str(head.get("ServerSideEncryption") or ""),
            sse_c=bool(head.get("SSECustomerAlgorithm")),
            checksums={a.name: str(head[a.field]) for a in ALGORITHMS.values() if head.get(a.field)},
            checksum_type=str(head.get("ChecksumType") or "").upper(),
            ferry_sha256=meta.get("ferry-sha256", ""),
        )

    @classmethod
    def from_entry(cls, meta: Mapping[str, str], hashes: Mapping[str, str], size: int) -> Facts:
        return cls(
            size=size,
            etag=meta.get("etag", ""),
            sse=meta.get("sse", ""),
            sse_c=bool(meta.get("sse_c")),
            checksums={
                a.name: meta[f"checksum_{a.name.lower()}"]
                for a in ALGORITHMS.values()
                if meta.get(f"checksum_{a.name.lower()}")
            },
            checksum_type=meta.get("checksum_type", "").upper(),
            ferry_sha256=hashes.get("sha256", ""),
        )

    @property
    def etag_is_md5(self) -> bool:
        return not self.sse_c and self.sse not in _KMS

    @property
    def parts(self) -> int:
        """The part count a multipart ETag names (0: not a multipart ETag)."""
        m = _MULTIPART.fullmatch(self.etag)
        return int(m.group(2)) if m else 0


# -- the checks --
class _Result:
    """Shared by the checks: count the bytes fed, compare the count at the end."""

    size: int
    fed: int

    def _short(self) -> SourceCheck | None:
        if self.fed != self.size:
            return SourceCheck(
                self.evidence(), False, f"read {self.fed:,} bytes of an object the store says has {self.size:,}"
            )
        return None

    def evidence(self) -> Evidence | None:
        raise NotImplementedError


def _view(data: Any) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class WholeCheck(_Result):
    """One running digest over the whole object, compared with ``expected`` (raw bytes)."""

    def __init__(self, size: int, new: Callable[[], _Running], expected: bytes, evidence: Evidence, what: str) -> None:
        self.size, self.fed = size, 0
        self._h = new()
        self._expected = expected
        self._evidence = evidence
        self.what = what

    def evidence(self) -> Evidence:
        return self._evidence

    def update(self, data: Any) -> None:
        self._h.update(data)
        self.fed += data.nbytes if isinstance(data, memoryview) else len(data)

    def result(self) -> SourceCheck:
        short = self._short()
        if short is not None:
            return short
        got = self._h.digest()
        if got == self._expected:
            return SourceCheck(self._evidence, True, f"{self.what} matched")
        return SourceCheck(
            self._evidence,
            False,
            f"the bytes read do not match the store's {self.what} ({_show(self._expected)} kept, "
            f"{_show(got)} read)",
        )


def _show(digest: bytes) -> str:
    return digest.hex() if len(digest) == 16 else base64.b64encode(digest).decode("ascii")


class PartsCheck(_Result):
    """A digest per part, then one digest over the parts' digests: the multipart ETag (MD5) or a
    composite checksum. ``layout`` is the part sizes (the last one may be shorter when assumed
    uniform). ``recheck``, on a mismatch, asks the store for the real part sizes: when they differ
    from the layout assumed, the bytes were never compared and the result says so (no evidence)
    instead of calling them wrong."""

    def __init__(
        self,
        size: int,
        new: Callable[[], _Running],
        layout: Sequence[int],
        expected: bytes,
        evidence: Evidence,
        what: str,
        *,
        assumed: bool,
        recheck: Callable[[], Sequence[int] | None] | None = None,
    ) -> None:
        self.size, self.fed = size, 0
        self._new = new
        self._layout = list(layout)
        self._expected = expected
        self._evidence = evidence
        self.what = what
        self._assumed = assumed
        self._recheck = recheck
        self._digests: list[bytes] = []
        self._h = new()
        self._left = self._layout[0] if self._layout else 0
        self._index = 0

    def evidence(self) -> Evidence:
        return self._evidence

    def update(self, data: Any) -> None:
        view = _view(data)
        self.fed += len(view)
        while view:
            if self._left == 0:
                self._next_part()
                if self._left == 0:  # past the layout: the rest counts as an extra part
                    self._left = len(view)
            take = min(self._left, len(view))
            self._h.update(view[:take] if take < len(view) else view)
            self._left -= take
            view = view[take:]

    def _next_part(self) -> None:
        self._digests.append(self._h.digest())
        self._h = self._new()
        self._index += 1
        self._left = self._layout[self._index] if self._index < len(self._layout) else 0

    def result(self) -> SourceCheck:
        short = self._short()
        if short is not None:
            return short
        self._digests.append(self._h.digest())  # the last part's
        got = self._combine()
        if got == self._expected:
            return SourceCheck(self._evidence, True, f"{self.what} ({_parts_text(self._layout)}) matched")
        if self._assumed and self._recheck is not None:
            real = self._recheck()
            if real is None or list(real) != self._layout:
                told = f"parts of {_parts_text(real)}" if real else "the part sizes are not told by the store"
                return SourceCheck(
                    None,
                    False,
                    f"the store's {self.what} could not be recomputed: it was assumed to be made of "
                    f"{_parts_text(self._layout)}, but {told}; only reading the object again with that layout "
                    "could check it",
                )
        return SourceCheck(
            self._evidence,
            False,
            f"the bytes read do not match the store's {self.what} ({_show(self._expected)} kept, "
            f"{_show(got)} read, {_parts_text(self._layout)})",
        )

    def _combine(self) -> bytes:
        h = self._new()
        h.update(b"".join(self._digests))
        return h.digest()


def _parts_text(layout: Sequence[int] | None) -> str:
    if not layout:
        return "no parts"
    n = len(layout)
    if n == 1:
        return f"1 part of {_size(layout[0])}"
    if all(s == layout[0] for s in layout[:-1]):
        last = "" if layout[-1] == layout[0] else f", the last {_size(layout[-1])}"
        return f"{n} parts of {_size(layout[0])}{last}"
    return f"{n} parts of unequal sizes"


def _size(n: int) -> str:
    if n and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    return f"{n:,} bytes"


class EitherCheck:
    """Several readings of one stored value (a CRC on a multipart object whose store does not say
    whether it is full-object or composite): matched when one of them matched."""

    def __init__(self, checks: Sequence[EvidenceCheck]) -> None:
        self._checks = list(checks)

    def update(self, data: Any) -> None:
        for c in self._checks:
            c.update(data)

    def result(self) -> SourceCheck:
        results = [c.result() for c in self._checks]
        for r in results:
            if r.matched:
                return r
        return results[0]


class NoEvidence:
    """The store keeps nothing this process can compare: ``note`` says why."""

    def __init__(self, note: str) -> None:
        self.note = note

    def update(self, data: Any) -> None:
        return None

    def result(self) -> SourceCheck:
        return SourceCheck(None, False, self.note)


# -- choosing --
@dataclass(frozen=True)
class Candidate:
    cost: float  # seconds per GB to compute
    layout: bool  # needs the part layout (requests)
    build: Callable[[Sequence[int] | None, bool], EvidenceCheck]  # (layout, assumed uniform) -> check
    parts: int = 0  # with layout: the part count


def _decode(value: str) -> tuple[bytes, int]:
    """A checksum value as S3 sends it (base64, maybe ``-N``): (raw bytes, N or 0)."""
    raw, _, n = value.partition("-")
    try:
        digest = base64.b64decode(raw, validate=True)
    except (ValueError, TypeError):
        return b"", 0
    return digest, int(n) if n.isdigit() else 0


Builder = Callable[[Sequence[int] | None, bool], EvidenceCheck]  # (layout, assumed uniform) -> check


def candidates(
    facts: Facts, recheck: Callable[[], Sequence[int] | None] | None
) -> tuple[list[Candidate], list[str]]:
    """Every check the store's evidence allows, and why others could not be used (notes)."""
    out: list[Candidate] = []
    why: list[str] = []
    for name, value in facts.checksums.items():
        found = _checksum_candidate(facts, name, value, recheck)
        if isinstance(found, str):
            why.append(found)
        else:
            out.append(found)
    if facts.ferry_sha256:
        try:
            digest = bytes.fromhex(facts.ferry_sha256)
        except ValueError:
            digest = b""
        if len(digest) == 32:
            ferry = _whole(facts.size, hashlib.sha256, digest, "SHA-256 Ferry stored with it", Evidence.FERRY_METADATA)
            out.append(Candidate(ALGORITHMS["SHA256"].cost, False, ferry))
    if facts.etag:
        found = _etag_candidate(facts, recheck)
        if isinstance(found, str):
            why.append(found)
        else:
            out.append(found)
    return out, why


def _checksum_candidate(
    facts: Facts, name: str, value: str, recheck: Callable[[], Sequence[int] | None] | None
) -> Candidate | str:
    """The check an additional checksum allows, or why it allows none."""
    algo = ALGORITHMS[name]
    new = algo.new
    if new is None:
        return f"its {name} checksum needs {algo.needs}, which is not installed"
    digest, n = _decode(value)
    if not digest:
        return f"its {name} checksum {value!r} is not readable"
    kind = facts.checksum_type
    multipart = facts.parts > 1 or n > 1
    what = f"{name} checksum"
    whole = _whole(facts.size, new, digest, what, Evidence.S3_CHECKSUM)
    if name == "CRC64NVME" or kind == "FULL_OBJECT" or not multipart:
        return Candidate(algo.cost, False, whole)
    count = n or facts.parts
    composite = _parts(facts.size, new, digest, f"composite {what}", Evidence.S3_CHECKSUM, recheck)
    if kind == "COMPOSITE" or n or name.startswith("SHA"):
        return Candidate(algo.cost, True, composite, count)
    # A CRC on a multipart object, its kind not said (moto): either reading may be meant.
    return Candidate(algo.cost * 2, True, _either(whole, composite), count)


def _etag_candidate(facts: Facts, recheck: Callable[[], Sequence[int] | None] | None) -> Candidate | str:
    """The check the ETag allows (an MD5, or a multipart ETag), or why it allows none."""
    parts = facts.parts
    if not facts.etag_is_md5:
        how = "SSE-C" if facts.sse_c else "SSE-KMS"
        kind_of = "multipart ETag" if parts else "ETag"
        return f"its {kind_of} is no MD5 ({how} encryption)"
    if _MD5_HEX.fullmatch(facts.etag):
        digest = bytes.fromhex(facts.etag)
        return Candidate(MD5_COST, False, _whole(facts.size, _md5, digest, "MD5 ETag", Evidence.S3_ETAG_MD5))
    if parts:
        digest = bytes.fromhex(facts.etag[:32])
        etag = _parts(facts.size, _md5, digest, "multipart ETag", Evidence.S3_MULTIPART_ETAG, recheck)
        # One part: the MD5 of the object's MD5, no layout to ask.
        return Candidate(MD5_COST, parts > 1, etag, parts)
    return f"its ETag {facts.etag!r} is neither an MD5 nor a multipart ETag"


def _whole(size: int, new: Callable[[], _Running], digest: bytes, what: str, evidence: Evidence) -> Builder:
    def build(_layout: Sequence[int] | None, _assumed: bool) -> EvidenceCheck:
        return WholeCheck(size, new, digest, evidence, what)

    return build


def _parts(
    size: int,
    new: Callable[[], _Running],
    digest: bytes,
    what: str,
    evidence: Evidence,
    recheck: Callable[[], Sequence[int] | None] | None,
) -> Builder:
    def build(layout: Sequence[int] | None, assumed: bool) -> EvidenceCheck:
        return PartsCheck(size, new, layout or [size], digest, evidence, what, assumed=assumed, recheck=recheck)

    return build


def _either(*builders: Builder) -> Builder:
    def build(layout: Sequence[int] | None, assumed: bool) -> EvidenceCheck:
        return EitherCheck([b(layout, assumed) for b in builders])

    return build


def uniform_layout(size: int, count: int, first: int) -> list[int] | None:
    """Parts of ``first`` bytes, the last one shorter: None when ``count`` such parts cannot make
    ``size`` bytes."""
    if count < 1 or first <= 0:
        return None
    last = size - first * (count - 1)
    if not 0 < last <= first:
        return None
    return [first] * (count - 1) + [last]


def no_evidence_note(why: Sequence[str]) -> str:
    if why:
        return "the store keeps no checksum Ferry can compare for this object (" + "; ".join(why) + ")"
    return "the store keeps no checksum for this object (no ETag, no additional checksum)"


# -- asking the store --
# Up to this size a download is checked with what stat() already saw (an MD5 ETag, Ferry's
# SHA-256, a checksum the GET carried): hashing 1 MiB with MD5 costs ~1.6 ms here, about what one
# more request costs. A larger object gets one HEAD asking for the store's checksums, which may
# name a cheaper one (CRC32: ~0.45 ms per MiB; CRC64NVME with awscrt: ~0.1 ms).
EVIDENCE_HEAD = 1 << 20
MAX_PART_HEADS = 1000  # part sizes asked one HEAD each, only for multipart objects of unequal parts


class StoreEvidence:
    """Checks of downloads against what the store keeps, asking it what stat() did not see; the
    part layouts asked are kept for the next download of the same version."""

    def __init__(self, conn: S3Connection) -> None:
        self._conn = conn
        self._layouts: dict[tuple[str, str], list[int]] = {}  # (key, ETag) -> part sizes asked

    def check(self, entry: Entry) -> EvidenceCheck:
        """A check of ``entry``'s bytes (fed by the copy from byte 0) against the cheapest evidence
        the store keeps. Small objects use what stat() saw; larger ones cost one HEAD with
        ``ChecksumMode=ENABLED`` (and, for a multipart ETag or a composite checksum, one or two
        HEADs with ``PartNumber`` for the part layout)."""
        key = key_of(entry.path)
        size = entry.size or 0
        facts = Facts.from_entry(entry.meta, entry.hashes, size)
        found, _ = candidates(facts, None)
        if size > EVIDENCE_HEAD or not any(not c.layout for c in found):
            facts = self._asked(key, facts, size)
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

    def _asked(self, key: str, seen: Facts, size: int) -> Facts:
        """What a HEAD with ``ChecksumMode=ENABLED`` says, the object still the version seen."""
        conn = self._conn
        try:
            head = conn.head_object(key, checksum_mode=True)
        except Exception as exc:
            raise conn.err(exc, conn.display(key)) from exc
        etag = str(head.get("ETag") or "").strip('"')
        if seen.etag and etag and etag != seen.etag:
            raise Transient(f"{conn.display(key)} changed on the server during the download")
        if int(head.get("ContentLength", size)) != size:
            raise Transient(f"{conn.display(key)} changed on the server during the download")
        return Facts.from_head(head, size)

    def _head_part(self, key: str, number: int) -> tuple[int, int] | None:
        """(size of part ``number``, the part count the store says or 0), or None where the store
        does not answer for parts."""
        try:
            head = self._conn.head_object(key, part_number=number)
        except Exception as exc:
            err = self._conn.err(exc, self._conn.display(key))
            if err.kind in ("auth", "transient") and not isinstance(err, NotFound):
                raise err from exc
            return None  # an error answer for a part number: the store does not serve parts
        told = head.get("PartsCount")
        try:
            count = int(told) if told is not None else 0
        except (TypeError, ValueError):
            count = 0
        return int(head.get("ContentLength", -1)), count

    def _layout(self, key: str, facts: Facts, count: int) -> tuple[list[int] | None, bool, str]:
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

    def _part_sizes(self, key: str, etag: str, count: int) -> list[int] | None:
        """Every part's size, one HEAD each (in parallel), kept for the next download of the same
        version; None when the store does not tell them, or there are too many to ask."""
        if count > MAX_PART_HEADS:
            return None
        found = list(self._conn.executor.map(lambda n: self._head_part(key, n), range(1, count + 1)))
        if any(f is None or f[0] < 0 for f in found):
            return None
        sizes = [f[0] for f in found if f is not None]
        if len(self._layouts) > 1000:
            self._layouts.clear()
        self._layouts[(key, etag)] = sizes
        return sizes
