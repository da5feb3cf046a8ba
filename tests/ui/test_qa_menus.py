"""QA of issue 20 in the running window: a pane's right-click menu offers only what works there.

Found under Xvfb (right-click on a file in a pane on the loopback sshd): the menu offered "Watch
this folder…", which then only said "Only a folder on this computer can be watched"; and its
"Permissions…" entry, alone in the menu, showed no shortcut beside it (Ctrl+Shift+A)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QAction

from ferry.ui.main_window import MainWindow
from ferry.ui.pane import Pane
from sshd import SshServer, require_sshd


@pytest.fixture
def sftp_server() -> Iterator[SshServer]:
    require_sshd()
    from ferry.backends import sftp

    sftp.close_all()
    with SshServer() as s:
        yield s
    sftp.close_all()


def listed(qtbot, window: MainWindow, pane: Pane, target: str) -> list[str]:  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(pane.listed, timeout=30_000):
        pane.navigate(target)
    assert pane.model.all_entries(), pane.error_text
    qtbot.waitUntil(lambda: id(pane.view) in window.site_offers.known, timeout=30_000)
    return window.site_offers.offered(pane.view)


def test_watch_is_offered_on_this_computer_only(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, sftp_server: SshServer, tmp_path: Path
) -> None:
    folder = sftp_server.mkdir()
    (folder / "a.txt").write_text("a")
    sftp_server.chown(folder)
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(sftp_server.ssh_config_block("cluster"))
    (tmp_path / "here.txt").write_text("x")
    assert "Watch this folder…" in listed(qtbot, window, window.left, str(tmp_path))
    remote = listed(qtbot, window, window.right, f"cluster:{folder}")
    assert "Watch this folder…" not in remote and "Copy to other pane" in remote
    # The same listing back on this computer offers it again.
    assert "Watch this folder…" in listed(qtbot, window, window.right, str(tmp_path))


def test_entries_that_depend_on_the_site_show_their_shortcut(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    (tmp_path / "here.txt").write_text("x")
    listed(qtbot, window, window.left, str(tmp_path))
    texts = {a.objectName(): a.text() for a in window.left.view.actions() if isinstance(a, QAction)}
    assert texts["menu_permissions"] == "Permissions…\tCtrl+Shift+A", texts
    assert texts["menu_watch"] == "Watch this folder…\tCtrl+Shift+W", texts
