"""The cyclic garbage collector runs on the UI thread while a window is open (ui/collector.py):
never inside a worker's allocation (where a pass froze the window and could destroy Qt objects
on the wrong thread), and the automatic collector is back once the window is gone."""

from __future__ import annotations

import gc
import threading
from typing import Any

from ferry.ui.main_window import MainWindow


def test_passes_run_on_the_ui_thread_never_on_a_worker(qtbot, window: MainWindow) -> None:  # type: ignore[no-untyped-def]
    assert not gc.isenabled()  # the window's collector has taken over
    threads: list[str] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            threads.append(threading.current_thread().name)

    done = threading.Event()
    kept: list[object] = []

    def storm() -> None:  # what a big listing does: many small tracked objects that survive
        for i in range(200_000):
            kept.append({"n": i})
        done.set()

    before = list(window.collector.passes)
    gc.callbacks.append(seen)
    try:
        threading.Thread(target=storm, name="storm").start()
        qtbot.waitUntil(done.is_set, timeout=30_000)
        # The storm left far more than a young pass's worth of new objects: the UI thread's
        # timer collects them (a middle pass follows only after ten young ones, so it is not
        # waited for: how many young passes the storm spans depends on the machine's speed).
        qtbot.waitUntil(lambda: window.collector.passes[0] > before[0], timeout=10_000)
    finally:
        gc.callbacks.remove(seen)
    assert threads and set(threads) == {"MainThread"}, threads
    assert len(kept) == 200_000


def test_cycles_are_still_freed_and_the_automatic_collector_comes_back(qtbot, ferry_home) -> None:  # type: ignore[no-untyped-def]
    import weakref

    class Node:
        pass

    w = MainWindow(restore=False)
    qtbot.addWidget(w)
    assert not gc.isenabled()
    a, b = Node(), Node()
    a.other, b.other = b, a  # type: ignore[attr-defined]
    gone = weakref.ref(a)
    del a, b
    from ferry.ui.collector import YOUNG

    filler = [{"n": i} for i in range(YOUNG + 100)]  # enough new objects for a young pass
    qtbot.waitUntil(lambda: gone() is None, timeout=5_000)  # freed by the timer's pass
    assert len(filler) == YOUNG + 100
    assert gone() is None
    w.shutdown()
    assert gc.isenabled()
