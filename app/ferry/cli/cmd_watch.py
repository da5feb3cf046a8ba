"""``ferry watch``: placeholder until its issue lands (registers nothing yet)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    return None
