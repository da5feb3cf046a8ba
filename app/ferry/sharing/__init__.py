"""Share links and access grants, dispatched on what each backend can do.

A backend that can share implements :class:`~ferry.sharing.base.Sharer` (``share`` and, where the
service allows it, ``revoke``) and says so in its capabilities (``presign`` for S3 pre-signed
URLs, ``acl_share`` for Globus access rules). Every link issued on this machine is recorded in
the :mod:`ferry.sharing.ledger` (owner-only, in the data folder: pre-signed URLs are bearer
secrets) so ``ferry share list`` and the GUI can show what is out there and when it expires.
"""

from __future__ import annotations

from ferry.sharing.base import Link, Sharer, ShareRequest, create_share, revoke_share

__all__ = ["Link", "ShareRequest", "Sharer", "create_share", "revoke_share"]
