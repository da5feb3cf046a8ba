"""Issue 20: confirmations that count folders in the window's words; menus and the share dialog
offering only what the site declares it can do."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtGui import QContextMenuEvent, QStandardItemModel
from PySide6.QtWidgets import QApplication, QMenu

from ferry.backends.globus.backend import _BASE_CAPS as GLOBUS_CAPS
from ferry.transfers.store import Store
from ferry.ui import transfer_requests
from ferry.ui.dialogs.drop_confirm import DropConfirmDialog
from ferry.ui.dialogs.share import ShareDialog, SiteFacts
from ferry.ui.main_window import MainWindow
from s3.servers import S3Server, shared_server
from sshd import SshServer, require_sshd
from ui.helpers_ui import make_tree


def listed(qtbot, pane, target) -> None:  # type: ignore[no-untyped-def]
    with qtbot.waitSignal(pane.listed, timeout=20_000):
        pane.navigate(target)


def confirm_texts(qtbot, window: MainWindow, start: Callable[[], object]) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """(the summary as the dialog opens, the summary once counted); the dialog is declined."""
    window.transfer_settings.confirm_drops = True
    seen: list[str] = []

    def answer(dlg: DropConfirmDialog) -> bool:
        seen.append(dlg.summary.text())
        qtbot.waitUntil(lambda: not dlg.counting, timeout=20_000)
        seen.append(dlg.summary.text())
        return False

    window.confirm_transfer = answer  # type: ignore[method-assign]
    start()
    assert len(seen) == 2, "no confirmation was shown"
    return seen[0], seen[1]


def test_drop_confirmation_counts_folders_in_the_window_words(qtbot, window: MainWindow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    make_tree(src / "run", 25, size=16)  # 25 files of 16 bytes in a subfolder
    (src / "f.bin").write_bytes(b"x" * 2048)
    listed(qtbot, window.left, str(src))
    window.transfer_settings.on_conflict = "ask"
    sources, dest = [str(src / "f.bin"), str(src / "run")], str(tmp_path / "out") + "/"
    first, counted = confirm_texts(qtbot, window, lambda: window.request_transfer(sources, dest))
    assert "counting…" in first  # the dialog opens before the tree is walked (on a worker)
    assert "1 file (2.0 KiB)" in counted
    assert "1 folder holding 25 files (400 B)" in counted
    # The window's words: no terminal, no flags.
    assert "terminal" not in counted and "--" not in counted and "Ferry asks you" in counted
    assert Store().jobs() == []


def test_f5_confirmation_says_more_than_the_limit_for_a_huge_tree(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer_requests, "COUNT_LIMIT", 10)
    src = tmp_path / "src"
    make_tree(src / "big", 30, size=8)
    (tmp_path / "out").mkdir()
    listed(qtbot, window.left, str(src))
    listed(qtbot, window.right, str(tmp_path / "out"))
    window.left.view.setFocus()
    window.left.select_names({"big"})
    first, counted = confirm_texts(qtbot, window, window.action_map["copy"].trigger)  # F5
    assert "counting…" in first
    assert "more than 10 files" in counted and "at least 80 B" in counted


def test_closing_the_confirmation_stops_the_count(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dlg = DropConfirmDialog(files=0, folders=1, size=0, destination="/x/", policy="skip", move=False)
    qtbot.addWidget(dlg)
    assert dlg.counting and "counting…" in dlg.summary.text()
    dlg.reject()
    assert dlg.cancel.cancelled
    dlg.set_folder_contents(5, 50, False)  # a count finishing after the dialog closed changes nothing
    assert "counting…" in dlg.summary.text()


# ---- menus and the share dialog: only what the site declares


def run_now(fn, on_done, on_error):  # type: ignore[no-untyped-def]
    try:
        result = fn()
    except Exception as exc:
        on_error(exc)
    else:
        on_done(result)


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch) -> tuple[S3Server, str]:
    """A bucket on the loopback moto server, reached as a user would (its environment variables)."""
    try:
        server = shared_server("moto")
    except RuntimeError as exc:
        pytest.skip(f"moto S3 server unavailable, so no S3 site to share from: {exc}")
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    return server, server.new_bucket()


def enabled_kinds(dlg: ShareDialog) -> set[str]:
    model = dlg.kind.model()
    assert isinstance(model, QStandardItemModel)
    return {str(dlg.kind.itemData(i)) for i in range(dlg.kind.count()) if model.item(i).isEnabled()}


def test_pane_menu_offers_share_only_where_the_site_declares_it(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path, s3_bucket: tuple[S3Server, str]
) -> None:
    server, bucket = s3_bucket
    server.client().put_object(Bucket=bucket, Key="report.pdf", Body=b"pdf")
    (tmp_path / "here.txt").write_text("x")
    listed(qtbot, window.left, str(tmp_path))
    listed(qtbot, window.right, f"s3://{bucket}/")
    offers = window.site_offers
    qtbot.waitUntil(lambda: id(window.left.view) in offers.known and id(window.right.view) in offers.known)
    local_menu, s3_menu = offers.offered(window.left.view), offers.offered(window.right.view)
    assert "Share link…" not in local_menu and "Copy to other pane" in local_menu
    assert "Share link…" in s3_menu
    # The real right-click goes through the same gate: the menu Qt builds leaves Share out.
    shown: list[list[str]] = []

    def read_and_close() -> None:
        popup = QApplication.activePopupWidget()
        if isinstance(popup, QMenu):
            shown.append([a.text().split("\t")[0] for a in popup.actions() if a.isVisible()])
            popup.close()

    for n, view in enumerate((window.left.view, window.right.view), start=1):
        QTimer.singleShot(300, read_and_close)
        port = view.viewport()
        centre = port.rect().center()
        QApplication.sendEvent(
            port, QContextMenuEvent(QContextMenuEvent.Reason.Mouse, centre, port.mapToGlobal(centre))
        )
        qtbot.waitUntil(lambda n=n: len(shown) >= n, timeout=5000)
    assert "Share link…" not in shown[0] and "Copy to other pane" in shown[0]
    assert "Share link…" in shown[1]


@pytest.fixture
def sftp_server() -> Iterator[SshServer]:
    require_sshd()
    with SshServer() as s:
        yield s


def test_sftp_pane_menu_has_no_share_link(qtbot, window: MainWindow, sftp_server: SshServer) -> None:  # type: ignore[no-untyped-def]
    from ferry.backends import sftp

    sftp.close_all()
    folder = sftp_server.mkdir()
    (folder / "a.txt").write_text("a")
    sftp_server.chown(folder)
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(sftp_server.ssh_config_block("cluster"))
    listed(qtbot, window.right, f"cluster:{folder}")
    assert window.right.model.all_entries(), window.right.error_text
    offers = window.site_offers
    qtbot.waitUntil(lambda: id(window.right.view) in offers.known, timeout=20_000)
    menu = offers.offered(window.right.view)
    assert "Share link…" not in menu and "Copy to other pane" in menu


def test_share_dialog_offers_kinds_the_site_declares_and_explains_upload_links(  # type: ignore[no-untyped-def]
    qtbot, ferry_home: Path, s3_bucket: tuple[S3Server, str]
) -> None:
    server, bucket = s3_bucket
    server.client().put_object(Bucket=bucket, Key="in/data.csv", Body=b"a,b\n")
    # S3 declares pre-signed links: download and upload, never a Globus grant.
    dlg = ShareDialog(f"s3://{bucket}/in/new.csv", "s3", run_now)
    qtbot.addWidget(dlg)
    assert dlg.facts is not None and not dlg.facts.file_exists
    assert enabled_kinds(dlg) == {"download", "upload"}
    dlg.kind.setCurrentIndex(dlg.kind.findData("upload"))
    assert "curl -T FILE 'URL'" in dlg.hint.text() and "replaces" not in dlg.hint.text()
    dlg.create_btn.click()  # a real pre-signed PUT link from the server's credentials
    assert dlg.link is not None and dlg.link.kind == "upload"
    assert f"curl -T FILE '{dlg.link.url}'" in dlg.hint.text()
    # The key already holds an object: the dialog warns that an upload replaces it.
    taken = ShareDialog(f"s3://{bucket}/in/data.csv", "s3", run_now)
    qtbot.addWidget(taken)
    taken.kind.setCurrentIndex(taken.kind.findData("upload"))
    assert "already stored under this name" in taken.hint.text()
    taken.kind.setCurrentIndex(taken.kind.findData("download"))
    assert taken.hint.text() == ""


def test_share_dialog_on_sites_without_links_or_uploads(qtbot, ferry_home: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Globus declares access grants and HTTPS links, not upload links.
    globus = ShareDialog("globus://c/d/", "globus", run_now, probe=lambda _t: SiteFacts(GLOBUS_CAPS, file_exists=False))
    qtbot.addWidget(globus)
    assert enabled_kinds(globus) == {"download", "grant"}
    # A local folder declares nothing to share: the dialog says so and creates nothing.
    (tmp_path / "f.txt").write_text("x")
    local = ShareDialog(str(tmp_path / "f.txt"), "local", run_now)
    qtbot.addWidget(local)
    assert enabled_kinds(local) == set()
    assert not local.create_btn.isEnabled() and "cannot make share links" in local.error.text()
