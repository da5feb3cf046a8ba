"""Where Ferry keeps its files: the platform's config and data folders.

``FERRY_CONFIG_DIR`` / ``FERRY_DATA_DIR`` override them (tests, portable installs); otherwise
platformdirs decides (``$XDG_CONFIG_HOME/ferry`` and ``$XDG_DATA_HOME/ferry`` on Linux).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def config_dir() -> Path:
    env = os.environ.get("FERRY_CONFIG_DIR")
    return Path(env) if env else Path(platformdirs.user_config_dir("ferry", appauthor=False))


def data_dir() -> Path:
    env = os.environ.get("FERRY_DATA_DIR")
    return Path(env) if env else Path(platformdirs.user_data_dir("ferry", appauthor=False))


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (owner-only on POSIX: queues and site lists name hosts and paths)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path
