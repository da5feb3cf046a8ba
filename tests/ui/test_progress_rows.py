"""A job row counts bytes in flight (issue 20, "Progress that tells the truth").

One big file does not read 0 % and 0 B/s until it completes; a paused job shows the bytes its
partial file already holds; the status bar says what the rows say. The figures come from the
engine (the runner's counters, and what it saves when it lets a job go), on a real local copy."""

from __future__ import annotations

import os
from pathlib import Path

from pytestqt.qtbot import QtBot

from ferry.core.progress import Accounting
from ferry.ui.main_window import MainWindow
from ferry.ui.queue_model import BYTES, PROGRESS, SPEED
from ferry.ui.queue_service import JobRow
from ui.helpers_ui import job_state, wait_job

MIB = 1024 * 1024


def big_file(path: Path, size: int) -> Path:
    with open(path, "wb") as f:  # random head and tail, a sparse middle: quick to make
        f.write(os.urandom(MIB))
        f.truncate(size - MIB)
        f.seek(size - MIB)
        f.write(os.urandom(MIB))
    return path


def row_of(window: MainWindow, job_id: int) -> JobRow | None:
    return next((j for j in window.queue_model.jobs() if j.id == job_id), None)


def cell(window: MainWindow, job_id: int, col: int) -> str:
    model = window.queue_model
    r = next(i for i, j in enumerate(model.jobs()) if j.id == job_id)
    return str(model.index(r, col).data())


def partial_size(dest: Path) -> int:
    return sum(p.stat().st_size for p in dest.iterdir() if p.name.endswith(".ferry-part"))


def test_one_big_file_counts_its_bytes_while_it_runs(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    src = big_file(tmp_path / "big.bin", 300 * MIB)
    dest = tmp_path / "out"
    dest.mkdir()
    window.transfer_settings.bwlimit = "40M"  # about 8 s: long enough to read the row mid-way
    window.service.apply_limits()  # a runner started with the window takes it too
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(src)], str(dest) + "/")
    job_id = created.args[0]

    def midway() -> None:
        row = row_of(window, job_id)
        assert row is not None and row.state == "running"
        assert 0.1 * row.bytes_total < row.bytes_done < row.bytes_total and row.files_done == 0
        assert row.speed > 0

    qtbot.waitUntil(midway, timeout=60_000)
    row = row_of(window, job_id)
    assert row is not None
    progress, speed = cell(window, job_id, PROGRESS), cell(window, job_id, SPEED)
    assert progress != "0%" and progress.endswith("%")
    assert speed and not speed.startswith("0 ")
    # The status bar sums the running rows: with one job, it says what the row says.
    assert window.progress.isVisible()
    assert window.progress.format() == progress
    assert window.speed_label.text().startswith(speed)
    assert wait_job(qtbot, job_id, ("done",), timeout=120_000) == "done"


def test_a_paused_job_shows_the_bytes_in_its_partial_file(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"  # no holes: the partial file's size is the bytes it holds
    src.write_bytes(os.urandom(64 * MIB))
    dest = tmp_path / "out"
    dest.mkdir()
    window.transfer_settings.bwlimit = "4M"  # 16 s: paused long before it ends
    window.service.apply_limits()  # a runner started with the window takes it too
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(src)], str(dest) + "/")
    job_id = created.args[0]
    qtbot.waitUntil(lambda: partial_size(dest) > 2 * MIB, timeout=60_000)
    window.queue_action("pause", [job_id])
    assert wait_job(qtbot, job_id, ("paused",), timeout=30_000) == "paused"
    # The store says paused at once; the runner lets the file go (and saves its bytes) just after.
    qtbot.waitUntil(lambda: not window.service.running, timeout=30_000)
    held = partial_size(dest)
    assert 0 < held < 64 * MIB

    def shown() -> None:
        row = row_of(window, job_id)
        assert row is not None and row.state == "paused"
        assert row.bytes_done == held and row.partial_bytes == held

    qtbot.waitUntil(shown, timeout=10_000)
    assert cell(window, job_id, PROGRESS) == f"{held / (64 * MIB) * 100:.0f}%" != "0%"
    assert cell(window, job_id, BYTES).split(" / ")[0] != "0 B"
    # Resumed, it goes on from there and ends with every byte.
    window.transfer_settings.bwlimit = ""
    window.service.apply_limits()
    window.queue_action("resume", [job_id])
    assert wait_job(qtbot, job_id, ("done",), timeout=60_000) == "done"
    assert (dest / "big.bin").stat().st_size == 64 * MIB
    assert job_state(job_id) == "done"

    def finished() -> None:
        row = row_of(window, job_id)
        assert row is not None and row.state == "done" and row.partial_bytes == 0
        assert row.bytes_done == row.bytes_total == 64 * MIB

    qtbot.waitUntil(finished, timeout=10_000)


def test_accounting_keeps_a_files_bytes_in_flight_until_the_store_has_it() -> None:
    a = Accounting()
    a.begin(7, 1)
    a.add_resumed(100, 7, 1)  # a partial file's bytes: in flight, not speed
    a.add_bytes(50, 7, 1)
    a.begin(7, 2)
    a.add_bytes(30, 7, 2)
    assert a.partial_bytes() == {7: 180} and a.moved_bytes() == {7: 80}
    a.settle(1)  # finished: the store counts it now
    assert a.job_partial_bytes(7) == 30
    a.settle(2, kept=True)  # paused: its partial file keeps the bytes
    assert a.job_partial_bytes(7) == 30
    a.begin(7, 2)  # runs again: counted again as it resumes
    assert a.job_partial_bytes(7) == 0
    a.add_bytes(5, 7, 2)
    a.forget_job(7)
    assert a.partial_bytes() == {} and a.moved_bytes() == {}
