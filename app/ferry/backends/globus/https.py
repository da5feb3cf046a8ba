"""Bytes between this computer and a GCSv5 collection over its HTTPS server (no Globus Connect
Personal needed): ``GET``/``PUT`` on the collection's ``https_server`` plus the path, with a token
for the collection's own ``https`` scope.

Reads support ranges (resume and parallel parts come from Ferry's scheduler). Writes go to the
hidden partial name beside the target and are renamed into place with the Transfer service's
rename after verification, so nothing half-written ever sits under the real name.
"""

from __future__ import annotations

import queue
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from ferry.backends.base import Reader, Writer
from ferry.core.errors import (
    AlreadyExists,
    AuthError,
    FerryError,
    IsADirectory,
    NotFound,
    PermissionDenied,
    Transient,
)

if TYPE_CHECKING:
    import requests

    from ferry.backends.globus.service import Collection

TIMEOUT = (15, 300)  # connect, read (seconds)
_session_lock = threading.Lock()
_sessions: dict[int, requests.Session] = {}


def _session() -> requests.Session:
    import requests

    key = threading.get_ident()
    with _session_lock:
        s = _sessions.get(key)
        if s is None:
            s = _sessions[key] = requests.Session()
        return s


def _url(base: str, path: str) -> str:
    return base.rstrip("/") + quote("/" + path.lstrip("/"), safe="/~")


def _headers(backend: Collection) -> dict[str, str]:
    header = backend.auth.https_authorizer(backend.collection).get_authorization_header()
    return {"Authorization": header} if header else {}


def _check(resp: requests.Response, what: str) -> None:
    """HTTP status to Ferry's errors, in one place."""
    code = resp.status_code
    if code < 400:
        return
    text = resp.text[:200].strip() if resp.content else resp.reason
    if code == 401:
        raise AuthError(f"The collection's HTTPS server refused the login while {what} (run 'ferry globus login')")
    if code == 403:
        raise PermissionDenied(f"Permission denied while {what}: {text}")
    if code == 404:
        raise NotFound(f"Not found while {what}")
    if code == 409:
        raise AlreadyExists(f"Already exists while {what}")
    if code in (408, 429) or code >= 500:
        raise Transient(f"The collection's HTTPS server failed while {what}: HTTP {code} {text}")
    raise FerryError(f"The collection's HTTPS server refused while {what}: HTTP {code} {text}")


def https_read(backend: Collection, path: str, offset: int = 0, length: int | None = None) -> Reader:
    import requests

    base = backend.https_base()
    headers = _headers(backend)
    if offset or length is not None:
        end = "" if length is None else str(offset + length - 1)
        headers["Range"] = f"bytes={offset}-{end}"
    what = f"reading {backend.display(path)}"
    try:
        resp = _session().get(_url(base, path), headers=headers, stream=True, timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise Transient(f"Cannot reach the collection's HTTPS server while {what}: {type(exc).__name__}") from None
    try:
        _check(resp, what)
    except NotFound:
        resp.close()
        if backend.stat(path).is_dir:  # HTTPS servers answer 404 (or a page) for folders
            raise IsADirectory(f"Is a folder: {backend.display(path)}") from None
        raise
    if (offset or length is not None) and resp.status_code != 206:
        resp.close()
        raise Transient(f"The collection's HTTPS server ignored the byte range while {what}")
    raw = resp.raw
    raw.decode_content = True
    return cast(Reader, raw)  # urllib3's response: readinto, close, a context manager


class HTTPSWriter(Writer):
    """Streams a PUT of the partial name from a feeding thread (a bounded queue: flat memory)."""

    def __init__(self, backend: Collection, base: str, final_path: str, temp_path: str, size: int | None) -> None:
        self.backend = backend
        self.final_path = final_path
        self.temp_path = temp_path
        self.offset = 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._finished = False
        # Chunked, without Content-Length: an aborted upload then ends cleanly (and is deleted)
        # instead of leaving the server waiting for bytes that never come.
        headers = _headers(backend)
        del size
        self._thread = threading.Thread(
            target=self._upload, args=(_url(base, temp_path), headers), name="ferry-globus-put", daemon=True
        )
        self._thread.start()

    def _chunks(self) -> Any:
        while True:
            item = self._queue.get()
            if item is None:
                return
            yield item

    def _upload(self, url: str, headers: dict[str, str]) -> None:
        import requests

        try:
            resp = requests.put(url, data=self._chunks(), headers=headers, timeout=TIMEOUT)
            _check(resp, f"writing {self.backend.display(self.final_path)}")
        except requests.RequestException as exc:
            self._error = Transient(f"Upload to the collection's HTTPS server failed: {type(exc).__name__}")
        except BaseException as exc:
            self._error = exc
        finally:
            self._done.set()
            # Unblock a writer waiting on a full queue after a failed upload.
            while not self._queue.empty():
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            raise self._error
        while True:
            if self._done.is_set():
                raise self._error or Transient("The upload ended early")
            try:
                self._queue.put(bytes(data), timeout=0.5)
                return
            except queue.Full:
                continue

    def finish(self) -> str | None:
        if not self._done.is_set() and not self._finished:
            self._finished = True
            self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return None

    def commit(self, *, overwrite: bool, mtime: datetime | None = None) -> None:
        self.finish()  # the upload must be complete before the rename makes it visible
        self.backend.rename(self.temp_path, self.final_path, overwrite=overwrite)

    def abort(self, *, keep_partial: bool = False) -> None:
        if not self._done.is_set():
            self._error = self._error or Transient("aborted")
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass
        self._thread.join(timeout=5)
        # The partial is removed even when asked to keep it: HTTPS uploads cannot be resumed.
        del keep_partial
        try:
            resp = _session().delete(
                _url(self.backend.https_base(), self.temp_path), headers=_headers(self.backend), timeout=TIMEOUT
            )
            resp.close()
        except Exception:
            pass  # a leftover partial is hidden and reported by the next run, never fatal here
