"""Write docs/cli.md from the argument parser, so the reference cannot drift from the code.

Run: .venv/bin/python scripts/gen_cli_docs.py  (a test checks the committed file is current)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _section(name: str, parser: argparse.ArgumentParser, depth: int, out: list[str]) -> None:
    out.append(f"{'#' * depth} `{name}`\n\n```text\n{parser.format_help().rstrip()}\n```\n\n")
    for sub, sp in _subparsers(parser).items():
        _section(f"{name} {sub}", sp, min(depth + 1, 4), out)


def render() -> str:
    os.environ["COLUMNS"] = "100"  # stable wrapping whatever the terminal
    from ferry.cli.main import build_parser

    out = [
        "# `ferry` command reference\n\n",
        "Generated from the argument parser by `scripts/gen_cli_docs.py`; do not edit by hand.\n\n",
    ]
    _section("ferry", build_parser(), 2, out)
    return "".join(out)


if __name__ == "__main__":
    (ROOT / "docs" / "cli.md").write_text(render(), encoding="utf-8")
    print("wrote docs/cli.md")
