"""QA of issue 20 in the running window: a finished row's duration and average speed are legible
at 1024 pixels.

Found under Xvfb (1024x700 window, a 300 MiB file sent to the loopback sshd): the finished row's
Speed column read ``avg 85.1 …`` and its ETA column ``took 00:…``, so the duration and average
speed the issue asks each finished row to show could not be read without a tooltip."""

from __future__ import annotations

from PySide6.QtWidgets import QStyle
from pytestqt.qtbot import QtBot

from ferry.core.units import format_duration, format_rate
from ferry.ui.main_window import MainWindow
from ferry.ui.queue_model import ETA, SPEED, TITLE

MIB = 1024 * 1024


def test_finished_rows_speed_and_duration_fit_their_columns_at_1024_pixels(qtbot: QtBot, window: MainWindow) -> None:
    window.resize(1024, 700)
    qtbot.waitExposed(window)
    view = window.queue_panel.view
    header = view.header()
    fm = view.fontMetrics()
    margin = 2 * (view.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, view) + 1)
    widest = {
        SPEED: [f"avg {format_rate(888.8 * MIB)}", format_rate(888.8 * MIB)],
        ETA: [f"took {format_duration(3725)}", f"took {format_duration(55 * 3600)}"],
    }
    for col, texts in widest.items():
        for t in texts:
            assert fm.horizontalAdvance(t) + margin <= header.sectionSize(col), (t, header.sectionSize(col))
    assert header.sectionSize(TITLE) >= 280  # the Transfer column keeps its room
