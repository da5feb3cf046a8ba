"""The one-time Globus app registration, explained in the window: where to register, what to
paste, and the id kept (``credentials.globus_auth.save_app_id``) so the login can go ahead."""

from __future__ import annotations

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget

from ferry.core.errors import UsageError
from ferry.credentials.globus_auth import APP_ID_STEPS, REGISTRATION_URL, save_app_id


class GlobusAppIdDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("globusAppIdDialog")
        self.setWindowTitle("Register Ferry with Globus (once)")
        self.saved: str | None = None
        lay = QVBoxLayout(self)
        for i, line in enumerate(APP_ID_STEPS):
            label = QLabel(line.replace(REGISTRATION_URL, f'<a href="{REGISTRATION_URL}">{REGISTRATION_URL}</a>'))
            label.setObjectName(f"globusAppIdStep{i}")
            label.setWordWrap(True)
            label.setOpenExternalLinks(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
            lay.addWidget(label)
        self.open_btn = QPushButton("Open the registration page")
        self.open_btn.setObjectName("globusAppIdOpen")
        self.open_btn.setAutoDefault(False)
        self.open_btn.clicked.connect(lambda: QDesktopServices.openUrl(QUrl(REGISTRATION_URL)))
        lay.addWidget(self.open_btn)
        self.edit = QLineEdit()
        self.edit.setObjectName("globusAppId")
        self.edit.setPlaceholderText("Client UUID, e.g. 1b0dc9d3-0a2b-4000-8bdc-2c2fb9f7b4e1")
        lay.addWidget(self.edit)
        self.error = QLabel("")
        self.error.setObjectName("globusAppIdError")
        self.error.setStyleSheet("color: #c62828")
        self.error.setWordWrap(True)
        lay.addWidget(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.save_btn = buttons.button(QDialogButtonBox.StandardButton.Save)
        self.save_btn.setText("Save and log in")
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.edit.setFocus()

    def save(self) -> None:
        """Keep the pasted id and close; a wrong one is explained and nothing is saved."""
        try:
            self.saved = save_app_id(self.edit.text())
        except UsageError as exc:
            self.error.setText(str(exc))
            self.edit.setFocus()
            self.edit.selectAll()
            return
        self.accept()
