"""``ferry compare A B``: what is only in A, only in B, different (and how), identical.

The two trees are merged as sorted streams (``transfers/compare.py``), so lines appear as the
listings advance and memory does not grow with the trees. Exit 0 when identical, 1 when they
differ (or a listing failed half way), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from ferry.cli import transfer_common as tc
from ferry.cli.exit_codes import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from ferry.transfers.compare import Item, Totals

BY_HELP = (
    "size-mtime (default): files differ when sizes differ, or modification times differ by more than the "
    "coarser side keeps (S3 and SFTP: a second; local disks: a nanosecond); checksum: files of the same size "
    "are compared by SHA-256, using the servers' own hashes where they have them (an SSH host's sha256sum, the "
    "checksum or ETag an S3 store keeps) and reading a file only where nothing else tells; each such line says how"
)

_WORDS = {"only-a": "only in A", "only-b": "only in B", "different": "differ", "same": "same"}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two files or folders: only in A, only in B, different, identical",
        description="Compare A with B (any two addresses: local, sftp://, s3://, NAME:path) and list every name "
        "that is only in A, only in B, different (saying how: size, time, content, kind) or identical. Folders "
        "are compared one level deep unless -r. Nothing is changed. Exit 0 when identical, 1 when they differ, "
        "2 on bad input.",
        epilog="Examples:\n  ferry compare -r ~/data/run42 /mnt/archive/run42\n"
        "  ferry compare -r --by checksum results cluster:/scratch/me/results\n"
        "  ferry compare -r --json ~/data s3://bucket/data",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="the first file or folder")
    p.add_argument("b", metavar="B", help="the second file or folder")
    p.add_argument("-r", "-R", "--recursive", action="store_true", help="compare folders and everything in them")
    p.add_argument("--by", choices=("size-mtime", "checksum"), default="size-mtime", help=BY_HELP)
    p.add_argument("--json", action="store_true", help="one JSON object per name, then a summary (JSON lines)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ferry.backends.registry import BackendPool
    from ferry.transfers.compare import By, Totals, compare, open_side
    from ferry.transfers.jobs import resolve

    a, b = resolve(args.a), resolve(args.b)
    totals = Totals()
    with BackendPool() as pool:
        side_a = open_side(pool.get(a), a.path, "A")
        side_b = open_side(pool.get(b), b.path, "B")
        for item in compare(side_a, side_b, by=By(args.by), recursive=args.recursive, totals=totals):
            totals.add(item)
            _say(item, args.json)
    code = EXIT_OK if totals.identical else EXIT_FAILED
    if args.json:
        print(json.dumps({"event": "summary", **totals.to_json(), "identical": totals.identical, "exit_code": code}))
    else:
        sys.stderr.write(summary(totals) + "\n")
    return code


def _say(item: Item, as_json: bool) -> None:
    if as_json:
        print(
            json.dumps(
                {
                    "event": "item",
                    "path": item.rel,
                    "kind": item.kind.value,
                    "state": item.state.value,
                    "reasons": [r.value for r in item.reasons],
                    "how": item.how or None,
                    "size_a": item.a.size if item.a is not None else None,
                    "size_b": item.b.size if item.b is not None else None,
                },
                ensure_ascii=False,
            )
        )
        return
    why = f" ({', '.join(r.value for r in item.reasons)})" if item.reasons else ""
    how = f"  [{item.how}]" if item.how else ""
    slash = "/" if item.kind.value == "dir" else ""
    print(f"{_WORDS[item.state.value]:9} {tc.escape_name(item.rel)}{slash}{why}{how}")


def summary(t: Totals) -> str:
    reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(t.by_reason.items()))
    line = (
        f"{'identical' if t.identical else 'different'}: {t.only_a:,} only in A, {t.only_b:,} only in B, "
        f"{t.different:,} different{f' ({reasons})' if reasons else ''}, {t.same:,} identical (files)"
    )
    if t.read_a or t.read_b:
        line += f"; read to compare content: {t.read_a:,} file(s) in A, {t.read_b:,} in B"
    return line
