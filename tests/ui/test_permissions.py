"""Permissions in the Properties dialog (issue 20): shown as ``rw-r--r--`` with the octal beside
it, and changed (chmod) on a worker thread where the site declares ``capabilities.modes`` — on the
local disk and on the loopback OpenSSH server; S3 shows what it knows and offers no chmod."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.backends.base import Entry, Kind
from ferry.backends.s3.backend import S3Backend
from ferry.core.address import Address, parse_address
from ferry.core.errors import NotFound, PermissionDenied
from ferry.ui.dialogs.properties import PropertiesDialog, parse_octal
from ferry.ui.listing_model import mode_text
from sshd import SshServer, require_sshd


def _dialog(qtbot, window, address: str) -> PropertiesDialog:  # type: ignore[no-untyped-def]
    addr = parse_address(address)
    backend = window.pool.get(addr)
    entry = backend.stat(addr.path)
    dlg = PropertiesDialog(entry, address, backend, window.run_async, window)
    qtbot.addWidget(dlg)
    return dlg


def _chmod_to_600(qtbot, dlg: PropertiesDialog) -> None:  # type: ignore[no-untyped-def]
    assert dlg.mode_editor is not None and dlg.apply_mode is not None
    # Through the check boxes, as a user clicks them: group read and others read off.
    dlg.mode_editor.boxes[0o040].click()
    dlg.mode_editor.boxes[0o004].click()
    assert dlg.mode_editor.octal.text() == "600"
    dlg.apply_mode.click()
    qtbot.waitUntil(lambda: "now" in dlg.mode_status.text(), timeout=30_000)
    assert dlg.mode_status.text() == "Permissions are now rw------- (600)", dlg.mode_status.text()
    assert dlg.mode_label is not None and dlg.mode_label.text() == "rw------- (600)"


def test_mode_text_and_octal() -> None:
    assert mode_text(0o100644) == "rw-r--r-- (644)"
    assert mode_text(0o40755) == "rwxr-xr-x (755)"
    assert mode_text(0o2775) == "rwxrwsr-x (2775)"
    assert parse_octal("600") == 0o600 and parse_octal("0644") == 0o644
    assert parse_octal("68") is None and parse_octal("12345") is None and parse_octal("") is None


def test_local_file_shown_and_changed_to_600(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "key.pem"
    f.write_bytes(b"secret")
    f.chmod(0o644)
    dlg = _dialog(qtbot, window, str(f))
    assert dlg.mode_label is not None and dlg.mode_label.text() == "rw-r--r-- (644)"
    _chmod_to_600(qtbot, dlg)
    assert stat.S_IMODE(f.stat().st_mode) == 0o600


def test_local_octal_field_and_bad_input(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o755)
    dlg = _dialog(qtbot, window, str(d))
    assert dlg.mode_editor is not None and dlg.apply_mode is not None
    dlg.mode_editor.octal.setText("9x")
    dlg.apply_mode.click()
    assert dlg.mode_status.text() == "Permissions are 3 or 4 octal digits, as 644 or 2775"
    assert stat.S_IMODE(d.stat().st_mode) == 0o755  # nothing changed
    dlg.mode_editor.octal.textEdited.emit("2770")  # as typed: the boxes follow
    dlg.mode_editor.octal.setText("2770")
    assert not dlg.mode_editor.boxes[0o001].isChecked() and dlg.mode_editor.boxes[0o020].isChecked()
    dlg.apply_mode.click()
    qtbot.waitUntil(lambda: "now" in dlg.mode_status.text(), timeout=30_000)
    assert stat.S_IMODE(d.stat().st_mode) == 0o2770
    assert dlg.mode_status.text() == "Permissions are now rwxrws--- (2770)"


def test_local_chmod_failure_shows_its_typed_kind(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "gone.txt"
    f.write_bytes(b"x")
    dlg = _dialog(qtbot, window, str(f))
    f.unlink()  # removed behind the dialog's back
    assert dlg.apply_mode is not None
    dlg.apply_mode.click()
    qtbot.waitUntil(lambda: dlg.mode_error_kind is not None, timeout=30_000)
    assert dlg.mode_error_kind == NotFound.kind, dlg.mode_error_kind
    assert dlg.mode_status.text().startswith("Permissions not changed (not-found): ")


def test_alt_return_on_a_selected_file_offers_chmod(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "run.sh"
    f.write_bytes(b"#!/bin/sh\n")
    f.chmod(0o755)
    pane = window.left
    with qtbot.waitSignal(pane.listed, timeout=20_000):
        pane.navigate(str(tmp_path))
    pane.select_names({"run.sh"})
    assert window.active is pane
    window.files.show_properties()
    dlg = window.findChild(PropertiesDialog)
    assert dlg is not None and dlg.mode_label is not None
    assert dlg.mode_label.text() == "rwxr-xr-x (755)"
    assert dlg.mode_editor is not None
    dlg.mode_editor.octal.setText("700")
    assert dlg.apply_mode is not None
    dlg.apply_mode.click()
    qtbot.waitUntil(lambda: "now" in dlg.mode_status.text(), timeout=30_000)
    assert stat.S_IMODE(f.stat().st_mode) == 0o700
    dlg.close()


def test_listing_kind_column_tooltip_shows_permissions(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    from ferry.ui.listing_model import KIND

    f = tmp_path / "data.h5"
    f.write_bytes(b"x")
    f.chmod(0o640)
    pane = window.left
    with qtbot.waitSignal(pane.listed, timeout=20_000):
        pane.navigate(str(tmp_path))
    row = next(i for i, e in enumerate(pane.model.entries()) if e.name == "data.h5")
    tip = pane.model.data(pane.model.index(row, KIND), Qt.ItemDataRole.ToolTipRole)
    assert tip == "Permissions rw-r----- (640)"


def test_no_chmod_offered_through_a_link(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "t").write_bytes(b"x")
    (tmp_path / "l").symlink_to("t")
    dlg = _dialog(qtbot, window, str(tmp_path / "l"))
    assert dlg.entry.kind is Kind.LINK and dlg.mode_editor is None and dlg.apply_mode is None


def test_s3_offers_no_chmod(qtbot) -> None:  # type: ignore[no-untyped-def]
    backend = S3Backend(Address("s3", "", host="bucket"))
    assert not backend.capabilities.modes
    # A mode S3 keeps in metadata (rclone's x-amz-meta-mode) is shown, not offered for change.
    entry = Entry("/data.h5", "data.h5", Kind.FILE, size=1, mode=0o100644)
    dlg = PropertiesDialog(entry, "s3://bucket/data.h5", backend, lambda *a: None)
    qtbot.addWidget(dlg)
    assert dlg.mode_label is not None and dlg.mode_label.text() == "rw-r--r-- (644)"
    assert dlg.mode_editor is None and dlg.apply_mode is None


@pytest.fixture
def server() -> Iterator[SshServer]:
    require_sshd()
    with SshServer() as s:
        yield s


def test_sftp_file_shown_and_changed_to_600(qtbot, window, server: SshServer) -> None:  # type: ignore[no-untyped-def]
    from ferry.backends import sftp

    sftp.close_all()
    folder = server.mkdir()
    f = folder / "key.pem"
    f.write_bytes(b"secret")
    f.chmod(0o644)
    server.chown(f)
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(server.ssh_config_block("cluster"))
    try:
        dlg = _dialog(qtbot, window, f"sftp://cluster{f}")
        assert dlg.backend.capabilities.modes
        assert dlg.mode_label is not None and dlg.mode_label.text() == "rw-r--r-- (644)"
        _chmod_to_600(qtbot, dlg)
        assert stat.S_IMODE(f.stat().st_mode) == 0o600  # on the server's disk
    finally:
        sftp.close_all()


@pytest.mark.skipif(os.geteuid() != 0, reason="a file the login user does not own is made with chown, as root")
def test_sftp_refused_chmod_shows_permission_denied(qtbot, window, server: SshServer) -> None:  # type: ignore[no-untyped-def]
    from ferry.backends import sftp

    sftp.close_all()
    folder = server.mkdir()
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(server.ssh_config_block("cluster"))
    try:
        # A file the login user does not own: the server refuses, and the kind says so.
        theirs = folder / "theirs.txt"
        theirs.write_bytes(b"x")
        os.chown(theirs, 0, 0)
        theirs.chmod(0o644)
        dlg2 = _dialog(qtbot, window, f"sftp://cluster{theirs}")
        assert dlg2.mode_editor is not None and dlg2.apply_mode is not None
        dlg2.mode_editor.octal.setText("666")
        dlg2.apply_mode.click()
        qtbot.waitUntil(lambda: dlg2.mode_error_kind is not None, timeout=30_000)
        assert dlg2.mode_error_kind == PermissionDenied.kind, dlg2.mode_status.text()
        assert stat.S_IMODE(theirs.stat().st_mode) == 0o644
    finally:
        sftp.close_all()
