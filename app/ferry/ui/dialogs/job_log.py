"""The transfers panel's log view: each failure of the chosen jobs with its technical detail
(error kind, suggested action, attempts, the recorded message), selectable and copyable."""

from __future__ import annotations

from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QPlainTextEdit, QVBoxLayout, QWidget


class JobLogDialog(QDialog):
    def __init__(self, title: str, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("jobLogDialog")
        self.setWindowTitle(title)
        self.resize(760, 420)
        lay = QVBoxLayout(self)
        self.text = QPlainTextEdit(text)
        self.text.setObjectName("jobLogText")
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        lay.addWidget(self.text, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy all", QDialogButtonBox.ButtonRole.ActionRole)
        copy.setObjectName("copyLogButton")
        copy.clicked.connect(self.copy_all)
        buttons.rejected.connect(self.reject)
        close = buttons.button(QDialogButtonBox.StandardButton.Close)
        close.setDefault(True)
        lay.addWidget(buttons)

    def copy_all(self) -> None:
        QGuiApplication.clipboard().setText(self.text.toPlainText())
