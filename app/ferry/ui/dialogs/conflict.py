"""``--on-conflict ask`` in the window: both sides, the answers (skip, overwrite, overwrite if
newer or different, keep both, resume, cancel the job) and "apply to all" (of one job)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QDialogButtonBox,
    QGridLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ferry.backends.base import Entry
from ferry.backends.registry import BackendPool
from ferry.core.errors import Cancelled
from ferry.core.units import format_size
from ferry.transfers.copy import Answer, Conflict
from ferry.ui.bridge import Bridge
from ferry.ui.dialogs.prompts import SafeDialog, safe_default
from ferry.ui.listing_model import display_name, mtime_text

CANCEL_JOB = "cancel-job"  # the window's answer: skip this file, then cancel its job
ANSWERS = (
    ("overwrite", "Overwrite", "Replace the existing file"),
    ("skip", "Skip", "Keep the existing file"),
    ("rename", "Keep both", "Keep both: the copy gets a name like 'data (1).csv'"),
    ("resume", "Resume", "Continue a shorter existing file from where it ends (verified as a whole)"),
    ("newer", "Overwrite if newer", "Replace only if the source is newer"),
    ("different", "Overwrite if different", "Replace only if size or modification time differ"),
    (CANCEL_JOB, "Cancel job", "Keep the existing file and cancel this job (files already copied stay)"),
)


def difference(source: Entry, existing: Entry) -> str:
    """How the two sides differ, in words, from their sizes and times (what a person decides on)."""
    parts = []
    if source.size is not None and existing.size is not None:
        if source.size == existing.size:
            parts.append("same size")
        else:
            bigger = "larger" if source.size > existing.size else "smaller"
            parts.append(f"the source is {format_size(abs(source.size - existing.size))} {bigger}")
    if source.mtime is not None and existing.mtime is not None:
        seconds = (source.mtime - existing.mtime).total_seconds()
        if abs(seconds) < 1:
            parts.append("same modification time")
        else:
            parts.append("the source is newer" if seconds > 0 else "the existing file is newer")
    if parts[:2] == ["same size", "same modification time"]:
        return "They look identical (same size and time), but the contents may differ."
    text = ", ".join(parts) + "."
    return text[0].upper() + text[1:] if parts else ""


class ConflictDialog(SafeDialog):
    def __init__(
        self, display: str, source: Entry, existing: Entry, parent: QWidget | None = None, *, job_id: int | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("File already exists")
        self.setObjectName("conflictDialog")
        self.answer = "skip"
        lay = QVBoxLayout(self)
        job = f" (job {job_id})" if job_id is not None else ""
        lay.addWidget(QLabel(f"<b>{display_name(display)}</b> already exists and differs{job}."))
        grid = QGridLayout()
        for col, head in enumerate(("", "Size", "Modified")):
            grid.addWidget(QLabel(f"<b>{head}</b>"), 0, col)
        for row, (label, e) in enumerate((("Existing", existing), ("Source", source)), start=1):
            grid.addWidget(QLabel(label), row, 0)
            grid.addWidget(QLabel(format_size(e.size) if e.size is not None else "unknown"), row, 1)
            grid.addWidget(QLabel(mtime_text(e.mtime)), row, 2)
        lay.addLayout(grid)
        self.difference = QLabel(difference(source, existing))
        self.difference.setObjectName("difference")
        lay.addWidget(self.difference)
        self.for_all = QCheckBox("Apply to all remaining conflicts of this job")
        self.for_all.setToolTip("Kept with this job (also after a restart); other jobs ask again")
        self.for_all.setObjectName("forAll")
        lay.addWidget(self.for_all)
        box = QDialogButtonBox()
        self.buttons: dict[str, QPushButton] = {}
        for policy, text, tip in ANSWERS:
            b = QPushButton(text)
            b.setToolTip(tip)
            b.clicked.connect(lambda _=False, p=policy: self._choose(p))
            box.addButton(b, QDialogButtonBox.ButtonRole.AcceptRole)
            self.buttons[policy] = b
        lay.addWidget(box)
        self._safe = self.buttons["skip"]
        safe_default(self._safe, *(b for p, b in self.buttons.items() if p != "skip"))  # Enter keeps the file

    def _choose(self, policy: str) -> None:
        self.answer = policy
        self.accept()

    def reject(self) -> None:  # closing the dialog keeps the existing file
        self.answer = "skip"
        super().reject()


class ConflictAsker:
    """The engine's ``AskFn``: asks on the UI thread. "Apply to all" comes back with the answer;
    the engine keeps it with the job it was given for, so other jobs ask again.

    "Cancel job" has ``cancel_job`` cancel the job in the queue (on the asking worker's thread),
    then ends this file as cancelled (the existing file untouched; answering "skip" instead let
    the runner finish a one-file job as done over the cancel), and ends that job's further
    conflicts the same way without asking (its other workers may meet one before its runner has
    seen the cancel)."""

    def __init__(
        self,
        bridge: Bridge,
        parent: Callable[[], QWidget | None],
        cancel_job: Callable[[int], object] | None = None,
    ) -> None:
        self.bridge = bridge
        self.parent = parent
        self.cancel_job = cancel_job
        self.cancelled: set[int] = set()

    def __call__(self, conflict: Conflict) -> Answer:
        job_id = conflict.task.job_id
        if job_id in self.cancelled:  # its runner has yet to see the cancel: this file is not done
            raise Cancelled(f"job {job_id} was cancelled")

        def show(reply: Callable[[Any], None]) -> None:
            dlg = ConflictDialog(conflict.display, conflict.source, conflict.existing, self.parent(), job_id=job_id)
            dlg.buttons[CANCEL_JOB].setVisible(self.cancel_job is not None)
            dlg.finished.connect(lambda _c: reply((dlg.answer, dlg.for_all.isChecked())))
            dlg.finished.connect(dlg.deleteLater)
            dlg.open()
            self.bridge.prompt_shown.emit(dlg)

        answer, for_all = self.bridge.ask_blocking(show, ("skip", False))
        if answer == CANCEL_JOB:
            self.cancelled.add(job_id)
            if self.cancel_job is not None:
                self.cancel_job(job_id)
            raise Cancelled(f"job {job_id} was cancelled")  # this file too ends cancelled, untouched
        return Answer(str(answer), bool(for_all))


def queue_canceller(store_path: Path | None, pool: BackendPool) -> Callable[[int], object]:
    """Cancels a job in the queue as the panel's Cancel does, from the calling (worker) thread."""

    def cancel(job_id: int) -> int:
        from ferry.transfers.store import Store
        from ferry.ui import queue_actions

        store = Store(store_path)
        try:
            return queue_actions.cancel(store, [job_id], pool)
        finally:
            store.close()

    return cancel
