""" "Watch this folder" in the window: the dialog's defaults, files written into the watched
folder arriving checksum-verified, the counters in the transfers panel, and Stop."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QWidget

from ferry.transfers.store import Store
from ferry.transfers.watch import read_counters
from ferry.ui.dialogs.watch import WatchDialog
from ferry.ui.main_window import MainWindow
from ferry.ui.queue_model import STATE, TITLE
from ui.test_queue_and_app import select_job


def _write_into_place(folder: Path, name: str, data: bytes) -> None:
    """As a well-behaved writer does: a hidden temporary name, then a rename into place."""
    tmp = folder / f".{name}.tmp"
    tmp.write_bytes(data)
    os.rename(tmp, folder / name)


def test_watch_dialog_defaults_to_the_other_pane_and_never_deletes_unless_asked(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dlg = WatchDialog(str(tmp_path / "out"), str(tmp_path / "archive"))
    qtbot.addWidget(dlg)
    assert dlg.dest.text() == str(tmp_path / "archive")
    assert not dlg.delete.isChecked()
    from ferry.transfers.options import JobOptions

    spec = dlg.spec(JobOptions())
    assert spec.delete_after_verify is False and spec.patterns == () and spec.settle == 30.0
    dlg.pattern.setText("*.h5 *.nc")
    dlg.settle.setValue(2.5)
    dlg.delete.setChecked(True)
    spec = dlg.spec(JobOptions())
    assert spec.patterns == ("*.h5", "*.nc") and spec.settle == 2.5 and spec.delete_after_verify
    assert spec.source == str(tmp_path / "out")
    dlg.dest.setText("  ")
    dlg._accept()
    assert "where the files go" in dlg.error.text() and dlg.result() == 0


def test_watch_this_folder_ships_new_files_verified_shows_counters_and_stops(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    src, dst = tmp_path / "run42", tmp_path / "archive"
    src.mkdir()
    dst.mkdir()
    (src / "old.dat").write_bytes(b"o" * 100)  # already there: shipped too
    window.left.navigate(str(src))
    window.right.navigate(str(dst))
    qtbot.waitUntil(lambda: window.left.address is not None and window.right.address is not None)
    window._set_active(window.left)
    seen: list[WatchDialog] = []

    def fill(dlg: QWidget) -> bool:
        assert isinstance(dlg, WatchDialog)
        seen.append(dlg)
        assert dlg.dest.text() == str(dst)  # the other pane's folder by default
        dlg.pattern.setText("*.dat")
        dlg.settle.setValue(0.5)
        dlg.delete.setChecked(True)
        return True

    window.exec_watch_dialog = fill  # type: ignore[method-assign]
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.action_map["watch"].trigger()
    job = created.args[0]
    assert seen and window.watches.running(job)
    assert job in window.watches.skip  # the window's own runner leaves the watch's job alone

    _write_into_place(src, "step1.dat", b"a" * 5000)
    _write_into_place(src, "step2.dat", b"b" * 7000)
    (src / "notes.txt").write_text("not matched")

    names = ("step1.dat", "step2.dat", "old.dat")
    qtbot.waitUntil(lambda: all((dst / n).exists() for n in names), timeout=60_000)
    assert [(dst / n).read_bytes() for n in names] == [b"a" * 5000, b"b" * 7000, b"o" * 100]
    store = Store()
    try:
        # The file is renamed into place just before its result is recorded.
        qtbot.waitUntil(lambda: all(t.state == "done" for t in store.tasks(job)), timeout=30_000)
        verified = {t.rel: t.verified for t in store.tasks(job)}
    finally:
        store.close()
    assert verified == dict.fromkeys(names, "sha256 match")
    assert not (dst / "notes.txt").exists()
    # Sources go only after a checksum match; the unmatched file stays.
    qtbot.waitUntil(lambda: not (src / "step1.dat").exists() and not (src / "step2.dat").exists(), timeout=30_000)
    assert (src / "notes.txt").exists()

    # The panel shows the watch as a long-lived job with its counters.
    def counters_shown() -> None:
        row = next(r for r, j in enumerate(window.queue_model.jobs()) if j.id == job)
        title = window.queue_model.index(row, TITLE).data()
        assert title == f"#{job}  seen 3 · shipped 3 · verified 3 · deleted 3 · failed 0", title
        assert window.queue_model.index(row, STATE).data() == "watching run42/"

    qtbot.waitUntil(counters_shown, timeout=30_000)

    select_job(window, job)
    panel = window.queue_panel
    qtbot.waitUntil(lambda: panel.buttons["stop"].isEnabled())
    panel.buttons["stop"].click()
    qtbot.waitUntil(lambda: not window.watches.running(job), timeout=30_000)
    assert job not in window.watches.skip
    qtbot.waitUntil(lambda: not panel.buttons["stop"].isEnabled() and panel.buttons["stop"].isHidden())
    store = Store()
    try:
        counters = read_counters(store, job)
    finally:
        store.close()
    assert counters is not None and counters.state == "stopped" and counters.verified == 3
    # Stopped means stopped: a file written now is not shipped.
    (src / "late.dat").write_bytes(b"late")
    qtbot.wait(1500)
    assert not (dst / "late.dat").exists()


def test_watch_refuses_a_remote_folder_with_a_message(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from ferry.backends.memory import get_store  # noqa: F401 - registers memory://

    window.left.navigate("memory://watchtest/")
    qtbot.waitUntil(lambda: window.left.address is not None and not window.left.address.is_local)
    window._set_active(window.left)
    shown: list[str] = []
    window.show_error = lambda text, detail="": shown.append(text)  # type: ignore[method-assign]
    window.action_map["watch"].trigger()
    assert shown and "this computer" in shown[0]
