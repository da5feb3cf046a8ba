"""Sharing on Globus: the web app link, the direct HTTPS URL, and access rules on guest collections.

A web link opens the path in the Globus web app; it grants nothing by itself (whoever opens it
sees what the collection's rules let them see), so there is nothing to revoke. An access rule
(``--grant``/``--group``/``--public``) does grant, read-only unless asked, optionally until an
expiry; it is revocable (``ferry share revoke ID`` deletes the rule on the service).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from ferry.core.errors import NotFound, Unsupported, UsageError
from ferry.sharing.types import Link, ShareRequest

if TYPE_CHECKING:
    from ferry.backends.globus.service import Collection

WEB_APP = "https://app.globus.org/file-manager"
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
GUEST_TYPES = ("GCSv5_guest_collection", "shared")


def web_link(collection: str, path: str) -> str:
    return f"{WEB_APP}?{urlencode({'origin_id': collection, 'origin_path': path or '/'})}"


def make_link(backend: Collection, path: str, request: ShareRequest) -> Link:
    target = backend.display(path)
    if request.upload:
        raise Unsupported("Globus has no upload links: grant write access instead (--grant ... --permissions rw)")
    if request.https:
        base = backend.https_server
        if base is None:
            raise Unsupported(f"Collection {backend.collection} has no HTTPS server, so there is no direct file URL")
        url = base.rstrip("/") + quote("/" + path.lstrip("/"), safe="/~")
        return Link(
            "https",
            target,
            url,
            "globus",
            revocable=False,
            revoke_note="the URL works only for people the collection's rules already allow",
        )
    if request.grant_user or request.grant_group or request.public:
        return _grant(backend, path, request, target)
    if request.expires is not None:
        raise UsageError("A Globus web link does not expire; --expires applies to grants (--grant/--group/--public)")
    return Link(
        "web",
        target,
        web_link(backend.collection, path),
        "globus",
        revocable=False,
        revoke_note="a web link grants nothing by itself; remove access rules to take access back",
    )


def _grant(backend: Collection, path: str, request: ShareRequest, target: str) -> Link:
    doc = backend.collection_doc()
    if doc.get("entity_type") not in GUEST_TYPES and not doc.get("host_endpoint_id"):
        raise Unsupported(
            "Access rules can be added only on a guest collection you manage; "
            f"{doc.get('display_name') or backend.collection} is not one. Create a guest collection on it "
            "in the Globus web app, then share from there."
        )
    entry = backend.stat(path or "/")
    if not entry.is_dir:
        raise UsageError("Globus access rules apply to folders: share the folder that holds the file")
    folder = (path or "/").rstrip("/") + "/"
    if request.public:
        principal_type, principal, who = "anonymous", "", "anyone"
    elif request.grant_group:
        principal_type, principal, who = "group", request.grant_group, f"group {request.grant_group}"
    else:
        principal_type, who = "identity", str(request.grant_user)
        principal = _identity_id(backend, str(request.grant_user))
    rule: dict[str, object] = {
        "DATA_TYPE": "access",
        "principal_type": principal_type,
        "principal": principal,
        "path": folder,
        "permissions": request.permissions,
    }
    expires = None
    if request.expires is not None:
        expires = datetime.now(UTC) + request.expires
        rule["expiration_date"] = expires.isoformat(timespec="seconds")
    res = backend.call(
        f"adding an access rule on {target}", lambda tc: tc.add_endpoint_acl_rule(backend.collection, rule)
    )
    rule_id = str(res["access_id"])
    perms = "read and write" if request.permissions == "rw" else "read"
    return Link(
        "grant",
        target,
        f"{who} may {perms} {folder} ({web_link(backend.collection, folder)})",
        "globus",
        expires=expires,
        revocable=True,
        ref={"collection": backend.collection, "rule_id": rule_id},
    )


def _identity_id(backend: Collection, who: str) -> str:
    if _UUID.match(who):
        return who
    from globus_sdk import GlobusAPIError

    try:
        res = backend.auth.auth_client().get_identities(usernames=[who])
    except GlobusAPIError as exc:
        raise UsageError(f"Globus could not look up {who}: {exc.message or exc.code}") from None
    ids = [i for i in res.get("identities", []) if i.get("id")]
    if not ids:
        raise NotFound(f"No Globus identity named {who}")
    return str(ids[0]["id"])


def revoke_link(backend: Collection, link: Link) -> None:
    rule_id = link.ref.get("rule_id")
    if not rule_id:
        raise Unsupported("This Globus link grants nothing by itself, so there is nothing to revoke")
    collection = link.ref.get("collection", backend.collection)
    try:
        backend.call("removing the access rule", lambda tc: tc.delete_endpoint_acl_rule(collection, rule_id))
    except NotFound:
        pass  # already gone (removed in the web app): the ledger entry goes too
