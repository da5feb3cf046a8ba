"""Globus collections (``globus://COLLECTION_ID/path``) through the Transfer service.

Browsing goes through the Transfer API (``operation_ls`` paged at the service's 100,000 entries
per call, ``operation_stat``, ``mkdir``, ``rename``; delete is a *delete task*, submitted with a
stored submission id and followed to its end). Bytes between two collections never pass through
this process: :meth:`GlobusBackend.delegation` hands the whole Ferry job to one Globus transfer
task (see :mod:`ferry.backends.globus.tasks`). Between this computer and a collection, bytes
stream over the collection's HTTPS server when it has one (GCSv5), with Ferry's own scheduler,
resume and hashing (:mod:`ferry.backends.globus.https`); otherwise Ferry says what to do instead.

Every service call goes through :meth:`~ferry.backends.globus.service.TransferService.call`:
``ConsentRequired`` asks for consent (re-running the login with the scopes the service named) and
retries once; every other service error is mapped to :mod:`ferry.core.errors` in
:func:`~ferry.backends.globus.errors.map_error`, keeping the service's message.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ferry.backends.base import Backend, Capabilities, Entry, JobDelegate, Kind, Reader, Writer, temp_name
from ferry.backends.globus import https, local, tasks
from ferry.backends.globus.service import TransferService
from ferry.backends.globus.settings import GlobusSettings
from ferry.backends.globus.share import make_link, revoke_link
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import (
    AlreadyExists,
    AuthError,
    FerryError,
    NotADirectory,
    NotFound,
    PermissionDenied,
    Transient,
    Unsupported,
)

if TYPE_CHECKING:
    from ferry.sharing.types import Link, ShareRequest

log = logging.getLogger(__name__)

LS_PAGE = 100_000  # the service's maximum per call
SEEN_TTL = 30.0  # seconds a listed entry may stand in for a stat
SEEN_MAX = 200_000  # entries remembered from listings at most

NO_STREAM_ADVICE = (
    "Globus collection {c} has no HTTPS server, so files cannot move between it and this computer "
    "directly. Either install Globus Connect Personal (https://www.globus.org/globus-connect-personal), "
    "which makes this computer a collection, and copy between the two collections "
    "(ferry cp globus://YOUR_GCP_ID/path globus://{c}/path), or pick a Globus Connect Server v5 "
    "collection with HTTPS enabled."
)

_BASE_CAPS = Capabilities(
    streaming=False,
    range_read=False,
    resume_write=False,
    atomic_commit=True,
    delegated_transfer=True,
    acl_share=True,
    hashes=(),
    slow_hash=True,
    symlinks=False,
    empty_dirs=True,
    set_mtime=False,
    mtime_precision=1.0,
    max_connections=4,  # Globus's own guidance for concurrent operations per user and collection
)


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def entry_from_doc(folder: str, doc: dict[str, Any], path: str | None = None) -> Entry:
    """A Transfer ``file`` document (from ls or stat) as an :class:`Entry`."""
    name = str(doc.get("name", ""))
    kind = {"dir": Kind.DIR, "file": Kind.FILE, "link": Kind.LINK, "invalid_symlink": Kind.LINK}.get(
        str(doc.get("type", "file")), Kind.SPECIAL
    )
    size = doc.get("size")
    perms = doc.get("permissions")
    meta = {k: str(doc[k]) for k in ("user", "group") if doc.get(k)}
    if kind is Kind.SPECIAL:
        meta["special"] = f"{doc.get('type')} entry"
    return Entry(
        path=path if path is not None else posixpath.join(folder, name),
        name=name,
        kind=kind,
        size=int(size) if isinstance(size, int) and kind is Kind.FILE else None,
        mtime=_parse_time(doc.get("last_modified")),
        link_target=doc.get("link_target") if isinstance(doc.get("link_target"), str) else None,
        mode=int(perms, 8) if isinstance(perms, str) and perms.isdigit() else None,
        meta=meta,
    )


def _doc_of(e: Entry) -> dict[str, Any]:
    """An Entry back as the fields of a Transfer file document (for :func:`entry_from_doc`)."""
    kind = {Kind.DIR: "dir", Kind.FILE: "file", Kind.LINK: "link"}.get(e.kind, "special")
    return {
        "type": kind,
        "size": e.size,
        "last_modified": e.mtime.isoformat() if e.mtime else None,
        "permissions": f"{e.mode:o}" if e.mode is not None else None,
        "link_target": e.link_target,
        **dict(e.meta),
    }


class GlobusBackend(TransferService, Backend):
    scheme = "globus"

    def __init__(self, address: Address, settings: GlobusSettings | None = None) -> None:
        Backend.__init__(self, address)
        TransferService.__init__(self, address.host, settings)
        self._caps: Capabilities | None = None
        self._folders: set[str] = set()  # folders known to exist (uploads check each once)
        # Entries seen in recent listings: the copier stats every source file again, and each
        # Transfer API call is a round trip to the service (tens of ms or more).
        self._seen: dict[str, tuple[float, Entry]] = {}
        self._seen_lock = threading.Lock()

    @property
    def capabilities(self) -> Capabilities:
        """Honest: streaming (and ranged reads) only where the collection has an HTTPS server."""
        if self._caps is None:
            try:
                https = self.https_server is not None
            except FerryError:
                https = False  # not logged in or offline: claim nothing we cannot show
            self._caps = replace(_BASE_CAPS, streaming=https, range_read=https, readback=False)
        return self._caps

    @capabilities.setter
    def capabilities(self, value: Capabilities) -> None:
        self._caps = value

    # -- required --
    def list(self, path: str, cancel: CancelToken | None = None) -> Iterator[Entry]:
        """Entries of a folder, a page of at most 100,000 per call (the service's limit)."""
        offset = 0
        folder = path or "/"
        while True:
            if cancel is not None:
                cancel.check()
            page = self.call(
                f"listing {self.display(folder)}",
                lambda tc, off=offset: tc.operation_ls(  # type: ignore[misc]
                    self.collection, path=folder, show_hidden=True, limit=LS_PAGE, offset=off
                ),
            )
            data = page.get("DATA") or []
            now = time.monotonic()
            entries = [entry_from_doc(folder, d) for d in data if str(d.get("name", "")) not in (".", "..")]
            with self._seen_lock:
                if len(self._seen) > SEEN_MAX:
                    self._seen.clear()
                for e in entries:
                    self._seen[e.path] = (now, e)
            yield from entries
            # A full page means there may be more; the service does not always send a total.
            if len(data) < LS_PAGE:
                return
            offset += len(data)

    def stat(self, path: str) -> Entry:
        target = path or "/"
        with self._seen_lock:
            hit = self._seen.pop(target.rstrip("/") or "/", None)  # used once: a later stat asks again
        if hit is not None and time.monotonic() - hit[0] < SEEN_TTL:
            return hit[1]
        what = f"looking at {self.display(target)}"
        try:
            doc = self.call(what, lambda tc: tc.operation_stat(self.collection, target))
        except (AuthError, PermissionDenied, Transient):
            raise
        except FerryError as first:
            # Not found, or a server without the (newer) stat operation: the parent's listing is
            # the authority, as for the Globus CLI. A real "not found" keeps the service's words.
            try:
                return self._stat_by_listing(target)
            except NotFound:
                raise first from None
        data = dict(doc.data)
        if target.rstrip("/") == "" or target == "/":
            data.setdefault("type", "dir")
            return entry_from_doc("/", {**data, "name": ""}, path="/")
        clean = target.rstrip("/")
        data.setdefault("name", posixpath.basename(clean))
        return entry_from_doc(posixpath.dirname(clean), data, path=clean)

    def _stat_by_listing(self, target: str) -> Entry:
        clean = target.rstrip("/") or "/"
        parent, name = posixpath.split(clean)
        if not name or name == "~":  # the collection's root or the home folder: a listing proves it
            self.call(
                f"looking at {self.display(target)}",
                lambda tc: tc.operation_ls(self.collection, path=target, limit=1),
            )
            return Entry(path=target, name="", kind=Kind.DIR)
        try:
            page = self.call(
                f"looking at {self.display(target)}",
                lambda tc: tc.operation_ls(self.collection, path=parent or "/", filter=f"name:={name}"),
            )
            docs = [dict(d) for d in page.get("DATA") or []]
        except NotFound:
            raise NotFound(f"Not found: {self.display(target)}") from None
        except (AuthError, PermissionDenied, Transient):
            raise
        except FerryError:  # a filter the server does not understand: list the whole folder
            docs = [{"name": e.name, **_doc_of(e)} for e in self.list(parent or "/")]
        for d in docs:
            if d.get("name") == name:
                return entry_from_doc(parent or "/", d, path=clean)
        raise NotFound(f"Not found: {self.display(target)}")

    def open_read(self, path: str, offset: int = 0, length: int | None = None) -> Reader:
        return https.https_read(self, path, offset, length)

    def open_write(
        self, path: str, *, size: int | None, token: str, resume: bool = False, readback: str | None = None
    ) -> Writer:
        base = self.https_base()
        folder, name = self.split(path)
        self._check_folder(folder)
        return https.HTTPSWriter(self, base, path, self.join(folder, temp_name(name, token)), size)

    def _forget_seen(self) -> None:
        with self._seen_lock:
            self._seen.clear()

    def _check_folder(self, folder: str) -> None:
        """Raise NotFound for a missing folder before an upload starts (the copier then creates it):
        an HTTPS PUT's own 404 would only surface after the bytes were sent. Checked once per folder."""
        if folder in self._folders:
            return
        if not self.stat(folder).is_dir:
            raise NotADirectory(f"Not a folder: {self.display(folder)}")
        self._folders.add(folder)

    def https_base(self) -> str:
        """The collection's HTTPS server, or Unsupported saying what to do instead."""
        base = self.https_server
        if base is None:
            raise Unsupported(self._no_stream_advice())
        return base

    def _no_stream_advice(self) -> str:
        gcp = local.gcp_collection_id(self.settings)
        if gcp:  # Globus Connect Personal is installed here (else Ferry would have used it)
            return (
                f"Globus collection {self.collection} has no HTTPS server, and this computer's Globus Connect "
                f"Personal (collection {gcp}) is not connected: start Globus Connect Personal and run the job "
                "again ('ferry globus this-computer' shows its state), or pick a collection with HTTPS enabled."
            )
        return NO_STREAM_ADVICE.format(c=self.collection)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        self._forget_seen()
        try:
            self.call(f"creating {self.display(path)}", lambda tc: tc.operation_mkdir(self.collection, path))
        except AlreadyExists:
            if not exist_ok:
                raise
            if not self.stat(path).is_dir:
                raise AlreadyExists(f"A file is in the way of folder {self.display(path)}") from None
        except NotFound:
            parent = self.split(path)[0]
            if not parents or parent in (path, "", "/"):
                raise
            self.mkdir(parent, parents=True, exist_ok=True)
            self.mkdir(path, parents=False, exist_ok=exist_ok)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Delete through a delete task (the service's only way), followed until it ends."""
        self._forget_seen()
        entry = self.stat(path)
        if entry.is_dir and not recursive and any(True for _ in self.list(path)):
            raise AlreadyExists(f"Folder not empty: {self.display(path)} (delete recursively)")
        tasks.run_delete(self, [path], recursive=entry.is_dir)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self._forget_seen()
        if self.exists(dst):
            if not overwrite:
                raise AlreadyExists(f"Already exists: {self.display(dst)}")
            self.remove(dst, recursive=False)
        self.call(
            f"renaming {self.display(src)}",
            lambda tc: tc.operation_rename(self.collection, src, dst),
        )

    # -- optional protocols --
    def delegation(self, src: Backend, dst: Backend) -> JobDelegate | None:
        """Collection to collection: the service moves the bytes, one Globus task per Ferry job.

        Between this computer and a collection: through this computer's Globus Connect Personal
        collection when it is installed and connected (a task like any other, which keeps going
        while Ferry is closed); else streamed over the collection's HTTPS server; else the job
        fails before it starts, with one sentence saying what to do (not once per file).
        """
        if isinstance(src, GlobusBackend) and isinstance(dst, GlobusBackend):
            return tasks.GlobusDelegation(src, dst)
        other = src if dst is self else dst
        if other.scheme == "local":
            gcp = self._connected_gcp()
            if gcp is not None:
                return tasks.GlobusDelegation(gcp, self) if other is src else tasks.GlobusDelegation(self, gcp)
        self.https_base()
        return None

    def _connected_gcp(self) -> GlobusBackend | None:
        """This computer's Globus Connect Personal collection, if installed and connected now.

        Its paths are this computer's own absolute paths on Linux and macOS, so a job's local
        paths need no translation; on Windows (``/C/...`` paths) Ferry streams instead.
        """
        import sys

        if sys.platform == "win32" or not self.settings.use_gcp:
            return None
        here = local.this_computer(self.settings)
        if here is None or not here.connected:
            return None
        return GlobusBackend(Address("globus", "/", host=here.collection_id), self.settings)

    def share(self, path: str, request: ShareRequest) -> Link:
        return make_link(self, path, request)

    def revoke(self, link: Link) -> None:
        revoke_link(self, link)
