"""The main window against real backends: listings, navigation, drops that create jobs, transfers."""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from ferry.backends import registry
from ferry.backends.memory import MemoryBackend, get_store
from ferry.core.address import Address, parse_address
from ferry.core.errors import PermissionDenied
from ferry.transfers.store import Store
from ferry.ui.dialogs.drop_confirm import DropConfirmDialog
from ferry.ui.listing_model import MIME_ADDRESSES
from ferry.ui.main_window import MainWindow
from ui.helpers_ui import fill_memory, make_tree, wait_job


def listed(qtbot, pane, target) -> None:  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(pane.listed, timeout=20_000):
        assert pane.navigate(target)


def names(pane) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.name for e in pane.model.entries()]


def test_window_opens_on_home_with_a_hint_and_every_action_has_shortcut_and_tooltip(window: MainWindow) -> None:
    assert window.left.address is not None and window.right.address is not None
    assert "Add a site" in window.left.message.text()
    for key, action in window.action_map.items():
        assert action.toolTip(), key
        assert not action.shortcut().isEmpty(), key
    assert window.action_map["copy"].shortcut().toString() == "F5"
    assert window.action_map["move"].shortcut().toString() == "F6"
    assert window.action_map["mkdir"].shortcut().toString() == "F7"
    assert window.action_map["rename"].shortcut().toString() == "F2"
    assert window.action_map["refresh"].shortcut().toString() == "Ctrl+R"


def test_navigation_breadcrumbs_filter_hidden_and_tab(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "data"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "b.csv").write_text("bb")
    (root / ".secret").write_text("x")
    pane = window.left
    listed(qtbot, pane, str(root))
    assert names(pane) == ["sub", "a.txt", "b.csv"]
    pane.hidden_btn.setChecked(True)
    assert ".secret" in names(pane)
    pane.filter.setText("CSV")
    assert names(pane) == ["b.csv"]
    pane.filter.clear()
    listed(qtbot, pane, str(root / "sub"))
    assert names(pane) == ["deeper"]
    with qtbot.waitSignal(pane.listed):
        pane.back()
    assert pane.address is not None and pane.address.path == str(root)
    with qtbot.waitSignal(pane.listed):
        pane.forward()
    assert pane.address.path == str(root / "sub")
    with qtbot.waitSignal(pane.listed):
        pane.up()
    assert pane.address.path == str(root)
    crumbs = [b.text() for b in pane.crumbs.findChildren(type(pane.back_btn)) if b.objectName() != "editPath"]
    assert crumbs[-1] == "data" and crumbs[0] == "/"
    # A path typed in the path bar; a bad one says why and keeps the listing.
    pane.edit_path()
    pane.path_edit.setText(str(root / "nope"))
    with qtbot.waitSignal(pane.listed):
        pane.path_edit.returnPressed.emit()
    assert "not found" in pane.error_text.lower() or "no such" in pane.error_text.lower()
    # Tab in a listing switches panes.
    window.left.view.setFocus()
    window._set_active(window.left)
    qtbot.keyClick(window.left.view, Qt.Key.Key_Tab)
    assert window.active is window.right


class GatedMemory(MemoryBackend):
    """A memory backend whose listings wait for a gate: a slow server, made deterministic."""

    gate = threading.Event()

    def list(self, path, cancel=None):  # type: ignore[no-untyped-def]
        self.gate.wait(20)
        return super().list(path, cancel)


def test_a_stale_listing_never_overwrites_a_newer_one(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    registry.register("gated", "ui.test_window:GatedMemory")
    fill_memory("slow", "/big", 3000)
    GatedMemory.gate.clear()
    (tmp_path / "fresh.txt").write_text("new")
    pane = window.left
    assert pane.navigate(Address("gated", "/big", host="slow"))  # blocks in the worker until the gate opens
    assert pane.loading
    listed(qtbot, pane, str(tmp_path))
    assert "fresh.txt" in names(pane)
    GatedMemory.gate.set()  # the old listing now completes, late
    qtbot.wait(300)
    assert pane.address is not None and pane.address.path == str(tmp_path)
    assert not any(n.startswith("file-") for n in names(pane))


def test_f5_copies_selection_to_the_other_pane_and_the_queue_shows_it(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src", 30)
    dst = tmp_path / "dst"
    dst.mkdir()
    listed(qtbot, window.left, str(src))
    listed(qtbot, window.right, str(dst))
    window._set_active(window.left)
    window.left.view.selectAll()
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.action_map["copy"].trigger()
    job_id = created.args[0]
    assert wait_job(qtbot, job_id) == "done"
    assert sorted(p.name for p in (dst / "d00").iterdir()) == [f"f{i:05d}.txt" for i in range(30)]
    qtbot.waitUntil(lambda: any(j.id == job_id and j.state == "done" for j in window.queue_model.all_jobs()))
    row = next(j for j in window.queue_model.all_jobs() if j.id == job_id)
    assert row.files_done == 30 and row.files_failed == 0
    # The destination pane refreshed by itself.
    qtbot.waitUntil(lambda: "d00" in names(window.right))


def test_pane_to_pane_drop_and_drop_onto_a_folder_row(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    (src / "one.txt").write_text("1")
    (src / "two.txt").write_text("22")
    dst = tmp_path / "dst"
    (dst / "inbox").mkdir(parents=True)
    listed(qtbot, window.left, str(src))
    listed(qtbot, window.right, str(dst))
    rows = [window.left.model.index(r, 0) for r in range(window.left.model.rowCount())]
    mime = window.left.model.mimeData(rows)
    assert mime.hasFormat(MIME_ADDRESSES) and len(mime.urls()) == 2  # file:// too, for file managers
    inbox = window.right.model.index(names(window.right).index("inbox"), 0)
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        assert window.right.model.dropMimeData(mime, Qt.DropAction.CopyAction, -1, -1, inbox)
    wait_job(qtbot, created.args[0])
    assert (dst / "inbox" / "one.txt").read_text() == "1"
    assert (dst / "inbox" / "two.txt").read_text() == "22"


def test_file_manager_drop_with_file_urls_uploads_to_the_pane_folder(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A drop from a file manager: plain ``text/uri-list`` with file:// URLs, sent as a real QDropEvent."""
    fill_memory("remote", "/incoming", 0)
    outside = tmp_path / "desktop"
    (outside / "folder").mkdir(parents=True)
    (outside / "folder" / "inner.bin").write_bytes(b"\x01" * 1000)
    (outside / "paper.pdf").write_bytes(b"%PDF" * 100)
    listed(qtbot, window.right, "memory://remote/incoming")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(outside / "paper.pdf")), QUrl.fromLocalFile(str(outside / "folder"))])
    view = window.right.view
    at = view.viewport().rect().center()
    buttons, mods, copy = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, Qt.DropAction.CopyAction
    enter = QDragEnterEvent(at, copy, mime, buttons, mods)
    assert QApplication.sendEvent(view.viewport(), enter) and enter.isAccepted()
    move = QDragMoveEvent(at, copy, mime, buttons, mods)
    QApplication.sendEvent(view.viewport(), move)
    assert move.isAccepted()
    drop = QDropEvent(QPointF(at), copy, mime, buttons, mods)
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        QApplication.sendEvent(view.viewport(), drop)
    assert drop.isAccepted()
    wait_job(qtbot, created.args[0])
    b = MemoryBackend(parse_address("memory://remote/"))
    assert b.stat("/incoming/paper.pdf").size == 400
    assert b.stat("/incoming/folder/inner.bin").size == 1000


def test_drop_shows_what_will_happen_and_cancel_creates_nothing(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    (src / "dir").mkdir(parents=True)
    (src / "f.bin").write_bytes(b"x" * 2048)
    listed(qtbot, window.left, str(src))
    window.transfer_settings.confirm_drops = True
    seen: list[str] = []

    def answer(dlg: DropConfirmDialog) -> bool:
        seen.append(dlg.summary.text())
        return False

    window.confirm_transfer = answer  # type: ignore[method-assign]
    sources = [str(src / "f.bin"), str(src / "dir")]
    assert not window.request_transfer(sources, str(tmp_path / "out") + "/")
    assert "1 file (2.0 KiB)" in seen[0] and "1 folder" in seen[0] and "out/" in seen[0]
    assert "skip" in seen[0]  # the conflict policy
    qtbot.wait(200)
    store = Store()
    assert store.jobs() == []


def test_failed_files_say_why_and_retry_fixes_them(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fill_memory("target", "/in", 0)
    get_store("target").fail_on("open_write", "bad", PermissionDenied("Permission denied: /in/bad.txt"), times=None)
    src = tmp_path / "src"
    src.mkdir()
    (src / "bad.txt").write_text("b")
    (src / "good.txt").write_text("g")
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(src / "bad.txt"), str(src / "good.txt")], "memory://target/in/")
    job_id = created.args[0]
    assert wait_job(qtbot, job_id, ("failed",)) == "failed"
    qtbot.waitUntil(lambda: any(j.id == job_id and j.state == "failed" for j in window.queue_model.all_jobs()))
    panel = window.queue_panel
    row = next(r for r, j in enumerate(window.queue_model.jobs()) if j.id == job_id)
    panel.view.selectionModel().select(
        window.queue_model.index(row, 0),
        panel.view.selectionModel().SelectionFlag.ClearAndSelect | panel.view.selectionModel().SelectionFlag.Rows,
    )
    assert panel.buttons["retry"].isEnabled()
    # Expanding the job shows its files; the failed one says why.
    panel.view.expand(window.queue_model.index(row, 0))
    qtbot.waitUntil(lambda: window.queue_model.rowCount(window.queue_model.index(row, 0)) == 2)
    texts = [window.queue_model.index(r, 1, window.queue_model.index(row, 0)).data() for r in range(2)]
    assert any("Permission denied" in t for t in texts), texts
    get_store("target").clear_faults()
    panel.buttons["retry"].click()
    assert wait_job(qtbot, job_id, ("done",)) == "done"
