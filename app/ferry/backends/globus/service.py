"""The Transfer service for one collection: the login, the Transfer client, one call with consent
asked and errors mapped, and the collection's own document.

:class:`TransferService` is what every Globus call goes through (:class:`~.backend.GlobusBackend`
is one). :class:`Collection` is what the role modules (tasks, share, https) use of a collection's
backend, so they need not import the backend module: the package's imports run one way, from
``backend`` down to these.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ferry.backends.globus.errors import is_consent, map_error
from ferry.backends.globus.settings import GlobusSettings

if TYPE_CHECKING:
    import globus_sdk

    from ferry.backends.base import Entry
    from ferry.credentials.globus_auth import GlobusAuth

T = TypeVar("T")


class TransferService:
    """One collection on the Transfer service, reached with this person's (or client's) login."""

    def __init__(self, collection: str, settings: GlobusSettings | None = None) -> None:
        self.collection = collection
        self.settings = settings if settings is not None else GlobusSettings.from_env(os.environ)
        self._doc: dict[str, Any] | None = None
        self._doc_lock = threading.Lock()
        self._auth: GlobusAuth | None = None
        self._tc: globus_sdk.TransferClient | None = None

    @property
    def auth(self) -> GlobusAuth:
        if self._auth is None:
            from ferry.credentials.globus_auth import shared_auth

            self._auth = shared_auth()
        return self._auth

    @property
    def transfer(self) -> globus_sdk.TransferClient:
        if self._tc is None:
            self._tc = self.auth.transfer_client()
        return self._tc

    def call(self, what: str, fn: Callable[[globus_sdk.TransferClient], T]) -> T:
        """Run one Transfer call: consent asked and the call retried once; errors mapped."""
        import globus_sdk

        for attempt in (1, 2):
            try:
                return fn(self.transfer)
            except globus_sdk.GlobusAPIError as exc:
                if attempt == 1 and is_consent(exc):
                    scopes = exc.info.consent_required.required_scopes or []
                    self.auth.consent(list(scopes), f"{what} on collection {self.collection}")
                    continue
                raise map_error(exc, what) from None
            except globus_sdk.NetworkError as exc:
                raise map_error(exc, what) from None
        raise AssertionError("unreachable")

    def collection_doc(self) -> dict[str, Any]:
        """The collection's endpoint document (name, GCS version, https_server, encryption policy)."""
        with self._doc_lock:
            if self._doc is None:
                self._doc = dict(
                    self.call("looking up the collection", lambda tc: tc.get_endpoint(self.collection)).data
                )
            return self._doc

    @property
    def https_server(self) -> str | None:
        url = self.collection_doc().get("https_server")
        return str(url).rstrip("/") if url else None


class Collection(Protocol):
    """A collection's backend as tasks, sharing and HTTPS transfers use it: the service's calls
    plus the backend's own stat, rename and display (``GlobusBackend`` is the one)."""

    collection: str
    settings: GlobusSettings

    @property
    def auth(self) -> GlobusAuth: ...

    def call(self, what: str, fn: Callable[[globus_sdk.TransferClient], T]) -> T: ...

    def collection_doc(self) -> dict[str, Any]: ...

    @property
    def https_server(self) -> str | None: ...

    def https_base(self) -> str:
        """The collection's HTTPS server, or Unsupported saying what to do instead."""
        ...

    def display(self, path: str) -> str: ...

    def stat(self, path: str) -> Entry: ...

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None: ...
