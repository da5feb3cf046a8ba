"""The transfers panel (a dock): jobs with expandable files, progress bars, per-job actions."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPoint, Qt, Signal
from PySide6.QtGui import QGuiApplication, QPainter
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionProgressBar,
    QStyleOptionViewItem,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from ferry.core.errors import Action
from ferry.core.units import format_duration, format_rate
from ferry.ui.queue_actions import addresses_text
from ferry.ui.queue_model import (
    ETA,
    PROGRESS,
    SPEED,
    TITLE,
    FractionRole,
    JobRole,
    QueueModel,
    elided_title,
    fix_for,
    gui_message,
    problem_text,
)
from ferry.ui.queue_service import JobRow


class ProgressDelegate(QStyledItemDelegate):
    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        if index.column() != PROGRESS or index.parent().isValid():
            super().paint(painter, option, index)
            return
        fraction = index.data(FractionRole)
        bar = QStyleOptionProgressBar()
        bar.rect = option.rect.adjusted(2, 3, -2, -3)
        bar.minimum = 0
        bar.maximum = 1000
        bar.progress = int(float(fraction or 0.0) * 1000)
        bar.text = str(index.data(Qt.ItemDataRole.DisplayRole) or "")
        bar.textVisible = True
        # Horizontal, filling from the left: without the flag Qt 6 draws a vertical bar (a
        # full-width strip growing from the bottom).
        bar.state = option.state | QStyle.StateFlag.State_Horizontal
        bar.direction = Qt.LayoutDirection.LeftToRight if option.widget is None else option.widget.layoutDirection()
        style = option.widget.style() if option.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter)


class TitleDelegate(QStyledItemDelegate):
    """The Transfer column: a job's source and destination each elided in the middle, so both
    stay legible in a narrow window (the tooltip has them whole); file rows elide in the middle."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideMiddle
        job = index.data(JobRole)
        if isinstance(job, JobRow) and not index.parent().isValid():
            style = option.widget.style() if option.widget is not None else QApplication.style()
            margin = 2 * (style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin) + 1) + 2
            option.text = elided_title(job, option.fontMetrics, option.rect.width() - margin)


def failure_line(jobs: list[JobRow]) -> str:
    """The line under the panel for the selected jobs: the first one that stopped or has a file
    failed for good, with what the engine said and the first failure's cause and advice (the
    State cell has them too, but cut short in a narrow window). Else, for a running job, how
    many files move at once and why (``--parallel auto``)."""
    for j in jobs:
        stopped = bool(j.message) and j.state in ("failed", "paused")
        problem = problem_text(j)
        if stopped or problem:
            said = [gui_message(j.id, j.message) or ""] if stopped else []
            if problem:
                said.append(f"first failure: {problem}")
            return f"Job {j.id}: " + "; ".join(said)
    running = next((j for j in jobs if j.state == "running" and j.tuning), None)
    return f"Job {running.id}: {running.tuning}" if running is not None else ""


class QueuePanel(QWidget):
    """Buttons act on the selected jobs, or on all jobs with the "… all" buttons."""

    action = Signal(str, list)  # pause/resume/cancel/retry/fix/top/bottom, job ids
    clear_finished = Signal()
    show_log = Signal(list)  # job ids: the log view with each failure's detail
    open_destination = Signal(str)  # a job's destination address, for the active pane

    def __init__(self, model: QueueModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("queuePanel")
        self.model = model
        self.can_stop: Callable[[int], bool] = lambda job_id: False  # a folder watch this window runs
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        bar = QHBoxLayout()
        self.filter = QComboBox()
        self.filter.setObjectName("queueFilter")
        for key, text in (
            ("all", "All"),
            ("active", "Active"),
            ("queued", "Queued"),
            ("failed", "Failed"),
            ("done", "Done"),
        ):
            self.filter.addItem(text, key)
        self.filter.setToolTip("Show only jobs in this state")
        self.filter.currentIndexChanged.connect(lambda _i: model.set_filter(str(self.filter.currentData())))
        bar.addWidget(QLabel("Show:"))
        bar.addWidget(self.filter)
        self.buttons: dict[str, QPushButton] = {}
        for key, text, tip in (
            ("pause", "Pause", "Pause the selected jobs (files in flight keep their partial data)"),
            ("resume", "Resume", "Continue the selected paused jobs"),
            ("cancel", "Cancel", "Cancel the selected jobs (partial files are removed)"),
            ("retry", "Retry", "Queue the failed files of the selected jobs again"),
            ("stop", "Stop", "Stop watching the selected folders (what was queued still arrives)"),
            ("fix", "Fix…", "Do what the failure message suggests (log in again, trust key, retry)"),
        ):
            b = QPushButton(text)
            b.setObjectName(f"{key}Button")
            b.setToolTip(tip)
            b.clicked.connect(lambda _=False, k=key: self._act(k))
            bar.addWidget(b)
            self.buttons[key] = b
        bar.addSpacing(12)
        for key, text, tip in (
            ("pause-all", "Pause all", "Pause every queued or running job"),
            ("resume-all", "Resume all", "Continue every paused job"),
        ):
            b = QPushButton(text)
            b.setToolTip(tip)
            b.clicked.connect(lambda _=False, k=key: self._act_all(k))
            bar.addWidget(b)
            self.buttons[key] = b
        clear = QPushButton("Clear finished")
        clear.setObjectName("clearButton")
        clear.setToolTip("Remove done and cancelled jobs from the list")
        clear.clicked.connect(self.clear_finished.emit)
        bar.addWidget(clear)
        self.buttons["clear"] = clear
        bar.addStretch(1)
        lay.addLayout(bar)
        self.view = QTreeView()
        self.view.setObjectName("queueView")
        self.view.setModel(model)
        self.view.setUniformRowHeights(True)
        self.view.setAlternatingRowColors(True)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setItemDelegateForColumn(PROGRESS, ProgressDelegate(self.view))
        self.view.setItemDelegateForColumn(TITLE, TitleDelegate(self.view))
        self.view.collapsed.connect(self._collapsed)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        h = self.view.header()
        h.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        h.setStretchLastSection(False)
        for col, width in ((1, 135), (2, 70), (3, 130), (4, 70), (7, 100)):  # Transfer: the rest
            h.resizeSection(col, width)
        # A finished row's average speed and duration are read, not guessed: wide enough for
        # "avg 888.8 MiB/s" and "took 55:00:00" in this font (the text's margins included).
        fm, pad = (
            self.view.fontMetrics(),
            2 * (self.view.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin) + 1),
        )
        h.resizeSection(SPEED, fm.horizontalAdvance(f"avg {format_rate(888.8 * 2**20)}") + pad + 4)
        h.resizeSection(ETA, fm.horizontalAdvance(f"took {format_duration(55 * 3600)}") + pad + 4)
        lay.addWidget(self.view, 1)
        self.fix_label = QLabel("")
        self.fix_label.setObjectName("fixLabel")
        self.fix_label.setWordWrap(True)
        lay.addWidget(self.fix_label)
        self.view.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())
        self._selection_changed()
        self.fix_handler: Callable[[Action, list[int]], object] | None = None

    def _collapsed(self, index: QModelIndex) -> None:
        job = self.model.job(index)
        if job is not None:
            self.model.collapse(job.id)

    def selected_jobs(self) -> list[JobRow]:
        seen: dict[int, JobRow] = {}
        for idx in self.view.selectionModel().selectedRows():
            j = self.model.job(idx)
            if j is not None:
                seen[j.id] = j
        return list(seen.values())

    def _selection_changed(self) -> None:
        jobs = self.selected_jobs()
        states = {j.state for j in jobs}
        self.buttons["pause"].setEnabled(bool(states & {"queued", "running"}))
        self.buttons["resume"].setEnabled("paused" in states)
        self.buttons["cancel"].setEnabled(bool(states & {"queued", "running", "paused"}))
        stoppable = any(self.can_stop(j.id) for j in jobs)
        self.buttons["stop"].setVisible(stoppable)  # only folder watches can be stopped
        self.buttons["stop"].setEnabled(stoppable)
        self.buttons["retry"].setEnabled(any(j.files_failed or j.state in ("failed", "cancelled") for j in jobs))
        fixes = [fix_for(j.error_action) for j in jobs if j.state in ("failed", "paused") and j.message]
        # A plain retry is the Retry button already; the fix button offers something else.
        fix = next((f for f in fixes if f is not None and f[0] is not Action.RETRY), None)
        self.buttons["fix"].setVisible(fix is not None)
        self.buttons["fix"].setEnabled(fix is not None)
        self.buttons["fix"].setText(fix[1] if fix else "Fix…")
        self.fix_label.setText(failure_line(jobs))

    def refresh_buttons(self) -> None:
        self._selection_changed()

    def _act(self, key: str) -> None:
        ids = [j.id for j in self.selected_jobs()]
        if ids:
            self.action.emit(key, ids)

    def _act_all(self, key: str) -> None:
        ids = [j.id for j in self.model.all_jobs()]
        if ids:
            self.action.emit(key.removesuffix("-all"), ids)

    # ---- the right-click menu
    def context_menu(self) -> QMenu:
        """What can be done to the selected jobs; entries that do not apply are greyed out."""
        jobs = self.selected_jobs()
        states = {j.state for j in jobs}
        menu = QMenu(self)
        menu.setObjectName("queueMenu")

        def add(key: str, text: str, enabled: bool, slot: object) -> None:
            act = menu.addAction(text)
            act.setObjectName(f"queueMenu-{key}")
            act.setEnabled(enabled)
            act.triggered.connect(slot)

        ids = [j.id for j in jobs]
        for key, text, enabled in (
            ("pause", "Pause", bool(states & {"queued", "running"})),
            ("resume", "Resume", "paused" in states),
            ("cancel", "Cancel", bool(states & {"queued", "running", "paused"})),
            ("retry", "Retry failed", any(j.files_failed or j.state in ("failed", "cancelled") for j in jobs)),
        ):
            add(key, text, enabled, lambda _=False, k=key: self.action.emit(k, ids))
        menu.addSeparator()
        waiting = bool(states & {"queued", "paused", "running"})  # order means nothing to a finished job
        add("top", "Move to top", waiting, lambda _=False: self.action.emit("top", ids))
        add("bottom", "Move to bottom", waiting, lambda _=False: self.action.emit("bottom", ids))
        menu.addSeparator()
        add(
            "open",
            "Open destination",
            len(jobs) == 1,
            lambda _=False: self.open_destination.emit(jobs[0].dest),
        )
        add("copy", "Copy addresses", bool(jobs), lambda _=False: self._copy_addresses())
        add("log", "Show log…", bool(jobs), lambda _=False: self.show_log.emit(ids))
        return menu

    def _context_menu(self, pos: QPoint) -> None:
        index = self.view.indexAt(pos)
        if index.isValid() and not self.view.selectionModel().isRowSelected(index.row(), index.parent()):
            self.view.setCurrentIndex(index)  # a right-click on another row acts on that row
        if self.selected_jobs():
            menu = self.context_menu()
            menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            menu.popup(self.view.viewport().mapToGlobal(pos))

    def _copy_addresses(self) -> None:
        QGuiApplication.clipboard().setText(addresses_text([(j.sources, j.dest) for j in self.selected_jobs()]))
