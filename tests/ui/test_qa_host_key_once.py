"""QA of issue 20 in the running window: rejecting an unknown host key in a pane is asked ONCE.

Found under Xvfb: typing ``sftp://user@127.0.0.1:PORT/tmp`` into a pane's address bar asked about
the host key; Enter (Reject) was answered, and then the very same question came up a second time.
The pane's failed listing still told the window "listed", and the window then connected again (to
read the site's capabilities for the right-click menus), which asked again. Against the loopback
OpenSSH server, with an empty known_hosts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog

from ferry.ui.dialogs.prompts import HostKeyDialog
from ferry.ui.main_window import MainWindow
from sshd import SshServer, require_sshd


@pytest.fixture
def server() -> Iterator[SshServer]:
    require_sshd()
    from ferry.backends import sftp

    sftp.close_all()
    with SshServer() as s:
        yield s
    sftp.close_all()


def test_a_rejected_host_key_is_asked_once_and_then_left_alone(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, server: SshServer, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(
        f"Host 127.0.0.*\n  User {server.user}\n  IdentityFile {server.client_key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {empty}\n  GlobalKnownHostsFile /dev/null\n"
    )
    asked: list[str] = []

    def reject_with_enter(d: QDialog) -> None:
        assert isinstance(d, HostKeyDialog)
        asked.append(d.windowTitle())
        qtbot.keyClick(d, Qt.Key.Key_Return)  # Enter: the safe answer, Reject

    window.bridge.prompt_shown.connect(reject_with_enter)
    pane = window.right
    pane.edit_path()
    pane.path_edit.setText(f"sftp://{server.user}@127.0.0.1:{server.port}{server.root}")
    with qtbot.waitSignal(pane.listed, timeout=30_000):
        qtbot.keyClick(pane.path_edit, Qt.Key.Key_Return)
    assert "was not trusted" in pane.error_text
    qtbot.wait(3000)  # anything the window starts after the listing has had its time to ask
    assert asked == [f"Unknown host key for [127.0.0.1]:{server.port}"], asked
    assert empty.read_text() == ""
