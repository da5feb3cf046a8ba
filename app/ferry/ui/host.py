"""What the window's helpers use of it: :class:`WindowHost`, a protocol ``MainWindow`` fulfils.

File operations (:mod:`ferry.ui.file_ops`), transfer requests (:mod:`ferry.ui.transfer_requests`)
and job control (:mod:`ferry.ui.job_control`) act on the panes and the queue and ask the person
things, but they neither build widgets nor import the window (which would make an import
cycle). They reach it through this protocol, at call time: the dialog seams (``confirm``,
``ask_text``, ``show_error``, ``choose_folder``, ``confirm_transfer``, ``exec_watch_dialog``)
are what tests replace on the window.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from PySide6.QtWidgets import QWidget

from ferry.ui.bridge import Bridge
from ferry.ui.dialogs.drop_confirm import DropConfirmDialog
from ferry.ui.pane import Pane
from ferry.ui.queue_model import QueueModel
from ferry.ui.queue_service import QueuePoller, QueueService, SharedPool
from ferry.ui.settings import TransferSettings
from ferry.ui.watch_service import WatchManager

T = TypeVar("T")


class WindowHost(Protocol):
    left: Pane
    right: Pane
    active: Pane
    bridge: Bridge
    pool: SharedPool
    store_path: Path | None
    transfer_settings: TransferSettings
    service: QueueService
    poller: QueuePoller
    watches: WatchManager
    queue_model: QueueModel

    @property
    def other(self) -> Pane: ...

    def say(self, text: str) -> None:
        """One line in the status bar."""

    def job_queued(self, job_id: int, *, watch: bool = False) -> None:
        """A job was created: the panel shows it and the window's runner runs it (``watch``: a
        folder watch's job, run by its own watcher)."""

    # ---- dialog seams (tests replace these on the window)
    def confirm(self, title: str, text: str) -> bool: ...

    def ask_text(self, title: str, label: str, text: str = "") -> str | None: ...

    def show_error(self, text: str, detail: str = "") -> None: ...

    def choose_folder(self, title: str) -> str | None: ...

    def confirm_transfer(self, dlg: DropConfirmDialog) -> bool: ...

    def exec_watch_dialog(self, dlg: QWidget) -> bool: ...

    def run_async(
        self,
        fn: Callable[[], T],
        on_done: Callable[[T], object],
        on_error: Callable[[BaseException], object] | None = None,
    ) -> None: ...
