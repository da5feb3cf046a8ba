"""Editing a remote file: the cached copy opened in the desktop's application is watched, and when
it is saved Ferry asks, then uploads it back as an ordinary (verified) job, as Cyberduck, FileZilla
and WinSCP do.

The copy is watched by polling its size and modification time once a second (editors that save by
writing a new file and renaming it over the old one leave a file-system watch on a deleted file;
a stat of a handful of paths costs nothing). A change is acted on once it has stood still for a
tick, so a save in progress is not uploaded half-written. Before uploading, the remote file is
looked at again: if it changed since it was downloaded (someone else saved it), the question says
so and the default answer keeps the remote one. Declining keeps watching: the next save asks again.

:func:`open_with_desktop` is the one place that hands a file to the desktop (``QDesktopServices``,
``xdg-open`` on Linux); it returns False when nothing can open it, and the window says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, QUrl
from PySide6.QtGui import QDesktopServices

from ferry.backends.base import Entry
from ferry.core.address import Address
from ferry.ui import open_cache
from ferry.ui.host import WindowHost

POLL_MS = 1000


def open_with_desktop(path: Path) -> bool:
    """Open ``path`` in the desktop's application for its type; False when there is none."""
    return bool(QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))))


def _state(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@dataclass
class _Watched:
    address: Address
    path: Path
    saved: tuple[int, int] | None  # the state last uploaded (or opened, or declined)
    seen: tuple[int, int] | None  # the state at the last tick
    asking: bool = False


class EditBack(QObject):
    """The cached copies opened for editing, and uploading them back when saved."""

    def __init__(
        self,
        host: WindowHost,
        upload: Callable[[Path, Address], object],
        parent: QObject | None = None,
        interval_ms: int = POLL_MS,
    ) -> None:
        super().__init__(parent)
        self.host = host
        self.upload = upload  # queues the verified upload job (the window's transfer requests)
        self.watched: dict[Path, _Watched] = {}
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.check)

    def open(self, address: Address, path: Path) -> bool:
        """Open the cached copy of ``address`` and watch it; say so when nothing can open it."""
        if not open_with_desktop(path):
            self.host.show_error(
                f"No application on this computer opens {path.name}: the downloaded copy is at {path}",
                "Ferry asks the desktop (xdg-open on Linux) to open the file; it found no application "
                "for this type of file. Set one in your desktop's settings, or open the copy yourself.",
            )
            return False
        state = _state(path)
        self.watched[path] = _Watched(address, path, state, state)
        self.timer.start()
        return True

    def stop(self) -> None:
        self.timer.stop()
        self.watched.clear()

    def check(self) -> None:
        """One tick: a copy whose new state stood still since the last tick was saved."""
        for w in list(self.watched.values()):
            now = _state(w.path)
            settled = now is not None and now == w.seen and now != w.saved
            w.seen = now
            if settled and not w.asking:
                w.asking = True
                self._look_at_remote(w)

    def _look_at_remote(self, w: _Watched) -> None:
        pool = self.host.pool

        def work() -> bool:
            """True when the remote file is still the one downloaded."""
            entry: Entry = pool.get(w.address).stat(w.address.path)
            return open_cache.is_unchanged_remote(w.address, entry)

        def failed(exc: BaseException) -> None:
            w.asking = False
            w.saved = w.seen  # asked again at the next save
            self.host.show_error(f"{w.path.name} was saved, but {w.address} cannot be reached to upload it: {exc}")

        self.host.run_async(work, lambda unchanged: self._ask(w, unchanged), failed)

    def _ask(self, w: _Watched, remote_unchanged: bool) -> None:
        w.asking = False
        w.saved = w.seen  # whatever the answer, this version has been asked about
        if remote_unchanged:
            question = f"{w.path.name} was saved. Upload it back to {w.address}?"
        else:
            question = (
                f"{w.path.name} was saved, but {w.address} changed on the server since you opened it "
                "(someone else may have saved it). Upload yours over it?"
            )
        if not self.host.confirm("Upload the edited file?", question):
            self.host.say(f"Not uploaded: {w.path.name} (the next save asks again)")
            return
        self.upload(w.path, w.address)
        self.host.say(f"Uploading {w.path.name} to {w.address} (checked like any transfer)")
