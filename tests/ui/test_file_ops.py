"""F7 new folder, F2 rename, Del delete (with counts), F6 move (sources go only after verification),
open (remote files through the cache, reused while unchanged)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, Qt, QUrl
from PySide6.QtGui import QDesktopServices

from ferry.backends.memory import MemoryBackend, get_store
from ferry.core.address import parse_address
from ferry.core.errors import PermissionDenied
from ferry.ui import open_cache
from ferry.ui.main_window import MainWindow
from ui.helpers_ui import fill_memory, wait_job


def listed(qtbot, pane, target) -> None:  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(pane.listed, timeout=20_000):
        pane.navigate(target)


def select(pane, *names: str) -> None:  # type: ignore[no-untyped-def]
    sm = pane.view.selectionModel()
    sm.clearSelection()
    for row, e in enumerate(pane.model.entries()):
        if e.name in names:
            sm.select(
                pane.model.index(row, 0),
                QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
            )
            sm.setCurrentIndex(pane.model.index(row, 0), QItemSelectionModel.SelectionFlag.NoUpdate)


def names(pane) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.name for e in pane.model.entries()]


def test_f7_new_folder_and_f2_rename_in_place(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a.txt").write_text("a")
    pane = window.left
    listed(qtbot, pane, str(tmp_path))
    window._set_active(pane)
    window.ask_text = lambda title, label, text="": "new folder"  # type: ignore[method-assign]
    with qtbot.waitSignal(pane.listed, timeout=10_000):
        window.action_map["mkdir"].trigger()
    assert (tmp_path / "new folder").is_dir() and "new folder" in names(pane)
    window.ask_text = lambda title, label, text="": "../escape"  # type: ignore[method-assign]
    shown: list[str] = []
    window.show_error = lambda text, detail="": shown.append(text)  # type: ignore[method-assign]
    window.action_map["mkdir"].trigger()
    assert shown and "cannot be a folder name" in shown[0] and not (tmp_path.parent / "escape").exists()
    # Rename edits the name in place; the model hands the new name to the window.
    row = names(pane).index("a.txt")
    with qtbot.waitSignal(pane.listed, timeout=10_000):
        pane.model.setData(pane.model.index(row, 0), "b.txt", Qt.ItemDataRole.EditRole)
    assert (tmp_path / "b.txt").read_text() == "a" and not (tmp_path / "a.txt").exists()
    assert "b.txt" in names(pane)


def test_delete_says_how_many_files_and_bytes_and_cancel_keeps_them(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "set"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "x.bin").write_bytes(b"x" * 1024)
    (d / "y.bin").write_bytes(b"y" * 1024)
    (tmp_path / "keep.txt").write_text("k")
    pane = window.left
    listed(qtbot, pane, str(tmp_path))
    window._set_active(pane)
    select(pane, "set")
    asked: list[str] = []

    def refuse(title: str, text: str) -> bool:
        asked.append(text)
        return False

    window.confirm = refuse  # type: ignore[method-assign]
    window.action_map["delete"].trigger()
    qtbot.waitUntil(lambda: bool(asked))
    assert "2 file(s), 2.0 KiB" in asked[0] and "set" in asked[0]
    assert d.exists()
    window.confirm = lambda title, text: True  # type: ignore[method-assign]
    with qtbot.waitSignal(pane.listed, timeout=10_000):
        window.action_map["delete"].trigger()
    assert not d.exists() and (tmp_path / "keep.txt").exists()


def test_f6_move_deletes_sources_only_after_every_file_verified(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    (src / "m1.txt").write_text("one")
    (src / "m2.txt").write_text("two")
    fill_memory("movedst", "/in", 0)
    listed(qtbot, window.left, str(src))
    listed(qtbot, window.right, "memory://movedst/in")
    window._set_active(window.left)
    select(window.left, "m1.txt", "m2.txt")
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.action_map["move"].trigger()
    errors: list[str] = []
    window.show_error = lambda text, detail="": errors.append(text)  # type: ignore[method-assign]
    wait_job(qtbot, created.args[0])
    qtbot.waitUntil(lambda: errors or (not (src / "m1.txt").exists() and not (src / "m2.txt").exists()), timeout=20_000)
    assert not errors, errors
    b = MemoryBackend(parse_address("memory://movedst/"))
    assert b.stat("/in/m1.txt").size == 3 and b.stat("/in/m2.txt").size == 3
    # A move whose copy fails keeps every source.
    (src / "m3.txt").write_text("three")
    get_store("movedst").fail_on("open_write", "m3", PermissionDenied("Permission denied"), times=None)
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(src / "m3.txt")], "memory://movedst/in/", move=True)
    wait_job(qtbot, created.args[0], ("failed",))
    qtbot.wait(500)
    assert (src / "m3.txt").read_text() == "three"


def test_open_downloads_to_the_cache_once_and_reuses_it_while_unchanged(qtbot, window: MainWindow, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    opened: list[str] = []

    def open_url(url: QUrl) -> bool:
        opened.append(url.toLocalFile())
        return True

    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(open_url))
    fill_memory("openme", "/docs", 0)
    b = MemoryBackend(parse_address("memory://openme/"))
    with b.open_write("/docs/paper.txt", size=5, token="t") as w:
        w.write(b"draft")
        w.finish()
        w.commit(overwrite=False)
    listed(qtbot, window.right, "memory://openme/docs")
    entry = window.right.model.entry(0)
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.open_entry(window.right, entry)
    wait_job(qtbot, created.args[0])
    qtbot.waitUntil(lambda: len(opened) == 1)
    cached = Path(opened[0])
    assert cached.read_bytes() == b"draft" and cached.is_relative_to(open_cache.cache_root())
    # Unchanged: opens from the cache without a new job.
    jobs_before = len(window.queue_model.all_jobs())
    window.open_entry(window.right, entry)
    assert len(opened) == 2 and opened[1] == opened[0]
    qtbot.wait(300)
    assert len(window.queue_model.all_jobs()) == jobs_before
    # Changed remotely (new size): downloaded again.
    with b.open_write("/docs/paper.txt", size=7, token="u") as w:
        w.write(b"final!!")
        w.finish()
        w.commit(overwrite=True)
    listed(qtbot, window.right, "memory://openme/docs")
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.open_entry(window.right, window.right.model.entry(0))
    wait_job(qtbot, created.args[0])
    qtbot.waitUntil(lambda: len(opened) == 3)
    assert Path(opened[2]).read_bytes() == b"final!!"


def test_cache_paths_never_escape_the_cache() -> None:
    hostile = parse_address("memory://evil/../../etc/passwd")
    assert open_cache.cache_path(hostile).is_relative_to(open_cache.cache_root())
    tricky = parse_address("memory://evil/a/..%2F../b\x1b")
    assert open_cache.cache_path(tricky).is_relative_to(open_cache.cache_root())


def test_download_to_a_chosen_folder(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fill_memory("dl", "/pub", 3, size=10)
    listed(qtbot, window.left, "memory://dl/pub")
    window._set_active(window.left)
    select(window.left, "file-000001.dat")
    target = tmp_path / "downloads"
    target.mkdir()
    window.choose_folder = lambda title: str(target)  # type: ignore[method-assign]
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.action_map["download"].trigger()
    wait_job(qtbot, created.args[0])
    assert (target / "file-000001.dat").read_bytes() == bytes(10)
    assert sorted(p.name for p in target.iterdir()) == ["file-000001.dat"]
