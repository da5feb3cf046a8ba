"""GUI tests run offscreen (no display needed), each with its own Ferry home and QSettings.

``QT_QPA_PLATFORM`` is set here, before pytest-qt creates the QApplication. pytest-xvfb may
start an Xvfb for the session; the offscreen platform simply ignores it, and the rest of the
suite never imports Qt.
"""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"
os.environ.setdefault("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def ferry_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Queue, sites, links and QSettings of this test only."""
    from PySide6.QtCore import QSettings

    home = tmp_path / "home"
    monkeypatch.setenv("FERRY_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(home / "config"))
    monkeypatch.setenv("FERRY_SSH_CONFIG", str(home / "ssh_config"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")  # never the real keychain
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(home / "qsettings"))
    from ferry.credentials import keychain
    from ferry.ui.main_window import MainWindow

    # pytest-qt closes a test's windows before its fixtures end: a quit question about jobs the
    # test left queued would wait for an answer for ever. Tests of that question turn it on.
    monkeypatch.setattr(MainWindow, "ask_before_quit", False)
    keychain.reset()
    yield home
    keychain.reset()


@pytest.fixture
def window(qtbot, ferry_home: Path):  # type: ignore[no-untyped-def]
    """A main window on an empty queue, both panes on a fresh folder, drops confirmed silently."""
    from ferry.ui.main_window import MainWindow
    from ferry.ui.settings import TransferSettings

    w = MainWindow(restore=False)
    w.transfer_settings = TransferSettings(confirm_drops=False, on_conflict="skip")
    qtbot.addWidget(w)
    w.show()
    yield w
    w.shutdown()
