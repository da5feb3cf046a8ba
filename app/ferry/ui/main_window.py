"""The main window: two panes, the transfers dock, menus with shortcuts, and the status bar.

Everything slow goes through the bridge (``self.bridge.run``); transfers are queued jobs run by
:class:`~ferry.ui.queue_service.QueueService`, exactly as ``ferry cp``/``ferry queue`` run them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QByteArray, QEvent, QObject, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QSystemTrayIcon,
    QWidget,
)

from ferry.backends.base import Entry
from ferry.core.address import Address
from ferry.core.errors import Action, FerryError, UsageError, describe
from ferry.core.units import format_rate, format_size
from ferry.credentials import prompts
from ferry.transfers.control import QueueAction
from ferry.transfers.watch import WatchSpec
from ferry.ui import open_cache, queue_actions
from ferry.ui.bridge import Bridge, background_priority
from ferry.ui.dialogs.conflict import ConflictAsker
from ferry.ui.dialogs.drop_confirm import DropConfirmDialog
from ferry.ui.dialogs.prompts import QtPrompter
from ferry.ui.keep_awake import KeepAwake
from ferry.ui.listing_model import display_name
from ferry.ui.pane import Pane
from ferry.ui.queue_model import QueueModel
from ferry.ui.queue_panel import QueuePanel
from ferry.ui.queue_service import QueuePoller, QueueService, QueueSnapshot, SharedPool
from ferry.ui.settings import TransferSettings, load_transfer_settings, save_transfer_settings, settings
from ferry.ui.sites_menu import Place
from ferry.ui.watch_service import WatchManager

T = TypeVar("T")
LONG_JOB = 10.0  # seconds: jobs longer than this are announced in the notification area


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
        self._opens: dict[int, tuple[Address, Entry]] = {}
        self._job_started: dict[int, float] = {}
        self._last_snapshot: QueueSnapshot | None = None

        # Questions from the engine are answered in dialogs on this window.
        self._previous_prompter = prompts.prompter()
        prompts.set_prompter(QtPrompter(self.bridge, lambda: self))
        self.conflicts = ConflictAsker(self.bridge, lambda: self)

        self.left = Pane(self.bridge, self.pool, "leftPane")
        self.right = Pane(self.bridge, self.pool, "rightPane")
        self.active = self.left
        tab = _TabSwitch(self)
        for pane in (self.left, self.right):
            pane.activated.connect(lambda p=pane: self._set_active(p))
            pane.status.connect(self._pane_status)
            pane.open_requested.connect(lambda e, p=pane: self.open_entry(p, e))
            pane.model.drop_handler = lambda srcs, dest, move: self.request_transfer(srcs, dest, move=move)
            pane.model.rename_handler = lambda e, new, p=pane: self.rename_entry(p, e, new)
            pane.view.installEventFilter(tab)
            pane.aws_profile_chosen = self.open_aws_profile
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.left)
        self.splitter.addWidget(self.right)
        self.setCentralWidget(self.splitter)

        self.queue_model = QueueModel(self)
        self.queue_panel = QueuePanel(self.queue_model)
        self.queue_panel.action.connect(self.queue_action)
        self.queue_panel.clear_finished.connect(self.clear_finished)
        self.queue_panel.fix_handler = self.fix_job
        self.watches = WatchManager(
            store_path,
            parallel=lambda: self.transfer_settings.run_config().parallel,
            ask=self.conflicts,
            on_message=lambda text: self.bridge.post(lambda: self.status_label.setText(text)),
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

        self.action_map: dict[str, QAction] = {}
        self._build_actions()

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
        self.queue_model.fetch_requested = self.poller.poke
        self.poller.start()
        if start_queue:
            self.service.start()

        self._restore(restore)
        self.fetch_slow_places()

    # ------------------------------------------------------------ actions and menus
    def _action(
        self,
        key: str,
        text: str,
        shortcut: str | QKeySequence.StandardKey | None,
        tip: str,
        slot: Callable[[], object],
        menu: Any = None,
        panes: bool = False,
    ) -> QAction:
        a = QAction(text, self)
        a.setObjectName(f"action_{key}")
        if shortcut is not None:
            a.setShortcut(QKeySequence(shortcut))
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        seq = a.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        a.setToolTip(f"{tip} ({seq})" if seq else tip)
        a.setStatusTip(tip)
        a.triggered.connect(lambda _=False: slot())
        self.addAction(a)
        if menu is not None:
            menu.addAction(a)
        if panes:
            for p in (self.left, self.right):
                p.view.addAction(a)
        self.action_map[key] = a
        return a

    def _build_actions(self) -> None:
        mb = self.menuBar()
        file_menu = mb.addMenu("&File")
        self._action(
            "copy",
            "Copy to other pane",
            "F5",
            "Copy the selection to the other pane's folder",
            lambda: self.copy_selection(move=False),
            file_menu,
            panes=True,
        )
        self._action(
            "move",
            "Move to other pane",
            "F6",
            "Move the selection: sources are deleted only after the copy is verified",
            lambda: self.copy_selection(move=True),
            file_menu,
            panes=True,
        )
        self._action("mkdir", "New folder…", "F7", "Create a folder here", self.new_folder, file_menu, panes=True)
        self._action("rename", "Rename", "F2", "Rename the selected item", self.rename_selected, file_menu, panes=True)
        self._action(
            "delete",
            "Delete…",
            "Del",
            "Delete the selection (asks first)",
            self.delete_selection,
            file_menu,
            panes=True,
        )
        self._action(
            "open",
            "Open",
            "Ctrl+O",
            "Open with the system's application (remote files via the cache)",
            self.open_selected,
            file_menu,
            panes=True,
        )
        self._action(
            "download",
            "Download to…",
            "Ctrl+Shift+D",
            "Copy the selection to a folder on this computer that you choose",
            self.download_selection,
            file_menu,
            panes=True,
        )
        self._action(
            "properties",
            "Properties…",
            "Alt+Return",
            "Size, times and checksums",
            self.show_properties,
            file_menu,
            panes=True,
        )
        self._action(
            "share",
            "Share link…",
            "Ctrl+Shift+L",
            "Make a download or upload link (S3, Globus)",
            self.share_selected,
            file_menu,
            panes=True,
        )
        self._action(
            "watch",
            "Watch this folder…",
            "Ctrl+Shift+W",
            "Ship each new file in this local folder as soon as it is complete",
            self.watch_folder,
            file_menu,
            panes=True,
        )
        file_menu.addSeparator()
        self._action(
            "quit",
            "Quit",
            "Ctrl+Q",
            "Quit Ferry (running files resume next time)",
            self.close,
            file_menu,
        )
        go = mb.addMenu("&Go")
        self._action(
            "refresh", "Refresh", "Ctrl+R", "List the folder again", lambda: self.active.refresh(), go, panes=True
        )
        self._action("back", "Back", "Alt+Left", "Previous folder", lambda: self.active.back(), go)
        self._action("forward", "Forward", "Alt+Right", "Next folder", lambda: self.active.forward(), go)
        self._action("up", "Up", "Alt+Up", "Parent folder", lambda: self.active.up(), go)
        self._action("path", "Edit path", "Ctrl+L", "Type a path or address", lambda: self.active.edit_path(), go)
        self._action(
            "filter", "Filter", "Ctrl+F", "Filter names in this pane", lambda: self.active.filter.setFocus(), go
        )
        self._action(
            "hidden",
            "Show hidden files",
            "Ctrl+H",
            "Show or hide names starting with a dot",
            lambda: self.active.hidden_btn.toggle(),
            go,
        )
        self._action(
            "switch", "Switch pane", "Ctrl+Tab", "Move to the other pane (Tab in a listing)", self.switch_pane, go
        )
        self._action(
            "same",
            "Same folder in other pane",
            "Ctrl+=",
            "Show this folder in the other pane too",
            self.same_folder,
            go,
        )
        sites = mb.addMenu("&Sites")
        self._action(
            "sites",
            "Site manager…",
            "Ctrl+Shift+M",
            "Add or edit SFTP, S3, Globus and local sites",
            self.show_site_manager,
            sites,
        )
        transfers = mb.addMenu("&Transfers")
        self._action(
            "transfers",
            "Show transfers",
            "Ctrl+T",
            "Show or hide the transfers panel",
            lambda: self.dock.setVisible(not self.dock.isVisible()),
            transfers,
        )
        self._action(
            "settings",
            "Transfer settings…",
            "Ctrl+,",
            "Parallel files, bandwidth, verification, conflicts, timing",
            self.show_transfer_settings,
            transfers,
        )
        self._action(
            "pause_all",
            "Pause all",
            "Ctrl+Shift+P",
            "Pause every job",
            lambda: self.queue_action("pause", [j.id for j in self.queue_model.all_jobs()]),
            transfers,
        )
        self._action(
            "resume_all",
            "Resume all",
            "Ctrl+Shift+R",
            "Resume every paused job",
            lambda: self.queue_action("resume", [j.id for j in self.queue_model.all_jobs()]),
            transfers,
        )
        self._action(
            "clear", "Clear finished", "Ctrl+Shift+K", "Remove done and cancelled jobs", self.clear_finished, transfers
        )
        view = mb.addMenu("&View")
        for n, mode in enumerate(("system", "light", "dark"), start=1):
            self._action(
                f"theme_{mode}",
                f"{mode.capitalize()} colours",
                f"Ctrl+Shift+{n}",
                f"Use {mode} colours",
                partial(self.set_theme, mode),
                view,
            )
        helpm = mb.addMenu("&Help")
        self._action("shortcuts", "Keyboard shortcuts", "F1", "List every shortcut", self.show_shortcuts, helpm)

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

    def _pane_status(self, text: str) -> None:
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

    # ------------------------------------------------------------ transfers
    def copy_selection(self, move: bool) -> None:
        srcs = [str(a) for a in self.active.selected_addresses()]
        if not srcs:
            self.status_label.setText("Select something to copy first")
            return
        dest = self.other.address
        if dest is None:
            return
        dest_text = dest.path + os.sep if dest.is_local else str(dest).rstrip("/") + "/"
        self.request_transfer(srcs, dest_text, move=move)

    def choose_folder(self, title: str) -> str | None:
        from PySide6.QtWidgets import QFileDialog

        path = QFileDialog.getExistingDirectory(self, title, str(Path.home()))
        return path or None

    def download_selection(self) -> None:
        """Where a drag to the desktop cannot work (a remote pane), "Download to…" does the same."""
        srcs = [str(a) for a in self.active.selected_addresses()]
        if not srcs:
            self.status_label.setText("Select something to download first")
            return
        folder = self.choose_folder("Download to")
        if folder:
            self.request_transfer(srcs, folder.rstrip(os.sep) + os.sep)

    def _summarise(self, sources: list[str]) -> tuple[int, int, int]:
        """(files, folders, bytes) for the confirmation, from listings already on screen."""
        known: dict[str, Entry] = {}
        for p in (self.left, self.right):
            if p.model.address is not None:
                for e in p.model.all_entries():
                    known[str(p.model.address_of(e))] = e
        files = folders = size = 0
        for s in sources:
            found = known.get(s)
            if found is not None:
                if found.is_dir:
                    folders += 1
                else:
                    files += 1
                    size += found.size or 0
            elif "://" not in s and os.path.isdir(s):
                folders += 1
            else:
                files += 1
                try:
                    size += os.lstat(s).st_size if "://" not in s else 0
                except OSError:
                    pass
        return files, folders, size

    def request_transfer(self, sources: list[str], dest: str, *, move: bool = False) -> bool:
        """A drop or F5/F6: show what will happen, then queue the job in the background."""
        if not sources:
            return False
        ts = self.transfer_settings
        if ts.confirm_drops:
            files, folders, size = self._summarise(sources)
            dlg = DropConfirmDialog(
                files=files, folders=folders, size=size, destination=dest, policy=ts.on_conflict, move=move, parent=self
            )
            if not self.confirm_transfer(dlg):
                return False
            if dlg.dont_ask.isChecked():
                ts.confirm_drops = False
                save_transfer_settings(ts)
        self.queue_transfer(sources, dest, move=move)
        return True

    def queue_transfer(
        self,
        sources: list[str],
        dest: str,
        *,
        move: bool = False,
        on_conflict: str | None = None,
        on_created: Callable[[int], object] | None = None,
    ) -> None:
        """Create the job in the engine (a move is the job's own option, kept in the queue with it:
        the engine deletes each source once its copy is verified, whether or not the window is open)."""
        from ferry.transfers import jobs
        from ferry.transfers.store import Store

        options = self.transfer_settings.job_options(recursive=True, on_conflict=on_conflict)
        if move:
            unverified = options.hash_algo is None
            if unverified and not self.confirm(
                "Move without a checksum",
                f"Your transfer settings check files by {options.verify}, not by checksum. Delete each source "
                "once its copy has the right size?",
            ):
                return
            options = dataclasses.replace(options, move=True, allow_unverified_move=unverified)
        pool, store_path = self.pool, self.store_path

        def work() -> int:
            store = Store(store_path)
            try:
                return jobs.new_job(store, pool, sources, dest, options)
            finally:
                store.close()

        def done(job_id: int) -> None:
            self._job_started[job_id] = time.monotonic()
            if on_created is not None:
                on_created(job_id)
            self.service.start()
            self.poller.poke()
            verb = "Move" if move else "Job"
            self.status_label.setText(f"{verb} {job_id} queued: {len(sources)} item(s) → {dest}")
            self.job_created.emit(job_id)

        self.run_async(work, done)

    # ------------------------------------------------------------ folder watches
    def watch_target(self) -> str | None:
        """The local folder to watch: the one selected folder, else the active pane's folder."""
        pane = self.active
        chosen = pane.selected_entries()
        addr = pane.model.address_of(chosen[0]) if len(chosen) == 1 and chosen[0].is_dir else pane.address
        if addr is None or not addr.is_local:
            return None
        return addr.path

    def watch_folder(self) -> None:
        from ferry.ui.dialogs.watch import WatchDialog

        folder = self.watch_target()
        if folder is None:
            self.show_error("Only a folder on this computer can be watched: open or select one first.")
            return
        other = self.other.address
        dest = "" if other is None else (other.path if other.is_local else str(other))
        dlg = WatchDialog(folder, dest, self)
        if not self.exec_watch_dialog(dlg):
            return
        self.start_watch(dlg.spec(self.transfer_settings.job_options(recursive=True)))

    def exec_watch_dialog(self, dlg: QWidget) -> bool:
        """Shown modally; tests replace this to fill the form in without a nested event loop."""
        from PySide6.QtWidgets import QDialog

        assert isinstance(dlg, QDialog)
        return dlg.exec() == QDialog.DialogCode.Accepted

    def start_watch(self, spec: WatchSpec) -> None:
        """Start a watch on a worker thread (it checks the folders and may log in)."""

        def done(job_id: int) -> None:
            self.status_label.setText(f"Watching {spec.source} → {spec.dest} (job {job_id})")
            self.poller.poke()
            self.job_created.emit(job_id)

        self.run_async(lambda: self.watches.start(spec), done)

    def stop_watches(self, job_ids: list[int]) -> None:
        ids = [j for j in job_ids if self.watches.running(j)]

        def work() -> int:
            for j in ids:
                self.watches.stop(j)
            return len(ids)

        def done(n: int) -> None:
            self.status_label.setText(f"Stopped {n} watch(es); what was queued still arrives")
            self.service.start()  # the feed is released: the window's runner ships what was queued
            self.poller.poke()

        self.run_async(work, done)

    def _job_changed(self, job_id: int, state: str, message: str | None) -> None:
        self.poller.poke()
        if state in ("running", "queued"):
            return
        started = self._job_started.pop(job_id, None)
        if job_id in self._opens:
            addr, entry = self._opens.pop(job_id)
            if state == "done":
                self._open_cached(addr, entry)
        if (started is not None and time.monotonic() - started > LONG_JOB) or state == "failed":
            self.notify(f"Job {job_id} {state}", message or "")
        for p in (self.left, self.right):
            if p.address is not None and not p.loading:
                p.refresh()
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
        live = self.service.snapshot()
        active = [j for j in snap.jobs if j.state == "running"]
        if active and self.transfer_settings.keep_awake:
            self.keep_awake.hold()
        else:
            self.keep_awake.release()
        if live is not None and active:
            self.progress.show()
            self.progress.setValue(int(live.fraction * 1000))
            self.progress.setFormat(f"{live.fraction * 100:.0f}%")
            self.speed_label.setText(f"{format_rate(live.speed)} · {live.files_done:,}/{live.files_total:,} files")
            self.setWindowTitle(f"Ferry — {live.fraction * 100:.0f}% of {len(active)} job(s)")
        else:
            self.progress.hide()
            failed = sum(1 for j in snap.jobs if j.state == "failed")
            self.speed_label.setText(f"{failed} failed job(s)" if failed else "")
            self.setWindowTitle("Ferry" + (f" — {failed} failed" if failed else ""))

    def queue_action(self, key: str, job_ids: list[int]) -> None:
        from ferry.transfers.store import Store

        if key == "stop":
            self.stop_watches(job_ids)
            return

        store_path, pool = self.store_path, self.pool

        try:  # the Fix button retries, after whatever its action asked the person to do
            action = QueueAction.RETRY if key == "fix" else QueueAction(key)
        except ValueError:
            raise UsageError(f"Unknown action {key}") from None

        def work() -> int:
            store = Store(store_path)
            try:
                return queue_actions.apply(store, action, job_ids, pool)
            finally:
                store.close()

        def done(n: int) -> None:
            self.status_label.setText(
                f"{key.capitalize()}: {n} job(s)" if key != "retry" else f"{n:,} file(s) queued again"
            )
            if key in ("resume", "retry", "fix"):
                self.service.start()
            self.poller.poke()

        if key == "fix":
            jobs = [j for j in self.queue_model.all_jobs() if j.id in job_ids]
            from ferry.ui.queue_model import fix_for

            fixes = [fix_for(j.error_action) for j in jobs]
            self.fix_job(next((f[0] for f in fixes if f is not None), Action.RETRY), job_ids)
            return
        self.run_async(work, done)

    def fix_job(self, action: Action, job_ids: list[int]) -> None:
        """The failed row's suggestion: retrying reconnects, which asks again (log in, trust key)."""
        if action is Action.FREE_SPACE and not self.confirm(
            "Free space", "Free some space on the destination, then press OK to retry."
        ):
            return
        if action is Action.CHECK_PERMISSIONS and not self.confirm(
            "Check permissions", "Make sure you may write to the destination folder, then press OK to retry."
        ):
            return
        if action in (Action.LOGIN, Action.TRUST_HOST_KEY):
            self.pool.close_all()  # a fresh connection asks for the password / host key again
        self.queue_action("retry", job_ids)

    def clear_finished(self) -> None:
        from ferry.transfers.store import Store

        store_path = self.store_path

        def work() -> int:
            store = Store(store_path)
            try:
                return queue_actions.clear_finished(store)
            finally:
                store.close()

        self.run_async(work, self._cleared)

    def _cleared(self, n: int) -> None:
        self.status_label.setText(f"Removed {n} finished job(s)")
        self.poller.poke()

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

    def notify(self, title: str, text: str) -> None:
        self.status_label.setText(f"{title}: {text}" if text else title)
        if QSystemTrayIcon.isSystemTrayAvailable():
            if self.tray is None:
                self.tray = QSystemTrayIcon(self.windowIcon(), self)
                self.tray.show()
            self.tray.showMessage(title, text)

    # ------------------------------------------------------------ file operations
    def new_folder(self) -> None:
        pane = self.active
        if pane.address is None:
            return
        name = self.ask_text("New folder", "Name of the new folder:")
        if not name:
            return
        if not _valid_name(name):
            self.show_error(f"'{display_name(name)}' cannot be a folder name (no '/', NUL or '..')")
            return
        addr = pane.address
        backend = self.pool.get(addr)
        path = backend.join(addr.path, name) if addr.path else name
        self.run_async(lambda: backend.mkdir(path, parents=False, exist_ok=False), lambda _r: pane.refresh())

    def rename_selected(self) -> None:
        view = self.active.view
        idx = view.currentIndex()
        if idx.isValid():
            view.edit(idx.siblingAtColumn(0))

    def rename_entry(self, pane: Pane, entry: Entry, new: str) -> bool:
        if not _valid_name(new) or pane.address is None:
            self.show_error(f"'{display_name(new)}' cannot be a name (no '/', NUL or '..')")
            return False
        backend = self.pool.get(pane.address)
        folder, _ = backend.split(entry.path)
        target = backend.join(folder, new) if folder else new
        self.run_async(lambda: backend.rename(entry.path, target, overwrite=False), lambda _r: pane.refresh())
        return False  # the listing refreshes when the rename is done

    def delete_selection(self) -> None:
        pane = self.active
        entries = pane.selected_entries()
        if not entries or pane.address is None:
            return
        backend = self.pool.get(pane.address)

        def count() -> tuple[int, int, bool]:
            files = size = 0
            for e in entries:
                if e.is_dir:
                    for _rel, sub in backend.walk(e.path, self.bridge.closing):
                        if not sub.is_dir:
                            files += 1
                            size += sub.size or 0
                        if files > 1_000_000:
                            return files, size, True
                else:
                    files += 1
                    size += e.size or 0
            return files, size, False

        def ask(found: tuple[int, int, bool]) -> None:
            files, size, capped = found
            names = ", ".join(display_name(e.name) for e in entries[:3]) + ("…" if len(entries) > 3 else "")
            text = (
                f"Delete {len(entries)} item(s) ({names}) from {pane.address}?\n\n"
                f"That is {'more than ' if capped else ''}{files:,} file(s), {format_size(size)}. "
                "This cannot be undone."
            )
            if not self.confirm("Delete", text):
                return
            self.run_async(
                lambda: [backend.remove(e.path, recursive=e.is_dir) for e in entries], lambda _r: pane.refresh()
            )

        self.run_async(count, ask)

    def show_properties(self) -> None:
        from ferry.ui.dialogs.properties import PropertiesDialog

        pane = self.active
        entries = pane.selected_entries()
        if not entries or pane.address is None:
            return
        e = entries[0]
        dlg = PropertiesDialog(e, str(pane.model.address_of(e)), self.pool.get(pane.address), self.run_async, self)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()

    def share_selected(self) -> None:
        from ferry.ui.dialogs.share import ShareDialog

        pane = self.active
        addrs = pane.selected_addresses() or ([pane.address] if pane.address else [])
        if not addrs:
            return
        dlg = ShareDialog(str(addrs[0]), addrs[0].scheme, self.run_async, parent=self)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()

    def open_selected(self) -> None:
        entries = [e for e in self.active.selected_entries() if e.is_file]
        if entries:
            self.open_entry(self.active, entries[0])

    def open_entry(self, pane: Pane, entry: Entry) -> None:
        addr = pane.model.address_of(entry)
        if addr.is_local:
            QDesktopServices.openUrl(QUrl.fromLocalFile(addr.path))
            return
        if open_cache.is_fresh(addr, entry):
            self._open_cached(addr, entry, reused=True)
            return
        target = open_cache.prepare(addr)

        def created(job_id: int) -> None:
            self._opens[job_id] = (addr, entry)

        self.queue_transfer([str(addr)], str(target), on_conflict="overwrite", on_created=created)

    def _open_cached(self, addr: Address, entry: Entry, reused: bool = False) -> None:
        path = open_cache.cache_path(addr)
        if not reused:
            open_cache.record(addr, entry)
        self.status_label.setText(f"Opening {path}" + (" (unchanged: from the cache)" if reused else ""))
        self.opened_path = path
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))

    opened_path: Path | None = None

    # ------------------------------------------------------------ dialogs
    def show_site_manager(self) -> None:
        from ferry.ui.dialogs.site_manager import SiteManagerDialog

        dlg = SiteManagerDialog(parent=self)
        dlg.saved.connect(lambda _n: self._reload_places())
        dlg.tester = self._test_site
        dlg.run_async = self.run_async
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.finished.connect(lambda _c: self._reload_places())
        dlg.open()
        self.site_manager = dlg

    def _test_site(self, text: str, say: Callable[[str], object]) -> None:
        from ferry.credentials.sites import resolve_address

        def work() -> int:
            a = resolve_address(text)
            return sum(1 for _ in self.pool.get(a).list(a.path))

        self.run_async(
            work,
            lambda n: say(f"Connected: {n:,} item(s) in the site's folder."),
            lambda exc: say(f"Could not connect: {describe(exc)}"),
        )

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
        lines = [
            f"{a.shortcut().toString(QKeySequence.SequenceFormat.NativeText):>14}   {a.text()}"
            for a in self.action_map.values()
            if not a.shortcut().isEmpty()
        ]
        lines.append(f"{'Tab':>14}   Switch pane")
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
            if not pane.navigate(where, remember=False):
                pane.navigate(home, remember=False)
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
            if pane.address is not None:
                s.setValue(f"panes/{key}/address", str(pane.address))
            col, order = pane.model.sort_state()
            s.setValue(f"panes/{key}/sort_column", col)
            s.setValue(f"panes/{key}/sort_order", order.value)
            s.setValue(f"panes/{key}/hidden", pane.hidden_btn.isChecked())
        s.sync()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop the queue (files in flight resume next time), join workers, close connections."""
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
        self.bridge.shutdown()
        self.pool.close_all()
        self.keep_awake.release()
        if self.tray is not None:
            self.tray.hide()
        prompts.set_prompter(self._previous_prompter)


def _valid_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\x00" not in name and os.sep not in name


def pane_widget(window: MainWindow, side: str) -> QWidget:
    return window.left if side == "left" else window.right


__all__ = ["FerryError", "MainWindow"]
