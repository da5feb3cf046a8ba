"""Editing a remote file (issue 20): the cached copy opened in the desktop's application is
watched; a save asks, then uploads it back as a verified job; a remote file changed meanwhile is
said so; with no application to open it, the window says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from pytestqt.qtbot import QtBot

from ferry.backends.memory import MemoryBackend
from ferry.core.address import parse_address
from ferry.transfers.store import Store
from ferry.ui.main_window import MainWindow
from ui.helpers_ui import fill_memory, wait_job


def _put(b: MemoryBackend, path: str, data: bytes, token: str) -> None:
    with b.open_write(path, size=len(data), token=token) as w:
        w.write(data)
        w.finish()
        w.commit(overwrite=True)


def _remote(b: MemoryBackend, path: str) -> bytes:
    with b.open_read(path) as r:
        return bytes(r.read())


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What was handed to the desktop to open (the seam is QDesktopServices.openUrl)."""
    got: list[str] = []

    def open_url(url: QUrl) -> bool:
        got.append(url.toLocalFile())
        return True

    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(open_url))
    return got


def _open(qtbot: QtBot, window: MainWindow, site: str) -> MemoryBackend:
    fill_memory(site, "/docs", 0)
    b = MemoryBackend(parse_address(f"memory://{site}/"))
    _put(b, "/docs/notes.txt", b"first draft", "t0")
    with qtbot.waitSignal(window.right.listed, timeout=20_000):
        window.right.navigate(f"memory://{site}/docs")
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.open_entry(window.right, window.right.model.entry(0))
    wait_job(qtbot, created.args[0])
    return b


def _save(path: Path, data: bytes, window: MainWindow) -> None:
    path.write_bytes(data)
    window.files.edits.check()  # the watch's ticks: the change is seen...
    window.files.edits.check()  # ...and acted on once it stood still


def test_a_saved_edit_is_uploaded_back_after_asking(
    qtbot: QtBot, window: MainWindow, opened: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    b = _open(qtbot, window, "editme")
    qtbot.waitUntil(lambda: len(opened) == 1)
    cached = Path(opened[0])
    questions: list[str] = []
    answers = [True, False]

    def confirm(title: str, text: str) -> bool:
        questions.append(text)
        return answers.pop(0)

    monkeypatch.setattr(window, "confirm", confirm)
    window.files.edits.check()
    assert questions == []  # opened, not saved: nothing to ask
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        _save(cached, b"second draft, longer", window)
    assert questions == ["notes.txt was saved. Upload it back to memory://editme/docs/notes.txt?"]
    assert wait_job(qtbot, created.args[0]) == "done"
    assert _remote(b, "/docs/notes.txt") == b"second draft, longer"
    store = Store()
    try:
        (task,) = [t for t in store.tasks(created.args[0]) if t.kind == "file"]
        assert task.state == "done" and task.level is not None  # a verified job like any other
    finally:
        store.close()
    jobs = len(window.queue_model.all_jobs())
    _save(cached, b"third", window)
    qtbot.waitUntil(lambda: len(questions) == 2)
    qtbot.wait(300)
    assert len(window.queue_model.all_jobs()) == jobs and _remote(b, "/docs/notes.txt") == b"second draft, longer"
    window.files.edits.check()
    assert len(questions) == 2  # declined: asked again only at the next save


def test_a_remote_file_changed_meanwhile_is_said_so(
    qtbot: QtBot, window: MainWindow, opened: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    b = _open(qtbot, window, "editrace")
    qtbot.waitUntil(lambda: len(opened) == 1)
    _put(b, "/docs/notes.txt", b"a colleague's version", "t1")
    questions: list[str] = []
    def confirm(title: str, text: str) -> bool:
        questions.append(text)
        return False

    monkeypatch.setattr(window, "confirm", confirm)
    _save(Path(opened[0]), b"mine", window)
    qtbot.waitUntil(lambda: len(questions) == 1)
    assert "changed on the server since you opened it" in questions[0]
    assert _remote(b, "/docs/notes.txt") == b"a colleague's version"  # kept: the answer was no


def test_no_application_to_open_it_is_said(qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: False))
    errors: list[str] = []
    monkeypatch.setattr(window, "show_error", lambda text, detail="": errors.append(text))
    b = _open(qtbot, window, "noopener")
    qtbot.waitUntil(lambda: len(errors) == 1)
    assert errors[0].startswith("No application on this computer opens notes.txt")
    assert "the downloaded copy is at" in errors[0]
    assert window.files.edits.watched == {}  # nothing opened, nothing watched
    assert _remote(b, "/docs/notes.txt") == b"first draft"


def test_a_local_file_with_no_application_is_said_too(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "run.h5").write_bytes(b"x")
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: False))
    errors: list[str] = []
    monkeypatch.setattr(window, "show_error", lambda text, detail="": errors.append(text))
    with qtbot.waitSignal(window.right.listed, timeout=20_000):
        window.right.navigate(str(tmp_path))
    (entry,) = [e for e in window.right.model.entries() if e.name == "run.h5"]
    window.open_entry(window.right, entry)
    assert errors == ["No application on this computer opens run.h5"]
