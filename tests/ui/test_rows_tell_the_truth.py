"""What a job row shows (issue 20, "Progress that tells the truth").

The progress bar fills left to right; a finished row says what happened from the typed outcomes
(``25 verified``, ``25 skipped (identical)``, ``3 failed``), the level reached, how long it took
and the average speed; a write the SFTP server refuses shows at once with its cause and what to
do; the Transfer column keeps source and destination legible at 1024 pixels, and new jobs scroll
into view. Real copies: local folders and an OpenSSH server on loopback."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from PySide6.QtCore import QModelIndex, QPoint, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QStyleOptionViewItem
from pytestqt.qtbot import QtBot

from ferry.core.outcomes import Level, OutcomeCounts, SkipReason
from ferry.ui.main_window import MainWindow
from ferry.ui.queue_model import ETA, PROGRESS, SPEED, STATE, TITLE, VERIFY, QueueModel, outcome_words
from ferry.ui.queue_panel import QueuePanel, TitleDelegate
from ferry.ui.queue_service import JobRow, QueueSnapshot
from sshd import SshServer, require_sshd
from ui.helpers_ui import wait_job


def job_row(**kw: object) -> JobRow:
    base: dict[str, object] = dict(
        id=1, state="running", message=None, sources=("/data/a",), dest="/backup/", verify="sha256",
        files_total=10, files_done=3, files_failed=0, files_skipped=0, bytes_total=1000, bytes_done=300,
        planned=True, created=0.0, finished=None,
    )  # fmt: skip
    base.update(kw)
    return JobRow(**base)  # type: ignore[arg-type]


def row_index(window: MainWindow, job_id: int, col: int) -> QModelIndex:
    model = window.queue_model
    rows = [i for i, j in enumerate(model.jobs()) if j.id == job_id]
    assert rows, f"job {job_id} is not shown (yet)"
    return model.index(rows[0], col)


def text(window: MainWindow, job_id: int, col: int) -> str:
    return str(row_index(window, job_id, col).data() or "")


def tooltip(window: MainWindow, job_id: int, col: int) -> str:
    return str(row_index(window, job_id, col).data(Qt.ItemDataRole.ToolTipRole) or "")


# ---- 3. the bar


def test_a_part_full_bar_fills_from_the_left(qtbot: QtBot) -> None:
    model = QueueModel()
    model.apply(QueueSnapshot([job_row(bytes_done=300)]))
    panel = QueuePanel(model)
    qtbot.addWidget(panel)
    panel.resize(1024, 200)
    panel.show()
    qtbot.waitExposed(panel)
    view = panel.view
    rect = view.visualRect(model.index(0, PROGRESS))
    image = view.viewport().grab(rect).toImage()
    chunk = panel.palette().color(QPalette.ColorRole.Highlight)

    def filled(x: int) -> bool:
        # Any pixel of this column of the bar in the chunk's colour (text aside).
        for y in range(image.height()):
            c = QColor(image.pixel(x, y))
            if abs(c.red() - chunk.red()) + abs(c.green() - chunk.green()) + abs(c.blue() - chunk.blue()) < 60:
                return True
        return False

    w = image.width()
    left = [filled(x) for x in range(int(w * 0.06), int(w * 0.2))]
    right = [filled(x) for x in range(int(w * 0.55), int(w * 0.95))]
    assert all(left), "the left part of a 30 % bar is not filled"
    assert not any(right), "the right part of a 30 % bar is filled (a vertical bar?)"


# ---- 4. finished rows


def test_outcome_words_say_what_happened() -> None:
    assert outcome_words(OutcomeCounts(copied={Level.CHECKSUM: 25})) == "25 verified"
    assert outcome_words(OutcomeCounts(skipped={SkipReason.IDENTICAL: 25})) == "25 skipped (identical)"
    assert outcome_words(OutcomeCounts(copied={Level.CHECKSUM: 22}, failed={"permission-denied": 3})) == (
        "22 verified, 3 failed"
    )
    # Size only is never called verified; cancelled files are said as such.
    assert outcome_words(OutcomeCounts(copied={Level.SIZE: 2}, cancelled=5)) == "2 size-checked, 5 cancelled"


def test_finished_rows_say_what_happened_how_long_and_how_fast(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(25):
        (src / f"f{i:02d}.dat").write_bytes(os.urandom(64 * 1024))
    dest = tmp_path / "dest"
    dest.mkdir()
    jobs = []
    for _ in range(2):  # the second run finds every file there, identical
        with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
            window.queue_transfer([str(src)], str(dest) + "/")
        assert wait_job(qtbot, created.args[0], ("done",), timeout=60_000) == "done"
        jobs.append(created.args[0])
    first, second = jobs

    def shown() -> None:
        assert text(window, first, STATE) == "done: 25 verified"
        assert text(window, second, STATE) == "done: 25 skipped (identical)"

    qtbot.waitUntil(shown, timeout=10_000)
    # The level reached, as the engine recorded it; nothing "checked" on a job that copied nothing.
    assert text(window, first, VERIFY) == "25 copied: 25 sha256-checked"
    assert "checked" not in text(window, second, VERIFY)
    # Duration and average speed (of what was copied; the skipping job copied nothing).
    assert text(window, first, ETA).startswith("took ") and text(window, second, ETA).startswith("took ")
    assert text(window, first, SPEED).startswith("avg ") and text(window, second, SPEED) == ""
    assert "took" in tooltip(window, first, STATE) and "on average" in tooltip(window, first, STATE)


def test_a_cancelled_job_never_shows_the_configured_method(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_text("a")
    window.transfer_settings.start_at = (datetime.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(src)], str(tmp_path / "later") + "/")
    job_id = created.args[0]
    qtbot.waitUntil(lambda: any(j.id == job_id for j in window.queue_model.jobs()), timeout=10_000)
    window.queue_action("cancel", [job_id])
    assert wait_job(qtbot, job_id, ("cancelled",), timeout=20_000) == "cancelled"
    qtbot.waitUntil(lambda: text(window, job_id, STATE).startswith("cancelled"), timeout=10_000)
    assert "checked" not in text(window, job_id, VERIFY) and "sha256" not in text(window, job_id, VERIFY)
    assert text(window, job_id, STATE) == "cancelled"  # cancelled before it was planned: no files


# ---- 5. a refused write on an SFTP server


@pytest.fixture
def server() -> Iterator[SshServer]:
    require_sshd()
    with SshServer() as s:
        yield s


@pytest.fixture
def fresh_logins() -> Iterator[None]:
    from ferry.backends import sftp

    sftp.close_all()
    yield
    sftp.close_all()


@pytest.mark.skipif(os.geteuid() != 0, reason="a folder the SFTP login may not write needs root to make")
def test_a_refused_sftp_write_shows_at_once_with_its_cause_and_advice(
    qtbot: QtBot, window: MainWindow, server: SshServer, fresh_logins: None, tmp_path: Path
) -> None:
    src = tmp_path / "data"
    (src / "locked").mkdir(parents=True)
    for i in range(22):
        (src / f"ok{i:02d}.dat").write_bytes(os.urandom(1024))
    for i in range(3):
        (src / "locked" / f"no{i}.dat").write_bytes(os.urandom(1024))
    target = server.mkdir()
    server.chown(target)
    (target / "data").mkdir()
    server.chown(target / "data")
    (target / "data" / "locked").mkdir(mode=0o755)  # root's: the login user may not write in it
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(server.ssh_config_block("cluster"))
    started = time.monotonic()
    with qtbot.waitSignal(window.job_created, timeout=30_000) as created:
        window.queue_transfer([str(src)], f"cluster:{target}/")
    job_id = created.args[0]

    def refused_shown() -> None:
        state = text(window, job_id, STATE)
        assert "failed" in state and "ermission" in state, state
        assert "check permissions" in state, state

    qtbot.waitUntil(refused_shown, timeout=30_000)
    assert time.monotonic() - started < 30  # at once, not after a minute of retries
    assert "Connection lost" not in text(window, job_id, STATE)
    assert wait_job(qtbot, job_id, ("failed",), timeout=60_000) == "failed"
    qtbot.waitUntil(lambda: text(window, job_id, STATE).startswith("failed: 22 verified, 3 failed"), timeout=10_000)
    tip = tooltip(window, job_id, STATE)
    assert "What to do: check permissions, then retry" in tip, tip
    row = next(j for j in window.queue_model.jobs() if j.id == job_id)
    assert row.problem_kind == "permission-denied"


# ---- 6. the Transfer column


def test_the_transfer_column_keeps_source_and_destination_legible_at_1024_pixels(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    deep = tmp_path / "projects" / "climate-model-ensemble" / "experiment-2024-11" / "outputs" / "member-017"
    deep.mkdir(parents=True)
    (deep / "tas_day_1990-2020.nc").write_text("x")
    dest = tmp_path / "archive" / "long-term-storage" / "climate" / "ensembles" / "incoming-from-cluster"
    window.transfer_settings.start_at = (datetime.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    window.resize(1024, 700)
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(deep / "tas_day_1990-2020.nc")], str(dest) + "/")
    job_id = created.args[0]
    qtbot.waitUntil(lambda: any(j.id == job_id for j in window.queue_model.jobs()), timeout=10_000)
    view = window.queue_panel.view
    index = row_index(window, job_id, TITLE)
    option = QStyleOptionViewItem()
    option.initFrom(view)
    option.rect = view.visualRect(index)
    delegate = view.itemDelegateForColumn(TITLE)
    assert isinstance(delegate, TitleDelegate)
    delegate.initStyleOption(option, index)
    shown = option.text
    assert option.rect.width() > 200  # the Transfer column gets the room the others leave
    assert option.fontMetrics.horizontalAdvance(shown) <= option.rect.width()
    assert shown.startswith(f"#{job_id}  ")
    assert "/tas_day_1990-2020.nc → " in shown  # the file name whole
    assert shown.endswith("cluster") and shown.count("…") == 2  # both elided in the middle
    assert tooltip(window, job_id, TITLE) == f"{deep / 'tas_day_1990-2020.nc'}\n→ {dest}"


def test_new_jobs_scroll_into_view(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_text("a")
    window.transfer_settings.start_at = (datetime.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    window.resize(1024, 700)
    window.dock.setMinimumHeight(0)
    window.resizeDocks([window.dock], [140], Qt.Orientation.Vertical)
    view = window.queue_panel.view
    last = 0
    for i in range(12):
        with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
            window.queue_transfer([str(src)], str(tmp_path / f"out{i}") + "/")
        last = created.args[0]
    qtbot.waitUntil(lambda: any(j.id == last for j in window.queue_model.jobs()), timeout=10_000)
    QApplication.processEvents()
    assert view.viewport().height() < 12 * view.sizeHintForRow(0)  # not all rows fit
    rect = view.visualRect(row_index(window, last, TITLE))
    assert view.viewport().rect().contains(QPoint(rect.left() + 2, rect.center().y())), rect
