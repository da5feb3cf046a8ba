""" "What will happen" before a drop or F5/F6 starts a transfer."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

from ferry.core.units import format_size
from ferry.transfers.options import CONFLICT_HELP


class DropConfirmDialog(QDialog):
    def __init__(
        self,
        *,
        files: int,
        folders: int,
        size: int,
        destination: str,
        policy: str,
        move: bool,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("dropConfirmDialog")
        verb = "Move" if move else "Copy"
        self.setWindowTitle(f"{verb} to {destination}")
        parts = []
        if files:
            parts.append(f"{files:,} file{'s' if files != 1 else ''} ({format_size(size)})")
        if folders:
            parts.append(f"{folders:,} folder{'s' if folders != 1 else ''} with everything in them")
        what = " and ".join(parts) or "nothing"
        lay = QVBoxLayout(self)
        text = QLabel(
            f"{verb} {what}\nto {destination}\n\nWhen a file already exists: {policy} ({CONFLICT_HELP.get(policy, '')})"
            + ("\n\nSources are deleted only after every file has been copied and verified." if move else "")
        )
        text.setObjectName("summary")
        self.summary = text
        text.setWordWrap(True)
        lay.addWidget(text)
        self.dont_ask = QCheckBox("Don't ask again (Transfer settings turn it back on)")
        lay.addWidget(self.dont_ask)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setText(verb)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)
