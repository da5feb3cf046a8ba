"""Site manager: "Test connection" before saving (issue 20). The settings as typed, unsaved, on a
worker thread: success says how many items are in which folder; a failure gives the typed error's
one-line cause; a password or secret typed into the form is never written anywhere. Against the
loopback OpenSSH server (good and bad password and key, a closed port) and moto."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QDialog

from ferry.credentials import keychain
from ferry.ui.dialogs.prompts import SecretDialog
from ferry.ui.dialogs.site_manager import SiteManagerDialog
from ferry.ui.main_window import MainWindow
from s3.servers import S3Server, shared_server
from sshd import SshServer, require_sshd

PASSWORD = "typed-not-saved-7Qx"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SshServer]:
    """The loopback sshd; ssh_config gives its known host key and turns off every key but the
    form's (so what is typed decides the login)."""
    require_sshd()
    from ferry.backends import sftp

    sftp.close_all()
    with SshServer() as s:
        Path(os.environ["FERRY_SSH_CONFIG"]).write_text(
            f"Host 127.0.0.*\n  IdentityFile {tmp_path / 'no-such-key'}\n  IdentitiesOnly yes\n"
            f"  IdentityAgent none\n  UserKnownHostsFile {s.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
        )
        yield s
    sftp.close_all()


def manager(window: MainWindow) -> SiteManagerDialog:
    window.show_site_manager()
    dlg = window.site_manager
    assert isinstance(dlg, SiteManagerDialog)
    dlg.new_site()
    return dlg


def fill_sftp(dlg: SiteManagerDialog, server: SshServer, folder: Path, *, name: str = "", **fields: str) -> None:
    dlg.kind.setCurrentIndex(dlg.kind.findData("sftp"))
    dlg.name.setText(name)
    dlg.host.setText("127.0.0.1")
    dlg.user.setText(server.user)
    dlg.port.setValue(server.port)
    dlg.sftp_path.setText(str(folder))
    dlg.password.setText(fields.get("password", ""))
    dlg.key.setText(fields.get("key", ""))


def run_test(qtbot, dlg: SiteManagerDialog) -> str:  # type: ignore[no-untyped-def]
    dlg.test_btn.click()
    assert not dlg.test_btn.isEnabled()  # under way, on a worker: the dialog stays usable
    qtbot.waitUntil(lambda: dlg.test_btn.isEnabled(), timeout=30_000)
    return dlg.message.text()


def nothing_holds(home: Path, secret: str) -> None:
    """The secret is in no file Ferry wrote, and no site was saved."""
    assert not (home / "config" / "sites.toml").exists()
    for f in home.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


@pytest.fixture
def password_set(server: SshServer) -> SshServer:
    if os.geteuid() != 0:
        pytest.skip("password logins need a root-run sshd (it reads /etc/shadow)")
    server.set_password(PASSWORD)
    return server


def test_unsaved_site_with_typed_password_connects_and_nothing_is_written(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, password_set: SshServer, ferry_home: Path
) -> None:
    folder = password_set.mkdir()
    (folder / "a.h5").write_text("a")
    (folder / "b.h5").write_text("b")
    dlg = manager(window)
    fill_sftp(dlg, password_set, folder, name="newsite", password=PASSWORD)
    said = run_test(qtbot, dlg)
    assert said == f"Connected: 2 items in {folder}"
    assert dlg.store.get("newsite") is None  # not saved
    assert keychain.get_secret(keychain.site_secret_key("newsite")) is None
    assert PASSWORD not in said
    nothing_holds(ferry_home, PASSWORD)


def test_wrong_password_is_said_in_one_line_and_never_asked_again(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, password_set: SshServer, ferry_home: Path
) -> None:
    asked: list[QDialog] = []

    def refuse(d: QDialog) -> None:
        asked.append(d)
        d.reject()

    window.bridge.prompt_shown.connect(refuse)
    dlg = manager(window)
    fill_sftp(dlg, password_set, password_set.mkdir(), password="not-the-password")
    said = run_test(qtbot, dlg)
    assert said == f"Could not connect: Login to {password_set.user}@127.0.0.1 failed: wrong password"
    assert asked == []  # the test is of what was typed: no password dialog
    nothing_holds(ferry_home, "not-the-password")


def test_key_file_as_typed_connects_and_an_unknown_key_does_not(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, server: SshServer, tmp_path: Path
) -> None:
    folder = server.mkdir()
    (folder / "x").write_text("x")
    dlg = manager(window)
    fill_sftp(dlg, server, folder, key=str(server.client_key))  # no name: an unsaved, unnamed site
    assert run_test(qtbot, dlg) == f"Connected: 1 item in {folder}"

    stranger = tmp_path / "stranger_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    asked: list[QDialog] = []

    def refuse(d: QDialog) -> None:  # the server then wants a password: the person declines
        asked.append(d)
        d.reject()

    window.bridge.prompt_shown.connect(refuse)
    fill_sftp(dlg, server, folder, key=str(stranger))
    said = run_test(qtbot, dlg)
    assert said.startswith("Could not connect: ") and "\n" not in said, said
    assert "cancelled" in said, said
    assert len(asked) == 1 and isinstance(asked[0], SecretDialog)


def test_closed_port_is_said_in_one_line(qtbot, window: MainWindow, server: SshServer) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = int(s.getsockname()[1])
    dlg = manager(window)
    fill_sftp(dlg, server, Path("/"), key=str(server.client_key))
    dlg.port.setValue(closed)
    said = run_test(qtbot, dlg)
    assert said.startswith(f"Could not connect: Cannot connect to 127.0.0.1:{closed}: "), said
    assert "\n" not in said


def test_bad_form_is_said_before_connecting(qtbot, window: MainWindow) -> None:  # type: ignore[no-untyped-def]
    dlg = manager(window)
    dlg.kind.setCurrentIndex(dlg.kind.findData("sftp"))
    dlg.test_btn.click()
    assert dlg.message.text() == "Give the host name" and dlg.test_btn.isEnabled()


def test_unsaved_s3_site_with_typed_keys_connects(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, ferry_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        server: S3Server = shared_server("moto")
    except RuntimeError as exc:
        pytest.skip(f"moto S3 server unavailable, so no bucket to test against: {exc}")
    bucket = server.new_bucket()
    server.client().put_object(Bucket=bucket, Key="in/one.csv", Body=b"1")
    env = server.env()
    # Only what the form says reaches the server: no keys in the environment.
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    for key in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED"):
        monkeypatch.setenv(key, env[key])
    dlg = manager(window)
    dlg.kind.setCurrentIndex(dlg.kind.findData("s3"))
    dlg.name.setText("lab")
    dlg.bucket.setText(bucket)
    dlg.prefix.setText("in")
    dlg.endpoint.setText(env["AWS_ENDPOINT_URL"])
    dlg.region.setText("us-east-1")
    dlg.access_key.setText(env["AWS_ACCESS_KEY_ID"])
    dlg.secret_key.setText(env["AWS_SECRET_ACCESS_KEY"])
    assert run_test(qtbot, dlg) == f"Connected: 1 item in s3://{bucket}/in/"
    assert dlg.store.get("lab") is None
    nothing_holds(ferry_home, env["AWS_SECRET_ACCESS_KEY"])
