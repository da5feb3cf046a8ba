"""``ferry share``: pre-signed S3 links, Globus links and grants; the list of issued links.

    ferry share s3://bucket/key --expires 2h [--upload] [--curl]
    ferry share globus://COLLECTION/path [--grant user@example.org | --group ID | --public] [--https]
    ferry share list            # links issued on this machine, with expiry
    ferry share revoke ID       # where the service allows it
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ferry.core.units import format_duration, parse_duration, parse_size

if TYPE_CHECKING:  # imported when a link is made, not for every 'ferry' command
    from ferry.sharing.types import Link, ShareRequest


def register(sub: Any) -> None:
    p = sub.add_parser(
        "share",
        help="make a share link (S3 pre-signed URL, Globus link or grant); 'share list' shows issued links",
        description=(
            "Make a link a collaborator can use without an account (S3 pre-signed URL, up to 7 days), "
            "or an access rule on a Globus collection. 'ferry share list' shows the links issued on this "
            "machine; 'ferry share revoke ID' takes back those the service can revoke."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  ferry share s3://bucket/results.tar --expires 2h\n"
            "  ferry share s3://bucket/inbox/data.h5 --upload --curl\n"
            "  ferry share globus://COLLECTION/run42/ --grant someone@example.org\n"
            "  ferry share list\n"
            "  ferry share revoke 3f2a9c01de"
        ),
    )
    p.add_argument("address", metavar="ADDRESS|list|revoke", help="what to share, or 'list' / 'revoke'")
    p.add_argument("link_id", nargs="?", metavar="ID", help="with 'revoke': the link's id from 'share list'")
    p.add_argument("--expires", metavar="DURATION", help="how long the link works: 90s, 30m, 2h, 7d (S3 at most 7d)")
    p.add_argument("--upload", action="store_true", help="a link to upload one file to ADDRESS (S3)")
    p.add_argument("--max-size", metavar="SIZE", help="with --upload: refuse files larger than SIZE (S3 POST policy)")
    p.add_argument("--curl", action="store_true", help="also print the matching curl command")
    p.add_argument("--grant", metavar="IDENTITY", help="Globus: give this user (user@example.org) access")
    p.add_argument("--group", metavar="GROUP_ID", help="Globus: give this group access")
    p.add_argument("--public", action="store_true", help="Globus: give anyone read access")
    p.add_argument("--permissions", choices=("r", "rw"), default="r", help="Globus access rule (default r)")
    p.add_argument("--https", action="store_true", help="Globus: print the direct HTTPS URL of the file")
    p.add_argument("--all", action="store_true", help="with 'list': include expired links")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=run)


def _request(args: argparse.Namespace) -> ShareRequest:
    from ferry.core.errors import UsageError
    from ferry.sharing.types import ShareRequest

    if sum(bool(x) for x in (args.grant, args.group, args.public)) > 1:
        raise UsageError("Choose one of --grant, --group and --public")
    if args.max_size and not args.upload:
        raise UsageError("--max-size only applies to --upload links")
    return ShareRequest(
        expires=timedelta(seconds=parse_duration(args.expires)) if args.expires else None,
        upload=args.upload,
        max_size=parse_size(args.max_size) if args.max_size else None,
        grant_user=args.grant,
        grant_group=args.group,
        public=args.public,
        permissions=args.permissions,
        https=args.https,
    )


def _as_json(link: Link) -> dict[str, Any]:
    return {
        "id": link.id,
        "kind": link.kind,
        "target": link.target,
        "url": link.url,
        "expires": link.expires.isoformat() if link.expires else None,
        "revocable": link.revocable,
        "created": link.created.isoformat(),
        "warnings": list(link.warnings),
        **link.extra,
    }


def _expiry(link: Link, now: datetime) -> str:
    if link.expires is None:
        return "until revoked"
    left = (link.expires - now).total_seconds()
    return "expired" if left <= 0 else f"in {format_duration(left)}"


def run(args: argparse.Namespace) -> int:
    from ferry.core.errors import UsageError

    if args.address == "list":
        return run_list(args)
    if args.address == "revoke":
        if not args.link_id:
            raise UsageError("Say which link: ferry share revoke ID (ids are in 'ferry share list')")
        from ferry.backends.sharing import revoke_share

        link = revoke_share(args.link_id)
        print(f"Revoked {link.id}: {link.kind} for {link.target}")
        return 0
    if args.link_id:
        raise UsageError(f"Unexpected argument {args.link_id!r}")
    from ferry.backends.sharing import create_share

    link = create_share(args.address, _request(args))
    for warning in link.warnings:
        sys.stderr.write(f"ferry: warning: {warning}\n")
    if args.json:
        print(json.dumps(_as_json(link)))
        return 0
    print(link.url)
    if args.curl and "curl" in link.extra:
        print(link.extra["curl"])
    if link.expires is not None and sys.stderr.isatty():
        when = f"{link.expires.astimezone():%Y-%m-%d %H:%M %Z}"
        sys.stderr.write(f"Expires {when} ({_expiry(link, datetime.now(UTC))}).\n")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from ferry.sharing import ledger

    now = datetime.now(UTC)
    found = ledger.links(include_expired=args.all)
    if args.json:
        print(json.dumps([_as_json(link) for link in found]))
        return 0
    if not found:
        print("No links issued on this machine" + ("" if args.all else " that are still valid") + ".")
    for link in found:
        print(f"{link.id}  {link.kind:<8}  {_expiry(link, now):<16}  {link.target}")
        if link.kind == "grant":
            print(f"            {link.url}")
    if any(link.scheme == "s3" for link in found):
        print(
            "\nS3 pre-signed links cannot be revoked early: they stop working when they expire or when "
            "the access key that signed them is deactivated or rotated."
        )
    return 0
