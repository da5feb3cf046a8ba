"""Share link… and Permissions… offered only where the site can (issue 20): the shortcut on a site
that cannot make links only says so; the File menu greys out what the active pane's site lacks;
Permissions… opens the Properties dialog at its chmod part on local disks and SFTP, nowhere else.
Against the local disk, the loopback OpenSSH server and moto."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QMenu

from ferry.ui.dialogs.properties import PropertiesDialog
from ferry.ui.dialogs.share import ShareDialog
from ferry.ui.main_window import MainWindow
from ferry.ui.pane import Pane
from s3.servers import S3Server, shared_server
from sshd import SshServer, require_sshd


def listed(qtbot, pane: Pane, target: str) -> None:  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(pane.listed, timeout=30_000):
        pane.navigate(target)
    assert pane.model.all_entries(), pane.error_text


def make_active(qtbot, window: MainWindow, pane: Pane) -> None:  # type: ignore[no-untyped-def]
    pane.view.setFocus()
    window._set_active(pane)
    offers = window.site_offers
    qtbot.waitUntil(lambda: id(pane.view) in offers.known, timeout=30_000)


def file_menu_state(window: MainWindow) -> dict[str, bool]:
    """Whether Share link… and Permissions… are enabled in the File menu as it opens."""
    menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&File")
    assert isinstance(menu, QMenu)
    menu.popup(QPoint(0, 0))
    try:
        return {key: window.action_map[key].isEnabled() for key in ("share", "permissions")}
    finally:
        menu.hide()


def test_share_shortcut_on_a_local_pane_says_it_cannot_and_opens_nothing(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    (here / "data.csv").write_text("a,b\n")
    listed(qtbot, window.left, str(here))
    make_active(qtbot, window, window.left)
    window.left.select_names({"data.csv"})
    assert file_menu_state(window) == {"share": False, "permissions": True}
    assert window.action_map["share"].isEnabled()  # enabled again once the menu closed: the key works
    window.activateWindow()
    qtbot.keyClick(
        window.left.view, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
    )
    qtbot.waitUntil(lambda: window.status_label.text() == "This site cannot make share links", timeout=10_000)
    qtbot.wait(200)  # nothing more arrives
    assert window.findChild(ShareDialog) is None
    assert "Share link…" not in window.site_offers.offered(window.left.view)
    assert "Permissions…" in window.site_offers.offered(window.left.view)


def test_permissions_menu_opens_the_chmod_part_on_a_local_file(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    f = here / "run.sh"
    f.write_text("#!/bin/sh\n")
    f.chmod(0o644)
    listed(qtbot, window.left, str(here))
    make_active(qtbot, window, window.left)
    window.action_map["permissions"].trigger()  # nothing selected: said, nothing opens
    qtbot.waitUntil(lambda: "Select a file or folder" in window.status_label.text(), timeout=10_000)
    assert window.findChild(PropertiesDialog) is None
    window.left.select_names({"run.sh"})
    window.action_map["permissions"].trigger()
    qtbot.waitUntil(lambda: window.findChild(PropertiesDialog) is not None, timeout=10_000)
    dlg = window.findChild(PropertiesDialog)
    assert dlg is not None and dlg.windowTitle() == "Permissions of run.sh"
    assert dlg.mode_editor is not None and dlg.apply_mode is not None
    assert dlg.mode_editor.octal.hasFocus() or dlg.focusWidget() is dlg.mode_editor.octal
    dlg.mode_editor.octal.setText("755")
    dlg.apply_mode.click()
    qtbot.waitUntil(lambda: "now" in dlg.mode_status.text(), timeout=20_000)
    assert stat.S_IMODE(f.stat().st_mode) == 0o755
    dlg.close()


@pytest.fixture
def sftp_server() -> Iterator[SshServer]:
    require_sshd()
    from ferry.backends import sftp

    sftp.close_all()
    with SshServer() as s:
        yield s
    sftp.close_all()


def test_sftp_pane_offers_permissions_and_no_share(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, sftp_server: SshServer
) -> None:
    folder = sftp_server.mkdir()
    f = folder / "key.pem"
    f.write_text("k")
    f.chmod(0o644)
    sftp_server.chown(folder)
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(sftp_server.ssh_config_block("cluster"))
    pane = window.right
    listed(qtbot, pane, f"cluster:{folder}")
    make_active(qtbot, window, pane)
    offered = window.site_offers.offered(pane.view)
    assert "Permissions…" in offered and "Share link…" not in offered
    assert file_menu_state(window) == {"share": False, "permissions": True}
    pane.select_names({"key.pem"})
    window.action_map["share"].trigger()
    qtbot.waitUntil(lambda: window.status_label.text() == "This site cannot make share links", timeout=10_000)
    assert window.findChild(ShareDialog) is None
    window.action_map["permissions"].trigger()
    qtbot.waitUntil(lambda: window.findChild(PropertiesDialog) is not None, timeout=10_000)
    dlg = window.findChild(PropertiesDialog)
    assert dlg is not None and dlg.mode_editor is not None and dlg.apply_mode is not None
    dlg.mode_editor.octal.setText("600")
    dlg.apply_mode.click()
    qtbot.waitUntil(lambda: "now" in dlg.mode_status.text(), timeout=30_000)
    assert stat.S_IMODE(f.stat().st_mode) == 0o600  # on the server's disk
    dlg.close()


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch) -> tuple[S3Server, str]:
    try:
        server = shared_server("moto")
    except RuntimeError as exc:
        pytest.skip(f"moto S3 server unavailable, so no S3 pane to check: {exc}")
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    return server, server.new_bucket()


def test_s3_pane_offers_share_and_no_permissions(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, s3_bucket: tuple[S3Server, str]
) -> None:
    server, bucket = s3_bucket
    server.client().put_object(Bucket=bucket, Key="report.pdf", Body=b"pdf")
    pane = window.right
    listed(qtbot, pane, f"s3://{bucket}/")
    make_active(qtbot, window, pane)
    offered = window.site_offers.offered(pane.view)
    assert "Share link…" in offered and "Permissions…" not in offered
    assert file_menu_state(window) == {"share": True, "permissions": False}
    pane.select_names({"report.pdf"})
    window.action_map["permissions"].trigger()
    qtbot.waitUntil(lambda: window.status_label.text() == "This site cannot change permissions", timeout=10_000)
    assert window.findChild(PropertiesDialog) is None
    window.action_map["share"].trigger()  # the site can: the dialog opens
    qtbot.waitUntil(lambda: window.findChild(ShareDialog) is not None, timeout=10_000)
    share = window.findChild(ShareDialog)
    assert share is not None
    share.close()
