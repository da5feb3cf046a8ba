"""Share links at an address: its backend makes or takes back the link, and the ledger records it.

This is the one place that opens a backend for sharing (``ferry share`` and the window's share
dialog call it). It sits in the backends layer because it needs the registry; the types it deals
in are :mod:`ferry.sharing.types`, and a backend shares by implementing
:class:`~ferry.sharing.types.Sharer` and saying so in its capabilities (``presign``, ``acl_share``).
"""

from __future__ import annotations

from ferry.backends.base import Backend
from ferry.core.errors import Unsupported
from ferry.sharing.types import Link, Sharer, ShareRequest


def _sharer(backend: Backend, what: str) -> Sharer:
    if not isinstance(backend, Sharer):
        raise Unsupported(
            f"{backend.scheme} sites cannot {what}: share links exist for S3 buckets and Globus collections"
        )
    return backend


def create_share(address_text: str, request: ShareRequest, *, record: bool = True) -> Link:
    """Make a link for ``address_text`` and, unless told not to, record it in the ledger."""
    from ferry.backends.registry import BackendPool
    from ferry.credentials.sites import resolve_address
    from ferry.sharing import ledger

    address = resolve_address(address_text)
    with BackendPool() as pool:
        backend = pool.get(address)
        link = _sharer(backend, "make share links").share(address.path, request)
    if record:
        ledger.add(link)
    return link


def revoke_share(link_id: str) -> Link:
    """Take a recorded link back where its backend can; raise Unsupported (with why) otherwise."""
    from ferry.backends.registry import BackendPool
    from ferry.credentials.sites import resolve_address
    from ferry.sharing import ledger

    link = ledger.get(link_id)
    if not link.revocable:
        raise Unsupported(f"Link {link.id} cannot be revoked early: {link.revoke_note or 'the service has no way to'}")
    address = resolve_address(link.target)
    with BackendPool() as pool:
        _sharer(pool.get(address), "revoke links").revoke(link)
    ledger.remove(link.id)
    return link
