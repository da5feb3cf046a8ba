"""Argument parsing and dispatch for ``ferry``.

Exit codes (:mod:`ferry.cli.exit_codes`, which the commands import): 0 success (for transfers:
every file verified), 1 some files failed or the job stopped unfinished, 2 bad input (nothing was
changed), 130 interrupted by Ctrl+C.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from ferry import __version__
from ferry.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from ferry.core.errors import FerryError, Unsupported, UsageError

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's default is exit 2 with usage; keep the code, make the line readable.
        self.print_usage(sys.stderr)
        sys.stderr.write(f"ferry: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    from ferry.cli import (
        cmd_compare,
        cmd_cp,
        cmd_globus,
        cmd_hash,
        cmd_ls,
        cmd_queue,
        cmd_s3,
        cmd_share,
        cmd_sites,
        cmd_sync,
        cmd_watch,
    )

    parser = _Parser(
        prog="ferry",
        description=(
            "Move research data between this computer, SSH hosts, S3 buckets and Globus collections, "
            "with every file verified. Transfers run in a persistent queue that survives crashes."
        ),
        epilog=(
            "Addresses: local paths, sftp://[user@]host[:port]/path, s3://bucket/key, "
            "globus://COLLECTION/path, or NAME:path for a saved site.\n"
            "Run 'ferry COMMAND --help' for the options of a command."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ferry {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show technical detail with errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    # One line per command module; each owns its subcommand tree.
    for module in (
        cmd_cp,
        cmd_sync,
        cmd_compare,
        cmd_queue,
        cmd_watch,
        cmd_ls,
        cmd_hash,
        cmd_sites,
        cmd_share,
        cmd_s3,
        cmd_globus,
    ):
        module.register(sub)
    return parser


def _setup_interaction() -> None:
    """Warnings (e.g. unsupported ssh_config options) as one line each; questions on the terminal."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="ferry: warning: %(message)s")
    if sys.stdin is not None and sys.stdin.isatty():
        from ferry.credentials.prompts import TerminalPrompter, set_prompter

        set_prompter(TerminalPrompter())


def _tune_allocator() -> None:
    """Keep freed blocks of up to 8 MiB in the heap (glibc's malloc; elsewhere nothing changes).

    glibc gives every block over 128 KiB a fresh mmap and unmaps it when freed, until a large
    free raises that threshold. Ferry's per-file buffers (the copy's 1 MiB read buffer, the
    read-back, S3 bodies and single-PUT bodies) then came page-faulted and zeroed from the kernel
    for every file. Importing botocore used to raise the threshold by accident; the lean S3 path
    no longer imports it. Measured on 200 x 1 MiB against rclone serve s3 (5 interleaved rounds,
    load 6-6.5): uploads 158k page faults -> 22k, client CPU 1.12 -> 0.81 s; downloads 59k ->
    14k, 0.86 -> 0.73 s. 8 MiB rather than 4 so the read-back's 4 MiB reads of a large file fit
    too (256 MiB down, 3 rounds: 90k faults -> 28k, CPU 0.74 -> 0.62 s). What the heap keeps is
    reused by the next buffers (up to 16 MiB unused per arena before it is trimmed; glibc's own
    dynamic threshold goes up to 32 MiB). Any MALLOC_* variable in the environment (the person
    tuning malloc themselves) leaves it alone."""
    if not sys.platform.startswith("linux") or any(k.startswith("MALLOC_") for k in os.environ):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return  # not glibc (musl has no mallopt)
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's <malloc.h>
    mallopt(m_mmap_threshold, 8 << 20)
    mallopt(m_trim_threshold, 16 << 20)


def main(argv: list[str]) -> int:
    _tune_allocator()
    _setup_interaction()
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE if argv else EXIT_OK
    try:
        return handler(args)
    except KeyboardInterrupt:
        sys.stderr.write("ferry: interrupted\n")
        return EXIT_INTERRUPTED
    except FerryError as exc:
        sys.stderr.write(f"ferry: {exc.message}\n")
        if getattr(args, "verbose", False) and exc.detail:
            sys.stderr.write(f"  detail: {exc.detail}\n")
        return EXIT_USAGE if isinstance(exc, (UsageError, Unsupported)) else EXIT_FAILED
    except BrokenPipeError:
        return EXIT_FAILED
