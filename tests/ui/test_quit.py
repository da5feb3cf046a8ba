"""Quitting with transfers unfinished asks what to do with them (issue 20, "Safety first").

Enter keeps them running in a headless ``ferry queue run`` that outlives the window; Pause and
Cancel do what their buttons say; Escape (Don't quit) leaves the window open and the job running.
The dialog is the real one, answered with key presses and button clicks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMessageBox, QPushButton
from pytestqt.qtbot import QtBot

from ferry.transfers.store import Store
from ferry.ui.main_window import MainWindow
from ui.helpers_ui import job_state

SIZE = 4 * 1024 * 1024


def answer_quit(how: str) -> list[str]:
    """Answer the quit dialog when it opens: 'enter', 'escape', or a button (QuitChoice value)."""
    seen: list[str] = []

    def go() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox) or box.objectName() != "quitDialog":
            QTimer.singleShot(20, go)
            return
        seen.append(box.text())
        if how == "enter":
            QTest.keyClick(box, Qt.Key.Key_Return)
        elif how == "escape":
            QTest.keyClick(box, Qt.Key.Key_Escape)
        else:
            button = box.findChild(QPushButton, f"quit-{how}")
            assert button is not None
            QTest.mouseClick(button, Qt.MouseButton.LeftButton)

    QTimer.singleShot(0, go)
    return seen


def start_slow_job(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> tuple[int, Path, Path]:
    window.ask_before_quit = True  # off for other tests (see conftest)
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(SIZE))
    dest = tmp_path / "out"
    dest.mkdir()
    window.transfer_settings.bwlimit = "256K"  # about 16 s for the file: running when we quit, even on a loaded machine
    window.service.apply_limits()  # a runner started with the window takes it too
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(src)], str(dest) + "/")
    job_id: int = created.args[0]
    qtbot.waitUntil(lambda: job_state(job_id) == "running", timeout=20_000)
    return job_id, src, dest


def partials(dest: Path) -> list[Path]:
    return [p for p in dest.iterdir() if p.name != "big.bin"]


def test_enter_keeps_the_transfer_running_in_a_background_process(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    job_id, src, dest = start_slow_job(qtbot, window, tmp_path)
    seen = answer_quit("enter")
    assert window.close()
    assert seen and "1 transfer is not finished" in seen[0]
    assert not window.service._thread.is_alive()  # the window's own runner stopped
    proc = window.background_runner
    assert proc is not None
    try:
        assert os.getsid(proc.pid) != os.getsid(0)  # its own session: outlives the window's
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert job_state(job_id) == "done"
    assert (dest / "big.bin").read_bytes() == src.read_bytes()
    log = (Path(os.environ["FERRY_DATA_DIR"]) / "background-run.log").read_text()
    assert "job " + str(job_id) + " done" in log


def test_pause_pauses_the_job_and_keeps_its_partial_file(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    job_id, _src, dest = start_slow_job(qtbot, window, tmp_path)
    qtbot.waitUntil(lambda: bool(partials(dest)), timeout=10_000)
    answer_quit("pause")
    assert window.close()
    assert window.background_runner is None
    assert job_state(job_id) == "paused"
    assert not (dest / "big.bin").exists() and partials(dest)


def test_cancel_cancels_the_job_and_removes_its_partial_file(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    job_id, _src, dest = start_slow_job(qtbot, window, tmp_path)
    qtbot.waitUntil(lambda: bool(partials(dest)), timeout=10_000)
    answer_quit("cancel")
    assert window.close()
    assert window.background_runner is None
    assert job_state(job_id) == "cancelled"
    assert list(dest.iterdir()) == []


def test_the_keep_button_and_escape(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    job_id, src, dest = start_slow_job(qtbot, window, tmp_path)
    answer_quit("escape")  # Don't quit: the window stays and goes on
    assert not window.close()
    assert window.isVisible() and window.service._thread.is_alive()
    assert job_state(job_id) == "running"
    answer_quit("background")
    assert window.close()
    proc = window.background_runner
    assert proc is not None
    try:
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (dest / "big.bin").read_bytes() == src.read_bytes()


def test_no_question_when_nothing_is_unfinished(qtbot: QtBot, window: MainWindow) -> None:
    window.ask_before_quit = True
    assert window.close()  # a dialog here would never be answered: the test would hang
    assert window.background_runner is None
    store = Store()
    try:
        assert store.jobs() == []
    finally:
        store.close()


def test_the_background_command_carries_the_window_limits() -> None:
    from ferry.transfers.scheduler import RunConfig
    from ferry.ui.queue_service import background_command

    cmd = background_command(RunConfig(parallel=3, bwlimit=524288))
    assert cmd[1:] == ["-m", "ferry", "queue", "run", "--parallel", "3", "--bwlimit", "524288"]
    out = subprocess.run([*cmd[:4], "--help"], capture_output=True, text=True, timeout=60)
    assert "--bwlimit" in out.stdout
    # The window's default, Auto, carries on as auto (not as the 128 it may try at most).
    from ferry.ui.settings import TransferSettings

    assert background_command(TransferSettings().run_config())[4:] == ["run", "--parallel", "auto"]


def test_sigterm_closes_without_asking_and_the_job_resumes_later(tmp_path: Path) -> None:
    """A logout or a service manager sends SIGTERM: nobody is there to answer a question, so the
    window stops its runner (the job goes back to the queue, its partial file kept) and exits."""
    import signal
    import sys
    import time

    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(SIZE))
    dest = tmp_path / "out"
    dest.mkdir()
    ferry = [sys.executable, "-m", "ferry"]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    subprocess.run([*ferry, "queue", "add", str(src), str(dest) + "/", "--bwlimit", "256K"], env=env, check=True)
    window = subprocess.Popen([*ferry, "--new-window"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 30
        while job_state(1) != "running" and time.monotonic() < end:
            time.sleep(0.2)
        assert job_state(1) == "running"
        time.sleep(2)  # the window is shown and its signal handlers set (just after its runner starts)
        window.send_signal(signal.SIGTERM)
        assert window.wait(timeout=30) == 0  # a question would have kept it open
    finally:
        if window.poll() is None:
            window.kill()
            window.wait(10)
    assert job_state(1) == "queued"  # interrupted: the next run (or window) continues it
    assert partials(dest) and not (dest / "big.bin").exists()
