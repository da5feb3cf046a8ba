"""Share a file or folder: link kind, expiry (checked against the backend's limit), issued links.

Links are made by :func:`ferry.backends.sharing.create_share` on a worker thread and recorded in the
ledger; the list below shows every link issued on this computer with a live expiry countdown
and a Revoke button where the service can take a link back (S3 pre-signed links cannot: the
dialog says that revoking one means rotating the signing key).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

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

from ferry.backends.base import Capabilities
from ferry.core.errors import NotFound, describe
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

RunAsync = Callable[[Callable[[], Any], Callable[[Any], object], Callable[[BaseException], object]], object]

UPLOAD_HINT = "Whoever has an upload link delivers one file with:  curl -T FILE '{url}'"
EXISTS_WARNING = (
    "Something is already stored under this name: a file uploaded through the link replaces it. "
    "Share a new name (a folder path plus the file's name) to keep it."
)


@dataclass(frozen=True)
class SiteFacts:
    """What the target's site declares it can share, and whether the target already holds a file."""

    capabilities: Capabilities
    file_exists: bool


def offered_kinds(caps: Capabilities) -> tuple[str, ...]:
    """The link kinds a site's declared capabilities allow: pre-signed links (S3) download and
    upload; an access-controlled service (Globus) grants access and links its HTTPS server."""
    kinds = []
    if caps.presign or caps.acl_share:
        kinds.append("download")
    if caps.presign:
        kinds.append("upload")
    if caps.acl_share:
        kinds.append("grant")
    return tuple(kinds)


def probe_site(target: str) -> SiteFacts:
    """On a worker thread: the target's backend's declared capabilities and whether a file is there."""
    from ferry.backends.registry import BackendPool
    from ferry.credentials.sites import resolve_address

    address = resolve_address(target)
    with BackendPool() as pool:
        backend = pool.get(address)
        caps = backend.capabilities
        try:
            exists = backend.stat(address.path).is_file
        except NotFound:
            exists = False
    return SiteFacts(caps, exists)


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
        probe: Callable[[str], SiteFacts] | None = None,
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
        self.facts: SiteFacts | None = None  # until the worker has asked the site
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
        self.grantee_label = QLabel("Grant to:")
        form.addRow(self.grantee_label, self.grantee)
        lay.addLayout(form)
        self.error = QLabel("")
        self.error.setObjectName("error")
        self.error.setStyleSheet("color: #c62828")
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        lay.addWidget(self.error)
        self.hint = QLabel("")
        self.hint.setObjectName("hint")
        self.hint.setWordWrap(True)
        self.hint.setTextFormat(Qt.TextFormat.PlainText)
        self.hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.hint)
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
        self.run_async(lambda: (probe or probe_site)(target), self.site_known, self._probe_failed)

    def site_known(self, facts: SiteFacts) -> None:
        """Offer only the kinds the site declares it can make; note a file already at the target."""
        self.facts = facts
        offered = offered_kinds(facts.capabilities)
        for i in range(self.kind.count()):
            item = self.kind.model().item(i)  # type: ignore[attr-defined]
            item.setEnabled(self.kind.itemData(i) in offered)
        if offered and self.kind.currentData() not in offered:
            self.kind.setCurrentIndex(self.kind.findData(offered[0]))
        self.validate()

    def _probe_failed(self, exc: BaseException) -> None:
        self.error.setText(describe(exc))

    def offered(self) -> tuple[str, ...]:
        """The kinds the dialog offers (every kind until the site has answered)."""
        if self.facts is None:
            return tuple(key for key, _ in KINDS)
        return offered_kinds(self.facts.capabilities)

    def expires(self) -> timedelta:
        return timedelta(seconds=self.amount.value() * int(self.unit.currentData()))

    def validate(self) -> bool:
        kind = str(self.kind.currentData())
        why = expiry_error(self.scheme, kind, self.expires())
        offered = self.offered()
        if why is None and not offered:
            why = f"{self.scheme} sites cannot make share links: they exist for S3 buckets and Globus collections"
        elif why is None and kind not in offered:
            why = f"{self.scheme} sites cannot make this kind of link"
        self.error.setText(why or "")
        self.show_hint()
        self.create_btn.setEnabled(why is None)
        self.grantee.setEnabled(self.kind.currentData() == "grant")
        # Only where the site grants access (Globus): not a greyed-out field on S3.
        self.grantee_label.setVisible("grant" in offered)
        self.grantee.setVisible("grant" in offered)
        return why is None

    def show_hint(self) -> None:
        """How an upload link is used, and a warning when it would replace a stored file."""
        lines = []
        if self.kind.currentData() == "upload":
            url = self.link.url if self.link is not None and self.link.kind == "upload" else "URL"
            lines.append(UPLOAD_HINT.format(url=url))
            if self.facts is not None and self.facts.file_exists:
                lines.append(EXISTS_WARNING)
        self.hint.setText("\n".join(lines))

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
        self.show_hint()
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
