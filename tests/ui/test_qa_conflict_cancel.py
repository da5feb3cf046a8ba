"""QA of issue 20 in the running window: the file-exists question can cancel its job.

Found under Xvfb: the question offered Overwrite, Skip, Rename, Resume, Overwrite if newer and
Overwrite if different, but not "cancel the job" that the issue lists with WinSCP's and
FileZilla's choices; a person facing a folder of conflicts had to answer each one, or find the
job in the panel while the question waited. Real copies between local folders."""

from __future__ import annotations

import os
import time
from pathlib import Path

from PySide6.QtWidgets import QDialog
from pytestqt.qtbot import QtBot

from ferry.transfers.store import Store
from ferry.ui.dialogs.conflict import CANCEL_JOB, ConflictDialog
from ferry.ui.main_window import MainWindow
from ui.helpers_ui import wait_job


def test_cancel_job_in_the_question_keeps_the_file_and_asks_no_more(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    (dest / "src").mkdir(parents=True)
    src.mkdir()
    old = time.time() - 86_400
    for i in range(6):  # every file is there already, older and of another size
        (src / f"f{i}.dat").write_bytes(os.urandom(2000))
        (dest / "src" / f"f{i}.dat").write_bytes(b"old")
        os.utime(dest / "src" / f"f{i}.dat", (old, old))
    window.transfer_settings.on_conflict = "ask"
    asked: list[str] = []

    def cancel_the_job(d: QDialog) -> None:
        assert isinstance(d, ConflictDialog)
        asked.append(d.windowTitle())
        assert d.buttons[CANCEL_JOB].isVisible() and not d.buttons[CANCEL_JOB].isDefault()
        d.buttons[CANCEL_JOB].click()

    window.bridge.prompt_shown.connect(cancel_the_job)
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(src)], str(dest) + "/")
    job = created.args[0]
    assert wait_job(qtbot, job, ("cancelled",), timeout=60_000) == "cancelled"
    assert asked == ["File already exists"]  # one question, then no more for this job
    assert all((dest / "src" / f"f{i}.dat").read_bytes() == b"old" for i in range(6))
    store = Store()
    try:
        assert store.job(job).state == "cancelled"
    finally:
        store.close()


def test_cancel_job_on_a_one_file_job_ends_it_cancelled(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    """Found in the running window: a one-file job answered "Cancel job" ended "done: 1 skipped"."""
    src, dest = tmp_path / "notes.txt", tmp_path / "dest"
    dest.mkdir()
    src.write_text("new notes, longer")
    (dest / "notes.txt").write_text("old")
    window.transfer_settings.on_conflict = "ask"
    window.bridge.prompt_shown.connect(
        lambda d: d.buttons[CANCEL_JOB].click() if isinstance(d, ConflictDialog) else None
    )
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(src)], str(dest) + "/")
    assert wait_job(qtbot, created.args[0], ("cancelled",), timeout=60_000) == "cancelled"
    assert (dest / "notes.txt").read_text() == "old"
    assert sorted(p.name for p in dest.iterdir()) == ["notes.txt"]  # no partial left
