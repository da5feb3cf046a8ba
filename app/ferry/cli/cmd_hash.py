"""``ferry hash``: checksums of files at any address, in ``sha256sum`` format.

Lines are ``HEX  PATH`` with PATH as typed (plus the relative path under a folder with ``-r``), so
for local files ``sha256sum -c`` (or ``b3sum -c``, ``md5sum -c``...) verifies the output directly.
A name containing a backslash, newline or carriage return is written the way coreutils does it:
the line starts with ``\\`` and those characters are escaped. Names are written as their original
bytes (undecodable ones included), since that is what ``sha256sum -c`` will open.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ferry.backends.base import Backend, Kind
from ferry.backends.registry import BackendPool
from ferry.core.address import Address
from ferry.core.errors import FerryError, IsADirectory, UsageError, describe
from ferry.core.hashing import HASH_ALGORITHMS


def register(sub: Any) -> None:
    p = sub.add_parser(
        "hash",
        help="print checksums of files (sha256sum format)",
        description=(
            "Print a checksum line 'HEX  PATH' for each file, in the format sha256sum -c, b3sum -c and "
            "md5sum -c verify. With -r, hash every file under a folder (links are not followed)."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files (or folders, with -r) at any address")
    p.add_argument("--algo", choices=HASH_ALGORITHMS, default="sha256", help="hash algorithm (default: %(default)s)")
    p.add_argument("-r", "--recursive", action="store_true", help="hash every file under the folders given")
    p.set_defaults(handler=run)


def checksum_line(digest: str, name: str) -> str:
    """One ``sha256sum`` line (coreutils >= 9.1 escaping: backslash, newline, carriage return)."""
    if any(c in name for c in "\\\n\r"):
        escaped = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        return f"\\{digest}  {escaped}\n"
    return f"{digest}  {name}\n"


def _write_out(text: str) -> None:
    """Write to stdout as the name's original bytes (surrogateescape), not mangled or refused."""
    data = text.encode("utf-8", "surrogateescape")
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (some embedders): best effort
        sys.stdout.write(data.decode("utf-8", "replace"))
        return
    sys.stdout.flush()
    buffer.write(data)
    buffer.flush()


def _err(message: str) -> None:
    sys.stdout.flush()  # keep the order of lines when both go to one terminal
    sys.stderr.write(f"ferry: {message}\n")
    sys.stderr.flush()


def _under(typed: str, address: Address, rel: str) -> str:
    """``typed`` joined with a walk-relative path (always '/'-separated), as the user would type it."""
    if address.is_local and os.sep != "/":
        rel = rel.replace("/", os.sep)
        sep = os.sep
    else:
        sep = "/"
    return typed + rel if typed.endswith(("/", sep)) else f"{typed}{sep}{rel}"


def _files_under(backend: Backend, path: str, typed: str) -> tuple[list[tuple[str, str]], bool]:
    """(relative path, backend path) of every regular file under ``path``, sorted by components.

    Uses ``backend.walk`` (object stores list a whole prefix in one flat listing). If the walk
    breaks off (an unreadable subfolder), the error is reported and the files found so far are
    still hashed; the second value says whether the walk completed.
    """
    files: list[tuple[str, str]] = []
    complete = True
    try:
        for rel, e in backend.walk(path):
            if e.kind is Kind.FILE:
                files.append((rel, e.path))
    except FerryError as exc:
        _report(typed, path, exc)
        complete = False
    files.sort(key=lambda item: item[0].split("/"))
    return files, complete


def _report(shown: str, path: str, exc: BaseException) -> None:
    """Print an error naming the file once (backend messages usually name the path already)."""
    message = describe(exc)
    _err(message if shown in message or (path and path in message) else f"{shown}: {message}")


def run(args: argparse.Namespace) -> int:
    from ferry.cli.transfer_common import resolve as resolve_address

    failed = False
    with BackendPool() as pool:
        for typed in args.paths:
            try:
                address = resolve_address(typed)
                backend = pool.get(address)
            except UsageError:
                raise  # a malformed address or unknown site: bad input, stop as for any usage error
            except FerryError as exc:
                _err(f"{typed}: {exc.message}")
                failed = True
                continue
            if not _hash_one(backend, address, typed, args):
                failed = True
    return 1 if failed else 0


def _hash_one(backend: Backend, address: Address, typed: str, args: argparse.Namespace) -> bool:
    """Hash one argument (a file, or with -r a folder); report errors; True if all went well."""
    try:
        entry = backend.stat(address.path)
        if entry.kind is Kind.SPECIAL:
            # Reading a named pipe would block, a device would never end: sha256sum's hangs, avoided.
            _err(f"{typed}: Not a regular file ({entry.meta.get('special', 'special file')})")
            return False
        if entry.kind is not Kind.DIR:
            try:
                digest = backend.hash(address.path, args.algo)
            except IsADirectory:
                pass  # a link to a folder: treated as the folder, as sha256sum follows links
            else:
                _write_out(checksum_line(digest, typed))
                return True
        if not args.recursive:
            _err(f"{typed}: Is a folder (use -r to hash the files in it)")
            return False
    except FerryError as exc:
        _report(typed, address.path, exc)
        return False
    files, ok = _files_under(backend, address.path, typed)
    for rel, path in files:
        shown = _under(typed, address, rel)
        try:
            digest = backend.hash(path, args.algo)
        except (FerryError, OSError) as exc:
            _report(shown, path, exc)
            ok = False
            continue
        _write_out(checksum_line(digest, shown))
    return ok
