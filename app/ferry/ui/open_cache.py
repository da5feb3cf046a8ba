"""Opening a remote file: a per-site cache, reused while the remote file is unchanged (no Qt).

The download itself is an ordinary queued job (so it is verified, resumable and visible in the
transfers panel). Beside each cached file a small record keeps the remote size, modification
time and ETag it was downloaded at; the next open compares them with a fresh listing and opens
the cached copy when all match (also when the copy was edited here and not uploaded: a download
would overwrite the edit).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ferry.backends.base import Entry
from ferry.core.address import Address
from ferry.core.dirs import data_dir, ensure_private_dir

_SUFFIX = ".ferry-cache.json"


def cache_root() -> Path:
    return data_dir() / "cache"


def cache_path(address: Address) -> Path:
    """Where ``address`` is cached: one folder per site, the remote path below it, sanitised so a
    hostile remote name can never point outside the cache."""
    site = hashlib.sha256(address.endpoint.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    parts = [p for p in address.path.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    safe = ["".join(c if c.isprintable() and c not in "\x00" else "_" for c in p) for p in parts] or ["file"]
    return cache_root() / site / Path(*safe)


def _fingerprint(entry: Entry) -> dict[str, object]:
    return {
        "size": entry.size,
        "mtime": entry.mtime.timestamp() if entry.mtime else None,
        "etag": entry.meta.get("etag") or entry.meta.get("ETag"),
    }


def is_fresh(address: Address, entry: Entry) -> bool:
    """True if the cached copy was downloaded from this very version of the remote file."""
    path = cache_path(address)
    try:
        record = json.loads(Path(str(path) + _SUFFIX).read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return False
    return bool(record.get("remote") == _fingerprint(entry) and record.get("local_size") == st.st_size)


def is_unchanged_remote(address: Address, entry: Entry) -> bool:
    """True if the remote file is still the version the cached copy was downloaded from (the
    copy itself may have been edited since: editing a remote file uploads it back)."""
    try:
        record = json.loads(Path(str(cache_path(address)) + _SUFFIX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(record.get("remote") == _fingerprint(entry))


def is_edited_here(address: Address, entry: Entry) -> bool:
    """True if the cached copy was changed on this computer since it was downloaded while the
    remote file stayed as it was: an edit not uploaded (declined, or saved with no application
    watching), which a new download would overwrite."""
    path = cache_path(address)
    return path.is_file() and is_unchanged_remote(address, entry) and not is_fresh(address, entry)


def record(address: Address, entry: Entry) -> None:
    path = cache_path(address)
    data = {"remote": _fingerprint(entry), "local_size": path.stat().st_size}
    tmp = Path(str(path) + _SUFFIX + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, str(path) + _SUFFIX)


def prepare(address: Address) -> Path:
    """Make the cache folder for ``address`` and remove a stale copy (the job then downloads anew)."""
    path = cache_path(address)
    ensure_private_dir(path.parent)
    for p in (path, Path(str(path) + _SUFFIX)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
    return path
