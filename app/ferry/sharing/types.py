"""The sharing types: a request, the link it produced, and the :class:`Sharer` protocol a backend
that can share implements. Types only: backends import this module and nothing else of
``ferry.sharing``; making a link at an address is :mod:`ferry.backends.sharing`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ShareRequest:
    """What the person asked for. Backends refuse, with the reason, what they cannot honour."""

    expires: timedelta | None = None  # None: the backend's default
    upload: bool = False  # a link that lets someone deliver one file (S3 pre-signed PUT/POST)
    max_size: int | None = None  # upload size limit (S3 POST policy)
    grant_user: str | None = None  # Globus: an identity (user@example.org) to grant access to
    grant_group: str | None = None  # Globus: a group id
    public: bool = False  # Globus: anyone (anonymous) may read
    permissions: str = "r"  # "r" or "rw" for access rules
    https: bool = False  # Globus: the direct HTTPS file URL instead of the web app link


@dataclass(frozen=True)
class Link:
    """One issued link or grant. ``url`` may be a bearer secret: never log it."""

    kind: str  # download, upload, web, https, grant
    target: str  # the address shared, as the person would type it
    url: str  # what to hand to the collaborator (a URL, or a description of the grant)
    scheme: str  # the backend that issued it
    expires: datetime | None = None  # aware UTC; None: until revoked
    revocable: bool = False  # can Ferry take it back before it expires?
    revoke_note: str = ""  # said when it cannot (e.g. "rotate the signing key")
    ref: dict[str, str] = field(default_factory=dict)  # what revoke() needs (rule id, endpoint)
    warnings: tuple[str, ...] = ()  # e.g. temporary credentials: the link dies with them
    extra: dict[str, str] = field(default_factory=dict)  # e.g. "curl": a matching command line
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    created: datetime = field(default_factory=lambda: datetime.now(UTC))

    def expired(self, now: datetime | None = None) -> bool:
        return self.expires is not None and (now or datetime.now(UTC)) >= self.expires


@runtime_checkable
class Sharer(Protocol):
    """Implemented by backends that can share (S3, Globus)."""

    def share(self, path: str, request: ShareRequest) -> Link: ...

    def revoke(self, link: Link) -> None: ...

