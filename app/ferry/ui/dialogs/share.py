"""Share a file or folder: link kind, expiry (checked against the backend's limit), issued links.

Links are made by :func:`ferry.backends.sharing.create_share` on a worker thread and recorded in the
ledger; the list below shows every link issued on this computer with a live expiry countdown
and a Revoke button where the service can take a link back (S3 pre-signed links cannot: the
dialog says that revoking one means rotating the signing key).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ferry.core.errors import describe
from ferry.sharing.types import Link, ShareRequest

# The longest expiry each kind of backend honours (None: until revoked). S3 pre-signed URLs are
# signed with SigV4, which caps them at 7 days.
MAX_EXPIRY: dict[str, timedelta | None] = {"s3": timedelta(days=7), "globus": None}
UNITS = (("minutes", 60), ("hours", 3600), ("days", 86400))
KINDS = (
    ("download", "Download link"),
    ("upload", "Upload link (someone can deliver a file)"),
    ("grant", "Globus access grant"),
)

RunAsync = Callable[[Callable[[], Link], Callable[[Link], object], Callable[[BaseException], object]], object]


def humane(seconds: float) -> str:
    """'7 days', '2 days 3 h', '45 min': how a person reads an expiry."""
    s = int(seconds)
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} day{'s' if days != 1 else ''}" + (f" {hours} h" if hours else "")
    if hours:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    return f"{max(1, minutes)} min" if s >= 60 else f"{s} s"


def expiry_error(scheme: str, kind: str, expires: timedelta) -> str | None:
    """Why this expiry cannot be honoured, or None."""
    if expires <= timedelta(0):
        return "The expiry must be in the future"
    limit = MAX_EXPIRY.get(scheme)
    if kind != "grant" and limit is not None and expires > limit:
        return f"{scheme.upper()} links can last at most {humane(limit.total_seconds())}"
    if kind == "grant" and scheme != "globus":
        return "Access grants exist only on Globus collections"
    return None


class ShareDialog(QDialog):
    def __init__(
        self,
        target: str,
        scheme: str,
        run_async: RunAsync,
        create: Callable[[str, ShareRequest], Link] | None = None,
        links: Callable[[], list[Link]] | None = None,
        revoke: Callable[[str], Link] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        from ferry.backends.sharing import create_share, revoke_share
        from ferry.sharing import ledger

        self.setWindowTitle(f"Share {target}")
        self.setObjectName("shareDialog")
        self.resize(680, 460)
        self.target, self.scheme = target, scheme
        self.run_async = run_async
        self.create_fn = create or (lambda t, r: create_share(t, r))
        self.links_fn = links or ledger.links
        self.revoke_fn = revoke or revoke_share
        self.link: Link | None = None
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.kind = QComboBox()
        self.kind.setObjectName("kind")
        for key, text in KINDS:
            self.kind.addItem(text, key)
        self.kind.setToolTip("What the person you share with can do")
        form.addRow("Kind:", self.kind)
        exp = QHBoxLayout()
        self.amount = QSpinBox()
        self.amount.setObjectName("amount")
        self.amount.setRange(0, 100000)
        self.amount.setValue(1)
        self.unit = QComboBox()
        for name, seconds in UNITS:
            self.unit.addItem(name, seconds)
        self.unit.setCurrentIndex(2)
        exp.addWidget(self.amount)
        exp.addWidget(self.unit)
        exp.addStretch(1)
        limit = MAX_EXPIRY.get(scheme)
        self.amount.setToolTip(
            f"At most {humane(limit.total_seconds())} on {scheme}" if limit else "How long the link works"
        )
        form.addRow("Expires in:", exp)
        self.grantee = QLineEdit()
        self.grantee.setPlaceholderText("user@example.org (Globus grants)")
        form.addRow("Grant to:", self.grantee)
        lay.addLayout(form)
        self.error = QLabel("")
        self.error.setObjectName("error")
        self.error.setStyleSheet("color: #c62828")
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        lay.addWidget(self.error)
        row = QHBoxLayout()
        self.url = QLineEdit()
        self.url.setObjectName("url")
        self.url.setReadOnly(True)
        self.url.setPlaceholderText("The link appears here")
        row.addWidget(self.url, 1)
        self.copy_btn = QPushButton("Copy")
        self.copy_btn.setToolTip("Copy the link to the clipboard")
        self.copy_btn.setEnabled(False)
        self.copy_btn.clicked.connect(self.copy_link)
        row.addWidget(self.copy_btn)
        lay.addLayout(row)
        lay.addWidget(QLabel("<b>Links issued on this computer</b>"))
        self.table = QTableWidget(0, 4)
        self.table.setObjectName("links")
        self.table.setHorizontalHeaderLabels(["Shared", "Kind", "Expires in", ""])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().hide()
        lay.addWidget(self.table, 1)
        self.buttons = QDialogButtonBox()
        self.create_btn = QPushButton("Create link")
        self.create_btn.setObjectName("createButton")
        self.create_btn.setDefault(True)
        self.buttons.addButton(self.create_btn, QDialogButtonBox.ButtonRole.ActionRole)
        self.buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.buttons.rejected.connect(self.reject)
        self.create_btn.clicked.connect(self.create_link)
        lay.addWidget(self.buttons)
        for w in (self.amount, self.unit, self.kind):
            sig = w.valueChanged if isinstance(w, QSpinBox) else w.currentIndexChanged
            sig.connect(lambda *_: self.validate())
        self._links: list[Link] = []
        self.timer = QTimer(self)
        self.timer.setInterval(1000)
        self.timer.timeout.connect(self.tick)
        self.timer.start()
        self.reload_links()
        self.validate()

    def expires(self) -> timedelta:
        return timedelta(seconds=self.amount.value() * int(self.unit.currentData()))

    def validate(self) -> bool:
        why = expiry_error(self.scheme, str(self.kind.currentData()), self.expires())
        self.error.setText(why or "")
        self.create_btn.setEnabled(why is None)
        self.grantee.setEnabled(self.kind.currentData() == "grant")
        return why is None

    def request(self) -> ShareRequest:
        kind = str(self.kind.currentData())
        return ShareRequest(
            expires=self.expires(),
            upload=kind == "upload",
            grant_user=self.grantee.text().strip() or None if kind == "grant" else None,
        )

    def create_link(self) -> None:
        if not self.validate():
            return
        self.create_btn.setEnabled(False)
        self.error.setText("")
        req = self.request()
        self.run_async(lambda: self.create_fn(self.target, req), self._created, self._failed)

    def _created(self, link: Link) -> None:
        self.link = link
        self.url.setText(link.url)
        self.copy_btn.setEnabled(True)
        self.create_btn.setEnabled(True)
        notes = list(link.warnings)
        if not link.revocable and link.revoke_note:
            notes.append(f"This link cannot be revoked early: {link.revoke_note}.")
        self.error.setStyleSheet("")
        self.error.setText(" ".join(notes))
        self.reload_links()

    def _failed(self, exc: BaseException) -> None:
        self.create_btn.setEnabled(True)
        self.error.setStyleSheet("color: #c62828")
        self.error.setText(describe(exc))

    def copy_link(self) -> None:
        if self.link is not None:
            QGuiApplication.clipboard().setText(self.link.url)

    def reload_links(self) -> None:
        try:
            self._links = self.links_fn()
        except Exception as exc:  # an unreadable ledger is reported, not fatal
            self._links = []
            self.error.setText(describe(exc))
        self.table.setRowCount(len(self._links))
        for row, link in enumerate(self._links):
            self.table.setItem(row, 0, QTableWidgetItem(link.target))
            self.table.setItem(row, 1, QTableWidgetItem(link.kind))
            self.table.setItem(row, 2, QTableWidgetItem(self.countdown(link)))
            b = QPushButton("Revoke")
            b.setEnabled(link.revocable)
            b.setToolTip(
                "Take this link back now"
                if link.revocable
                else (link.revoke_note or "This service cannot revoke links")
            )
            b.clicked.connect(lambda _=False, lid=link.id: self._revoke(lid))
            self.table.setCellWidget(row, 3, b)

    @staticmethod
    def countdown(link: Link, now: datetime | None = None) -> str:
        if link.expires is None:
            return "until revoked"
        left = (link.expires - (now or datetime.now(UTC))).total_seconds()
        return "expired" if left <= 0 else humane(left)

    def tick(self) -> None:
        for row, link in enumerate(self._links):
            item = self.table.item(row, 2)
            if item is not None:
                item.setText(self.countdown(link))

    def _revoke(self, link_id: str) -> None:
        self.run_async(lambda: self.revoke_fn(link_id), lambda _l: self.reload_links(), self._failed)
