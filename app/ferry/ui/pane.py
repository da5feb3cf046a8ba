"""One side of the window: a site picker, a path bar with breadcrumbs, navigation and a listing.

Entering a folder lists it on a worker thread (through the bridge) while the pane shows a
spinner and stays usable. Every listing carries a generation number: batches from an older
request are dropped, so a slow listing can never overwrite a newer one.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import QEvent, QModelIndex, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QFocusEvent,
    QKeyEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QWheelEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QStackedWidget,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ferry.backends.base import Entry
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import FerryError, UsageError, describe
from ferry.ui.bridge import PAINT_GATE, Bridge
from ferry.ui.icons import icon
from ferry.ui.listing_model import EntryRole, ListingModel
from ferry.ui.queue_service import SharedPool
from ferry.ui.sites_menu import AWS_PROFILE_PREFIX, Place, all_places

BATCH = 2000
BATCH_SECONDS = 0.1
PAINT_MS = 15
YIELD_EVERY = 64


class FileView(QTableView):
    """The listing: multi-select, drag out, drops in (from the other pane or a file manager).

    A table, not a tree: QTreeView lays out by asking the model about every row (``hasChildren``
    per row, a Python call each), which froze the window for over a second at 100,000 entries;
    a table with fixed row heights asks only about the rows on screen.
    """

    focused = Signal()
    go_up = Signal()  # Backspace: the parent folder, as in file managers

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        vh = self.verticalHeader()
        vh.hide()
        vh.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        vh.setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.setShowGrid(False)
        self.setWordWrap(False)
        self.setCornerButtonEnabled(False)
        self.setSortingEnabled(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setDragEnabled(True)
        self.setAcceptDrops(True)
        self.setDropIndicatorShown(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DragDrop)
        self.setDefaultDropAction(Qt.DropAction.CopyAction)
        self.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)

    def focusInEvent(self, event: QFocusEvent) -> None:
        super().focusInEvent(event)
        self.focused.emit()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if (
            event.key() == Qt.Key.Key_Backspace
            and event.modifiers() == Qt.KeyboardModifier.NoModifier
            and self.state() != QAbstractItemView.State.EditingState
        ):
            self.go_up.emit()
            event.accept()
            return
        super().keyPressEvent(event)

    def paintEvent(self, event: QPaintEvent) -> None:
        PAINT_GATE.close()  # listing workers pause so each cell's trip into Python is quick
        try:
            super().paintEvent(event)
            model = self.model()
            if model is not None and model.rowCount() == 0 and self.placeholder:
                painter = QPainter(self.viewport())
                painter.setPen(self.palette().color(QPalette.ColorRole.PlaceholderText))
                painter.drawText(self.viewport().rect(), Qt.AlignmentFlag.AlignCenter, self.placeholder)
                painter.end()
        finally:
            PAINT_GATE.open()

    placeholder = ""  # said in an empty listing ("This folder is empty")

    # A drop from a file manager arrives as a plain copy; a drop from our own pane keeps the
    # action the person chose (Shift = move). The model decides what the drop means.
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls() or event.mimeData().hasFormat("application/x-ferry-addresses"):
            event.acceptProposedAction()
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if event.source() is self:
            event.ignore()  # dropping a pane onto itself copies nothing
            return
        event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        if event.source() is self:
            event.ignore()
            return
        index = self.indexAt(event.position().toPoint())
        model = self.model()
        parent = index.siblingAtColumn(0) if index.isValid() else QModelIndex()
        action = event.dropAction() if event.source() is not None else Qt.DropAction.CopyAction
        if model is not None and model.dropMimeData(event.mimeData(), action, -1, -1, parent):
            event.setDropAction(action)
            event.accept()
        else:
            event.ignore()


class SitePicker(QComboBox):
    """The site picker: arrow keys on the closed picker open its list instead of switching the
    pane at every step (a closed QComboBox changes its item, and so the pane, on each arrow);
    the pane changes only when a place is chosen with Enter or a click."""

    _OPENING_KEYS = frozenset(
        {Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown, Qt.Key.Key_Home, Qt.Key.Key_End}
    )

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if Qt.Key(event.key()) in self._OPENING_KEYS and not (event.modifiers() & Qt.KeyboardModifier.AltModifier):
            self.showPopup()
            event.accept()
            return
        super().keyPressEvent(event)

    def wheelEvent(self, event: QWheelEvent) -> None:
        event.ignore()  # scrolling over the picker must not switch the pane either


class Breadcrumbs(QWidget):
    """The path as buttons; clicking one goes there, clicking the empty end edits the path."""

    go = Signal(str)
    edit = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._lay = QHBoxLayout(self)
        self._lay.setContentsMargins(0, 0, 0, 0)
        self._lay.setSpacing(0)

    def set_address(self, address: Address) -> None:
        while self._lay.count():
            item = self._lay.takeAt(0)
            w = item.widget() if item is not None else None
            if w is not None:
                w.hide()  # deleteLater() alone left the old crumbs drawn under the new ones
                w.deleteLater()  # (not setParent(None): Python would then free it first)
        for label, target in crumbs(address):
            b = QToolButton()
            b.setText(label)
            b.setAutoRaise(True)
            b.setToolTip(target)
            b.clicked.connect(lambda _=False, t=target: self.go.emit(t))
            self._lay.addWidget(b)
            sep = QLabel("›")
            sep.setEnabled(False)
            self._lay.addWidget(sep)
        edit = QToolButton()
        edit.setObjectName("editPath")
        edit.setText("Edit path")
        edit.setIcon(icon("edit"))
        edit.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)
        edit.setAutoRaise(True)
        edit.setToolTip("Type a path or address (Ctrl+L)")
        edit.clicked.connect(self.edit.emit)
        self._lay.addWidget(edit)
        self._lay.addStretch(1)


def crumbs(address: Address) -> list[tuple[str, str]]:
    """(label, address text) for each ancestor of ``address``, the root first."""
    out: list[tuple[str, str]] = []
    if address.is_local:
        path = address.path
        parts = [p for p in path.split(os.sep) if p]
        out.append((os.sep, os.sep))
        acc = ""
        for p in parts:
            acc = f"{acc}{os.sep}{p}"
            out.append((p, acc))
        return out
    root = replace(address, path="/" if address.path.startswith("/") else "", trailing_slash=False)
    out.append((address.site or f"{address.host or address.scheme}", str(root)))
    acc = root.path
    for p in [p for p in address.path.split("/") if p]:
        acc = f"{acc.rstrip('/')}/{p}" if acc else p
        out.append((p, str(replace(root, path=acc))))
    return out


class Pane(QWidget):
    activated = Signal()
    status = Signal(str)
    listed = Signal(int)  # generation of a completed listing (tests and status bar)
    open_requested = Signal(object)  # Entry of a file to open

    def __init__(self, bridge: Bridge, pool: SharedPool, name: str = "pane", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self.bridge = bridge
        self.pool = pool
        self.model = ListingModel(self)
        self.address: Address | None = None
        self.generation = 0
        self.loading = False
        # The start's folder (the last session's) and where to go if it cannot be listed: the
        # listing's generation, the folder, the fallback (see open_first).
        self._fallback: tuple[int, str, str] | None = None
        self.remember_folder = True  # False: the window does not save this pane's folder (the demo's)
        self._stale = False  # the listing under way may predate a change: list again when it ends
        self._cancel: CancelToken | None = None
        self._back: list[Address] = []
        self._forward: list[Address] = []
        self.error_text = ""
        self.resolve: Callable[[str], Address] = _resolve
        self.extra_places: list[Place] = []  # e.g. the --demo servers, listed first
        self.slow_places: list[Place] = []  # AWS profiles, Globus collections: found off the UI thread
        self.aws_profile_chosen: Callable[[str], object] | None = None

        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(3)
        # The active pane is marked by a strip in the selection colour along its top.
        self.marker = QFrame()
        self.marker.setObjectName("activeMarker")
        self.marker.setFixedHeight(3)
        self.marker.setAutoFillBackground(True)
        lay.addWidget(self.marker)
        top = QHBoxLayout()
        self.site = SitePicker()
        self.site.setObjectName("sitePicker")
        self.site.setToolTip("Choose a place: this computer, a saved site, or an ssh_config host")
        self.site.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.site.setMinimumContentsLength(14)
        self.site.activated.connect(self._site_chosen)
        top.addWidget(self.site, 1)
        self.back_btn = self._tool("back", "Back", "Back (Alt+Left)", self.back)
        self.fwd_btn = self._tool("forward", "Forward", "Forward (Alt+Right)", self.forward)
        self.up_btn = self._tool("up", "Up", "Up one folder (Alt+Up / Backspace)", self.up)
        self.refresh_btn = self._tool("refresh", "Refresh", "Refresh (Ctrl+R)", self.refresh)
        for b in (self.back_btn, self.fwd_btn, self.up_btn, self.refresh_btn):
            top.addWidget(b)
        self.hidden_btn = self._tool(
            "hidden", "Hidden files", "Show hidden files: names starting with a dot (Ctrl+H)", None
        )
        self.hidden_btn.setCheckable(True)
        self.hidden_btn.toggled.connect(self.model.set_show_hidden)
        top.addWidget(self.hidden_btn)
        self.filter = QLineEdit()
        self.filter.setObjectName("filter")
        self.filter.setPlaceholderText("Filter")
        self.filter.setClearButtonEnabled(True)
        self.filter.setToolTip("Show only names containing this text, or matching a glob: *.h5, run_0?? (Ctrl+F)")
        self.filter.setMaximumWidth(160)
        self.filter.textChanged.connect(self.model.set_filter)
        top.addWidget(self.filter)
        lay.addLayout(top)

        self.path_stack = QStackedWidget()
        self.crumbs = Breadcrumbs()
        self.crumbs.go.connect(self.navigate)
        self.crumbs.edit.connect(self.edit_path)
        self.path_edit = QLineEdit()
        self.path_edit.setObjectName("pathEdit")
        self.path_edit.setToolTip(
            "A folder, a saved site (name:path), user@host[:path], host:/path, a URL (sftp://user@host:port/path, "
            "s3://bucket/prefix, globus://COLLECTION/path) or a Globus collection id. In a remote pane, /path "
            "and ~/path are on that server (file:///path for this computer)"
        )
        self.path_edit.returnPressed.connect(self.go_typed)
        self.path_edit.editingFinished.connect(self._edit_finished)
        self.path_stack.addWidget(self.crumbs)
        self.path_stack.addWidget(self.path_edit)
        self.path_stack.setFixedHeight(self.path_edit.sizeHint().height())
        path_row = QHBoxLayout()
        path_row.addWidget(self.path_stack, 1)
        self.spinner = QProgressBar()
        self.spinner.setObjectName("spinner")
        self.spinner.setRange(0, 0)  # busy indicator
        self.spinner.setMaximumSize(QSize(60, 12))
        self.spinner.setTextVisible(False)
        self.spinner.setToolTip("Listing…")
        self.spinner.hide()
        path_row.addWidget(self.spinner)
        lay.addLayout(path_row)
        # What was wrong with a typed address: one line under the address bar; nothing else changes.
        self.address_error = QLabel("")
        self.address_error.setObjectName("addressError")
        self.address_error.setTextFormat(Qt.TextFormat.PlainText)
        self.address_error.setStyleSheet("color: #c62828")
        self.address_error.hide()
        lay.addWidget(self.address_error)
        self.path_edit.textEdited.connect(lambda _t: self.address_error.hide())

        self.view = FileView()
        self.view.setModel(self.model)
        header = self.view.horizontalHeader()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col, width in ((1, 80), (2, 130), (3, 110)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(col, width)
        self.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.view.focused.connect(self.activated.emit)
        self.view.go_up.connect(self.up)
        self.model.modelReset.connect(self._update_placeholder)
        self.view.activated.connect(self._activated)
        lay.addWidget(self.view, 1)
        self.message = QLabel("")
        self.message.setObjectName("paneMessage")
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.message.setFrameShape(QFrame.Shape.StyledPanel)
        self.message.hide()
        lay.addWidget(self.message)
        self.reload_places()
        self._show_active(False)

    def event(self, e: QEvent) -> bool:
        if e.type() in (QEvent.Type.DynamicPropertyChange, QEvent.Type.PaletteChange):  # the window sets "active"
            self._show_active(bool(self.property("active")))
        return super().event(e)

    def _show_active(self, active: bool) -> None:
        from ferry.ui.theme import active_pane_colors

        strip, _text = active_pane_colors(self.palette(), active)
        pal = self.marker.palette()
        pal.setColor(QPalette.ColorRole.Window, strip)
        self.marker.setPalette(pal)
        self.marker.setToolTip("The active pane: keys and toolbar act here" if active else "")
        font = self.site.font()
        font.setBold(active)
        self.site.setFont(font)

    def is_marked_active(self) -> bool:
        """The strip shows the selection colour (what a person sees as "this pane is active")."""
        from ferry.ui.theme import active_pane_colors

        return self.marker.palette().color(QPalette.ColorRole.Window) == active_pane_colors(self.palette(), True)[0]

    def _tool(self, name: str, text: str, tip: str, slot: Callable[[], object] | None) -> QToolButton:
        """A toolbar button showing the ``name`` icon (the theme's, else Ferry's); its text is for
        screen readers and for a style that shows text."""
        b = QToolButton()
        b.setObjectName(f"{name}Button")
        b.setIcon(icon(name))
        b.setText(text)
        b.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)
        b.setToolTip(tip)
        b.setAutoRaise(True)
        if slot is not None:
            b.clicked.connect(lambda _=False: slot())
        return b

    # ---- places ----
    def reload_places(self) -> None:
        self.site.blockSignals(True)
        self.site.clear()
        groups: dict[str, list[Place]] = {"demo": [], "local": [], "site": [], "ssh": [], "aws": [], "globus": []}
        for p in [*self.extra_places, *all_places(), *self.slow_places]:
            groups.setdefault(p.group, []).append(p)
        first = True
        for name, items in groups.items():
            if not items:
                continue
            if not first:
                self.site.insertSeparator(self.site.count())
            first = False
            for p in items:
                self.site.addItem(p.label, p.address)
                self.site.setItemData(self.site.count() - 1, p.tooltip, Qt.ItemDataRole.ToolTipRole)
            del name
        self._place_addresses: dict[str, Address | None] = {}
        self.site.setPlaceholderText("Other location")
        self.site.blockSignals(False)
        if self.address is not None:
            self._sync_site(self.address)

    def _sync_site(self, address: Address) -> None:
        """Show in the picker the place the pane is in (the one whose folder holds it most
        closely), or "Other location": never a place the pane has left."""
        best, best_len = -1, -1
        for i in range(self.site.count()):
            data = self.site.itemData(i)
            if not data or str(data).startswith(AWS_PROFILE_PREFIX):
                continue
            cache = getattr(self, "_place_addresses", None)
            if cache is None:
                cache = self._place_addresses = {}
            if data not in cache:
                try:
                    cache[data] = self.resolve(str(data))
                except Exception:
                    cache[data] = None
            place = cache[data]
            if place is None or place.scheme != address.scheme or place.host != address.host:
                continue
            root = place.path.rstrip("/\\") if place.path not in ("/", "") else ""
            sep = os.sep if address.is_local else "/"
            inside = address.path == place.path or root == "" or address.path.startswith(root + sep)
            if inside and len(root) > best_len:
                best, best_len = i, len(root)
        if best != self.site.currentIndex():
            self.site.blockSignals(True)
            self.site.setCurrentIndex(best)
            self.site.blockSignals(False)

    def _site_chosen(self, index: int) -> None:
        target = self.site.itemData(index)
        if target and str(target).startswith(AWS_PROFILE_PREFIX):
            if self.aws_profile_chosen is not None:
                self.aws_profile_chosen(str(target).removeprefix(AWS_PROFILE_PREFIX))
        elif target:
            self.navigate(str(target))

    # ---- navigation ----
    def edit_path(self) -> None:
        self.path_edit.setText(str(self.address) if self.address else "")
        self.path_stack.setCurrentWidget(self.path_edit)
        self.path_edit.setFocus()
        self.path_edit.selectAll()

    def go_typed(self) -> None:
        """Enter in the address bar: go to what was typed, read as :func:`quick_address` reads it
        (quick connect, and paths on the pane's own server). Bad input leaves the bar open with
        the text, says why under it, and changes nothing else."""
        text = self.path_edit.text().strip()
        try:
            address = quick_address(text, self.address, self.resolve)
        except FerryError as exc:
            self._bad_address(exc.message)
            return
        self.navigate(address)

    def _bad_address(self, text: str) -> None:
        self.address_error.setText(text.splitlines()[0] if text else "Not an address")
        self.address_error.setToolTip(text)
        self.address_error.show()
        self.status.emit(text)
        self.path_stack.setCurrentWidget(self.path_edit)
        self.path_edit.setFocus()

    def _edit_finished(self) -> None:
        if self.address_error.isHidden():  # after bad input the text stays for mending
            self.path_stack.setCurrentWidget(self.crumbs)

    def open_first(self, target: str, fallback: str) -> None:
        """Open the folder a start begins in (the last session's). If it cannot be listed (a demo's
        folder deleted when the demo closed, a site that is gone), open ``fallback`` (the home
        folder) instead and say why, rather than leave an error where the files should be."""
        if target != fallback and self.navigate(target, remember=False):
            self._fallback = (self.generation, target, fallback)
        else:
            self.navigate(fallback, remember=False)

    def _fall_back(self, gen: int, exc: BaseException) -> bool:
        """The start's folder failed: go to the fallback instead (True when it did)."""
        pending, self._fallback = self._fallback, None
        if pending is None or pending[0] != gen:
            return False
        _gen, gone, home = pending
        self.navigate(home, remember=False)
        self.show_hint(f"{gone} could not be opened ({describe(exc)}): showing your home folder instead")
        return True

    def navigate(self, target: str | Address, *, remember: bool = True) -> bool:
        try:
            address = target if isinstance(target, Address) else self.resolve(target)
        except FerryError as exc:
            if isinstance(target, str):
                self.path_edit.setText(target)  # shown for mending, whoever asked (a link, the picker)
            self._bad_address(exc.message)
            return False
        if remember and self.address is not None and address != self.address:
            self._back.append(self.address)
            self._forward.clear()
        self._list(address)
        return True

    def back(self) -> None:
        if self._back:
            assert self.address is not None
            self._forward.append(self.address)
            self._list(self._back.pop())

    def forward(self) -> None:
        if self._forward:
            assert self.address is not None
            self._back.append(self.address)
            self._list(self._forward.pop())

    def up(self) -> None:
        if self.address is not None:
            parent = self.address.parent()
            if parent != self.address:
                self.navigate(parent)

    def refresh(self, select: str | None = None) -> None:
        """List again keeping the selection, or selecting ``select`` (a new or renamed name)."""
        if self.address is not None:
            self._list(self.address, keep_selection=True, select=select)

    def refresh_soon(self) -> None:
        """List again now, or when the listing under way ends: it may have read the folder before
        the change the caller knows of (a finished move's deleted sources)."""
        if self.loading:
            self._stale = True
        else:
            self.refresh()

    def _listing_ended(self) -> None:
        if self._stale:
            self._stale = False
            QTimer.singleShot(0, self.refresh)

    def _update_buttons(self) -> None:
        self.back_btn.setEnabled(bool(self._back))
        self.fwd_btn.setEnabled(bool(self._forward))

    def _list(self, address: Address, keep_selection: bool = False, select: str | None = None) -> None:
        if self._cancel is not None:
            self._cancel.cancel()
        self.generation += 1
        gen = self.generation
        cancel = self._cancel = CancelToken()
        self.address = address
        self._sync_site(address)
        self.error_text = ""
        self.message.hide()
        self.address_error.hide()
        self.crumbs.set_address(address)
        self.path_stack.setCurrentWidget(self.crumbs)
        self.setToolTip("")
        selected = {e.name for e in self.selected_entries()} if keep_selection else set()
        if select is not None:
            selected = {select}
        self._stale = False  # this listing reads the folder as it is now
        self.model.begin_listing(address)
        self.view.placeholder = ""
        self.loading = True
        self.spinner.show()
        self.status.emit(f"Listing {address}…")
        self._update_buttons()
        sorter = self.model.sorter()
        sort_state = self.model.sort_state()
        pool, post = self.pool, self.bridge.post
        started = time.monotonic()

        consumed = threading.Event()
        consumed.set()

        def hand_over(b: list[Entry]) -> None:
            # One batch in flight at a time, and a few milliseconds after it for the view to
            # repaint: painting calls into Python for every visible cell, and each call waits for
            # the GIL while this worker runs, so the worker steps aside instead.
            consumed.wait(1.0)
            consumed.clear()

            def show() -> None:
                self._on_batch(gen, b)
                QTimer.singleShot(PAINT_MS, consumed.set)

            post(show)

        def work() -> int:
            backend = pool.get(address)
            everything: list[Entry] = []
            batch: list[Entry] = []
            last = time.monotonic()
            for e in backend.list(address.path, cancel):
                batch.append(e)
                if not len(batch) % YIELD_EVERY:
                    PAINT_GATE.wait()  # step aside while a view paints (see bridge.PaintGate)
                    # ... and hand the GIL over now and then: the timer that runs the window's
                    # slots waited up to 50 ms for it while the first batch was being built.
                    time.sleep(0)
                if len(batch) >= BATCH or time.monotonic() - last > BATCH_SECONDS:
                    everything += batch
                    hand_over(batch)
                    batch, last = [], time.monotonic()
                    if cancel.cancelled:
                        return 0
            everything += batch
            hand_over(batch)
            # Sort here, off the UI thread; the model swaps the order in one layout change.
            ordered = sorter(everything)
            post(lambda: self._on_done(gen, ordered, selected, started, sort_state))
            return len(everything)

        def failed(exc: BaseException) -> None:
            if gen == self.generation and self._fall_back(gen, exc):
                return
            if gen == self.generation:
                self.loading = False
                self.spinner.hide()
                self._show_error(describe(exc))
                self.listed.emit(gen)
                self._listing_ended()

        self.bridge.run(work, on_error=failed, name="ferry-list")

    def _on_batch(self, gen: int, batch: list[Entry]) -> None:
        if gen == self.generation and batch:
            self.model.add_batch(batch)

    def _on_done(
        self, gen: int, ordered: list[Entry], selected: set[str], started: float, sort_state: tuple[int, Qt.SortOrder]
    ) -> None:
        if gen != self.generation:
            return  # a newer listing was asked for meanwhile: this one is stale
        # Sorted by the worker in the order the model had when the listing began; if the person
        # re-sorted meanwhile, the model sorts again itself.
        self.model.end_listing(ordered if self.model.sort_state() == sort_state else None)
        self.loading = False
        self.spinner.hide()
        if selected:
            self.select_names(selected)
        n = len(self.model.all_entries())
        self._update_placeholder()
        self.status.emit(listed_text(str(self.address), n, time.monotonic() - started))
        self.listed.emit(gen)
        self._listing_ended()

    def _update_placeholder(self) -> None:
        """What an empty listing says: empty, or everything hidden by the filter/hidden toggle."""
        n = len(self.model.all_entries())
        if self.loading or self.model.rowCount():
            text = ""
        elif not n:
            text = "This folder is empty"
        else:
            text = f"{n:,} item(s) hidden by the filter or the hidden-files toggle"
        self.view.placeholder = text
        self.view.viewport().update()

    def _show_error(self, text: str) -> None:
        self.error_text = text
        self.message.setText(text)
        self.message.setStyleSheet("color: #c62828")
        self.message.show()
        self.status.emit(text)

    def show_hint(self, text: str) -> None:
        self.message.setText(text)
        self.message.setStyleSheet("")
        self.message.show()

    def _activated(self, index: QModelIndex) -> None:
        e = index.data(EntryRole)
        if not isinstance(e, Entry):
            return
        if e.is_dir:
            self.navigate(self.model.address_of(e))
        elif e.is_file:
            self.open_requested.emit(e)

    # ---- selection ----
    def selected_entries(self) -> list[Entry]:
        sm = self.view.selectionModel()
        return [self.model.entry(i.row()) for i in sorted(sm.selectedRows(), key=lambda i: i.row())]

    def selected_addresses(self) -> list[Address]:
        return [self.model.address_of(e) for e in self.selected_entries()]

    def select_names(self, names: set[str]) -> None:
        from PySide6.QtCore import QItemSelection, QItemSelectionModel

        sm = self.view.selectionModel()
        sel = QItemSelection()
        for row, e in enumerate(self.model.entries()):
            if e.name in names:
                sel.select(self.model.index(row, 0), self.model.index(row, 3))
        sm.select(sel, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        if len(names) == 1 and not sel.isEmpty():  # the current item too: F2 and Enter act on it
            first = sel.indexes()[0].siblingAtColumn(0)
            sm.setCurrentIndex(first, QItemSelectionModel.SelectionFlag.NoUpdate)
            self.view.scrollTo(first)

    def current_text(self) -> str:
        return str(self.address) if self.address else ""

    def focus_view(self) -> None:
        self.view.setFocus()


def listed_text(where: str, n: int, seconds: float) -> str:
    """The status line after a listing: ``bucket: 3 items (0.2 s)`` for a site's top (its
    address already ends with the colon), ``/data: 3 items (0.2 s)`` elsewhere."""
    sep = "" if where.endswith(":") else ":"
    return f"{where}{sep} {n:,} item{'s' if n != 1 else ''} ({seconds:.1f} s)"


def _resolve(text: str) -> Address:
    from ferry.credentials.sites import resolve_address

    return resolve_address(text)


# user@host, user@host:path (scp's form); the host as a name, an IPv4 address or [IPv6].
_SCP_RE = re.compile(
    r"^(?P<user>[^@/:\s]+)@(?P<host>\[[0-9A-Fa-f:.%]+\]|[A-Za-z0-9_.-]+)(?::(?P<path>.*))?$", re.DOTALL
)
# host:/path, host:~/path, host: with a host that cannot be a saved site's name alone (a dot in it).
_HOST_PATH_RE = re.compile(
    r"^(?P<host>[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+|\[[0-9A-Fa-f:.%]+\]):(?P<path>.*)$", re.DOTALL
)
_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def quick_address(text: str, current: Address | None, resolve: Callable[[str], Address]) -> Address:
    """What a pane's address bar makes of ``text``: every form ``ferry cp`` takes (paths, saved
    sites as ``name:path``, ssh_config aliases, ``sftp://``, ``s3://``, ``globus://``, ``file://``),
    plus quick connect: ``user@host``, ``user@host:path`` and ``host.domain:/path`` open that SSH
    host (as scp reads them), a bare collection id opens that Globus collection. In a remote pane
    (``current``), ``/path``, ``~``, ``~/path`` and relative names are on that pane's server, not
    this computer. Raises :class:`UsageError` (one line) for what cannot be an address."""
    if not text:
        raise UsageError("Type a folder, a saved site (name:path) or an address such as sftp://host/path")
    if "://" in text:
        return resolve(text)  # URLs exactly as the command line takes them
    if _UUID_RE.match(text):
        return Address("globus", "/", host=text.lower(), trailing_slash=True)
    scp = _SCP_RE.match(text)
    if scp:
        return _saved_or(text, resolve, lambda: _sftp(scp["host"], scp["path"], scp["user"]))
    host_path = _HOST_PATH_RE.match(text)
    if host_path:
        return _saved_or(text, resolve, lambda: _sftp(host_path["host"], host_path["path"], None))
    if current is not None and not current.is_local and not _SITE_FORM.match(text):
        return on_server(current, text)
    bare = _BARE_HOST_PATH.match(text)
    try:
        return resolve(text)
    except UsageError as exc:
        if bare is None:
            raise
        # "login01:/scratch": no saved site or ssh_config alias of that name; a host may be meant.
        name, path = bare["name"], bare["path"]
        raise UsageError(f"{exc.message}; to connect to a host of that name, type sftp://{name}{path}") from exc


_SITE_FORM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]+:")
_BARE_HOST_PATH = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_-]+):(?P<path>/[^\x00-\x1f]*)$")


def _saved_or(text: str, resolve: Callable[[str], Address], quick: Callable[[], Address]) -> Address:
    """A saved site or ssh_config alias of that name wins (``cluster.lab:/x``); else quick connect."""
    if ":" in text:
        try:
            found = resolve(text)
        except UsageError:
            pass
        else:
            if not found.is_local or found.site:  # (a local path would be a misreading)
                return found
    return quick()


def _sftp(host: str, path: str | None, user: str | None) -> Address:
    host = host[1:-1] if host.startswith("[") else host
    rest = (path or "").strip()
    if rest in ("~", "~/"):
        rest = ""
    elif rest.startswith("~/"):
        rest = rest[2:]  # relative to the login folder, as sftp://host/~/path
    trailing = rest.endswith("/") and len(rest) > 1
    clean = posixpath.normpath(rest) if rest else ""
    return Address("sftp", clean, host=host, user=user, trailing_slash=trailing)


def on_server(current: Address, text: str) -> Address:
    """``text`` typed in a pane showing ``current`` (remote): ``/path`` from the server's root,
    ``~`` and ``~/path`` from the login (home) folder where the site has one, anything else
    relative to the folder shown."""
    scheme = current.scheme
    trailing = text.endswith("/") and len(text) > 1
    if text == "~" or text.startswith("~/"):
        rest = text[2:]
        if scheme == "sftp":
            path = posixpath.normpath(rest) if rest.strip("/") else ""
        elif scheme == "globus":
            path = posixpath.normpath("/~/" + rest) + ("/" if not rest.strip("/") else "")
        else:
            raise UsageError(f"{scheme}:// sites have no home folder (~): type /path from the top instead")
    elif text.startswith("/"):
        path = posixpath.normpath(text)
        if scheme == "s3":
            path = path.lstrip("/")
    else:
        base = current.path or ("" if scheme in ("sftp", "s3") else "/")
        path = posixpath.normpath(posixpath.join(base, text)) if base else posixpath.normpath(text)
        if scheme == "s3":
            path = "" if path.startswith("..") else path.lstrip("/")  # nothing above a bucket's top
    if path == ".":
        path = "" if scheme in ("sftp", "s3") else "/"
    return replace(current, path=path, trailing_slash=trailing)
