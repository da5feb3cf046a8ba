"""The transfers panel's right-click menu (issue 20): pause, resume, cancel, retry failed, move to
top/bottom (the engine's stored order), open destination, copy addresses and the log view."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QItemSelectionModel
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QApplication, QMenu
from pytestqt.qtbot import QtBot

from ferry.core.errors import Action
from ferry.transfers.options import JobOptions
from ferry.transfers.store import NewTask, Store, TaskResult
from ferry.ui.dialogs.job_log import JobLogDialog
from ferry.ui.main_window import MainWindow
from ui.helpers_ui import job_state


def _later_job(store: Store, src: Path, dest: Path, state: str = "queued") -> int:
    """A job that waits for tomorrow, so the window's runner leaves it queued."""
    opts = JobOptions(start_at=time.time() + 86_400)
    return store.create_job([str(src)], str(dest), opts, [(str(src), str(dest / src.name), src.name)], state=state)


@pytest.fixture(autouse=True)
def nothing_left_queued(window: MainWindow) -> Iterator[None]:
    """Closing the window with queued jobs asks what to do with them (tested elsewhere): here the
    window closes without asking, pass or fail, so a failing test cannot hang on that question."""
    window.unfinished_jobs = list  # type: ignore[method-assign]
    yield


def _select(window: MainWindow, job_id: int) -> None:
    model, view = window.queue_model, window.queue_panel.view
    row = next(r for r, j in enumerate(model.jobs()) if j.id == job_id)
    flags = QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
    view.selectionModel().select(model.index(row, 0), flags)


def _entry(menu: QMenu, key: str) -> QAction:
    found = menu.findChild(QAction, f"queueMenu-{key}")
    assert found is not None, key
    return found


def _shown_order(window: MainWindow) -> list[int]:
    return [j.id for j in window.queue_model.jobs()]


def test_the_menu_pauses_resumes_and_moves_a_job_to_the_top(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    store = Store()
    first, second = (
        _later_job(store, tmp_path / "a.txt", tmp_path / "x"),
        _later_job(store, tmp_path / "a.txt", tmp_path / "y"),
    )
    window.poller.poke()
    qtbot.waitUntil(lambda: _shown_order(window) == [first, second])
    panel = window.queue_panel
    _select(window, second)
    menu = panel.context_menu()
    assert _entry(menu, "pause").isEnabled() and not _entry(menu, "resume").isEnabled()
    assert _entry(menu, "cancel").isEnabled() and not _entry(menu, "retry").isEnabled()
    _entry(menu, "top").trigger()
    qtbot.waitUntil(lambda: _shown_order(window) == [second, first])  # the row moves, from the store's order
    assert [j.id for j in store.jobs()] == [second, first]
    assert [j.id for j in panel.selected_jobs()] == [second]  # a moved row stays selected
    _entry(panel.context_menu(), "pause").trigger()
    qtbot.waitUntil(lambda: job_state(second) == "paused")
    qtbot.waitUntil(lambda: _entry(panel.context_menu(), "resume").isEnabled())
    _entry(panel.context_menu(), "resume").trigger()
    qtbot.waitUntil(lambda: job_state(second) == "queued")
    _entry(panel.context_menu(), "bottom").trigger()
    qtbot.waitUntil(lambda: _shown_order(window) == [first, second])
    _entry(panel.context_menu(), "cancel").trigger()
    qtbot.waitUntil(lambda: job_state(second) == "cancelled")
    # A finished job's place in the queue means nothing: no Move to top/bottom (QA, issue 20).
    qtbot.waitUntil(lambda: not _entry(panel.context_menu(), "top").isEnabled())
    assert not _entry(panel.context_menu(), "bottom").isEnabled()
    store.close()


def test_copy_addresses_and_open_destination(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    (tmp_path / "my file.txt").write_text("a")
    (tmp_path / "out").mkdir()
    store = Store()
    job = _later_job(store, tmp_path / "my file.txt", tmp_path / "out", "paused")
    store.close()
    window.poller.poke()
    qtbot.waitUntil(lambda: _shown_order(window) == [job])
    _select(window, job)
    _entry(window.queue_panel.context_menu(), "copy").trigger()
    assert QGuiApplication.clipboard().text() == f"'{tmp_path}/my file.txt' {tmp_path}/out"
    _entry(window.queue_panel.context_menu(), "open").trigger()
    qtbot.waitUntil(lambda: window.active.address is not None and window.active.address.path == str(tmp_path / "out"))


def test_show_log_gives_each_failure_its_kind_action_and_message(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    store = Store()
    job = store.create_job(["/data"], "/archive", JobOptions(), [("/data", "/archive/data", "data")])
    store.add_tasks(job, [NewTask("file", f"/data/{n}", f"/archive/data/{n}", n, 4, None) for n in ("ok.h5", "no.h5")])
    tasks = {t.rel: t.id for t in store.claim_tasks([job], 10)}
    store.finish_tasks(
        [
            TaskResult(
                tasks["no.h5"],
                "failed",
                3,
                error_kind="permission-denied",
                error="Permission denied: /archive/data/no.h5",
                error_detail="EACCES (13) from open()",
            ),
            TaskResult(tasks["ok.h5"], "cancelled", 1),
        ]
    )
    store.set_job_state(
        job, "failed", "1 item(s) failed", error_kind="permission-denied", error_action=Action.CHECK_PERMISSIONS
    )
    store.close()
    window.poller.poke()
    qtbot.waitUntil(lambda: _shown_order(window) == [job])
    _select(window, job)
    menu = window.queue_panel.context_menu()
    assert _entry(menu, "retry").isEnabled()
    _entry(menu, "log").trigger()
    qtbot.waitUntil(lambda: isinstance(window.queue_menu.last_log, JobLogDialog))
    dlg = window.queue_menu.last_log
    assert isinstance(dlg, JobLogDialog) and dlg.isVisible()
    text = dlg.text.toPlainText()
    assert f"Job {job}: failed — 1 item(s) failed" in text
    assert "error kind: permission-denied; suggested action: check-permissions" in text
    assert (
        "Failed files (1):\n  no.h5\n    kind: permission-denied; suggested action: check-permissions; attempts: 3"
        in text
    )
    assert "Permission denied: /archive/data/no.h5\n    detail: EACCES (13) from open()" in text
    assert "ok.h5" not in text
    dlg.copy_all()
    assert QGuiApplication.clipboard().text() == text
    dlg.close()


def test_a_right_click_selects_the_row_under_it_and_opens_the_menu(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("a")
    store = Store()
    a, b = _later_job(store, tmp_path / "a.txt", tmp_path / "x"), _later_job(store, tmp_path / "a.txt", tmp_path / "y")
    store.close()
    window.poller.poke()
    qtbot.waitUntil(lambda: _shown_order(window) == [a, b])
    panel = window.queue_panel
    _select(window, a)
    pos = panel.view.visualRect(window.queue_model.index(1, 0)).center()
    panel.view.customContextMenuRequested.emit(pos)
    qtbot.waitUntil(lambda: isinstance(QApplication.activePopupWidget(), QMenu))
    popup = QApplication.activePopupWidget()
    assert popup is not None and popup.objectName() == "queueMenu"
    assert [j.id for j in panel.selected_jobs()] == [b]
    popup.close()
