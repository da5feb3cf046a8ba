"""``ferry s3``: what only S3 has.

    ferry s3 mb s3://bucket [--region R]                   # create a bucket
    ferry s3 cleanup s3://bucket/[prefix] [--older-than 7d] [--dry-run]
    ferry s3 restore s3://bucket/key [--days 7] [--tier Standard|Bulk|Expedited]

``cleanup`` lists unfinished multipart uploads (their parts are stored, and billed, but never
become an object) and aborts those older than the given age. ``restore`` asks for a temporary copy
of an archived (GLACIER, DEEP_ARCHIVE) object, or of every archived object under a folder; a
queued download of such an object then waits, re-checking, until the copy is readable.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

TIERS = ("Standard", "Bulk", "Expedited")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "s3",
        help="S3 housekeeping: create buckets, abort unfinished uploads, restore archived objects",
        description="Operations only S3 has. Addresses are s3://bucket/key or NAME:key for a saved S3 site.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  ferry s3 mb s3://my-bucket\n"
            "  ferry s3 cleanup s3://my-bucket/ --older-than 7d\n"
            "  ferry s3 restore s3://my-bucket/archive/run42.tar --days 3 --tier Bulk"
        ),
    )
    s3sub = p.add_subparsers(dest="s3_command", metavar="SUBCOMMAND")
    p.set_defaults(handler=lambda args: _help(p))

    mb = s3sub.add_parser("mb", help="create a bucket", description="Create a bucket.")
    mb.add_argument("address", metavar="s3://BUCKET")
    mb.add_argument("--region", help="where to create it (default: the configured region)")
    mb.set_defaults(handler=run_mb)

    cl = s3sub.add_parser(
        "cleanup",
        help="list and abort unfinished multipart uploads",
        description=(
            "List the unfinished multipart uploads under ADDRESS and abort those older than --older-than "
            "(default 7d). Their parts take space (and cost money) but never become an object. An upload "
            "still running elsewhere would be lost, which is why there is an age limit."
        ),
    )
    cl.add_argument("address", metavar="s3://BUCKET/[PREFIX]")
    cl.add_argument(
        "--older-than", default="7d", metavar="AGE", help="only uploads started before this (default 7d; 0 for all)"
    )
    cl.add_argument("--dry-run", action="store_true", help="list only, abort nothing")
    cl.add_argument("--json", action="store_true", help="machine-readable output")
    cl.set_defaults(handler=run_cleanup)

    rs = s3sub.add_parser(
        "restore",
        help="ask for a restored copy of an archived object (or of every archived object in a folder)",
        description=(
            "Request a temporary restored copy of a GLACIER or DEEP_ARCHIVE object. A download of it "
            "(ferry cp, the queue) waits, re-checking, until the copy is readable."
        ),
    )
    rs.add_argument("address", metavar="s3://BUCKET/KEY")
    rs.add_argument("--days", type=int, default=7, help="how long the restored copy stays (default 7)")
    rs.add_argument("--tier", choices=TIERS, default="Standard", help="retrieval speed and price (default Standard)")
    rs.set_defaults(handler=run_restore)


def _help(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _backend(text: str) -> Any:
    from ferry.backends.registry import BackendPool
    from ferry.backends.s3 import S3Backend
    from ferry.core.errors import UsageError
    from ferry.credentials.sites import resolve_address

    address = resolve_address(text)
    if address.scheme != "s3":
        raise UsageError(f"Not an S3 address: {text} (expected s3://bucket/key or a saved S3 site)")
    if not address.host:
        raise UsageError("Name a bucket: s3://BUCKET/...")
    pool = BackendPool()
    backend = pool.get(address)
    assert isinstance(backend, S3Backend)
    return pool, backend, address


def run_mb(args: argparse.Namespace) -> int:
    pool, backend, address = _backend(args.address)
    with pool:
        if address.path:
            from ferry.core.errors import UsageError

            raise UsageError("A bucket address has no key: ferry s3 mb s3://BUCKET")
        backend.make_bucket(region=args.region)
    print(f"Created bucket s3://{backend.bucket}")
    return 0


def run_cleanup(args: argparse.Namespace) -> int:
    from ferry.core.units import format_duration, parse_duration

    age = timedelta(seconds=parse_duration(args.older_than)) if args.older_than not in ("0", "0s") else timedelta(0)
    pool, backend, address = _backend(args.address)
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    with pool:
        for up in backend.multipart_uploads(address.path):
            started = up.get("Initiated")
            started = started.astimezone(UTC) if isinstance(started, datetime) else None
            old = started is None or now - started >= age
            action = "kept (too recent)"
            if old:
                if args.dry_run:
                    action = "would abort"
                else:
                    backend.abort_upload(up["Key"], up["UploadId"])
                    action = "aborted"
            rows.append(
                {
                    "key": up["Key"],
                    "upload_id": up["UploadId"],
                    "started": started.isoformat() if started else None,
                    "age_seconds": (now - started).total_seconds() if started else None,
                    "action": action,
                }
            )
    if args.json:
        print(json.dumps(rows))
        return 0
    if not rows:
        print(f"No unfinished multipart uploads under {backend.display(address.path)}.")
        return 0
    for r in rows:
        age_text = format_duration(r["age_seconds"]) if r["age_seconds"] is not None else "?"
        print(f"{r['action']:<18}  {age_text:>10} old  {backend.display(r['key'])}  (upload {r['upload_id'][:16]}…)")
    aborted = sum(r["action"] == "aborted" for r in rows)
    kept = sum(r["action"].startswith("kept") for r in rows)
    if not args.dry_run:
        sys.stderr.write(f"{aborted} upload(s) aborted, {kept} newer than {args.older_than} kept.\n")
    return 0


def run_restore(args: argparse.Namespace) -> int:
    from ferry.backends.s3 import Archived
    from ferry.core.errors import UsageError

    if args.days < 1:
        raise UsageError("--days must be at least 1")
    pool, backend, address = _backend(args.address)
    with pool:
        entry = backend.stat(address.path)
        if entry.is_file:
            state = backend.restore(entry.path, days=args.days, tier=args.tier)
            print(f"{backend.display(entry.path)}: {_words(state)}")
            return 0
        count = 0
        for _, e in backend.walk(entry.path):
            if e.is_file and e.meta.get("archived"):
                try:
                    state = backend.restore(e.path, days=args.days, tier=args.tier)
                except Archived as exc:
                    state = exc.message
                print(f"{backend.display(e.path)}: {_words(state)}")
                count += 1
        if not count:
            print(f"No archived objects under {backend.display(entry.path)}.")
    return 0


def _words(state: str) -> str:
    return {
        "restoring": (
            "restore requested; a download waits until it is ready (hours for GLACIER, up to 48 h for DEEP_ARCHIVE)"
        ),
        "restored": "restored: readable now",
        "archived": "archived (restore not started)",
        "available": "not archived",
    }.get(state, state)
