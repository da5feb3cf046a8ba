"""Start-up after a demo and panes after a move (issue 20): a start whose remembered folder is
gone opens the home folder instead and says why; a demo does not replace the folders a person
last used; the demo shows its S3 bucket; both panes show a move's result without a manual refresh."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QItemSelectionModel
from pytestqt.qtbot import QtBot

from ferry.ui.demo import BUCKET, DemoServers
from ferry.ui.main_window import MainWindow
from ferry.ui.settings import TransferSettings, settings
from ui.helpers_ui import wait_job


def _names(pane: object) -> set[str]:
    return {e.name for e in pane.model.entries()}  # type: ignore[attr-defined]


def _start(qtbot: QtBot) -> MainWindow:
    """A normal start: the window restores what the last session saved."""
    w = MainWindow(restore=True)
    w.transfer_settings = TransferSettings(confirm_drops=False, on_conflict="skip")
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "person"
    h.mkdir()
    (h / "thesis.tex").write_text("x")
    monkeypatch.setenv("HOME", str(h))
    return h


def test_a_remembered_folder_that_is_gone_falls_back_to_home(qtbot: QtBot, home: Path, tmp_path: Path) -> None:
    gone = tmp_path / "ferry-demo-x" / "this-computer"
    gone.mkdir(parents=True)
    s = settings()
    s.setValue("panes/left/address", str(gone))
    s.setValue("panes/right/address", str(home))
    s.sync()
    shutil.rmtree(gone.parent)  # the demo deleted its folders when it closed
    w = _start(qtbot)
    try:
        qtbot.waitUntil(lambda: w.left.address is not None and w.left.address.path == str(home), timeout=20_000)
        qtbot.waitUntil(lambda: not w.left.loading and "thesis.tex" in _names(w.left), timeout=20_000)
        assert w.left.error_text == ""
        assert str(gone) in w.left.message.text() and "home folder" in w.left.message.text()
        # A folder the person opens later that fails is reported, not swapped for home.
        with qtbot.waitSignal(w.left.listed, timeout=20_000):
            w.left.navigate(str(tmp_path / "nothing-here"))
        assert w.left.address is not None and w.left.address.path == str(tmp_path / "nothing-here")
        assert w.left.error_text
    finally:
        w.shutdown()


@pytest.fixture
def demo() -> Iterator[DemoServers]:
    d = DemoServers()
    d.start()
    yield d
    from ferry.backends import sftp

    sftp.close_all()
    d.stop()


def test_the_demo_shows_its_s3_bucket_and_leaves_the_last_folders_alone(
    qtbot: QtBot, home: Path, tmp_path: Path, demo: DemoServers
) -> None:
    mine = tmp_path / "my-data"
    mine.mkdir()
    s = settings()
    s.setValue("panes/left/address", str(mine))
    s.sync()
    assert not [p for p in demo.problems if "S3" in p], demo.problems  # moto (the demo extra) is installed
    w = MainWindow(restore=False)
    qtbot.addWidget(w)
    w.show()
    try:
        demo.open_in(w)
        labels = [w.right.site.itemText(i) for i in range(w.right.site.count())]
        assert f"Demo: s3://{BUCKET}/" in labels
        with qtbot.waitSignal(w.right.listed, timeout=30_000):
            w.right.navigate(f"s3://{BUCKET}/")
        assert {"README.txt", "results"} <= _names(w.right), w.right.error_text
        qtbot.waitUntil(lambda: not w.left.loading, timeout=20_000)
    finally:
        w.shutdown()  # saves the window's state, as quitting does
    assert settings().value("panes/left/address") == str(mine)  # not the demo's temporary folder


def test_both_panes_show_a_moves_result(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "a.txt").write_text("a")
    (src / "keep.txt").write_text("k")
    with qtbot.waitSignal(window.left.listed, timeout=20_000):
        window.left.navigate(str(src))
    with qtbot.waitSignal(window.right.listed, timeout=20_000):
        window.right.navigate(str(dst))
    window._set_active(window.left)
    row = next(r for r in range(window.left.model.rowCount()) if window.left.model.index(r, 0).data() == "a.txt")
    window.left.view.selectionModel().select(
        window.left.model.index(row, 0),
        QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows,
    )
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.action_map["move"].trigger()
    assert wait_job(qtbot, created.args[0], ("done", "failed")) == "done"
    assert not (src / "a.txt").exists()
    qtbot.waitUntil(lambda: "a.txt" in _names(window.right), timeout=10_000)
    qtbot.waitUntil(lambda: "a.txt" not in _names(window.left), timeout=10_000)
    assert "keep.txt" in _names(window.left)


def test_a_pane_still_listing_when_a_move_ends_lists_again(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    """The race the window met: the source pane was (re)listing when the move ended, so it was
    skipped and kept showing the moved file. Its listing read the folder before the sources went."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    (src / "keep.txt").write_text("k")
    pane = window.left
    with qtbot.waitSignal(pane.listed, timeout=20_000):
        pane.navigate(str(src))
    before = list(pane.model.all_entries())
    sort_state = pane.model.sort_state()
    (src / "a.txt").unlink()  # the move deleted its source...
    pane.loading = True  # ...while a listing that had already read the folder was still under way
    window._job_changed(999, "done", None)
    # That listing ends, with what it read before the move:
    pane._on_done(pane.generation, before, set(), time.monotonic(), sort_state)
    assert "a.txt" in _names(pane)
    qtbot.waitUntil(lambda: not pane.loading and _names(pane) == {"keep.txt"}, timeout=10_000)
