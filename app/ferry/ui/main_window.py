"""The main window: it builds the two panes, the transfers dock, the menus and the status bar, and
wires them together.

What the commands do lives beside it: the command table in :mod:`ferry.ui.actions`, file
operations in :mod:`ferry.ui.file_ops`, drops and F5/F6 in :mod:`ferry.ui.transfer_requests`,
job control and folder watches in :mod:`ferry.ui.job_control`; they reach the window through
:class:`ferry.ui.host.WindowHost`. Everything slow goes through the bridge (``self.bridge.run``);
transfers are queued jobs run by :class:`~ferry.ui.queue_service.QueueService`, exactly as
``ferry cp``/``ferry queue`` run them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QByteArray, QEvent, QModelIndex, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeyEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QSystemTrayIcon,
    QWidget,
)

from ferry.backends.base import Entry
from ferry.core.errors import FerryError, UsageError, describe
from ferry.core.units import format_rate
from ferry.credentials import prompts
from ferry.transfers.watch import WatchSpec
from ferry.ui.actions import THEME_MODES, SiteOffers, build_actions, shortcut_lines
from ferry.ui.bridge import Bridge, background_priority
from ferry.ui.collector import Collector
from ferry.ui.compare_view import open_compare
from ferry.ui.dialogs.conflict import ConflictAsker, queue_canceller
from ferry.ui.dialogs.drop_confirm import DropConfirmDialog
from ferry.ui.dialogs.prompts import QtPrompter
from ferry.ui.file_ops import FileOps
from ferry.ui.job_control import JobControl
from ferry.ui.keep_awake import KeepAwake
from ferry.ui.pane import Pane
from ferry.ui.queue_model import QueueModel
from ferry.ui.queue_panel import QueuePanel
from ferry.ui.queue_service import QueuePoller, QueueService, QueueSnapshot, SharedPool, start_background_runner
from ferry.ui.settings import TransferSettings, load_transfer_settings, save_transfer_settings, settings
from ferry.ui.sites_menu import Place
from ferry.ui.transfer_requests import TransferRequests
from ferry.ui.watch_service import WatchManager

T = TypeVar("T")
LONG_JOB = 10.0  # seconds: jobs longer than this are announced in the notification area
log = logging.getLogger(__name__)


class QuitChoice(StrEnum):
    """What happens to unfinished transfers when the window quits (see :meth:`MainWindow.ask_quit`)."""

    BACKGROUND = "background"  # a headless 'ferry queue run' carries on (Enter: loses nothing)
    PAUSE = "pause"
    CANCEL = "cancel"
    STAY = "stay"  # do not quit (Escape)


def quit_dialog(parent: QWidget, count: int) -> tuple[QMessageBox, dict[QuitChoice, QPushButton]]:
    """The question asked when the window quits with ``count`` unfinished jobs.

    Enter keeps the transfers running in the background: of the answers that quit, it is the
    one that loses nothing (the data still arrives, verified, as if the window had stayed
    open) and the one that does what the person was waiting for. Escape does not quit.
    """
    box = QMessageBox(parent)
    box.setObjectName("quitDialog")
    box.setIcon(QMessageBox.Icon.Question)
    box.setWindowTitle("Quit Ferry")
    jobs = "1 transfer is not finished. What should happen to it?"
    box.setText(jobs if count == 1 else f"{count:,} transfers are not finished. What should happen to them?")
    box.setInformativeText(
        "Keep running: a background 'ferry queue run' finishes them without the window, and "
        "exits when the queue is empty. Pause: they wait, partial files kept, until you resume "
        "them. Cancel: partial files are removed; finished files stay."
    )
    buttons: dict[QuitChoice, QPushButton] = {
        QuitChoice.BACKGROUND: box.addButton("&Keep running in the background", QMessageBox.ButtonRole.AcceptRole),
        QuitChoice.PAUSE: box.addButton("&Pause them", QMessageBox.ButtonRole.DestructiveRole),
        QuitChoice.CANCEL: box.addButton("Ca&ncel them", QMessageBox.ButtonRole.DestructiveRole),
        QuitChoice.STAY: box.addButton("&Don't quit", QMessageBox.ButtonRole.RejectRole),
    }
    for choice, button in buttons.items():
        button.setObjectName(f"quit-{choice.value}")
    keep = buttons[QuitChoice.BACKGROUND]
    box.setDefaultButton(keep)
    box.setEscapeButton(buttons[QuitChoice.STAY])
    keep.setFocus()
    return box, buttons


class _TabSwitch(QObject):
    """Tab in a listing switches panes (as in two-pane file managers)."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.main = window

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if (
            event.type() == QEvent.Type.KeyPress
            and isinstance(event, QKeyEvent)
            and event.key() == Qt.Key.Key_Tab
            and event.modifiers() == Qt.KeyboardModifier.NoModifier
        ):
            self.main.switch_pane()
            return True
        return False


class MainWindow(QMainWindow):
    ask_before_quit = True  # quitting with unfinished transfers asks what to do with them
    job_created = Signal(int)
    job_finished = Signal(int, str)
    slow_places_loaded = Signal(int)

    def __init__(self, *, store_path: Path | None = None, restore: bool = True, start_queue: bool = True) -> None:
        super().__init__()
        self.setObjectName("ferryMainWindow")
        self.setWindowTitle("Ferry")
        self.resize(1200, 760)
        self.store_path = store_path
        # No Qt parent: the bridge must outlive the window for as long as a worker thread still
        # holds it (a late post() then lands on a live object and is dropped, instead of
        # reaching a deleted one).
        self.bridge = Bridge()
        self.pool = SharedPool()
        self.transfer_settings: TransferSettings = load_transfer_settings()
        self._closed = False
        self.background_runner: subprocess.Popen[bytes] | None = None  # started on quit, if asked
        self._job_started: dict[int, float] = {}
        self._last_snapshot: QueueSnapshot | None = None

        # Questions from the engine are answered in dialogs on this window.
        self._previous_prompter = prompts.prompter()
        prompts.set_prompter(QtPrompter(self.bridge, lambda: self))
        self.conflicts = ConflictAsker(self.bridge, lambda: self, queue_canceller(self.store_path, self.pool))

        # What the commands do (each reaches back through WindowHost).
        self.transfers = TransferRequests(self, self)
        self.files = FileOps(self, self, self.transfers)
        self.jobs = JobControl(self, self)

        self.left = Pane(self.bridge, self.pool, "leftPane")
        self.right = Pane(self.bridge, self.pool, "rightPane")
        self.active = self.left
        # The cyclic garbage collector runs on this thread, in small steps (see ui/collector.py).
        panes = (self.left, self.right)
        self.collector = Collector(self, busy=lambda: any(p.loading for p in panes))
        tab = _TabSwitch(self)
        for pane in (self.left, self.right):
            pane.activated.connect(lambda p=pane: self._set_active(p))
            pane.status.connect(self.say)
            pane.open_requested.connect(lambda e, p=pane: self.files.open_entry(p, e))
            pane.model.drop_handler = lambda srcs, dest, move: self.transfers.request_transfer(srcs, dest, move=move)
            pane.model.rename_handler = lambda e, new, p=pane: self.files.rename_entry(p, e, new)
            pane.view.installEventFilter(tab)
            pane.aws_profile_chosen = self.open_aws_profile
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.left)
        self.splitter.addWidget(self.right)
        self.setCentralWidget(self.splitter)

        self.queue_model = QueueModel(self)
        self.queue_panel = QueuePanel(self.queue_model)
        self.queue_model.rowsInserted.connect(self._show_new_jobs)
        self.queue_panel.action.connect(self.jobs.queue_action)
        self.queue_panel.clear_finished.connect(self.jobs.clear_finished)
        self.queue_panel.fix_handler = self.jobs.fix_job
        from ferry.ui.queue_menu import QueueMenu

        self.queue_menu = QueueMenu(self, self)  # the right-click menu's log view and "open destination"
        self.queue_panel.show_log.connect(self.queue_menu.show_log)
        self.queue_panel.open_destination.connect(self.queue_menu.open_destination)
        self.watches = WatchManager(
            store_path,
            parallel=lambda: self.transfer_settings.parallel,
            ask=self.conflicts,
            on_message=lambda text: self.bridge.post(lambda: self.say(text)),
        )
        self.queue_panel.can_stop = self.watches.running
        self.dock = QDockWidget("Transfers", self)
        self.dock.setObjectName("transfersDock")
        self.dock.setWidget(self.queue_panel)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.dock)

        self.status_label = QLabel("Ready")
        self.progress = QProgressBar()
        self.progress.setObjectName("overallProgress")
        self.progress.setMaximumWidth(220)
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.speed_label = QLabel("")
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.speed_label)
        self.statusBar().addPermanentWidget(self.progress)
        self.tray: QSystemTrayIcon | None = None
        self.keep_awake = KeepAwake()

        # Right-click menus offer only what each pane's site declares (no "Share link" on SFTP).
        self.site_offers = SiteOffers(self.run_async, self)
        self.site_offers.active = lambda: self.active.view
        self.action_map: dict[str, QAction] = build_actions(
            self, [self.left.view, self.right.view], self._slots(), self.site_offers
        )
        for pane in (self.left, self.right):
            # Only a folder that could be read: a failed listing (a rejected host key, a wrong
            # password) must not connect again to learn the site's offers, asking once more.
            pane.listed.connect(
                lambda _gen, p=pane: self.site_offers.learn(p.view, p.pool, None if p.error_text else p.address)
            )

        # Create (or migrate) the queue database once, here, before threads open their own
        # connections to it: two first-time opens at once would both try to migrate.
        from ferry.transfers.store import Store

        Store(store_path).close()
        self.service = QueueService(
            store_path,
            self.pool,
            self.bridge.post,
            ask=self.conflicts,
            # The window's folder watches run their own jobs; this runner leaves them alone.
            config=lambda: dataclasses.replace(self.transfer_settings.run_config(), skip_job_ids=self.watches.skip),
        )
        self.service.on_job_changed = self._job_changed
        self.service.on_thread_start = background_priority
        self.poller = QueuePoller(store_path, self.bridge.post, self._apply_snapshot)
        self.poller.on_thread_start = background_priority
        self.poller.expanded = self.queue_model.wanted
        self.poller.live = self.service.accounting  # bytes in flight of the jobs this window runs
        self.queue_model.fetch_requested = self.poller.poke
        self.poller.start()
        if start_queue:
            self.service.start()

        self._restore(restore)
        self.fetch_slow_places()

    def _slots(self) -> dict[str, Callable[[], object]]:
        """What each command of :data:`ferry.ui.actions.MENUS` does, by name."""
        files, transfers, jobs = self.files, self.transfers, self.jobs

        def all_jobs() -> list[int]:
            return [j.id for j in self.queue_model.all_jobs()]

        return {
            "copy": lambda: transfers.copy_selection(move=False),
            "move": lambda: transfers.copy_selection(move=True),
            "mkdir": files.new_folder,
            "rename": files.rename_selected,
            "delete": files.delete_selection,
            "open": files.open_selected,
            "download": transfers.download_selection,
            "properties": files.show_properties,
            "permissions": files.show_permissions,
            "share": files.share_selected,
            "watch": jobs.watch_folder,
            "quit": self.close,
            "refresh": lambda: self.active.refresh(),
            "back": lambda: self.active.back(),
            "forward": lambda: self.active.forward(),
            "up": lambda: self.active.up(),
            "path": lambda: self.active.edit_path(),
            "filter": lambda: self.active.filter.setFocus(),
            "hidden": lambda: self.active.hidden_btn.toggle(),
            "switch": self.switch_pane,
            "same": self.same_folder,
            "sites": self.show_site_manager,
            "transfers": lambda: self.dock.setVisible(not self.dock.isVisible()),
            "settings": self.show_transfer_settings,
            "pause_all": lambda: jobs.queue_action("pause", all_jobs()),
            "resume_all": lambda: jobs.queue_action("resume", all_jobs()),
            "clear": jobs.clear_finished,
            "compare": lambda: open_compare(self, self),
            **{f"theme_{mode}": partial(self.set_theme, mode) for mode in THEME_MODES},
            "shortcuts": self.show_shortcuts,
        }

    # ------------------------------------------------------------ entry points (app, demo, scripts, tests)
    def queue_transfer(
        self,
        sources: list[str],
        dest: str,
        *,
        move: bool = False,
        on_conflict: str | None = None,
        on_created: Callable[[int], object] | None = None,
    ) -> None:
        self.transfers.queue_transfer(sources, dest, move=move, on_conflict=on_conflict, on_created=on_created)

    def request_transfer(self, sources: list[str], dest: str, *, move: bool = False) -> bool:
        return self.transfers.request_transfer(sources, dest, move=move)

    def open_entry(self, pane: Pane, entry: Entry) -> None:
        self.files.open_entry(pane, entry)

    def queue_action(self, key: str, job_ids: list[int]) -> None:
        self.jobs.queue_action(key, job_ids)

    def clear_finished(self) -> None:
        self.jobs.clear_finished()

    def start_watch(self, spec: WatchSpec) -> None:
        self.jobs.start_watch(spec)

    # ------------------------------------------------------------ panes
    @property
    def other(self) -> Pane:
        return self.right if self.active is self.left else self.left

    def _set_active(self, pane: Pane) -> None:
        self.active = pane
        for p in (self.left, self.right):
            p.setProperty("active", p is pane)

    def switch_pane(self) -> None:
        self._set_active(self.other)
        self.active.focus_view()

    def same_folder(self) -> None:
        if self.active.address is not None:
            self.other.navigate(self.active.address)

    def say(self, text: str) -> None:
        self.status_label.setText(text)

    def open_locations(self, texts: list[str]) -> None:
        for t in texts[:1]:
            self.open_location(t)
        if not texts:
            self.raise_()
            self.activateWindow()

    def open_location(self, text: str) -> None:
        """Open a path or address (command line, second launch): a file opens its folder."""
        from ferry.ui.links import location_from_argument

        self.raise_()
        self.activateWindow()
        try:
            text = location_from_argument(text)
        except UsageError as exc:
            self.show_error(str(exc))
            return
        target = text
        if "://" not in text and os.path.isfile(os.path.expanduser(text)):
            target = os.path.dirname(os.path.abspath(os.path.expanduser(text)))
        self.active.navigate(target)

    # ------------------------------------------------------------ seams for dialogs (tests replace these)
    def confirm(self, title: str, text: str) -> bool:
        box = QMessageBox(
            QMessageBox.Icon.Question,
            title,
            text,
            QMessageBox.StandardButton.Ok | QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        return box.exec() == QMessageBox.StandardButton.Ok

    def ask_text(self, title: str, label: str, text: str = "") -> str | None:
        value, ok = QInputDialog.getText(self, title, label, text=text)
        return value if ok else None

    def confirm_transfer(self, dlg: DropConfirmDialog) -> bool:
        return dlg.exec() == DropConfirmDialog.DialogCode.Accepted

    def choose_folder(self, title: str) -> str | None:
        from PySide6.QtWidgets import QFileDialog

        path = QFileDialog.getExistingDirectory(self, title, str(Path.home()))
        return path or None

    def exec_watch_dialog(self, dlg: QWidget) -> bool:
        """Shown modally; tests replace this to fill the form in without a nested event loop."""
        from PySide6.QtWidgets import QDialog

        assert isinstance(dlg, QDialog)
        return dlg.exec() == QDialog.DialogCode.Accepted

    def show_error(self, text: str, detail: str = "") -> None:
        self.status_label.setText(text)
        box = QMessageBox(QMessageBox.Icon.Warning, "Ferry", text, QMessageBox.StandardButton.Ok, self)
        if detail:
            box.setDetailedText(detail)
        box.open()

    def run_async(
        self,
        fn: Callable[[], T],
        on_done: Callable[[T], object],
        on_error: Callable[[BaseException], object] | None = None,
    ) -> None:
        def failed(exc: BaseException) -> None:
            if on_error is not None:
                on_error(exc)
            else:
                self.show_error(describe(exc), getattr(exc, "detail", ""))

        self.bridge.run(fn, on_done, failed)

    # ------------------------------------------------------------ the queue, as the window shows it
    def job_queued(self, job_id: int, *, watch: bool = False) -> None:
        if not watch:  # a watch's job runs in its watcher; the window's runner leaves it alone
            self._job_started[job_id] = time.monotonic()
            self.service.start()
        self.poller.poke()
        self.job_created.emit(job_id)

    def _show_new_jobs(self, parent: QModelIndex, first: int, last: int) -> None:
        """New jobs scroll into view (files of an expanded job do not move the view)."""
        if not parent.isValid():
            self.queue_panel.view.scrollTo(self.queue_model.index(last, 0))

    def _job_changed(self, job_id: int, state: str, message: str | None) -> None:
        self.poller.poke()
        if state in ("running", "queued"):
            return
        started = self._job_started.pop(job_id, None)
        self.files.job_finished(job_id, state)
        if (started is not None and time.monotonic() - started > LONG_JOB) or state == "failed":
            self.notify(f"Job {job_id} {state}", message or "")
        for p in (self.left, self.right):
            if p.address is not None:
                p.refresh_soon()  # a pane still listing lists again after (a move's sources are gone)
        self.job_finished.emit(job_id, state)
        if state in ("done", "failed", "cancelled") and self.transfer_settings.when_done != "nothing":
            QTimer.singleShot(800, self._maybe_queue_finished)

    def _maybe_queue_finished(self) -> None:
        snap = self._last_snapshot
        if snap is None or any(j.state in ("queued", "running") for j in snap.jobs):
            return
        if self.transfer_settings.when_done == "notify":
            failed = sum(1 for j in snap.jobs if j.state == "failed")
            self.notify("Ferry", "The queue has finished" + (f" ({failed} job(s) failed)" if failed else ""))
        elif self.transfer_settings.when_done == "quit":
            self.close()

    def _apply_snapshot(self, snap: QueueSnapshot) -> None:
        if self._closed:
            return
        self._last_snapshot = snap
        self.queue_model.apply(snap)
        self.queue_panel.refresh_buttons()
        active = [j for j in snap.jobs if j.state == "running"]
        if active and self.transfer_settings.keep_awake:
            self.keep_awake.hold()
        else:
            self.keep_awake.release()
        if active:
            # The sum of the running rows: the status bar and the rows always agree.
            total = sum(j.bytes_total for j in active)
            fraction = min(1.0, sum(j.bytes_done for j in active) / total) if total else 0.0
            speed = sum(j.speed for j in active)
            files = f"{sum(j.files_done for j in active):,}/{sum(j.files_total for j in active):,} files"
            self.progress.show()
            self.progress.setValue(int(fraction * 1000))
            self.progress.setFormat(f"{fraction * 100:.0f}%")
            self.speed_label.setText(f"{format_rate(speed)} · {files}")
            self.setWindowTitle(f"Ferry — {fraction * 100:.0f}% of {len(active)} job(s)")
        else:
            self.progress.hide()
            failed = sum(1 for j in snap.jobs if j.state == "failed")
            self.speed_label.setText(f"{failed} failed job(s)" if failed else "")
            self.setWindowTitle("Ferry" + (f" — {failed} failed" if failed else ""))

    def notify(self, title: str, text: str) -> None:
        self.status_label.setText(f"{title}: {text}" if text else title)
        if QSystemTrayIcon.isSystemTrayAvailable():
            if self.tray is None:
                self.tray = QSystemTrayIcon(self.windowIcon(), self)
                self.tray.show()
            self.tray.showMessage(title, text)

    # ------------------------------------------------------------ sites
    def fetch_slow_places(self) -> None:
        """AWS profiles and Globus collections for the site pickers, found on a worker thread:
        botocore's import and the Globus service must never hold up start-up."""
        from ferry.ui.sites_menu import slow_places

        def done(places: list[Place]) -> None:
            if self._closed:
                return
            for p in (self.left, self.right):
                p.slow_places = places
                p.reload_places()
            self.slow_places_loaded.emit(len(places))

        self.run_async(slow_places, done, lambda exc: None)

    def open_aws_profile(self, profile: str) -> None:
        """An AWS profile from the picker: its saved site if there is one, else ask for a bucket
        and save a site using the profile (secrets stay in the AWS files, as before)."""
        from ferry.credentials.sites import SiteStore

        existing = next((x for x in SiteStore().list() if dict(x.options).get("profile") == profile), None)
        if existing is not None:
            self.active.navigate(f"{existing.name}:")
            return
        bucket = self.ask_text(f"AWS profile {profile}", "Bucket (and optional prefix) to open with this profile:", "")
        if not bucket or not bucket.strip("/ "):
            return
        name = "aws-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in profile)

        def work() -> str:
            SiteStore().add(name, "s3://" + bucket.strip().strip("/"), {"profile": profile})
            return name

        def done(site: str) -> None:
            self.status_label.setText(f"Saved site {site} (AWS profile {profile}); edit it in the Site manager")
            self._reload_places()
            self.active.navigate(f"{site}:")

        self.run_async(work, done)

    def _reload_places(self) -> None:
        for p in (self.left, self.right):
            p.reload_places()

    # ------------------------------------------------------------ dialogs
    def show_site_manager(self) -> None:
        from ferry.ui.dialogs.site_manager import SiteManagerDialog

        dlg = SiteManagerDialog(parent=self)
        dlg.saved.connect(lambda _n: self._reload_places())
        dlg.run_async = self.run_async
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.finished.connect(lambda _c: self._reload_places())
        dlg.open()
        self.site_manager = dlg

    def show_transfer_settings(self) -> None:
        from ferry.ui.dialogs.transfer_settings import TransferSettingsDialog

        dlg = TransferSettingsDialog(self.transfer_settings, self)

        def done(code: int) -> None:
            if code and dlg.result_settings is not None:
                self.transfer_settings = dlg.result_settings
                save_transfer_settings(self.transfer_settings)
                self.service.apply_limits()
                self.status_label.setText(
                    "Transfer settings saved; speed and parallelism apply now, the rest to new transfers"
                )

        dlg.finished.connect(done)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()

    def show_shortcuts(self) -> None:
        lines = shortcut_lines(self.action_map)
        box = QMessageBox(
            QMessageBox.Icon.Information, "Keyboard shortcuts", "\n".join(lines), QMessageBox.StandardButton.Ok, self
        )
        box.open()

    def set_theme(self, mode: str) -> None:
        from PySide6.QtWidgets import QApplication

        from ferry.ui.theme import apply_theme

        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_theme(app, mode)
        settings().setValue("view/theme", mode)

    # ------------------------------------------------------------ remembering
    def _restore(self, restore: bool) -> None:
        s = settings()
        geom = s.value("window/geometry") if restore else None
        if isinstance(geom, QByteArray):
            self.restoreGeometry(geom)
        state = s.value("window/state") if restore else None
        if isinstance(state, QByteArray):
            self.restoreState(state)
        home = str(Path.home())
        for key, pane in (("left", self.left), ("right", self.right)):
            where = str(s.value(f"panes/{key}/address", home)) if restore else home
            col = int(str(s.value(f"panes/{key}/sort_column", 0))) if restore else 0
            order = int(str(s.value(f"panes/{key}/sort_order", 0))) if restore else 0
            pane.view.sortByColumn(col, Qt.SortOrder(order))
            if restore and str(s.value(f"panes/{key}/hidden", "false")).lower() == "true":
                pane.hidden_btn.setChecked(True)
            pane.open_first(where, home)  # home instead, should the last folder be gone
        if not restore or not s.value("window/seen"):
            self.left.show_hint(
                "Welcome to Ferry. Add a site (Sites → Site manager…, Ctrl+Shift+M), then drag "
                "files between the panes or press F5 to copy."
            )

    def save_state(self) -> None:
        s = settings()
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.setValue("window/seen", True)
        for key, pane in (("left", self.left), ("right", self.right)):
            if pane.address is not None and pane.remember_folder:
                s.setValue(f"panes/{key}/address", str(pane.address))
            col, order = pane.model.sort_state()
            s.setValue(f"panes/{key}/sort_column", col)
            s.setValue(f"panes/{key}/sort_order", order.value)
            s.setValue(f"panes/{key}/hidden", pane.hidden_btn.isChecked())
        s.sync()

    # ------------------------------------------------------------ quitting
    def unfinished_jobs(self) -> list[int]:
        """Jobs this window's runner would still run (queued or running; folder watches stop with
        the window and are not asked about)."""
        from ferry.transfers.store import Store

        store = Store(self.store_path)
        try:
            return [j.id for j in store.jobs(("queued", "running")) if j.id not in self.watches.skip]
        finally:
            store.close()

    def ask_quit(self, count: int) -> QuitChoice:
        box, buttons = quit_dialog(self, count)
        box.exec()
        clicked = box.clickedButton()
        return next((c for c, b in buttons.items() if b is clicked), QuitChoice.STAY)

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self._closed:
            pending = self.unfinished_jobs()
            choice = self.ask_quit(len(pending)) if pending and self.ask_before_quit else None
            if choice is QuitChoice.STAY:
                event.ignore()
                return
            self.shutdown(choice, pending)
        super().closeEvent(event)

    def _after_stop(self, choice: QuitChoice | None, job_ids: list[int]) -> None:
        """With the window's runner stopped (its jobs back in the queue, partial files kept), do
        what the person chose for them."""
        from ferry.transfers import control
        from ferry.transfers.store import Store

        if choice is None or not job_ids:
            return
        if choice is QuitChoice.BACKGROUND:
            proc, log_path = start_background_runner(self.store_path, self.transfer_settings.run_config())
            self.background_runner = proc
            sys.stderr.write(f"ferry: transfers continue in the background (pid {proc.pid}, log {log_path})\n")
            return
        store = Store(self.store_path)
        try:
            if choice is QuitChoice.PAUSE:
                control.pause(store, job_ids)
            elif choice is QuitChoice.CANCEL:
                control.cancel(store, job_ids, self.pool)
        finally:
            store.close()

    def shutdown(self, choice: QuitChoice | None = None, job_ids: list[int] | None = None) -> None:
        """Stop the queue (files in flight resume next time), join workers, close connections;
        then do what :meth:`ask_quit` answered for the unfinished jobs."""
        if self._closed:
            return
        self._closed = True
        try:
            self.save_state()
        except Exception:  # never lose the shutdown to a settings problem
            pass
        self.poller.stop()
        self.watches.stop_all()
        self.service.stop()
        try:
            self._after_stop(choice, job_ids or [])
        except Exception:  # say it; the window still closes
            log.exception("what to do with the unfinished transfers failed")
            sys.stderr.write("ferry: could not hand the unfinished transfers on; 'ferry queue list' shows them\n")
        self.bridge.shutdown()
        self.collector.stop()
        self.pool.close_all()
        self.keep_awake.release()
        if self.tray is not None:
            self.tray.hide()
        prompts.set_prompter(self._previous_prompter)


def pane_widget(window: MainWindow, side: str) -> QWidget:
    return window.left if side == "left" else window.right


__all__ = ["FerryError", "MainWindow"]
