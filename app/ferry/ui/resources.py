"""Where Ferry's ``resources/`` folder is (icons, style sheet): inside a PyInstaller bundle, or at
the top of a source checkout. No Qt: the window's theme and the self-test both ask here."""

from __future__ import annotations

import sys
from pathlib import Path


def resource_dir() -> Path:
    """Ferry's ``resources/`` folder: inside a PyInstaller bundle, or at the top of a source checkout."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        return Path(bundle) / "resources"
    return Path(__file__).resolve().parents[3] / "resources"  # app/ferry/ui/resources.py -> the checkout


def icon_path() -> Path:
    return resource_dir() / "icons" / "ferry.svg"


def ui_icon_path(name: str) -> Path:
    """One of Ferry's own small icons (toolbar buttons, file types): ``resources/icons/ui/NAME.svg``."""
    return resource_dir() / "icons" / "ui" / f"{name}.svg"
