"""Enter chooses the safe answer: it never trusts a host key nor overwrites a file.

A QPushButton with focus answers Enter whatever ``setDefault`` says, and the first button a box
lays out takes the focus: so each dialog also gives the safe button the focus, and the others
are not auto-default. Each test shows the dialog, presses Enter as a person would, and reads the
answer.
"""

from __future__ import annotations

from datetime import UTC, datetime

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from ferry.backends.base import Entry, Kind
from ferry.ui.dialogs.conflict import ConflictDialog
from ferry.ui.dialogs.prompts import HostKeyDialog, YesNoDialog


def _press_enter(qtbot: QtBot, dlg: object) -> None:
    from PySide6.QtWidgets import QDialog

    assert isinstance(dlg, QDialog)
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitExposed(dlg)
    dlg.activateWindow()
    target = dlg.focusWidget() or dlg  # where the key goes when this dialog is the active window
    QTest.keyClick(target, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not dlg.isVisible(), timeout=2000)


def test_enter_in_the_host_key_dialog_rejects_the_key(qtbot: QtBot) -> None:
    dlg = HostKeyDialog("cluster.example.org", "ssh-ed25519", "SHA256:abc", known_hosts_line="cluster ssh-ed25519 AAAA")
    _press_enter(qtbot, dlg)
    assert dlg.choice == "no"


def test_enter_in_the_conflict_dialog_keeps_the_existing_file(qtbot: QtBot) -> None:
    now = datetime.now(UTC)
    src = Entry("/src/a.csv", "a.csv", Kind.FILE, 10, now)
    old = Entry("/dst/a.csv", "a.csv", Kind.FILE, 12, now)
    dlg = ConflictDialog("/dst/a.csv", src, old, job_id=3)
    _press_enter(qtbot, dlg)
    assert dlg.answer == "skip" and not dlg.for_all.isChecked()


def test_enter_in_the_consent_question_says_not_now(qtbot: QtBot) -> None:
    dlg = YesNoDialog("Globus", "Log in to Globus now? [y/N]")
    _press_enter(qtbot, dlg)
    assert dlg.result() == YesNoDialog.DialogCode.Rejected


def test_the_conflict_dialog_says_how_the_sides_differ(qtbot: QtBot) -> None:
    from datetime import timedelta

    from ferry.ui.dialogs.conflict import difference

    now = datetime.now(UTC)
    src = Entry("/src/a.csv", "a.csv", Kind.FILE, 2048, now)
    older = Entry("/dst/a.csv", "a.csv", Kind.FILE, 1024, now - timedelta(hours=1))
    assert difference(src, older) == "The source is 1.0 KiB larger, the source is newer."
    same = Entry("/dst/a.csv", "a.csv", Kind.FILE, 2048, now)
    assert difference(src, same).startswith("They look identical")
    dlg = ConflictDialog("/dst/a.csv", src, older, job_id=1)
    qtbot.addWidget(dlg)
    assert "larger" in dlg.difference.text()
    assert set(dlg.buttons) == {"overwrite", "skip", "rename", "resume", "newer", "different", "cancel-job"}
