"""``ferry`` and ``python -m ferry``: the command-line front end (the GUI arrives with its issue)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from ferry.cli.main import main as cli_main

    return cli_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
