"""``ferry`` and ``python -m ferry``: the desktop window, or a command-line subcommand.

``ferry`` alone (or with ``--demo``, or with one path/URL to open) starts the desktop app;
``ferry --selftest`` checks an installation; anything else is the command line. The GUI and the
self-test are imported only when asked for, so the command line never loads Qt.
"""

from __future__ import annotations

import sys

_GUI_FLAGS = ("--demo", "--new-window")


def _wants_gui(argv: list[str]) -> bool:
    if not argv:
        return True
    if argv[0] in _GUI_FLAGS:
        return True
    # "ferry sftp://host/path" (a URL handler or a second launch with something to open).
    return len(argv) == 1 and "://" in argv[0] and not argv[0].startswith("-")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--selftest"]:
        from ferry.selftest import main as selftest_main

        return selftest_main(args[1:])
    if _wants_gui(args):
        from ferry.ui.app import main as gui_main

        return gui_main(args)
    from ferry.cli.main import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
