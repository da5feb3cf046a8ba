"""S3 listings and answers as :class:`~ferry.backends.base.Entry` values.

Every key's real path goes in ``Entry.path`` (so the source is always read exactly) and a name a
destination can hold in ``Entry.name`` (:mod:`ferry.backends.s3.names`). What cannot be one item
at a destination is refused with its :class:`~ferry.core.outcomes.SkipReason` and a note: ``.``
and ``..`` segments, empty ones (``a//b``, a leading ``/``), a ``dir/`` object holding data, and
an object whose key is also a folder prefix (``run/x`` beside ``run/x/y``: the folder is kept).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from ferry.backends.base import Entry, Kind, ns_datetime
from ferry.backends.s3.names import encode_name
from ferry.backends.s3.restore import ARCHIVE_CLASSES, restore_state
from ferry.core.cancel import CancelToken
from ferry.core.errors import FerryError
from ferry.core.hashing import HASH_ALGORITHMS
from ferry.core.outcomes import SkipReason

# HeadObject's fields kept in an entry's meta (the download's evidence reads them).
_HEAD_FIELDS = (
    ("ChecksumSHA256", "checksum_sha256"),
    ("ChecksumSHA1", "checksum_sha1"),
    ("ChecksumCRC32", "checksum_crc32"),
    ("ChecksumCRC32C", "checksum_crc32c"),
    ("ChecksumCRC64NVME", "checksum_crc64nvme"),
    ("ChecksumType", "checksum_type"),
    ("ServerSideEncryption", "sse"),
    ("SSECustomerAlgorithm", "sse_c"),
)


def named(
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
    kept_mtime_ns: int | None = None,
    mode: int | None = None,
) -> Entry:
    """An entry for ``key`` whose last segment is ``raw``: its name mapped or refused, and a note
    when it differs from an earlier name of the same listing (``seen``) only in case."""
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
        mtime=store_time(mtime),
        kept_mtime_ns=kept_mtime_ns,
        mode=mode,
        hashes=dict(hashes or {}),
        meta=meta,
    )


def store_time(mtime: datetime | None) -> datetime | None:
    """The store's Last-Modified in whole seconds, as aws-cli and the console show it: listings
    carry milliseconds, HEAD's (and GET's) Last-Modified does not, and the two must agree. The
    file's own time from metadata is ``Entry.kept_mtime_ns``, never this."""
    return mtime.astimezone(UTC).replace(microsecond=0) if mtime else None


def folder(p: str, raw: str, seen: dict[str, str]) -> Entry:
    """A CommonPrefix as a folder entry. A segment that cannot be a folder name (empty, from a
    leading '/' or '//'; '.', '..') is refused: its path is then the prefix itself, so it is
    never mistaken for the folder that holds it (``"/"`` is not the bucket's root)."""
    entry = named(p[:-1], raw, Kind.DIR, seen)
    if raw not in ("", ".", ".."):
        return entry
    why = "an empty folder name (a key with a leading '/' or '//')" if raw == "" else f"a {raw!r} folder name"
    meta = dict(entry.meta)
    meta["name_note"] = f"refused: the keys under {p!r} have {why}, which no destination can hold"
    meta["skip"] = (SkipReason.UNREPRESENTABLE if raw == "" else SkipReason.UNSAFE_NAME).value
    return replace(entry, path=p, meta=meta)


def also_folder(e: Entry) -> Entry:
    """A file whose key is also a folder prefix: refused, saying so (the folder is listed)."""
    meta = dict(e.meta)
    meta["name_note"] = (
        f"refused: {e.path!r} is an object and also a folder ({e.path + '/'!r} holds keys): a file and a folder "
        "cannot have one name at the destination (the folder is copied)"
    )
    meta["skip"] = SkipReason.UNREPRESENTABLE.value
    return replace(e, meta=meta)


def _data_in_folder_marker(key: str, obj: Mapping[str, Any]) -> Entry:
    """``dir/`` holding data: both a file and a folder; it cannot be downloaded as either."""
    return Entry(
        path=key,
        name="",
        kind=Kind.FILE,
        size=obj.get("Size"),
        mtime=store_time(obj.get("LastModified")),
        meta={
            "name_note": f"refused: the object {key!r} ends in '/' but holds data: it would have "
            "to be a file and a folder at once",
            "skip": SkipReason.UNREPRESENTABLE.value,
        },
    )


def folder_entries(
    prefix: str,
    first: Mapping[str, Any] | None,
    pages: Iterator[Mapping[str, Any]],
    cancel: CancelToken | None,
    failed: Callable[[Exception], FerryError],
) -> Iterator[Entry]:
    """The entries of one folder, page by page (``failed`` words an error fetching a page). An
    object whose key is also a folder prefix (``run/x`` beside ``run/x/y``) is refused (the
    folder is listed): a file and a folder cannot share a name at a destination. S3 lists in key
    order, so the prefix ``run/x/`` arrives after ``run/x`` (keys like ``run/x.txt`` may come
    between, even pages later): a file is held back until the listing has passed where its
    prefix would be."""
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
                if obj.get("Size", 0) != 0:
                    yield _data_in_folder_marker(key, obj)
                continue  # else the folder's own marker
            held.append(_listed_file(key, key[len(prefix) :], obj, seen))
        held_keys = {e.path for e in held}
        for cp in page.get("CommonPrefixes") or ():
            p = cp["Prefix"]
            folders.add(p)
            last = max(last, p)
            entry = folder(p, p[len(prefix) : -1], seen)
            if p[:-1] in held_keys:
                # Also an object's key (listed before it): the folder's path keeps its "/" so
                # that the two stay two items (the file is refused below).
                entry = replace(entry, path=p)
            yield entry
        try:
            page = next(pages, None)
        except Exception as exc:
            raise failed(exc) from exc
        done = page is None
        keep: list[Entry] = []
        for e in held:
            if done or e.path + "/" <= last:
                yield also_folder(e) if e.path + "/" in folders else e
            else:
                keep.append(e)
        held = keep


def _listed_file(key: str, raw: str, obj: Mapping[str, Any], seen: dict[str, str]) -> Entry:
    return named(
        key,
        raw,
        Kind.FILE,
        seen,
        size=obj.get("Size"),
        mtime=obj.get("LastModified"),
        etag=str(obj.get("ETag", "")).strip('"'),
        storage_class=obj.get("StorageClass") or "STANDARD",
    )


def bucket_entries(resp: Mapping[str, Any]) -> Iterator[Entry]:
    """ListBuckets' answer as folders."""
    for b in resp.get("Buckets") or ():
        created = b.get("CreationDate")
        yield Entry(path=b["Name"], name=b["Name"], kind=Kind.DIR, mtime=created.astimezone(UTC) if created else None)


# The file attributes kept with an object, as rclone writes them (``x-amz-meta-mtime``: seconds
# since the epoch with nine decimals; ``x-amz-meta-mode``: octal with the file type, as its
# ``--metadata`` does). s3cmd's ``x-amz-meta-s3cmd-attrs`` (``mode:33188/mtime:1700000000/...``,
# decimal) is read too.
_GIGA = 1_000_000_000


def attribute_metadata(mtime: datetime | None, mtime_ns: int | None, mode: int | None) -> dict[str, str]:
    """``mtime`` (exact to the nanosecond when ``mtime_ns`` is given) and ``mode`` as metadata."""
    out: dict[str, str] = {}
    if mtime_ns is not None:
        sign, ns = ("-", -mtime_ns) if mtime_ns < 0 else ("", mtime_ns)
        out["mtime"] = f"{sign}{ns // _GIGA}.{ns % _GIGA:09d}"
    elif mtime is not None:
        out["mtime"] = f"{mtime.timestamp():.9f}"
    if mode is not None:
        out["mode"] = f"0{0o100000 | (mode & 0o7777):o}"
    return out


def _seconds_ns(raw: str) -> int | None:
    """``1700000000.123456789`` (or any decimal number of seconds) as exact nanoseconds."""
    text = raw.strip()
    sign = -1 if text.startswith("-") else 1
    whole, _, frac = text.lstrip("+-").partition(".")
    if whole.isdigit() and (not frac or frac.isdigit()):
        return sign * (int(whole) * _GIGA + int((frac + "000000000")[:9]))
    try:
        return round(float(text) * _GIGA)
    except (ValueError, OverflowError):
        return None


def stored_attributes(head: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(mtime in nanoseconds, permission bits) from an object's metadata, where it has them."""
    meta = {k.lower(): v for k, v in (head.get("Metadata") or {}).items()}
    s3cmd = dict(p.partition(":")[::2] for p in str(meta.get("s3cmd-attrs", "")).split("/") if ":" in p)
    raw_mtime = meta.get("mtime") or s3cmd.get("mtime")
    mtime_ns = _seconds_ns(raw_mtime) if raw_mtime else None
    if mtime_ns is not None:
        try:
            ns_datetime(mtime_ns)
        except (OverflowError, ValueError):
            mtime_ns = None  # no time a datetime can hold: Last-Modified stands
    mode = None
    try:
        if meta.get("mode"):
            mode = int(meta["mode"], 8) & 0o7777
        elif s3cmd.get("mode"):
            mode = int(s3cmd["mode"]) & 0o7777
    except ValueError:
        mode = None
    return mtime_ns, mode


def head_entry(key: str, head: Mapping[str, Any], seen: dict[str, str]) -> Entry:
    """A HeadObject answer (or stat's GET) as a file entry: size, time, ETag, storage class and
    restore state, Ferry's stored hashes and the store's checksums and encryption. Its ``mtime``
    is the store's Last-Modified, as in a folder listing; the time kept in metadata (Ferry's,
    rclone's or s3cmd's) is ``kept_mtime_ns``."""
    meta = {k.lower(): v for k, v in (head.get("Metadata") or {}).items()}
    hashes = {algo: meta[f"ferry-{algo}"] for algo in HASH_ALGORITHMS if meta.get(f"ferry-{algo}")}
    extra = {name: str(head[field]) for field, name in _HEAD_FIELDS if head.get(field)}
    state = restore_state(head)
    if state != "available":
        extra["restore"] = state
    mtime_ns, mode = stored_attributes(head)
    return named(
        key,
        posixpath.basename(key),
        Kind.FILE,
        seen,
        size=int(head.get("ContentLength", 0)),
        mtime=lm if isinstance(lm := head.get("LastModified"), datetime) else None,
        etag=str(head.get("ETag", "")).strip('"'),
        storage_class=head.get("StorageClass") or "STANDARD",
        extra=extra,
        hashes=hashes,
        kept_mtime_ns=mtime_ns,
        mode=mode,
    )
