"""Share links and access grants: the types (:mod:`ferry.sharing.types`) and the links issued on
this machine (:mod:`ferry.sharing.ledger`).

A backend that can share implements :class:`~ferry.sharing.types.Sharer` (``share`` and, where
the service allows it, ``revoke``) and says so in its capabilities (``presign`` for S3 pre-signed
URLs, ``acl_share`` for Globus access rules); backends import only the types. Making or revoking
a link at an address is :mod:`ferry.backends.sharing`, which opens the backend and records every
link issued here in the ledger (owner-only, in the data folder: pre-signed URLs are bearer
secrets) so ``ferry share list`` and the GUI can show what is out there and when it expires.
"""

from __future__ import annotations

from ferry.sharing.types import Link, Sharer, ShareRequest

__all__ = ["Link", "ShareRequest", "Sharer"]
