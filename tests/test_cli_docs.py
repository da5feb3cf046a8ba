"""docs/cli.md is generated from the parser: it must match what the commands really accept."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11),
    reason="docs/cli.md is generated on Python 3.11; argparse words its help differently on other versions",
)
def test_committed_cli_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert module.render() == current, "docs/cli.md is stale: run .venv/bin/python scripts/gen_cli_docs.py"


def test_every_command_is_documented() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for command in (
        "cp",
        "queue",
        "queue wait",
        "watch",
        "ls",
        "hash",
        "sites",
        "share",
        "s3 cleanup",
        "s3 restore",
        "globus login",
        "globus schedule",
    ):
        assert f"`ferry {command}`" in text, command
