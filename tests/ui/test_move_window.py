"""F6 creates a move job in the engine: the move is the job's own option, kept in the queue, so
closing the window before it ran does not turn it into a copy."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QItemSelectionModel

from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from ferry.ui.main_window import MainWindow
from ferry.ui.settings import TransferSettings


def _window(qtbot, **settings: object) -> MainWindow:  # type: ignore[no-untyped-def]
    w = MainWindow(restore=False, start_queue=False)
    w.transfer_settings = TransferSettings(**{"confirm_drops": False, "on_conflict": "skip", **settings})  # type: ignore[arg-type]
    w.service.start = lambda: None  # type: ignore[method-assign]  # the window runs nothing: the queue keeps it
    qtbot.addWidget(w)
    w.show()
    return w


def _show(qtbot, pane, folder: Path) -> None:  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(pane.listed, timeout=20_000):
        pane.navigate(str(folder))


def _select_all(pane) -> None:  # type: ignore[no-untyped-def]
    sm = pane.view.selectionModel()
    for row in range(pane.model.rowCount()):
        sm.select(
            pane.model.index(row, 0),
            QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
        )


def test_f6_move_is_kept_with_the_job_after_the_window_closes(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "folder").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "folder" / "b.txt").write_text("b")
    dst.mkdir()
    w = _window(qtbot)
    _show(qtbot, w.left, src)
    _show(qtbot, w.right, dst)
    w._set_active(w.left)
    _select_all(w.left)
    with qtbot.waitSignal(w.job_created, timeout=20_000) as created:
        w.action_map["move"].trigger()
    job_id = created.args[0]
    w.shutdown()  # closed before anything ran
    store = Store()
    try:
        job = store.job(job_id)
        assert job.options.move and not job.options.allow_unverified_move and job.state == "queued"
        assert (src / "a.txt").exists()
        # Later, 'ferry queue run' (here: the same engine in this process) moves it.
        assert Runner(store, RunConfig(job_ids=[job_id])).run().jobs == {job_id: "done"}
    finally:
        store.close()
    assert (dst / "a.txt").read_text() == "a" and (dst / "folder" / "b.txt").read_text() == "b"
    assert not (src / "a.txt").exists() and not (src / "folder").exists()


def test_f6_with_size_checks_asks_before_accepting_an_unverified_move(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "a.txt").write_text("a")
    w = _window(qtbot, verify="size")
    _show(qtbot, w.left, src)
    _show(qtbot, w.right, dst)
    w._set_active(w.left)
    _select_all(w.left)
    asked: list[str] = []

    def refuse(title: str, text: str) -> bool:
        asked.append(text)
        return False

    w.confirm = refuse  # type: ignore[method-assign]
    w.action_map["move"].trigger()
    qtbot.wait(300)
    assert asked and "not by checksum" in asked[0]
    store = Store()
    try:
        assert store.jobs() == []  # declined: no job
        w.confirm = lambda title, text: True  # type: ignore[method-assign]
        with qtbot.waitSignal(w.job_created, timeout=20_000) as created:
            w.action_map["move"].trigger()
        opts = store.job(created.args[0]).options
        assert opts.move and opts.allow_unverified_move and opts.verify == "size"
    finally:
        store.close()
        w.shutdown()
