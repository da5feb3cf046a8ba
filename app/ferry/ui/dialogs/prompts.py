"""Questions from the engine (host keys, passwords, passphrases, 2FA codes), asked in dialogs.

:class:`QtPrompter` is installed with :func:`ferry.credentials.prompts.set_prompter`. A backend
asks from a worker thread; the dialog opens on the UI thread through the bridge and only that
worker waits. Prompts are shown verbatim (a second keyboard-interactive prompt is its own
dialog, never answered with a saved password), and answers are never logged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ferry.core.errors import AuthError
from ferry.ui.bridge import Bridge


def safe_default(safe: QPushButton, *others: QPushButton) -> None:
    """Make ``safe`` the answer to Enter. A push button with the focus answers Enter whatever
    ``setDefault`` says, and the first button a box lays out takes the focus: so the others are
    not auto-default and ``safe`` gets the focus too (again each time the dialog is shown)."""
    for b in others:
        b.setAutoDefault(False)
        b.setDefault(False)
    safe.setAutoDefault(True)
    safe.setDefault(True)
    safe.setFocus(Qt.FocusReason.OtherFocusReason)


class SafeDialog(QDialog):
    """A dialog whose Enter key chooses the answer that changes nothing."""

    _safe: QPushButton | None = None

    def showEvent(self, event: Any) -> None:
        super().showEvent(event)
        if self._safe is not None:
            self._safe.setFocus(Qt.FocusReason.OtherFocusReason)


class SecretDialog(QDialog):
    """One prompt, verbatim; the answer is hidden unless the server asked for echo."""

    def __init__(self, title: str, prompt: str, echo: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setObjectName("secretDialog")
        lay = QVBoxLayout(self)
        self.prompt_label = QLabel(prompt)
        self.prompt_label.setTextFormat(Qt.TextFormat.PlainText)  # verbatim, never rich text
        self.prompt_label.setWordWrap(True)
        lay.addWidget(self.prompt_label)
        self.answer = QLineEdit()
        self.answer.setObjectName("answer")
        self.answer.setEchoMode(QLineEdit.EchoMode.Normal if echo else QLineEdit.EchoMode.Password)
        lay.addWidget(self.answer)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)
        self.answer.setFocus()


class YesNoDialog(SafeDialog):
    """A question the engine asks as "... [y/N]" (Globus consent): two buttons instead of typing."""

    def __init__(self, title: str, prompt: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setObjectName("yesNoDialog")
        lay = QVBoxLayout(self)
        text = prompt.rstrip()
        text = text[: -len("[y/N]")].rstrip() if text.endswith("[y/N]") else text
        self.prompt_label = QLabel(text)
        self.prompt_label.setTextFormat(Qt.TextFormat.PlainText)
        self.prompt_label.setWordWrap(True)
        lay.addWidget(self.prompt_label)
        box = QDialogButtonBox()
        self.yes = box.addButton("Yes, log in", QDialogButtonBox.ButtonRole.AcceptRole)
        self.no = box.addButton("Not now", QDialogButtonBox.ButtonRole.RejectRole)
        box.accepted.connect(self.accept)
        box.rejected.connect(self.reject)
        lay.addWidget(box)
        self._safe = self.no
        safe_default(self.no, self.yes)  # Enter is "not now"


def is_yes_no(prompt: str) -> bool:
    return prompt.rstrip().endswith("[y/N]")


class HostKeyDialog(SafeDialog):
    """An unknown host key: fingerprint, the known_hosts line it would add, and three choices."""

    def __init__(
        self,
        host: str,
        key_type: str,
        fingerprint: str,
        parent: QWidget | None = None,
        known_hosts_line: str | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Unknown host key for {host}")
        self.setObjectName("hostKeyDialog")
        self.choice = "no"
        lay = QVBoxLayout(self)
        text = QLabel(
            f"Ferry has never connected to <b>{_esc(host)}</b> before, so it cannot tell whether this is "
            "really that computer. Compare the fingerprint with the one your administrator published."
        )
        text.setWordWrap(True)
        lay.addWidget(text)
        fp = QLabel(f"{key_type} key fingerprint:\n{fingerprint}")
        fp.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        fp.setFont(mono)
        lay.addWidget(fp)
        self.fingerprint_label = fp
        # The exact line when the backend says what it would write; without it (an older
        # backend) no made-up template: the fingerprint above is what to compare.
        self.line_edit: QPlainTextEdit | None = None
        if known_hosts_line:
            what = QLabel("'Trust always' adds this line to your known_hosts file:")
            lay.addWidget(what)
            line = QPlainTextEdit(known_hosts_line.strip())
            line.setObjectName("knownHostsLine")
            line.setReadOnly(True)
            line.setFont(mono)
            line.setMaximumHeight(64)
            line.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
            line.setToolTip("The line 'Trust always' adds to your known_hosts file")
            lay.addWidget(line)
            self.line_edit = line
        box = QDialogButtonBox()
        self.always = QPushButton("Trust always")
        self.always.setToolTip("Trust this key and save it to known_hosts")
        self.once = QPushButton("Trust once")
        self.once.setToolTip("Trust this key until Ferry quits")
        self.reject_button = QPushButton("Reject")
        self.reject_button.setToolTip("Do not connect")
        box.addButton(self.always, QDialogButtonBox.ButtonRole.AcceptRole)
        box.addButton(self.once, QDialogButtonBox.ButtonRole.AcceptRole)
        box.addButton(self.reject_button, QDialogButtonBox.ButtonRole.RejectRole)
        self.always.clicked.connect(lambda: self._done("save"))
        self.once.clicked.connect(lambda: self._done("once"))
        self.reject_button.clicked.connect(lambda: self._done("no"))
        lay.addWidget(box)
        self._safe = self.reject_button
        safe_default(self.reject_button, self.always, self.once)  # Enter must not trust a key

    def _done(self, choice: str) -> None:
        self.choice = choice
        if choice == "no":
            self.reject()
        else:
            self.accept()


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class QtPrompter:
    """The engine's :class:`~ferry.credentials.prompts.Prompter`, answered in dialogs."""

    def __init__(self, bridge: Bridge, parent: Callable[[], QWidget | None]) -> None:
        self.bridge = bridge
        self.parent = parent

    def ask(self, title: str, prompt: str, *, echo: bool) -> str:
        if echo and is_yes_no(prompt):
            return self._yes_no(title, prompt)

        def show(reply: Callable[[Any], None]) -> None:
            dlg = SecretDialog(title, prompt, echo, self.parent())
            dlg.finished.connect(lambda code: reply(dlg.answer.text() if code == QDialog.DialogCode.Accepted else None))
            dlg.finished.connect(dlg.deleteLater)
            dlg.open()
            self.bridge.prompt_shown.emit(dlg)

        answer: str | None = self.bridge.ask_blocking(show, None)
        if answer is None:
            raise AuthError(f"{title}: cancelled by you")
        return answer

    def _yes_no(self, title: str, prompt: str) -> str:
        def show(reply: Callable[[Any], None]) -> None:
            dlg = YesNoDialog(title, prompt, self.parent())
            dlg.finished.connect(lambda code: reply("y" if code == QDialog.DialogCode.Accepted else "n"))
            dlg.finished.connect(dlg.deleteLater)
            dlg.open()
            self.bridge.prompt_shown.emit(dlg)

        answer: str = self.bridge.ask_blocking(show, "n")
        return answer

    def confirm_host_key(
        self, host: str, key_type: str, fingerprint: str, *, known_hosts_line: str | None = None
    ) -> str:
        def show(reply: Callable[[Any], None]) -> None:
            dlg = HostKeyDialog(host, key_type, fingerprint, self.parent(), known_hosts_line=known_hosts_line)
            dlg.finished.connect(lambda _code: reply(dlg.choice))
            dlg.finished.connect(dlg.deleteLater)
            dlg.open()
            self.bridge.prompt_shown.emit(dlg)

        choice: str = self.bridge.ask_blocking(show, "no")
        return choice
