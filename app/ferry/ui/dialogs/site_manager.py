"""The site manager: SFTP, S3, Globus and local bookmarks saved to ``sites.toml``.

Settings go to ``sites.toml`` (never a secret: the engine refuses option names that look like
one); passwords and secret keys go to the system keychain, and the dialog says which happened,
including when there is no keychain and a secret lives only in memory until Ferry quits.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSpinBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from ferry.backends.sftp.auth import Authenticator
from ferry.core.address import Address, parse_address
from ferry.core.errors import AuthError, FerryError, UsageError, describe
from ferry.credentials import keychain
from ferry.credentials.sites import GLOBUS_COLLECTION, GLOBUS_PATH, Site, SiteStore

KINDS = (("sftp", "SFTP (SSH)"), ("s3", "S3 bucket"), ("globus", "Globus collection"), ("local", "Local folder"))


def _line(placeholder: str = "", tip: str = "") -> QLineEdit:
    e = QLineEdit()
    e.setPlaceholderText(placeholder)
    if tip:
        e.setToolTip(tip)
    return e


class SiteManagerDialog(QDialog):
    saved = Signal(str)  # site name
    test_requested = Signal(str)  # address text to try listing

    def __init__(self, store: SiteStore | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Sites")
        self.setObjectName("siteManagerDialog")
        self.store = store or SiteStore()
        # Set by the window: run slow calls in the background, results back on the UI thread.
        self.run_async: Callable[..., object] | None = None
        # Room for the tallest page with its wrapped notes: a stacked page does not ask for the
        # height its word-wrapped labels need, so at 460 pixels the SFTP note overlapped the form.
        self.resize(780, 580)
        outer = QHBoxLayout(self)
        left = QVBoxLayout()
        self.list = QListWidget()
        self.list.setObjectName("siteList")
        self.list.currentItemChanged.connect(lambda cur, _prev: self._load(cur))
        left.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.new_btn = QPushButton("New")
        self.new_btn.setToolTip("Start a new site (Ctrl+N)")
        self.new_btn.setShortcut("Ctrl+N")
        self.new_btn.clicked.connect(self.new_site)
        self.delete_btn = QPushButton("Delete")
        self.delete_btn.setToolTip("Forget the selected site and its stored secrets (no files are touched)")
        self.delete_btn.clicked.connect(self.delete_site)
        row.addWidget(self.new_btn)
        row.addWidget(self.delete_btn)
        left.addLayout(row)
        self.import_btn = QPushButton("Import from ssh_config…")
        self.import_btn.setToolTip("Fill in the SFTP form from a Host entry in your ssh_config")
        self.import_btn.clicked.connect(self._import_menu)
        left.addWidget(self.import_btn)
        outer.addLayout(left, 1)

        right = QVBoxLayout()
        form = QFormLayout()
        self.kind = QComboBox()
        self.kind.setObjectName("kind")
        for key, text in KINDS:
            self.kind.addItem(text, key)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        form.addRow("Type:", self.kind)
        self.name = _line("e.g. cluster", "A short name: use it as NAME:path anywhere Ferry takes an address")
        self.name.setObjectName("name")
        form.addRow("Name:", self.name)
        self.description = _line("optional")
        form.addRow("Description:", self.description)
        right.addLayout(form)

        self.pages = QStackedWidget()
        # SFTP
        p = QWidget()
        f = QFormLayout(p)
        self.host = _line("login.cluster.example.org")
        self.host.setObjectName("host")
        self.user = _line("your user name")
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(22)
        self.key = _line("~/.ssh/id_ed25519 (optional)", "A private key file; its passphrase is asked when needed")
        key_row = QHBoxLayout()
        key_row.addWidget(self.key)
        browse = QPushButton("…")
        browse.setToolTip("Choose a key file")
        browse.clicked.connect(self._browse_key)
        key_row.addWidget(browse)
        self.jump = _line("bastion.example.org (optional)", "Connect through this host (ProxyJump)")
        self.sftp_path = _line("/ or a folder (optional)")
        self.password = _line("optional: stored in the keychain")
        self.password.setEchoMode(QLineEdit.EchoMode.Password)
        self.password.setObjectName("password")
        f.addRow("Host:", self.host)
        f.addRow("User:", self.user)
        f.addRow("Port:", self.port)
        f.addRow("Key file:", key_row)
        f.addRow("Jump host:", self.jump)
        f.addRow("Folder:", self.sftp_path)
        f.addRow("Password:", self.password)
        self.sftp_globus, self.sftp_globus_path = _globus_lines(f, "/home/me=/~/")
        # How these combine with ssh_config, which the backend also follows (like ssh -i / -J / -l / -p).
        sftp_note = QLabel(
            "Your ~/.ssh/config still applies; a key file or jump host set here takes precedence, as "
            "ssh -i / -J would. A saved password only answers a password prompt, never a one-time code."
        )
        sftp_note.setWordWrap(True)
        sftp_note.setObjectName("sftpNote")
        f.addRow("", sftp_note)
        self.pages.addWidget(p)
        # S3
        p = QWidget()
        f = QFormLayout(p)
        self.bucket = _line("my-bucket")
        self.bucket.setObjectName("bucket")
        self.prefix = _line("optional/prefix")
        self.profile = _line("an AWS profile (optional)", "A profile from ~/.aws/config; or give endpoint and keys")
        self.endpoint = _line("https://s3.example.org (optional)")
        self.region = _line("us-east-1 (optional)")
        self.access_key = _line("access key id (optional)")
        self.secret_key = _line("secret access key: stored in the keychain")
        self.secret_key.setEchoMode(QLineEdit.EchoMode.Password)
        f.addRow("Bucket:", self.bucket)
        f.addRow("Prefix:", self.prefix)
        f.addRow("Profile:", self.profile)
        f.addRow("Endpoint:", self.endpoint)
        f.addRow("Region:", self.region)
        f.addRow("Access key:", self.access_key)
        f.addRow("Secret key:", self.secret_key)
        self.s3_globus, self.s3_globus_path = _globus_lines(f, "/=/BUCKET/")
        self.pages.addWidget(p)
        # Globus
        p = QWidget()
        f = QFormLayout(p)
        self.collection = _line("collection UUID")
        self.globus_path = _line("/~/ (optional)")
        f.addRow("Collection:", self.collection)
        f.addRow("Folder:", self.globus_path)
        self.globus_login_btn = QPushButton("Log in to Globus…")
        self.globus_login_btn.setToolTip("Opens the Globus login in your browser (or asks for the code it shows)")
        self.globus_login_btn.clicked.connect(self._globus_login)
        f.addRow("", self.globus_login_btn)
        find_row = QHBoxLayout()
        self.globus_search = _line("find a collection by name", "Search Globus for collections you can use")
        self.globus_find_btn = QPushButton("Find")
        self.globus_find_btn.clicked.connect(self._globus_find)
        find_row.addWidget(self.globus_search)
        find_row.addWidget(self.globus_find_btn)
        f.addRow("Search:", find_row)
        self.globus_results = QComboBox()
        self.globus_results.setToolTip("Choose one to fill in the collection id")
        self.globus_results.activated.connect(self._globus_chosen)
        f.addRow("Found:", self.globus_results)
        globus_note = QLabel("Ferry asks for consent when a collection needs it.")
        globus_note.setWordWrap(True)
        f.addRow("", globus_note)
        self.pages.addWidget(p)
        # Local
        p = QWidget()
        f = QFormLayout(p)
        self.local_path = _line("/data/project")
        self.local_path.setObjectName("localPath")
        f.addRow("Folder:", self.local_path)
        self.pages.addWidget(p)
        right.addWidget(self.pages)

        status = keychain.keychain_status()
        self.keychain_label = QLabel(
            ("Secrets go to the system keychain, never to sites.toml. " + status.description)
            if status.available
            else f"{status.description} Settings are still saved to sites.toml; secrets never are."
        )
        self.keychain_label.setObjectName("keychainLabel")
        self.keychain_label.setWordWrap(True)
        right.addWidget(self.keychain_label)
        self.message = QLabel("")
        self.message.setObjectName("message")
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        right.addWidget(self.message)
        buttons = QDialogButtonBox()
        self.test_btn = QPushButton("Test connection")
        self.test_btn.setObjectName("testButton")
        self.test_btn.setToolTip(
            "Connect with the settings as typed (saved or not) and list the folder once; nothing is saved"
        )
        self.test_btn.clicked.connect(self.test_connection)
        self.save_btn = QPushButton("Save")
        self.save_btn.setObjectName("saveButton")
        self.save_btn.setToolTip("Save this site (Ctrl+S)")
        self.save_btn.setShortcut("Ctrl+S")
        self.save_btn.clicked.connect(self.save)
        buttons.addButton(self.test_btn, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.save_btn, QDialogButtonBox.ButtonRole.ApplyRole)
        buttons.addButton(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        right.addWidget(buttons)
        outer.addLayout(right, 2)
        self.reload()

    def _kind_changed(self, index: int) -> None:
        self.pages.setCurrentIndex(index)

    # ---- list ----
    def reload(self, select: str | None = None) -> None:
        self.list.clear()
        try:
            sites = self.store.list()
        except FerryError as exc:
            self.message.setText(exc.message)
            sites = []
        for s in sites:
            item = QListWidgetItem(s.name)
            item.setData(Qt.ItemDataRole.UserRole, s)
            item.setToolTip(s.address)
            self.list.addItem(item)
            if s.name == select:
                self.list.setCurrentItem(item)

    def new_site(self) -> None:
        self.list.clearSelection()
        self.list.setCurrentRow(-1)
        self._clear_form()
        self.name.setFocus()

    def _clear_form(self) -> None:
        for w in (
            self.name,
            self.description,
            self.host,
            self.user,
            self.key,
            self.jump,
            self.sftp_path,
            self.password,
            self.bucket,
            self.prefix,
            self.profile,
            self.endpoint,
            self.region,
            self.access_key,
            self.secret_key,
            self.collection,
            self.globus_path,
            self.local_path,
            self.sftp_globus,
            self.sftp_globus_path,
            self.s3_globus,
            self.s3_globus_path,
        ):
            w.clear()
        self.port.setValue(22)

    def _load(self, item: QListWidgetItem | None) -> None:
        if item is None:
            return
        site: Site = item.data(Qt.ItemDataRole.UserRole)
        self._clear_form()
        self.name.setText(site.name)
        self.description.setText(site.description)
        a = site.base_address()
        opts = dict(site.options)
        kind = a.scheme if a.scheme in ("sftp", "s3", "globus") else "local"
        self.kind.setCurrentIndex(self.kind.findData(kind))
        if kind == "sftp":
            self.host.setText(a.host)
            self.user.setText(a.user or "")
            self.port.setValue(a.port or 22)
            self.sftp_path.setText(a.path)
            self.key.setText(opts.get("identity_file", ""))
            self.jump.setText(opts.get("proxy_jump", ""))
            self.sftp_globus.setText(opts.get(GLOBUS_COLLECTION, ""))
            self.sftp_globus_path.setText(opts.get(GLOBUS_PATH, ""))
        elif kind == "s3":
            self.bucket.setText(a.host)
            self.prefix.setText(a.path.lstrip("/"))
            self.profile.setText(opts.get("profile", ""))
            self.endpoint.setText(opts.get("endpoint_url", ""))
            self.region.setText(opts.get("region", ""))
            self.access_key.setText(opts.get("access_key_id", ""))
            self.s3_globus.setText(opts.get(GLOBUS_COLLECTION, ""))
            self.s3_globus_path.setText(opts.get(GLOBUS_PATH, ""))
        elif kind == "globus":
            self.collection.setText(a.host)
            self.globus_path.setText(a.path)
        else:
            self.local_path.setText(a.path)

    # ---- building a site ----
    def site_fields(self) -> tuple[str, str, dict[str, str], dict[str, str]]:
        """(name, address, options, secrets) from the form; UsageError if something is missing."""
        name = self.name.text().strip()
        if not name:
            raise UsageError("Give the site a name")
        address, opts, secrets = self._kind_fields()
        return name, address, opts, secrets

    def _kind_fields(self) -> tuple[str, dict[str, str], dict[str, str]]:
        kind = str(self.kind.currentData())
        fields = {"sftp": self._sftp_fields, "s3": self._s3_fields, "globus": self._globus_fields}
        return fields.get(kind, self._local_fields)()

    def _sftp_fields(self) -> tuple[str, dict[str, str], dict[str, str]]:
        host = self.host.text().strip()
        if not host:
            raise UsageError("Give the host name")
        user = self.user.text().strip()
        port = self.port.value()
        path = self.sftp_path.text().strip()
        netloc = (
            (f"{user}@" if user else "") + (f"[{host}]" if ":" in host else host) + (f":{port}" if port != 22 else "")
        )
        address = f"sftp://{netloc}" + (("" if path.startswith("/") else "/~/") + path if path else "")
        opts = _filled(
            (
                ("identity_file", self.key),
                ("proxy_jump", self.jump),
                (GLOBUS_COLLECTION, self.sftp_globus),
                (GLOBUS_PATH, self.sftp_globus_path),
            )
        )
        secrets = {"password": self.password.text()} if self.password.text() else {}
        return address, opts, secrets

    def _s3_fields(self) -> tuple[str, dict[str, str], dict[str, str]]:
        bucket = self.bucket.text().strip()
        if not bucket:
            raise UsageError("Give the bucket name")
        prefix = self.prefix.text().strip().strip("/")
        address = f"s3://{bucket}/" + (f"{prefix}/" if prefix else "")
        opts = _filled(
            (
                ("profile", self.profile),
                ("endpoint_url", self.endpoint),  # option names as the S3 backend's client reads them
                ("region", self.region),
                ("access_key_id", self.access_key),
                (GLOBUS_COLLECTION, self.s3_globus),
                (GLOBUS_PATH, self.s3_globus_path),
            )
        )
        # The site's secret: the S3 secret key.
        secrets = {"password": self.secret_key.text()} if self.secret_key.text() else {}
        return address, opts, secrets

    def _globus_fields(self) -> tuple[str, dict[str, str], dict[str, str]]:
        coll = self.collection.text().strip()
        if not coll:
            raise UsageError("Give the collection's id")
        path = self.globus_path.text().strip()
        return f"globus://{coll}" + (path if path.startswith("/") else f"/{path}" if path else "/"), {}, {}

    def _local_fields(self) -> tuple[str, dict[str, str], dict[str, str]]:
        address = self.local_path.text().strip()
        if not address:
            raise UsageError("Choose a folder")
        return address, {}, {}

    def save(self) -> bool:
        try:
            name, address, opts, secrets = self.site_fields()
            exists = self.store.get(name) is not None
            self.store.add(name, address, opts, replace=exists, description=self.description.text().strip())
        except FerryError as exc:
            self.message.setText(exc.message)
            return False
        said = [f"Saved '{name}' ({address})."]
        what = "secret key" if str(self.kind.currentData()) == "s3" else "password"
        for field, value in secrets.items():
            if keychain.set_secret(keychain.site_secret_key(name, field), value):
                said.append(f"The {what} is in the system keychain.")
            else:
                said.append(f"The {what} is kept in memory only until Ferry quits: {keychain.keychain_reason()}.")
        self.password.clear()
        self.secret_key.clear()
        self.message.setText(" ".join(said))
        self.reload(select=name)
        self.saved.emit(name)
        return True

    def delete_site(self) -> None:
        if self.list.currentRow() < 0:
            return
        name = self.list.currentItem().text()
        try:
            self.store.remove(name)
        except FerryError as exc:
            self.message.setText(exc.message)
            return
        keychain.delete_secret(keychain.site_secret_key(name))
        self.message.setText(f"Forgot '{name}' and its stored secrets.")
        self.reload()

    def test_connection(self) -> None:
        """Connect with the form as it stands, saved or not, and list the folder once, on a worker
        thread. The typed password or secret key is handed to that one login only: nothing is
        written to sites.toml, the keychain or a log, and the connection is closed after."""
        try:
            address, opts, secrets = self._kind_fields()
            target = parse_address(address)
        except FerryError as exc:
            self.message.setText(exc.message)
            return
        if self.run_async is None:
            self.message.setText("Testing needs the main window")
            return
        name, secret = self.name.text().strip(), secrets.get("password")
        self.test_btn.setEnabled(False)
        self.message.setText(f"Connecting to {address}…")
        self.tested = None
        self.run_async(lambda: try_site(name, target, opts, secret), self._tested, self._test_failed)

    tested: SiteTest | None = None  # the last test's outcome (None while one runs, or after a failure)

    def _tested(self, result: SiteTest) -> None:
        self.tested = result
        self.test_btn.setEnabled(True)
        items = f"{result.items:,} item{'' if result.items == 1 else 's'}"
        self.message.setText(f"Connected: {items} in {result.folder}")

    def _test_failed(self, exc: BaseException) -> None:
        self.test_btn.setEnabled(True)
        said = describe(exc).strip().splitlines()
        self.message.setText(f"Could not connect: {said[0] if said else type(exc).__name__}")

    # ---- Globus ----
    def _globus_login(self) -> None:
        if self.run_async is None or not self._globus_app_id():
            return

        def work() -> str:
            from ferry.credentials.globus_auth import shared_auth

            auth = shared_auth()
            auth.login(force=True)
            who = auth.whoami()
            return who.get("username") or who.get("name") or "you"

        self.message.setText("Logging in to Globus… (a browser window or a dialog asks next)")
        self.run_async(work, lambda who: self.message.setText(f"Logged in to Globus as {who}."), self._failed)

    def _globus_app_id(self) -> bool:
        """Without a registered app id the service would refuse the login: explain the one-time
        registration and keep the pasted id first (False: the person cancelled)."""
        from ferry.credentials import globus_auth

        try:
            needed = globus_auth.shared_auth().needs_app_id()
        except FerryError as exc:
            self.message.setText(str(exc))
            return False
        if not needed:
            return True
        from ferry.ui.dialogs.globus_app_id import GlobusAppIdDialog

        dlg = GlobusAppIdDialog(self)
        if dlg.exec() != QDialog.DialogCode.Accepted or dlg.saved is None:
            self.message.setText("Globus login needs a registered app id; nothing was changed.")
            return False
        globus_auth.reset_shared_auth()  # the next login uses the new id (and its own token storage)
        self.message.setText(f"Saved Globus app id {dlg.saved}.")
        return True

    def _globus_find(self) -> None:
        text = self.globus_search.text().strip()
        if not text or self.run_async is None:
            return

        def work() -> list[tuple[str, str]]:
            from ferry.credentials.globus_auth import shared_auth

            found = shared_auth().transfer_client().endpoint_search(text, limit=25)
            return [(str(ep["display_name"] or ep["id"]), str(ep["id"])) for ep in found]

        def done(found: list[tuple[str, str]]) -> None:
            self.globus_results.clear()
            for name, cid in found:
                self.globus_results.addItem(f"{name} ({cid[:8]}…)", cid)
            self.message.setText(f"{len(found)} collection(s) found" if found else "No collection matches that name")

        self.message.setText("Searching Globus…")
        self.run_async(work, done, self._failed)

    def _globus_chosen(self, index: int) -> None:
        cid = self.globus_results.itemData(index)
        if cid:
            self.collection.setText(str(cid))
            if not self.name.text():
                self.name.setText(self.globus_results.itemText(index).split(" (")[0].replace(" ", "-")[:40])

    def _failed(self, exc: BaseException) -> None:
        from ferry.core.errors import describe

        self.message.setText(describe(exc))

    # ---- ssh_config ----
    def _import_menu(self) -> None:
        from ferry.ui.sites_menu import ssh_hosts

        hosts = ssh_hosts()
        if not hosts:
            self.message.setText("No Host entries were found in your ssh_config.")
            return
        menu = QMenu(self)
        for h in hosts:
            act = menu.addAction(h)
            act.setData(h)
        menu.triggered.connect(lambda a: self.import_ssh_host(str(a.data())))
        menu.popup(self.import_btn.mapToGlobal(self.import_btn.rect().bottomLeft()))

    def import_ssh_host(self, alias: str) -> None:
        from ferry.credentials.ssh_config import resolve

        try:
            t = resolve(alias)
        except Exception as exc:  # a broken ssh_config entry must not break the dialog
            self.message.setText(f"Could not read ssh_config for {alias}: {exc}")
            return
        self.new_site()
        self.kind.setCurrentIndex(self.kind.findData("sftp"))
        self.name.setText(alias)
        self.host.setText(t.hostname)
        self.user.setText(t.user)
        self.port.setValue(t.port)
        if t.identity_files:
            self.key.setText(t.identity_files[0])
        self.jump.setText(t.proxy_jump or "")
        self.message.setText(f"Filled in from ssh_config's Host {alias}; check and Save.")

    def _browse_key(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a private key", "~/.ssh")
        if path:
            self.key.setText(path)


@dataclass(frozen=True)
class SiteTest:
    """What a connection test found: how many entries the folder holds, and which folder."""

    items: int
    folder: str


def try_site(name: str, address: Address, options: Mapping[str, str], secret: str | None) -> SiteTest:
    """Connect to ``address`` with a site's ``options`` and ``secret`` as typed (not saved) and list
    its folder once; raises the backend's typed error. Runs on a worker thread. Nothing is kept:
    not the login (closed here), not the secret (passed to this login only)."""
    if address.scheme == "sftp":
        return _try_sftp(name, address, options, secret)
    from ferry.backends.registry import backend_class

    backend: Any
    if address.scheme == "s3":
        from ferry.backends.s3.backend import S3Backend
        from ferry.backends.s3.settings import S3Settings

        settings = S3Settings.from_env(os.environ, options, site=name or None, secret_key=secret)
        backend = S3Backend(address, settings)
    else:
        backend = backend_class(address.scheme)(address)
    try:
        items = sum(1 for _ in backend.list(address.path))
    finally:
        backend.close()
    return SiteTest(items, str(address))


def _try_sftp(name: str, address: Address, options: Mapping[str, str], password: str | None) -> SiteTest:
    from ferry.backends.sftp.errors import map_error
    from ferry.backends.sftp.host import Host
    from ferry.credentials.ssh_config import apply_site, resolve

    target = resolve(address.host, address.user, address.port)
    given = {"user_given": address.user is not None, "port_given": address.port is not None}
    apply_site(target, name or "(unsaved)", dict(options), **given)
    if not name:
        target.site = None  # no saved password to look up under a made-up name
    host = Host(target)  # a connection of its own, not the window's shared one
    if password:
        host.connection.auth = _TypedPassword(target, password)
    folder = address.path or "."
    try:
        with host.pool.sftp() as client:
            try:
                folder = client.normalize(folder)
                items = len(client.listdir(folder))
            except Exception as exc:
                raise map_error(exc, folder) from exc
    finally:
        host.close()
    return SiteTest(items, folder)


class _TypedPassword(Authenticator):
    """The login as the backend does it (keys first, then keyboard-interactive, then password),
    with the password typed into the form instead of a saved one. A refused password is said,
    not asked for again: the test is of what was typed."""

    def __init__(self, target: Any, password: str) -> None:
        super().__init__(target)
        self._typed = password

    def login(self, transport: Any) -> None:
        import paramiko

        self._public_keys(transport)
        if transport.is_authenticated():
            return
        offered: list[str | None] = [self._typed]
        if self._keyboard_interactive(transport, offered):
            return
        try:
            transport.auth_password(self.target.user, self._typed)
        except paramiko.BadAuthenticationType as exc:
            raise AuthError(f"Login to {self.title} failed: the server takes no password") from exc
        except paramiko.AuthenticationException as exc:
            raise AuthError(f"Login to {self.title} failed: wrong password") from exc
        if not transport.is_authenticated():
            raise AuthError(f"Login to {self.title} failed")


def _globus_lines(form: QFormLayout, mapping_example: str) -> tuple[QLineEdit, QLineEdit]:
    """The Globus collection serving an SSH or S3 site, and where the site's paths are on it: a
    job between two such sites can go as one Globus task (docs/globus.md)."""
    collection = _line(
        "collection UUID (optional)",
        "The Globus collection serving this site's storage: copies between two such sites go as one Globus task",
    )
    mapping = _line(f"{mapping_example} (optional)", "SITE_PATH=COLLECTION_PATH: where this site's paths are on it")
    form.addRow("Globus collection:", collection)
    form.addRow("Globus path:", mapping)
    return collection, mapping


def _filled(fields: tuple[tuple[str, QLineEdit], ...]) -> dict[str, str]:
    """Option name -> the field's text, for the fields not left empty."""
    return {key: w.text().strip() for key, w in fields if w.text().strip()}
