"""Shared fixtures: the real ``ferry`` command, isolated in the test's own folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import Ferry


@pytest.fixture
def ferry(tmp_path: Path) -> Ferry:
    """Run ``ferry`` in a subprocess with its data and config under ``tmp_path``."""
    return Ferry(home=tmp_path, cwd=tmp_path)
