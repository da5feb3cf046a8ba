"""Quick connect in a pane's address bar (issue 20): ``user@host``, ``user@host:path``,
``host.domain:/path``, URLs as ``ferry cp`` takes them and a Globus collection id go there; in a
remote pane ``/path`` and ``~`` are on that pane's server. Against the loopback OpenSSH server
(unknown host key asked in the window's dialog) and moto."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog

from ferry.core.address import Address, parse_address
from ferry.core.errors import UsageError
from ferry.ui.dialogs.prompts import HostKeyDialog
from ferry.ui.main_window import MainWindow
from ferry.ui.pane import Pane, quick_address
from globus.fake_globus import FakeGlobusServer
from s3.servers import S3Server, shared_server
from sshd import SshServer, require_sshd


@pytest.fixture
def server() -> Iterator[SshServer]:
    require_sshd()
    from ferry.backends import sftp

    sftp.close_all()
    with SshServer() as s:
        yield s
    sftp.close_all()


def type_and_enter(qtbot, pane: Pane, text: str) -> None:  # type: ignore[no-untyped-def]
    """As a person does it: Ctrl+L's editor, the text, Enter; waits for the listing."""
    pane.edit_path()
    pane.path_edit.setText(text)
    with qtbot.waitSignal(pane.listed, timeout=30_000):
        qtbot.keyClick(pane.path_edit, Qt.Key.Key_Return)


def trust_once(window: MainWindow) -> list[str]:
    """Answers every host-key question "Trust once"; returns the hosts asked about."""
    asked: list[str] = []

    def answer(d: QDialog) -> None:
        assert isinstance(d, HostKeyDialog)
        asked.append(d.windowTitle() + " " + d.fingerprint_label.text())
        d.once.click()

    window.bridge.prompt_shown.connect(answer)
    return asked


def names(pane: Pane) -> set[str]:
    return {e.name for e in pane.model.all_entries()}


def test_quick_connect_to_ssh_hosts_and_paths_on_the_server(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, server: SshServer, tmp_path: Path
) -> None:
    folder = server.mkdir()
    (folder / "hello.txt").write_text("hi")
    other = server.mkdir()
    (other / "elsewhere.dat").write_text("x")
    server.chown(folder)
    server.chown(other)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    # A wildcard Host block: the port, key and known_hosts for the loopback server, but no alias
    # named 127.0.0.1 (so "127.0.0.1:/path" is not a saved site or an ssh_config alias).
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(
        f"Host 127.0.0.*\n  Port {server.port}\n  User {server.user}\n  IdentityFile {server.client_key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {empty}\n  GlobalKnownHostsFile /dev/null\n"
    )
    asked = trust_once(window)
    left, right = window.left, window.right

    # user@host:/path, as scp takes it: the unknown key is asked about in the safe dialog.
    type_and_enter(qtbot, left, f"{server.user}@127.0.0.1:{folder}")
    assert left.address is not None and left.address.scheme == "sftp", left.address
    assert (left.address.host, left.address.user, left.address.path) == ("127.0.0.1", server.user, str(folder))
    assert names(left) == {"hello.txt"}, left.error_text
    assert len(asked) == 1 and "SHA256:" in asked[0]
    assert empty.read_text() == ""  # trusted once: known_hosts untouched

    # In that remote pane, an absolute path is on the server, not this computer's disk.
    type_and_enter(qtbot, left, str(other))
    assert left.address is not None and left.address.scheme == "sftp" and left.address.path == str(other)
    assert names(left) == {"elsewhere.dat"}, left.error_text
    # ~ is the login folder on the server; a relative name is under the folder shown.
    type_and_enter(qtbot, left, "~")
    assert left.address is not None and left.address.scheme == "sftp" and left.address.path == ""
    assert left.error_text == ""
    type_and_enter(qtbot, left, str(folder))
    type_and_enter(qtbot, left, f"../{other.name}")
    assert left.address is not None and left.address.scheme == "sftp" and names(left) == {"elsewhere.dat"}

    # A local pane keeps reading /path as this computer's.
    type_and_enter(qtbot, right, str(tmp_path))
    assert right.address is not None and right.address.is_local and right.address.path == str(tmp_path)

    # host.domain:/path (no user: ssh_config's) and user@host (the login folder).
    type_and_enter(qtbot, right, f"127.0.0.1:{folder}")
    assert right.address is not None and right.address.scheme == "sftp" and names(right) == {"hello.txt"}
    type_and_enter(qtbot, right, f"{server.user}@127.0.0.1")
    assert right.address is not None and (right.address.scheme, right.address.path) == ("sftp", "")
    assert right.error_text == ""
    # The URL form, exactly as 'ferry cp' takes it.
    type_and_enter(qtbot, right, f"sftp://{server.user}@127.0.0.1:{server.port}{other}")
    assert right.address is not None and right.address.port == server.port and names(right) == {"elsewhere.dat"}


def test_bad_address_says_why_under_the_bar_and_changes_nothing(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    (here / "keep.txt").write_text("x")
    pane = window.left
    type_and_enter(qtbot, pane, str(here))
    before = pane.address
    generation = pane.generation
    pane.edit_path()
    pane.path_edit.setText("sftp://cluster.example.org:99999/data")
    qtbot.keyClick(pane.path_edit, Qt.Key.Key_Return)
    assert pane.address_error.isVisible()
    assert "Malformed port '99999'" in pane.address_error.text() and "\n" not in pane.address_error.text()
    # Nothing else changed: the same folder and listing, no listing started, the text kept to mend.
    assert pane.address == before and pane.generation == generation and names(pane) == {"keep.txt"}
    assert pane.path_stack.currentWidget() is pane.path_edit
    assert pane.path_edit.text() == "sftp://cluster.example.org:99999/data"
    assert pane.error_text == "" and not pane.message.isVisible()
    # A password in an address is refused without repeating it.
    pane.path_edit.setText("sftp://me:hunter2@cluster.example.org/data")
    qtbot.keyClick(pane.path_edit, Qt.Key.Key_Return)
    assert "Passwords are not accepted" in pane.address_error.text()
    assert "hunter2" not in pane.address_error.text() and "hunter2" not in window.status_label.text()
    assert pane.address == before
    # Asked for by something else (the site picker, a ferry:// link): the bar shows what was asked.
    pane.path_stack.setCurrentWidget(pane.crumbs)
    assert not pane.navigate("nosuchsite:/data")
    assert pane.path_stack.currentWidget() is pane.path_edit and pane.path_edit.text() == "nosuchsite:/data"
    assert "Unknown site 'nosuchsite'" in pane.address_error.text() and pane.address == before
    # The next good address clears the message.
    type_and_enter(qtbot, pane, str(here))
    assert not pane.address_error.isVisible()


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch) -> tuple[S3Server, str]:
    try:
        server = shared_server("moto")
    except RuntimeError as exc:
        pytest.skip(f"moto S3 server unavailable, so no bucket to open: {exc}")
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    return server, server.new_bucket()


def test_quick_connect_to_a_bucket_and_paths_in_it(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, s3_bucket: tuple[S3Server, str]
) -> None:
    server, bucket = s3_bucket
    client = server.client()
    client.put_object(Bucket=bucket, Key="in/run1.h5", Body=b"1")
    client.put_object(Bucket=bucket, Key="out/result.csv", Body=b"2")
    pane = window.right
    type_and_enter(qtbot, pane, f"s3://{bucket}/in/")
    assert pane.address is not None and pane.address.scheme == "s3" and names(pane) == {"run1.h5"}, pane.error_text
    # /prefix in an S3 pane is a key in the same bucket, not a local folder.
    type_and_enter(qtbot, pane, "/out/")
    assert pane.address is not None and (pane.address.scheme, pane.address.host) == ("s3", bucket)
    assert names(pane) == {"result.csv"}, pane.error_text
    # A bucket has no home folder: said under the bar, nothing else changes.
    pane.edit_path()
    pane.path_edit.setText("~")
    qtbot.keyClick(pane.path_edit, Qt.Key.Key_Return)
    assert pane.address_error.isVisible() and "no home folder" in pane.address_error.text()
    assert pane.address is not None and pane.address.path.rstrip("/") == "out" and names(pane) == {"result.csv"}


def test_address_forms() -> None:
    """What the bar makes of each form (no network: the forms alone)."""
    remote = Address("sftp", "/home/me/data", host="hpc.example.org", user="me")

    def q(text: str, current: Address | None = None) -> Address:
        return quick_address(text, current, parse_address)

    assert q("me@hpc.example.org") == Address("sftp", "", host="hpc.example.org", user="me")
    assert q("me@hpc.example.org:runs/1") == Address("sftp", "runs/1", host="hpc.example.org", user="me")
    assert q("me@hpc.example.org:~/runs") == Address("sftp", "runs", host="hpc.example.org", user="me")
    assert q("hpc.example.org:/scratch/") == Address("sftp", "/scratch", host="hpc.example.org", trailing_slash=True)
    assert q("me@[::1]:/x") == Address("sftp", "/x", host="::1", user="me")
    uuid = "0B5AD0C2-1111-2222-3333-444455556666"
    assert q(uuid) == Address("globus", "/", host=uuid.lower(), trailing_slash=True)
    assert q("globus://abc/~/x") == parse_address("globus://abc/~/x")
    assert q("/scratch/me", remote) == Address("sftp", "/scratch/me", host="hpc.example.org", user="me")
    assert q("~/x", remote).path == "x" and q("~", remote).path == ""
    assert q("file:///tmp", remote).is_local  # this computer's disk from a remote pane
    assert q("/tmp").is_local and q("/tmp").path == "/tmp"
    globus = Address("globus", "/data", host="abc")
    assert q("~", globus).path == "/~/" and q("/x", globus).path == "/x"
    for bad in ("", "hpc:/x", "sftp://h:0/x", "ftp://h/x"):
        with pytest.raises(UsageError):
            q(bad)
    # A name that is no saved site or alias, before a path: the quick form for a host is offered.
    with pytest.raises(UsageError) as caught:
        q("login01:/scratch/me")
    assert "Unknown site 'login01'" in caught.value.message
    assert caught.value.message.endswith("type sftp://login01/scratch/me") and "\n" not in caught.value.message


@pytest.fixture
def globus(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGlobusServer]:
    """The local fake of the Globus services, reached as a service account (no browser login)."""
    from ferry.credentials import globus_auth

    with FakeGlobusServer() as server:
        for k, v in server.env(client=True).items():
            monkeypatch.setenv(k, v)
        globus_auth.reset_shared_auth()
        yield server
    globus_auth.reset_shared_auth()


def test_quick_connect_to_a_globus_collection_by_its_id(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, globus: FakeGlobusServer
) -> None:
    cid = globus.fake.add_collection(name="Synchrotron")
    globus.fake.put(cid, "/data/run1.h5", b"x" * 10)
    globus.fake.put(cid, "/other/notes.txt", b"y")
    pane = window.left
    type_and_enter(qtbot, pane, cid)  # the collection id alone
    assert pane.address is not None and (pane.address.scheme, pane.address.host) == ("globus", cid)
    assert names(pane) == {"data", "other"}, pane.error_text
    type_and_enter(qtbot, pane, "/data")  # a path in that collection, not on this computer
    assert pane.address is not None and pane.address.scheme == "globus" and names(pane) == {"run1.h5"}
    type_and_enter(qtbot, pane, f"globus://{cid}/other/")  # the URL, as 'ferry cp' takes it
    assert names(pane) == {"notes.txt"}, pane.error_text
