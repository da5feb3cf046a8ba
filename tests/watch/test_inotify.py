"""The ctypes inotify wrapper: the events the watcher relies on, and waking a blocked read."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ferry.transfers.watch_inotify import Event, Inotify

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify exists only on Linux")


def _collect(ino: Inotify, want: int, timeout: float = 10.0) -> list[Event]:
    got: list[Event] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += ino.read(0.5)
    return got


def test_reports_close_after_write_rename_into_place_and_delete(tmp_path: Path) -> None:
    from ferry.transfers import watch_inotify as wi

    ino = wi.Inotify()
    try:
        assert ino.add(str(tmp_path))
        (tmp_path / "a.h5").write_bytes(b"x" * 10)  # create, modify, close-after-write
        (tmp_path / ".b.tmp").write_bytes(b"y")
        os.rename(tmp_path / ".b.tmp", tmp_path / "b.h5")
        os.unlink(tmp_path / "a.h5")
        (tmp_path / "sub").mkdir()
        events = _collect(ino, 8)
        seen = {
            (e.name, m)
            for e in events
            for m in (wi.IN_CREATE, wi.IN_CLOSE_WRITE, wi.IN_MOVED_TO, wi.IN_DELETE)
            if e.mask & m
        }
        assert ("a.h5", wi.IN_CREATE) in seen
        assert ("a.h5", wi.IN_CLOSE_WRITE) in seen
        assert ("b.h5", wi.IN_MOVED_TO) in seen
        assert ("a.h5", wi.IN_DELETE) in seen
        subdir = [e for e in events if e.name == "sub"]
        assert subdir and subdir[0].is_dir
        assert all(e.folder == str(tmp_path) for e in events)
    finally:
        ino.close()


def test_wake_ends_a_blocked_read_and_unwatchable_folders_say_so(tmp_path: Path) -> None:
    from ferry.transfers import watch_inotify as wi

    ino = wi.Inotify()
    try:
        assert not ino.add(str(tmp_path / "missing"))  # refused: the watcher polls it instead
        ino.add(str(tmp_path))
        result: list[float] = []

        def reader() -> None:
            start = time.monotonic()
            ino.read(30)
            result.append(time.monotonic() - start)

        t = threading.Thread(target=reader)
        t.start()
        ino.wake()
        t.join(10)
        assert not t.is_alive() and result, "wake() did not end the read"
    finally:
        ino.close()
