"""QA of issue 20 in the running window: an edit not yet uploaded is never overwritten by Open.

Found under Xvfb against the loopback sshd: a remote file was opened, its cached copy edited, the
upload declined (or never asked: no application had opened it), and the file opened again; Ferry
downloaded it again over the cached copy and the edit was gone, silently. The remote file had not
changed. Open now opens the edited copy (a save asks to upload it, as before)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from pytestqt.qtbot import QtBot

from ferry.backends.memory import MemoryBackend
from ferry.core.address import parse_address
from ferry.ui.main_window import MainWindow
from ui.helpers_ui import fill_memory, wait_job


def test_opening_again_keeps_an_edit_that_was_not_uploaded(
    qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    def open_url(url: QUrl) -> bool:
        opened.append(url.toLocalFile())
        return True

    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(open_url))
    monkeypatch.setattr(window, "confirm", lambda _title, _text: False)  # "Upload it back?" No
    fill_memory("keepedit", "/docs", 0)
    b = MemoryBackend(parse_address("memory://keepedit/"))
    with b.open_write("/docs/notes.txt", size=11, token="t0") as w:
        w.write(b"first draft")
        w.finish()
        w.commit(overwrite=True)
    with qtbot.waitSignal(window.right.listed, timeout=20_000):
        window.right.navigate("memory://keepedit/docs")
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.open_entry(window.right, window.right.model.entry(0))
    wait_job(qtbot, created.args[0])
    qtbot.waitUntil(lambda: len(opened) == 1)
    cached = Path(opened[0])
    cached.write_bytes(b"my edit, not uploaded yet")
    jobs = len(window.queue_model.all_jobs())
    qtbot.waitUntil(lambda: not window.right.loading and window.right.model.rowCount() == 1)
    window.open_entry(window.right, window.right.model.entry(0))
    qtbot.waitUntil(lambda: len(opened) == 2)
    qtbot.wait(500)
    assert cached.read_bytes() == b"my edit, not uploaded yet"
    assert len(window.queue_model.all_jobs()) == jobs  # nothing downloaded over it
    assert opened[1] == str(cached)
