"""Properties of one entry: size, times, kind, link target, permissions (``rw-r--r--`` with the
octal beside it, changeable where the site declares ``capabilities.modes``); checksums computed on
demand. Every backend call runs on a worker thread through the window's ``run_async``."""

from __future__ import annotations

import stat as stat_mod
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ferry.backends.base import Backend, Entry, Kind
from ferry.core.errors import describe, error_kind
from ferry.core.units import format_size
from ferry.ui.listing_model import display_name, kind_text, mode_text, mtime_text

RunAsync = Callable[[Callable[[], Any], Callable[[Any], object], Callable[[BaseException], object]], object]

WHO = ("Owner", "Group", "Others")
WHAT = (("r", "Read"), ("w", "Write"), ("x", "Execute"))


def parse_octal(text: str) -> int | None:
    """``644``/``0644``/``2755`` as permission bits, or None when it is not 3–4 octal digits."""
    t = text.strip()
    if not 3 <= len(t) <= 4 or any(c not in "01234567" for c in t):
        return None
    return int(t, 8)


class ModeEditor(QWidget):
    """Nine check boxes (owner/group/others × read/write/execute) and an octal field, kept in step."""

    def __init__(self, mode: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.special = stat_mod.S_IMODE(mode) & 0o7000
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        self.boxes: dict[int, QCheckBox] = {}
        for col, (_letter, what) in enumerate(WHAT, start=1):
            grid.addWidget(QLabel(what), 0, col)
        for row, who in enumerate(WHO, start=1):
            grid.addWidget(QLabel(who), row, 0)
            for col, (letter, what) in enumerate(WHAT, start=1):
                bit = 1 << (3 * (3 - row) + (3 - col))
                box = QCheckBox()
                box.setObjectName(f"mode_{who.lower()}_{letter}")
                box.setAccessibleName(f"{who} {what.lower()}")
                box.setChecked(bool(mode & bit))
                box.toggled.connect(self._boxes_changed)
                self.boxes[bit] = box
                grid.addWidget(box, row, col)
        self.octal = QLineEdit(f"{stat_mod.S_IMODE(mode):03o}")
        self.octal.setObjectName("modeOctal")
        self.octal.setMaxLength(4)
        self.octal.setToolTip("Octal, as chmod takes it: 644, 600, 755, 2775")
        self.octal.textEdited.connect(self._octal_changed)
        grid.addWidget(QLabel("Octal:"), 4, 0)
        grid.addWidget(self.octal, 4, 1, 1, 3)

    def mode(self) -> int | None:
        return parse_octal(self.octal.text())

    def _boxes_changed(self, _on: bool) -> None:
        bits = self.special | sum(bit for bit, box in self.boxes.items() if box.isChecked())
        self.octal.setText(f"{bits:03o}")

    def _octal_changed(self, text: str) -> None:
        bits = parse_octal(text)
        if bits is None:
            return
        self.special = bits & 0o7000
        for bit, box in self.boxes.items():
            box.blockSignals(True)
            box.setChecked(bool(bits & bit))
            box.blockSignals(False)


class PropertiesDialog(QDialog):
    """``permissions``: opened from Permissions… rather than Properties…: titled so, with the
    focus in the octal field (or, where chmod is not offered, the reason said at once)."""

    def __init__(
        self,
        entry: Entry,
        where: str,
        backend: Backend,
        run_async: RunAsync,
        parent: QWidget | None = None,
        *,
        permissions: bool = False,
    ) -> None:
        super().__init__(parent)
        what = "Permissions" if permissions else "Properties"
        self.setWindowTitle(f"{what} of {display_name(entry.name)}")
        self.setObjectName("propertiesDialog")
        self.entry, self.backend, self.run_async = entry, backend, run_async
        lay = QVBoxLayout(self)
        form = QFormLayout()

        def label(text: str) -> QLabel:
            w = QLabel(text)
            w.setTextFormat(Qt.TextFormat.PlainText)
            w.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            return w

        form.addRow("Name:", label(display_name(entry.name)))
        form.addRow("Where:", label(where))
        form.addRow("Kind:", label(kind_text(entry)))
        size = "unknown" if entry.size is None else f"{format_size(entry.size)} ({entry.size:,} bytes)"
        form.addRow("Size:", label("" if entry.is_dir else size))
        form.addRow("Modified:", label(mtime_text(entry.mtime)))
        if entry.link_target:
            form.addRow("Link to:", label(entry.link_target))
        self.mode_label: QLabel | None = None
        self.mode_editor: ModeEditor | None = None
        self.apply_mode: QPushButton | None = None
        if entry.mode is not None:
            self.mode_label = label(mode_text(entry.mode))
            self.mode_label.setObjectName("modeText")
            form.addRow("Permissions:", self.mode_label)
            # Offered where the site declares it can (capabilities.modes), never through a link.
            if backend.capabilities.modes and entry.kind is not Kind.LINK:
                self.mode_editor = ModeEditor(entry.mode)
                self.apply_mode = QPushButton("Change permissions")
                self.apply_mode.setObjectName("applyMode")
                self.apply_mode.clicked.connect(self.change_mode)
                row = QHBoxLayout()
                row.addWidget(self.mode_editor)
                row.addWidget(self.apply_mode, 0, Qt.AlignmentFlag.AlignBottom)
                form.addRow("Change (chmod):", row)
        self.mode_status = label("")
        self.mode_status.setObjectName("modeStatus")
        self.mode_status.setWordWrap(True)
        self.mode_error_kind: str | None = None  # the typed kind of the last chmod's failure
        for k, v in entry.meta.items():
            form.addRow(f"{k}:", label(v))
        for algo, h in entry.hashes.items():
            form.addRow(f"{algo}:", label(h))
        lay.addLayout(form)
        lay.addWidget(self.mode_status)
        self.hashes = label("")
        self.hashes.setObjectName("hashes")
        self.hashes.setWordWrap(True)
        lay.addWidget(self.hashes)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.hash_btn = QPushButton("Compute checksums")
        self.hash_btn.setObjectName("hashButton")
        algos = backend.capabilities.hashes
        self.hash_btn.setEnabled(entry.is_file and bool(algos))
        self.hash_btn.setToolTip(
            f"Compute {', '.join(algos)} ("
            + ("the server keeps them" if not backend.capabilities.slow_hash else "reads the whole file")
            + ")"
            if algos
            else "This site cannot compute checksums"
        )
        self.hash_btn.clicked.connect(self.compute)
        buttons.addButton(self.hash_btn, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        if permissions:
            self._open_at_permissions()

    def _open_at_permissions(self) -> None:
        if self.mode_editor is not None:
            self.mode_editor.octal.setFocus()
            self.mode_editor.octal.selectAll()
        elif self.entry.kind is Kind.LINK:
            self.mode_status.setText("A link's permissions are not changed here: chmod would change its target's")
        else:
            self.mode_status.setText("This site does not report permissions for this entry")

    def compute(self) -> None:
        self.hash_btn.setEnabled(False)
        self.hashes.setText("Computing…")
        backend, path, algos = self.backend, self.entry.path, self.backend.capabilities.hashes

        def work() -> dict[str, str]:
            return {a: backend.hash(path, a) for a in algos}

        self.run_async(work, self._done, lambda exc: self.hashes.setText(describe(exc)))

    def _done(self, found: dict[str, str]) -> None:
        self.hashes.setText("\n".join(f"{a}: {h}" for a, h in found.items()))

    def change_mode(self) -> None:
        """chmod on a worker thread; the label shows what the site then reports."""
        if self.mode_editor is None or self.apply_mode is None:
            return
        mode = self.mode_editor.mode()
        if mode is None:
            self.mode_status.setText("Permissions are 3 or 4 octal digits, as 644 or 2775")
            return
        backend, path = self.backend, self.entry.path
        self.apply_mode.setEnabled(False)
        self.mode_status.setText(f"Changing permissions to {mode_text(mode)}…")

        def work() -> Entry:
            backend.set_mode(path, mode)
            return backend.stat(path)

        self.run_async(work, self._mode_done, self._mode_failed)

    def _mode_done(self, entry: Entry) -> None:
        self.entry = entry
        self.mode_error_kind = None
        shown = "unknown" if entry.mode is None else mode_text(entry.mode)
        if self.mode_label is not None:
            self.mode_label.setText(shown)
        self.mode_status.setText(f"Permissions are now {shown}")
        if self.apply_mode is not None:
            self.apply_mode.setEnabled(True)

    def _mode_failed(self, exc: BaseException) -> None:
        self.mode_error_kind = error_kind(exc)
        self.mode_status.setText(f"Permissions not changed ({self.mode_error_kind}): {describe(exc)}")
        if self.apply_mode is not None:
            self.apply_mode.setEnabled(True)
