"""Links issued on this machine, kept in ``links.json`` in the data folder with owner-only
permissions: a pre-signed URL is a bearer secret, so it never goes to logs or the config folder."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from ferry.core.dirs import data_dir, ensure_private_dir
from ferry.core.errors import NotFound
from ferry.sharing.types import Link

_lock = threading.Lock()


def ledger_path() -> Path:
    return data_dir() / "links.json"


def _to_json(link: Link) -> dict[str, Any]:
    d = asdict(link)
    d["created"] = link.created.isoformat()
    d["expires"] = link.expires.isoformat() if link.expires else None
    d["warnings"] = list(link.warnings)
    return d


def _from_json(d: dict[str, Any]) -> Link:
    d = dict(d)
    d["created"] = datetime.fromisoformat(d["created"])
    d["expires"] = datetime.fromisoformat(d["expires"]) if d.get("expires") else None
    d["warnings"] = tuple(d.get("warnings", ()))
    return Link(**d)


def _read() -> list[Link]:
    try:
        raw = json.loads(ledger_path().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    return [_from_json(d) for d in raw.get("links", [])]


def _write(links: list[Link]) -> None:
    path = ledger_path()
    ensure_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=".links.", dir=path.parent)  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"links": [_to_json(link) for link in links]}, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def add(link: Link) -> None:
    with _lock:
        links = _read()
        links.append(link)
        _write(links)


def links(include_expired: bool = True) -> list[Link]:
    with _lock:
        found = _read()
    return found if include_expired else [link for link in found if not link.expired()]


def get(link_id: str) -> Link:
    for link in links():
        if link.id == link_id:
            return link
    raise NotFound(f"No issued link with id {link_id} (see 'ferry share list')")


def remove(link_id: str) -> None:
    with _lock:
        _write([link for link in _read() if link.id != link_id])


def forget_expired() -> int:
    with _lock:
        found = _read()
        keep = [link for link in found if not link.expired()]
        _write(keep)
    return len(found) - len(keep)
