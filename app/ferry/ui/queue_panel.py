"""The transfers panel (a dock): jobs with expandable files, progress bars, per-job actions."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
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
from ferry.ui.queue_model import PROGRESS, FractionRole, QueueModel, fix_for, gui_message
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
        bar.state = option.state
        style = option.widget.style() if option.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter)


class QueuePanel(QWidget):
    """Buttons act on the selected jobs, or on all jobs with the "… all" buttons."""

    action = Signal(str, list)  # pause/resume/cancel/retry/fix, job ids
    clear_finished = Signal()

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
        self.view.collapsed.connect(self._collapsed)
        h = self.view.header()
        h.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        h.setStretchLastSection(False)
        for col, width in ((1, 190), (2, 110), (3, 140), (4, 110), (5, 90), (6, 70), (7, 130)):
            h.resizeSection(col, width)
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
        failing = [j for j in jobs if j.message and j.state in ("failed", "paused")]
        self.fix_label.setText(
            f"Job {failing[0].id}: {gui_message(failing[0].id, failing[0].message)}" if failing else ""
        )

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
