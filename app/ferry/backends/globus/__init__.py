"""Globus collections (``globus://COLLECTION_ID/path``) through the Transfer service.

Modules by role, imported one way (``backend`` uses the others; none of them imports it):

- ``backend``: :class:`GlobusBackend`, browsing through the Transfer API and what it offers;
- ``service``: the login, the Transfer client, one call with consent and error mapping;
- ``errors``: the service's answers as Ferry's errors;
- ``tasks``: one delegated transfer task per Ferry job (never submitted twice), and delete tasks;
- ``https``: bytes between this computer and a GCSv5 collection over its HTTPS server;
- ``local``: this computer's Globus Connect Personal collection;
- ``share``: web links, HTTPS URLs and access rules;
- ``site_route``: the Globus route between saved SSH/S3 sites naming their collections (it uses
  ``backend``, as this package does; nothing imports it but the route choice).
"""

from __future__ import annotations

from ferry.backends.globus.backend import GlobusBackend

__all__ = ["GlobusBackend"]
