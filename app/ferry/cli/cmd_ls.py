"""``ferry ls``: list a folder (or show one file) at any address.

Text output is one line per entry whatever the names contain: control characters, backslashes
and undecodable bytes are escaped the way ``ls -b`` does it (C-style), so scripts reading lines
never split a name. ``--json`` keeps names exact.
"""

from __future__ import annotations

import argparse
import json
import stat as stat_mod
import sys
import unicodedata
from dataclasses import replace
from datetime import UTC
from typing import Any

from ferry.backends.base import Backend, Entry, Kind
from ferry.backends.registry import BackendPool
from ferry.core.address import Address
from ferry.core.errors import NotADirectory, NotFound

_ESCAPES = {
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\v": "\\v",
}
# Bidirectional overrides can make a listed name read differently from what it is ("Trojan Source").
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def escape_name(name: str) -> str:
    """A one-line, printable, unambiguous rendering of a file name (like ``ls -b``).

    Backslash is always doubled so an escape sequence and a literal backslash never look alike.
    Lone surrogates (bytes that were not UTF-8, via ``os.fsdecode``) come back as ``\\xNN``.
    """
    out: list[str] = []
    for ch in name:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # surrogateescape'd byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "ls",
        help="list a folder at any address",
        description=(
            "List the folder at PATH (a local path, sftp://, s3://, globus:// or NAME:path of a saved "
            "site), folders first. A file lists just that file. Names with control characters are "
            "shown escaped (like 'ls -b'); --json shows them exactly."
        ),
    )
    p.add_argument("path", metavar="PATH", help="what to list")
    p.add_argument("-l", "--long", action="store_true", help="show kind, size, modification time and link targets")
    p.add_argument("--json", action="store_true", help="print a JSON array of entries (exact names, UTC times)")
    p.add_argument("-a", "--all", action="store_true", help="include names starting with '.'")
    p.set_defaults(handler=run)


def _sort_key(e: Entry) -> tuple[int, str, str]:
    return (0 if e.kind is Kind.DIR else 1, e.name.casefold(), e.name)


def collect(backend: Backend, address: Address, *, show_hidden: bool, follow_links: bool) -> tuple[list[Entry], bool]:
    """The entries to show and whether PATH was a folder (False: a single non-folder entry)."""
    entry = backend.stat(address.path)
    is_folder = entry.kind is Kind.DIR
    if entry.kind is Kind.LINK and follow_links:
        # Like ls: a link to a folder named on the command line is listed through.
        try:
            entries = list(backend.list(address.path))
        except (NotADirectory, NotFound):
            pass
        else:
            return _visible(entries, show_hidden), True
    if not is_folder:
        return [entry], False
    return _visible(list(backend.list(address.path)), show_hidden), True


def _visible(entries: list[Entry], show_hidden: bool) -> list[Entry]:
    if not show_hidden:
        entries = [e for e in entries if not e.name.startswith(".")]
    return sorted(entries, key=_sort_key)


def _kind_char(e: Entry) -> str:
    if e.kind is Kind.DIR:
        return "d"
    if e.kind is Kind.LINK:
        return "l"
    if e.kind is Kind.SPECIAL:
        return {"named pipe": "p", "socket": "s", "character device": "c", "block device": "b"}.get(
            e.meta.get("special", ""), "?"
        )
    return "-"


def _mode_text(e: Entry) -> str:
    """``drwxr-xr-x`` when the backend knows permission bits; the kind letter alone otherwise."""
    kind = _kind_char(e)
    if e.mode is None:
        return kind.ljust(10)
    return kind + stat_mod.filemode(e.mode)[1:]


def _mtime_text(e: Entry) -> str:
    if e.mtime is None:
        return "-".ljust(16)
    return e.mtime.astimezone().strftime("%Y-%m-%d %H:%M")


def _display_name(e: Entry, shown: str) -> str:
    suffix = "/" if e.kind is Kind.DIR and not shown.endswith("/") else ""
    return escape_name(shown) + suffix


def format_short(entries: list[Entry], names: list[str]) -> list[str]:
    return [_display_name(e, n) for e, n in zip(entries, names, strict=True)]


def format_long(entries: list[Entry], names: list[str]) -> list[str]:
    sizes = ["-" if e.size is None or e.kind is Kind.DIR else str(e.size) for e in entries]
    width = max((len(s) for s in sizes), default=1)
    lines = []
    for e, name, size in zip(entries, names, sizes, strict=True):
        line = f"{_mode_text(e)}  {size:>{width}}  {_mtime_text(e)}  {_display_name(e, name)}"
        if e.kind is Kind.LINK and e.link_target is not None:
            line += f" -> {escape_name(e.link_target)}"
        lines.append(line)
    return lines


def to_json(e: Entry, address: Address) -> dict[str, Any]:
    mtime = e.mtime.astimezone(UTC).isoformat().replace("+00:00", "Z") if e.mtime is not None else None
    return {
        "name": e.name,
        "path": e.path,
        "address": str(replace(address, path=e.path, trailing_slash=False)),
        "kind": e.kind.value,
        "size": e.size,
        "mtime": mtime,
        "link_target": e.link_target,
        "mode": e.mode,
    }


def run(args: argparse.Namespace) -> int:
    from ferry.cli.transfer_common import resolve as resolve_address

    address = resolve_address(args.path)
    with BackendPool() as pool:
        backend = pool.get(address)
        # As ls: with -l a link named on the command line is shown itself unless written "link/".
        follow = not args.long or address.trailing_slash
        entries, is_folder = collect(backend, address, show_hidden=args.all, follow_links=follow)
    if args.json:
        json.dump([to_json(e, address) for e in entries], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    # A single file is shown as the user typed it, as ls does.
    names = [e.name for e in entries] if is_folder else [args.path]
    lines = format_long(entries, names) if args.long else format_short(entries, names)
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0
