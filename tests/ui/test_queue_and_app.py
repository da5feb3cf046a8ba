"""Queue actions from the transfers panel, single-instance hand-over, start-up without a display,
and the PySide6 signal-emission trap (6.12 aborts after a few hundred emits on Python 3.11)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, QObject, Signal
from PySide6.QtGui import QFontDatabase
from pytestqt.qtbot import QtBot

from ferry.backends.memory import MemoryBackend, get_store
from ferry.core.address import parse_address
from ferry.transfers.store import Store
from ferry.ui.bridge import Bridge
from ferry.ui.main_window import MainWindow
from ui.helpers_ui import fill_memory, job_state, wait_job


def select_job(window: MainWindow, job_id: int) -> None:
    model, view = window.queue_model, window.queue_panel.view
    row = next(r for r, j in enumerate(model.jobs()) if j.id == job_id)
    flags = QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
    view.selectionModel().select(model.index(row, 0), flags)


def test_pause_resume_cancel_and_clear_from_the_panel(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    window.transfer_settings.start_at = (datetime.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(src / "a.txt")], str(tmp_path / "later") + "/")
    later = created.args[0]
    qtbot.waitUntil(lambda: any(j.id == later for j in window.queue_model.jobs()))
    panel = window.queue_panel
    select_job(window, later)
    assert panel.buttons["pause"].isEnabled() and not panel.buttons["resume"].isEnabled()
    panel.buttons["pause"].click()
    qtbot.waitUntil(lambda: job_state(later) == "paused")
    qtbot.waitUntil(lambda: panel.buttons["resume"].isEnabled())
    panel.buttons["resume"].click()
    qtbot.waitUntil(lambda: job_state(later) == "queued")
    select_job(window, later)
    qtbot.waitUntil(lambda: panel.buttons["cancel"].isEnabled())
    panel.buttons["cancel"].click()
    qtbot.waitUntil(lambda: job_state(later) == "cancelled")
    assert not (tmp_path / "later" / "a.txt").exists()
    panel.buttons["clear"].click()
    qtbot.waitUntil(lambda: window.queue_model.rowCount() == 0)
    store = Store()
    assert store.jobs() == []


def test_pausing_a_running_job_keeps_its_partial_file_and_resume_finishes_it(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(8 * 1024 * 1024))
    fill_memory("slowdst", "/in", 0)
    # About 32 s for the file at this limit: room to pause it even on a loaded CI machine, where
    # the window may take seconds to show the job running. The limit is lifted for the resume.
    window.transfer_settings.bwlimit = "256K"
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(big)], "memory://slowdst/in/")
    job_id = created.args[0]
    qtbot.waitUntil(lambda: job_state(job_id) == "running", timeout=20_000)
    qtbot.waitUntil(lambda: any(j.id == job_id and j.state == "running" for j in window.queue_model.jobs()))
    select_job(window, job_id)
    qtbot.waitUntil(lambda: window.queue_panel.buttons["pause"].isEnabled())
    window.queue_panel.buttons["pause"].click()
    assert wait_job(qtbot, job_id, ("paused",), timeout=20_000) == "paused"
    backend = MemoryBackend(parse_address("memory://slowdst/"))
    assert not backend.exists("/in/big.bin")  # nothing under the final name while paused
    window.transfer_settings.bwlimit = ""
    window.service.apply_limits()  # what the settings dialog does: the running service takes it
    window.queue_action("resume", [job_id])
    assert wait_job(qtbot, job_id, ("done",), timeout=20_000) == "done"
    assert backend.stat("/in/big.bin").size == 8 * 1024 * 1024
    with backend.open_read("/in/big.bin") as f:
        assert f.read() == big.read_bytes()
    assert get_store("slowdst")  # the same store the window wrote to


def test_a_second_launch_opens_its_url_in_the_running_window(qtbot, window: MainWindow, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    from ferry.ui.single_instance import InstanceServer

    fill_memory("inst", "/shared/data", 3)
    server = InstanceServer(window.open_locations)
    assert server.listening
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferry", "memory://inst/shared/data"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        qtbot.waitUntil(lambda: proc.poll() is not None, timeout=30_000)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "running Ferry window" in out
    qtbot.waitUntil(lambda: window.active.address is not None and window.active.address.path == "/shared/data")
    qtbot.waitUntil(lambda: window.active.model.rowCount() == 3)
    server.close()


def test_without_a_display_ferry_says_so_and_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["FERRY_DATA_DIR"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-m", "ferry"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "ferry --help" in res.stderr and "no display" in res.stderr
    assert "Traceback" not in res.stderr


class Emitter(QObject):
    ping = Signal(object)


def test_signals_survive_many_thousands_of_emits(qtbot) -> None:  # type: ignore[no-untyped-def]
    """PySide6 6.12.0 on Python 3.11 aborts (bool_dealloc) after a few hundred emits: pinned 6.11.3."""
    e = Emitter()
    got: list[int] = []
    e.ping.connect(got.append)
    for i in range(20_000):
        e.ping.emit(i)
    assert len(got) == 20_000
    bridge = Bridge()
    delivered: list[int] = []

    def worker() -> None:
        for i in range(20_000):
            bridge.post(lambda i=i: delivered.append(i))  # type: ignore[misc]

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    qtbot.waitUntil(lambda: len(delivered) == 20_000, timeout=30_000)
    assert delivered == list(range(20_000))  # in order, on the UI thread
    bridge.shutdown()


def test_fonts_are_available_so_text_is_not_boxes(qapp) -> None:  # type: ignore[no-untyped-def]
    assert QFontDatabase.families(), "no font family found: every glyph would render as a box"


def test_main_window_constructs_with_no_arguments_for_the_selftest(qapp, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    w = MainWindow()
    w.show()
    w.close()
    assert w._closed


def test_keep_awake_holds_a_lock_only_while_asked_and_gives_up_where_it_cannot() -> None:
    from ferry.ui.keep_awake import KeepAwake

    k = KeepAwake()

    # Read afresh through a call: mypy would keep an assert's narrowing of these properties
    # across hold() and release(), and call what follows unreachable.
    def held() -> bool:
        return k.held

    def available() -> bool:
        return k.available

    if not k.available:
        k.hold()
        assert not k.held
        return
    k.hold()
    proc = k._proc
    assert proc is not None
    try:
        proc.wait(1.0)  # without logind (a container) systemd-inhibit exits at once
    except subprocess.TimeoutExpired:
        assert k.held  # a real lock: held until released
        k.release()
        assert not held() and proc.poll() is not None
        return
    k.hold()  # notices the failed lock and stops trying, saying why
    assert not available() and "exited" in k.failed
    k.hold()
    assert k._proc is None
