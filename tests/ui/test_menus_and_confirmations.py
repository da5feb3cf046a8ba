"""Issue 20: confirmations that count folders in the window's words; menus and the share dialog
offering only what the site declares it can do."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ferry.transfers.store import Store
from ferry.ui import transfer_requests
from ferry.ui.dialogs.drop_confirm import DropConfirmDialog
from ferry.ui.main_window import MainWindow
from ui.helpers_ui import make_tree


def listed(qtbot, pane, target) -> None:  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(pane.listed, timeout=20_000):
        pane.navigate(target)


def confirm_texts(qtbot, window: MainWindow, start: Callable[[], object]) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """(the summary as the dialog opens, the summary once counted); the dialog is declined."""
    window.transfer_settings.confirm_drops = True
    seen: list[str] = []

    def answer(dlg: DropConfirmDialog) -> bool:
        seen.append(dlg.summary.text())
        qtbot.waitUntil(lambda: not dlg.counting, timeout=20_000)
        seen.append(dlg.summary.text())
        return False

    window.confirm_transfer = answer  # type: ignore[method-assign]
    start()
    assert len(seen) == 2, "no confirmation was shown"
    return seen[0], seen[1]


def test_drop_confirmation_counts_folders_in_the_window_words(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    make_tree(src / "run", 25, size=16)  # 25 files of 16 bytes in a subfolder
    (src / "f.bin").write_bytes(b"x" * 2048)
    listed(qtbot, window.left, str(src))
    window.transfer_settings.on_conflict = "ask"
    sources, dest = [str(src / "f.bin"), str(src / "run")], str(tmp_path / "out") + "/"
    first, counted = confirm_texts(qtbot, window, lambda: window.request_transfer(sources, dest))
    assert "counting…" in first  # the dialog opens before the tree is walked (on a worker)
    assert "1 file (2.0 KiB)" in counted
    assert "1 folder holding 25 files (400 B)" in counted
    # The window's words: no terminal, no flags.
    assert "terminal" not in counted and "--" not in counted and "Ferry asks you" in counted
    assert Store().jobs() == []


def test_f5_confirmation_says_more_than_the_limit_for_a_huge_tree(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer_requests, "COUNT_LIMIT", 10)
    src = tmp_path / "src"
    make_tree(src / "big", 30, size=8)
    (tmp_path / "out").mkdir()
    listed(qtbot, window.left, str(src))
    listed(qtbot, window.right, str(tmp_path / "out"))
    window.left.view.setFocus()
    window.left.select_names({"big"})
    first, counted = confirm_texts(qtbot, window, window.action_map["copy"].trigger)  # F5
    assert "counting…" in first
    assert "more than 10 files" in counted and "at least 80 B" in counted


def test_closing_the_confirmation_stops_the_count(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dlg = DropConfirmDialog(files=0, folders=1, size=0, destination="/x/", policy="skip", move=False)
    qtbot.addWidget(dlg)
    assert dlg.counting and "counting…" in dlg.summary.text()
    dlg.reject()
    assert dlg.cancel.cancelled
    dlg.set_folder_contents(5, 50, False)  # a count finishing after the dialog closed changes nothing
    assert "counting…" in dlg.summary.text()
