"""The window's "Compare panes" view and its "Synchronise" preview, over the engine's compare and sync.

:class:`CompareView` runs :func:`ferry.transfers.compare.compare` (the engine of ``ferry compare
-r``) on the two panes' folders on a worker thread and streams what it decides into
:class:`CompareModel` in batches, so rows appear before the listings end; counts are the
engine's :class:`~ferry.transfers.compare.Totals`, a check box per state filters the rows, and
Stop cancels the comparison (its :class:`~ferry.core.cancel.CancelToken`).

"Synchronise left → right…" (and back) asks :func:`ferry.transfers.sync.plan_sync` what would be
copied and replaced (nothing changes), shows it in :class:`SyncPreviewDialog` (Cancel is the
answer to Enter), and on confirmation hands the request to :func:`ferry.transfers.sync.queue_sync`,
the path ``ferry sync`` takes: one job in the Transfers panel that copies and verifies. The
window never deletes: deletions stay with ``ferry sync --delete``.
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import Cancelled, UsageError, describe
from ferry.core.units import format_size
from ferry.transfers.compare import By, Item, State, Totals, compare, open_side
from ferry.transfers.options import JobOptions
from ferry.transfers.store import JOB_FINISHED, Store
from ferry.transfers.sync import Action, Deleted, SyncPlan, check_deletions, finish_sync, plan_sync, queue_sync
from ferry.ui.dialogs.prompts import SafeDialog, safe_default
from ferry.ui.host import WindowHost

Index = QModelIndex | QPersistentModelIndex

STATE_WORDS = {
    State.ONLY_A: "only left",
    State.ONLY_B: "only right",
    State.DIFFERENT: "different",
    State.SAME: "same",
}
COLUMNS = ("State", "Name", "Left size", "Right size", "How")
BATCH = 500  # items per hand-over to the UI thread
BATCH_SECONDS = 0.1  # ... or sooner, so the first differences show at once
PREVIEW_LINES = 1000  # actions listed in the preview (the counts cover all)


def _size(item: Item, left: bool) -> str:
    e = item.a if left else item.b
    if e is None:
        return ""
    if e.kind.value == "dir":
        return "folder"
    return format_size(e.size) if e.size is not None else "?"


def how(item: Item) -> str:
    """How two names differ (size, time, content, kind, link), and how content was compared."""
    parts = [r.value for r in item.reasons]
    if item.how:
        parts.append(item.how)
    return "; ".join(parts)


class CompareModel(QAbstractTableModel):
    """The comparison's items in walk order, appended as they are decided."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.items: list[Item] = []

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.items)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        item = self.items[index.row()]
        if role == Qt.ItemDataRole.UserRole:
            return item
        if role not in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            return None
        col = index.column()
        if col == 0:
            return STATE_WORDS[item.state]
        if col == 1:
            return item.rel + ("/" if item.kind.value == "dir" else "")
        if col in (2, 3):
            return _size(item, col == 2)
        return how(item)

    def clear(self) -> None:
        self.beginResetModel()
        self.items = []
        self.endResetModel()

    def add(self, batch: list[Item]) -> None:
        if not batch:
            return
        first = len(self.items)
        self.beginInsertRows(QModelIndex(), first, first + len(batch) - 1)
        self.items.extend(batch)
        self.endInsertRows()


class StateFilter(QSortFilterProxyModel):
    """Only the rows whose state is ticked."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.shown: set[State] = set(State)

    def set_shown(self, state: State, on: bool) -> None:
        self.beginFilterChange()
        if on:
            self.shown.add(state)
        else:
            self.shown.discard(state)
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:
        model = self.sourceModel()
        assert isinstance(model, CompareModel)
        return model.items[source_row].state in self.shown


def counts_text(t: Totals, running: bool) -> str:
    reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(t.by_reason.items()))
    text = (
        f"{t.only_a:,} only left, {t.only_b:,} only right, {t.different:,} different"
        f"{f' ({reasons})' if reasons else ''}, {t.same:,} same (files)"
    )
    if t.read_a or t.read_b:
        text += f"; read to compare content: {t.read_a:,} left, {t.read_b:,} right"
    return text + (" — comparing…" if running else "")


class SyncPreviewDialog(SafeDialog):
    """What a sync would do, exactly: Cancel is the default (Enter changes nothing)."""

    def __init__(self, src: Address, dst: Address, plan: SyncPlan, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("syncPreview")
        self.setWindowTitle("Synchronise")
        self.src, self.dst, self.plan = src, dst, plan
        lay = QVBoxLayout(self)
        summary = QLabel()
        summary.setObjectName("syncSummary")
        summary.setTextFormat(Qt.TextFormat.PlainText)
        summary.setWordWrap(True)
        lay.addWidget(summary)
        self.summary = summary
        self.delete = QCheckBox("Delete what the source no longer has (only after every copy verified)")
        self.delete.setObjectName("syncDelete")
        self.delete.toggled.connect(self._update)
        lay.addWidget(self.delete)
        # The engine refuses to delete more than half of the destination unless told how many may
        # go (ferry sync --max-delete N): here that is this box, shown only when the count is
        # what stops it (an empty source is refused whatever is ticked).
        self.allow_more = QCheckBox(
            f"I checked the folders: allow deleting {plan.delete_files:,} of the destination's {plan.dst_files:,} files"
        )
        self.allow_more.setObjectName("syncAllowMore")
        self.allow_more.toggled.connect(self._update)
        self.allow_more.hide()
        lay.addWidget(self.allow_more)
        self.lines = QPlainTextEdit()
        self.lines.setReadOnly(True)
        lay.addWidget(self.lines)
        box = QDialogButtonBox()
        self.start = QPushButton("Synchronise")
        self.cancel = QPushButton("Cancel")
        box.addButton(self.start, QDialogButtonBox.ButtonRole.AcceptRole)
        box.addButton(self.cancel, QDialogButtonBox.ButtonRole.RejectRole)
        self.start.clicked.connect(self.accept)
        self.cancel.clicked.connect(self.reject)
        lay.addWidget(box)
        self._safe = self.cancel
        safe_default(self.cancel, self.start)  # Enter must not start copying
        self._update()

    @property
    def max_delete(self) -> int | None:
        """What the person allowed (as --max-delete), or None: the engine's default guard."""
        return self.plan.delete_files if self.allow_more.isChecked() and not self.allow_more.isHidden() else None

    def _update(self) -> None:
        delete = self.delete.isChecked()
        by_count = (
            delete
            and deletion_check(self.plan) is not None
            and deletion_check(self.plan, self.plan.delete_files) is None
        )
        self.allow_more.setVisible(by_count)
        refusal = deletion_check(self.plan, self.max_delete) if delete else None
        self.summary.setText(preview_text(self.src, self.dst, self.plan, delete, refusal))
        shown = [a for a in self.plan.actions if delete or a[0] is not Action.DELETE]
        self.lines.setPlainText("\n".join(f"{a.value:8} {rel}" for a, rel, _n in shown[:PREVIEW_LINES]))
        work = self.plan.tasks_total > 0 or (delete and self.plan.delete_files > 0)
        self.start.setEnabled(work and refusal is None)


def deletion_check(plan: SyncPlan, max_delete: int | None = None) -> str | None:
    """Why the engine refuses these deletions (an empty source, more than half the destination,
    more than ``max_delete``), or None."""
    try:
        check_deletions(plan, max_delete)
    except UsageError as exc:
        return exc.message
    return None


def preview_text(src: Address, dst: Address, plan: SyncPlan, delete: bool = False, refusal: str | None = None) -> str:
    shown = len(plan.actions) if delete else plan.copies + plan.replaces
    more = f" (the first {PREVIEW_LINES:,} are listed)" if shown > PREVIEW_LINES else ""
    if refusal is not None:
        gone = f"Refused: {refusal}"
    elif delete:
        gone = (
            f"{plan.delete_files:,} file(s) only in the destination will be deleted, after every copy verified "
            "(if one fails, nothing is deleted)."
        )
    else:
        gone = f"Nothing is deleted: {plan.totals.only_b:,} file(s) only in the destination stay."
    return (
        f"Make {dst} like {src}, one way:\n"
        f"{plan.copies:,} file(s) to copy, {plan.replaces:,} to replace, {format_size(plan.bytes)} to send; "
        f"{plan.totals.same:,} identical.{more}\n{gone}\n"
        "The copies run as one job in the Transfers panel, each verified."
    )


class CompareView(QDialog):
    """The two panes' folders compared, streamed, filterable; synchronise either way from here."""

    def __init__(self, host: WindowHost, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.setObjectName("compareView")
        self.setWindowTitle("Compare panes")
        self.resize(900, 560)
        self.left: Address | None = None
        self.right: Address | None = None
        self.totals = Totals()
        self.running = False
        self.preview: SyncPreviewDialog | None = None
        # Syncs whose deletions wait for their job to end verified: job id -> (plan, options).
        self.pending: dict[int, tuple[SyncPlan, JobOptions]] = {}
        self.last_deleted: tuple[str | None, Deleted] | None = None
        self._watch = QTimer(self)
        self._watch.setInterval(500)
        self._watch.timeout.connect(self._check_pending)
        self._gen = 0
        self._cancel: CancelToken | None = None
        self.model = CompareModel(self)
        self.proxy = StateFilter(self)
        self.proxy.setSourceModel(self.model)
        self._build()

    def _build(self) -> None:
        lay = QVBoxLayout(self)
        self.where = QLabel()
        self.where.setTextFormat(Qt.TextFormat.PlainText)
        self.where.setWordWrap(True)
        lay.addWidget(self.where)
        top = QHBoxLayout()
        self.checksum = QCheckBox("Compare content (checksum)")
        self.checksum.setToolTip(
            "Files of the same size are compared by SHA-256, using the servers' own hashes where they have "
            "them and reading a file only where nothing else tells (as 'ferry compare --by checksum')"
        )
        top.addWidget(self.checksum)
        top.addStretch(1)
        self.compare_btn = QPushButton("Compare")
        self.compare_btn.clicked.connect(self.start)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.clicked.connect(self.stop)
        top.addWidget(self.compare_btn)
        top.addWidget(self.stop_btn)
        lay.addLayout(top)
        filters = QHBoxLayout()
        filters.addWidget(QLabel("Show:"))
        self.filters: dict[State, QCheckBox] = {}
        for state, word in STATE_WORDS.items():
            box = self.filters[state] = QCheckBox(word)
            box.setChecked(True)
            box.toggled.connect(partial(self.proxy.set_shown, state))
            filters.addWidget(box)
        filters.addStretch(1)
        lay.addLayout(filters)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        lay.addWidget(self.table, 1)
        self.counts = QLabel()
        self.counts.setObjectName("compareCounts")
        lay.addWidget(self.counts)
        bottom = QHBoxLayout()
        self.sync_right = QPushButton("Synchronise left → right…")
        self.sync_right.clicked.connect(lambda: self.synchronise(to_right=True))
        self.sync_left = QPushButton("Synchronise right → left…")
        self.sync_left.clicked.connect(lambda: self.synchronise(to_right=False))
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        for b in (self.sync_right, self.sync_left):
            b.setAutoDefault(False)
            bottom.addWidget(b)
        bottom.addStretch(1)
        bottom.addWidget(close)
        lay.addLayout(bottom)
        self._update()

    # ------------------------------------------------------------ comparing
    def start(self) -> None:
        """Compare the panes' current folders again, from the start."""
        self.stop()
        self.left, self.right = self.host.left.address, self.host.right.address
        if self.left is None or self.right is None:
            self.where.setText("Both panes must show a folder to compare them.")
            return
        self._gen += 1
        gen, cancel = self._gen, CancelToken()
        self._cancel = cancel
        self.model.clear()
        self.totals = Totals()
        self.running = True
        self.where.setText(f"Left: {self.left}\nRight: {self.right}")
        by = By.CHECKSUM if self.checksum.isChecked() else By.SIZE_MTIME
        a, b = self.left, self.right
        self.host.run_async(
            lambda: self._compare(gen, a, b, by, cancel),
            partial(self._ended, gen),
            partial(self._failed, gen),
        )
        self._update()

    def _compare(self, gen: int, a: Address, b: Address, by: By, cancel: CancelToken) -> Totals:
        """On a worker thread: the engine's comparison, handed to the UI thread in batches."""
        pool = self.host.pool
        side_a = open_side(pool.get(a), a.path, "Left")
        side_b = open_side(pool.get(b), b.path, "Right")
        totals = Totals()  # the engine's own count of files read (checksum mode)
        batch: list[Item] = []
        last = time.monotonic()
        for item in compare(side_a, side_b, by=by, recursive=True, cancel=cancel, totals=totals):
            batch.append(item)
            if len(batch) >= BATCH or time.monotonic() - last > BATCH_SECONDS:
                self.host.bridge.post(partial(self._on_batch, gen, batch))
                batch, last = [], time.monotonic()
        self.host.bridge.post(partial(self._on_batch, gen, batch))
        return totals

    def _on_batch(self, gen: int, batch: list[Item]) -> None:
        if gen != self._gen:
            return  # a comparison that was stopped or replaced
        for item in batch:
            self.totals.add(item)
        self.model.add(batch)
        self._update()

    def _ended(self, gen: int, engine: Totals) -> None:
        if gen != self._gen:
            return
        self.totals.read_a, self.totals.read_b = engine.read_a, engine.read_b
        self.running = False
        self._update()
        self.host.say(f"Compared: {counts_text(self.totals, False)}")

    def _failed(self, gen: int, exc: BaseException) -> None:
        if gen != self._gen:
            return
        self.running = False
        self._update()
        if isinstance(exc, Cancelled):
            self.counts.setText(counts_text(self.totals, False) + " — stopped: the lists are incomplete")
            return
        self.counts.setText(f"Comparison failed: {describe(exc)}")

    def stop(self) -> None:
        if self._cancel is not None:
            self._cancel.cancel("stopped by you")
        if self.running:
            self._failed(self._gen, Cancelled("stopped"))
        self._gen += 1  # late batches of the stopped comparison are dropped

    def _update(self) -> None:
        self.counts.setText(counts_text(self.totals, self.running))
        self.stop_btn.setEnabled(self.running)
        ready = self.left is not None and self.right is not None
        self.sync_right.setEnabled(ready)
        self.sync_left.setEnabled(ready)

    def closeEvent(self, event: object) -> None:
        self.stop()
        super().closeEvent(event)  # type: ignore[arg-type]

    # ------------------------------------------------------------ synchronising
    def synchronise(self, *, to_right: bool) -> None:
        """Preview a one-way sync (what the engine would copy and replace), then queue it."""
        if self.left is None or self.right is None:
            return
        src, dst = (self.left, self.right) if to_right else (self.right, self.left)
        by = By.CHECKSUM if self.checksum.isChecked() else By.SIZE_MTIME
        pool = self.host.pool
        self.host.say(f"Working out what to copy from {src} to {dst}…")
        self.host.run_async(
            lambda: plan_sync(pool, src, dst, by=by, delete=True, record_actions=True),
            lambda plan: self._show_preview(src, dst, by, plan),
        )

    def _show_preview(self, src: Address, dst: Address, by: By, plan: SyncPlan) -> None:
        dlg = SyncPreviewDialog(src, dst, plan, self)
        self.preview = dlg
        dlg.accepted.connect(lambda: self._queue(src, dst, by, dlg.delete.isChecked(), dlg.max_delete))
        dlg.finished.connect(dlg.deleteLater)
        dlg.open()

    def _queue(self, src: Address, dst: Address, by: By, delete: bool, max_delete: int | None = None) -> None:
        options = dataclasses.replace(
            self.host.transfer_settings.job_options(recursive=True, on_conflict="overwrite"), label="sync"
        )
        pool, store_path = self.host.pool, self.host.store_path

        def check(plan: SyncPlan) -> None:
            if delete:
                check_deletions(plan, max_delete)  # the comparison made again must still be allowed

        def work() -> tuple[SyncPlan, int | None]:
            store = Store(store_path)
            try:
                return queue_sync(pool, store, src, dst, by=by, options=options, delete=delete, check=check)
            finally:
                store.close()

        def queued(result: tuple[SyncPlan, int | None]) -> None:
            plan, job_id = result
            if job_id is not None:
                self.host.job_queued(job_id)
                self.host.say(f"Synchronising {src} → {dst} (job {job_id})")
            elif not plan.deletions:
                self.host.say(f"{dst} already has everything {src} has: nothing to copy")
            if plan.deletions:
                self._after_job(job_id, plan, options)

        self.host.run_async(work, queued)

    # ------------------------------------------------------------ deletions, after the job verified
    def _after_job(self, job_id: int | None, plan: SyncPlan, options: JobOptions) -> None:
        if job_id is None:
            self._finish(None, plan, options)
            return
        self.pending[job_id] = (plan, options)
        self._watch.start()

    def _check_pending(self) -> None:
        """Each pending sync's job state, read on a worker; an ended job gets its deletions (or not)."""
        store_path, ids = self.host.store_path, list(self.pending)

        def states() -> dict[int, str]:
            store = Store(store_path)
            try:
                return {j.id: j.state for j in store.jobs(ids=ids)}
            finally:
                store.close()

        self._watch.stop()  # one read at a time
        self.host.run_async(states, self._states_read, lambda _exc: self._watch.start())

    def _states_read(self, states: dict[int, str]) -> None:
        for job_id, state in states.items():
            if state in JOB_FINISHED and job_id in self.pending:
                plan, options = self.pending.pop(job_id)
                self._finish(job_id, plan, options)
        gone = [j for j in self.pending if j not in states]  # removed from the queue: nothing deleted
        for job_id in gone:
            del self.pending[job_id]
        if self.pending:
            self._watch.start()

    def _finish(self, job_id: int | None, plan: SyncPlan, options: JobOptions) -> None:
        store_path = self.host.store_path

        def work() -> tuple[str | None, Deleted]:
            store = Store(store_path)
            try:
                return finish_sync(store, job_id, plan, options)
            finally:
                store.close()

        self.host.run_async(work, self._deleted)

    def _deleted(self, result: tuple[str | None, Deleted]) -> None:
        self.last_deleted = result
        refusal, done = result
        if refusal is not None:
            self.host.show_error(f"Sync: {refusal}")
            return
        text = f"Sync: {done.deleted:,} file(s) deleted" + (f", {done.kept:,} kept" if done.kept else "")
        if done.errors:
            self.host.show_error(text, "\n".join(done.errors[:50]))
        else:
            self.host.say(text)


def open_compare(host: WindowHost, parent: QWidget) -> CompareView:
    """The compare view of the panes' folders, comparing at once (one per window, re-used)."""
    view = parent.findChild(CompareView, "compareView")
    if not isinstance(view, CompareView):
        view = CompareView(host, parent)
    view.show()
    view.raise_()
    view.start()
    return view
