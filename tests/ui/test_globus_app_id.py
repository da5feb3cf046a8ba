"""Globus login without a registered app id built in (issue 20): the login stops before the service
with what to do, and the window explains the one-time registration and keeps the pasted id."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from ferry.core.errors import AuthError, UsageError
from ferry.credentials import globus_auth
from ferry.ui.dialogs.globus_app_id import GlobusAppIdDialog
from ferry.ui.dialogs.site_manager import SiteManagerDialog

APP_ID = "1b0dc9d3-0a2b-4000-8bdc-2c2fb9f7b4e1"


@pytest.fixture(autouse=True)
def real_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a person's machine: the production service, no app id of one's own, no service account.
    (Nothing here reaches the network: the login must stop before it.)"""
    for name in (
        "GLOBUS_SDK_SERVICE_URL_AUTH",
        "GLOBUS_SDK_ENVIRONMENT",
        "FERRY_GLOBUS_NATIVE_CLIENT_ID",
        "GLOBUS_CLIENT_ID",
        "GLOBUS_CLIENT_SECRET",
    ):
        monkeypatch.delenv(name, raising=False)
    globus_auth.reset_shared_auth()


def _prefs(ferry_home: Path) -> dict[str, object]:
    path = ferry_home / "config" / "globus.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_the_login_stops_before_the_service_and_says_how_to_register() -> None:
    auth = globus_auth.GlobusAuth()
    assert auth.needs_app_id()
    with pytest.raises(AuthError, match="no registered Globus app id") as err:
        auth.login(force=True)
    assert globus_auth.REGISTRATION_URL in err.value.message
    assert auth._login_client is None  # nothing was sent to Globus


def test_a_pasted_id_is_checked_and_kept(ferry_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for bad, words in (("not-an-id", "not a Globus Client UUID"), (globus_auth.NATIVE_CLIENT_ID, "placeholder")):
        with pytest.raises(UsageError, match=words):
            globus_auth.save_app_id(bad)
    assert _prefs(ferry_home) == {}  # nothing saved
    assert globus_auth.save_app_id(f'  "{APP_ID.upper()}"\n') == APP_ID
    assert _prefs(ferry_home)[globus_auth.APP_ID_KEY] == APP_ID
    auth = globus_auth.GlobusAuth()
    assert not auth.needs_app_id() and auth.native_client_id == APP_ID
    monkeypatch.setenv("FERRY_GLOBUS_NATIVE_CLIENT_ID", "11111111-2222-4333-8444-555555555555")
    assert globus_auth.GlobusAuth().native_client_id == "11111111-2222-4333-8444-555555555555"  # the environment wins


def _answer_dialog(qtbot: QtBot, steps: Callable[[GlobusAppIdDialog], None]) -> list[str]:
    """Answer the modal registration dialog once it is up; returns what it showed."""
    seen: list[str] = []

    def answer() -> None:
        dlg = QApplication.activeModalWidget()
        if not isinstance(dlg, GlobusAppIdDialog):
            QTimer.singleShot(20, answer)
            return
        seen.extend(lab.text() for lab in dlg.findChildren(type(dlg.error)) if lab.text())
        steps(dlg)

    QTimer.singleShot(0, answer)
    return seen


def test_the_window_explains_the_registration_keeps_the_id_then_logs_in(qtbot: QtBot, ferry_home: Path) -> None:
    dlg = SiteManagerDialog()
    qtbot.addWidget(dlg)
    started: list[object] = []
    dlg.run_async = lambda work, done, failed: started.append(work)
    errors: list[str] = []

    def steps(d: GlobusAppIdDialog) -> None:
        d.edit.setText("paste went wrong")
        d.save_btn.click()
        errors.append(d.error.text())
        assert d.isVisible() and _prefs(ferry_home) == {}
        d.edit.setText(APP_ID)
        d.save_btn.click()

    seen = _answer_dialog(qtbot, steps)
    dlg.globus_login_btn.click()
    assert any(globus_auth.REGISTRATION_URL in text for text in seen)
    assert any("Client UUID" in text for text in seen)
    assert errors and "not a Globus Client UUID" in errors[0]
    assert _prefs(ferry_home)[globus_auth.APP_ID_KEY] == APP_ID
    assert len(started) == 1  # then the login went ahead, with the new id
    assert globus_auth.shared_auth().native_client_id == APP_ID
    # Registered: the next login asks nothing more.
    dlg.globus_login_btn.click()
    assert len(started) == 2


def test_cancelling_the_registration_changes_nothing(qtbot: QtBot, ferry_home: Path) -> None:
    dlg = SiteManagerDialog()
    qtbot.addWidget(dlg)
    started: list[object] = []
    dlg.run_async = lambda work, done, failed: started.append(work)
    _answer_dialog(qtbot, lambda d: d.reject())
    dlg.globus_login_btn.click()
    assert started == [] and _prefs(ferry_home) == {}
    assert "needs a registered app id" in dlg.message.text()
