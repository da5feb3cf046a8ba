"""Every dialog's accept and reject paths, driven through its widgets."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from PySide6.QtWidgets import QApplication, QDialog, QLabel, QTableWidget

from ferry.backends.base import Entry, Kind
from ferry.backends.memory import MemoryBackend
from ferry.core.address import parse_address
from ferry.core.outcomes import TaskState
from ferry.credentials.sites import SiteStore
from ferry.sharing import ledger
from ferry.sharing.types import Link
from ferry.transfers.copy import Answer, Conflict
from ferry.transfers.store import Task
from ferry.ui.bridge import Bridge
from ferry.ui.dialogs.conflict import ConflictAsker, ConflictDialog
from ferry.ui.dialogs.drop_confirm import DropConfirmDialog
from ferry.ui.dialogs.prompts import HostKeyDialog, QtPrompter, SecretDialog, YesNoDialog
from ferry.ui.dialogs.properties import PropertiesDialog
from ferry.ui.dialogs.share import ShareDialog, expiry_error
from ferry.ui.dialogs.site_manager import SiteManagerDialog
from ferry.ui.dialogs.transfer_settings import TransferSettingsDialog
from ferry.ui.settings import TransferSettings, load_transfer_settings, save_transfer_settings

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def cell_text(table: QTableWidget, row: int, column: int) -> str:
    item = table.item(row, column)
    assert item is not None, (row, column)
    return item.text()


def run_now(fn, on_done, on_error):  # type: ignore[no-untyped-def]
    """Synchronous stand-in for the window's run_async (the real one is tested in test_window)."""
    try:
        result = fn()
    except Exception as exc:
        on_error(exc)
    else:
        on_done(result)


def test_site_manager_saves_sftp_site_and_says_where_the_password_went(qtbot, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    dlg = SiteManagerDialog()
    qtbot.addWidget(dlg)
    # No keychain on this machine (the test keyring fails): the dialog says so up front.
    assert "No usable system keychain" in dlg.keychain_label.text()
    dlg.kind.setCurrentIndex(dlg.kind.findData("sftp"))
    dlg.save()
    assert "name" in dlg.message.text().lower()  # missing name is a sentence, not a crash
    dlg.name.setText("cluster")
    dlg.host.setText("login.example.org")
    dlg.user.setText("ada")
    dlg.port.setValue(2222)
    dlg.key.setText("~/.ssh/id_ed25519")
    dlg.jump.setText("bastion.example.org")
    dlg.sftp_path.setText("/scratch/ada")
    dlg.password.setText("s3cret!")
    assert dlg.save()
    site = SiteStore().get("cluster")
    assert site is not None
    assert site.address == "sftp://ada@login.example.org:2222/scratch/ada"
    assert dict(site.options) == {"identity_file": "~/.ssh/id_ed25519", "proxy_jump": "bastion.example.org"}
    assert "in memory only" in dlg.message.text()
    assert "s3cret" not in (ferry_home / "config" / "sites.toml").read_text()  # never in the file
    assert dlg.password.text() == ""
    assert [dlg.list.item(i).text() for i in range(dlg.list.count())] == ["cluster"]
    # Load it back, change to a local bookmark, delete it.
    dlg.new_site()
    dlg.list.setCurrentRow(0)
    assert dlg.host.text() == "login.example.org" and dlg.port.value() == 2222
    dlg.new_site()
    dlg.kind.setCurrentIndex(dlg.kind.findData("local"))
    dlg.name.setText("scratch")
    dlg.local_path.setText(str(ferry_home))
    assert dlg.save()
    dlg.list.setCurrentRow([dlg.list.item(i).text() for i in range(dlg.list.count())].index("cluster"))
    dlg.delete_site()
    assert SiteStore().get("cluster") is None and SiteStore().get("scratch") is not None
    with qtbot.waitSignal(dlg.rejected):
        dlg.reject()


def test_site_manager_s3_form_keeps_the_secret_key_out_of_settings(qtbot, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    dlg = SiteManagerDialog()
    qtbot.addWidget(dlg)
    dlg.kind.setCurrentIndex(dlg.kind.findData("s3"))
    dlg.name.setText("archive")
    dlg.bucket.setText("lab-archive")
    dlg.prefix.setText("runs/")
    dlg.endpoint.setText("https://s3.example.org")
    dlg.access_key.setText("AKIAEXAMPLE")
    dlg.secret_key.setText("wJalrXUtnFEMI")
    assert dlg.save()
    site = SiteStore().get("archive")
    assert site is not None and site.address == "s3://lab-archive/runs/"
    assert dict(site.options) == {"endpoint_url": "https://s3.example.org", "access_key_id": "AKIAEXAMPLE"}
    assert "wJalrXUtnFEMI" not in (ferry_home / "config" / "sites.toml").read_text()
    assert "secret key is kept in memory only" in dlg.message.text()
    from ferry.credentials import keychain

    assert keychain.get_secret(keychain.site_secret_key("archive")) == "wJalrXUtnFEMI"  # where the S3 backend looks


def test_site_manager_imports_an_ssh_config_host(qtbot, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    import os

    Path(os.environ["FERRY_SSH_CONFIG"]).parent.mkdir(parents=True, exist_ok=True)
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(
        "Host hpc\n  HostName hpc.example.org\n  User grace\n  Port 2200\n  ProxyJump gw.example.org\n"
    )
    dlg = SiteManagerDialog()
    qtbot.addWidget(dlg)
    dlg.import_ssh_host("hpc")
    assert (dlg.name.text(), dlg.host.text(), dlg.user.text(), dlg.port.value(), dlg.jump.text()) == (
        "hpc", "hpc.example.org", "grace", 2200, "gw.example.org",
    )  # fmt: skip


def test_transfer_settings_validate_and_persist(qtbot, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    dlg = TransferSettingsDialog(TransferSettings())
    qtbot.addWidget(dlg)
    dlg.window_edit.setText("25:00-07:00")
    dlg.accept()
    assert dlg.result() != QDialog.DialogCode.Accepted and dlg.error.text()  # stays open, says why
    dlg.window_edit.setText("20:00-07:00")
    dlg.bwlimit.setText("50M")
    dlg.parallel.setValue(8)
    dlg.verify.setCurrentIndex(dlg.verify.findData("blake3"))
    dlg.conflict.setCurrentIndex(dlg.conflict.findData("rename"))
    dlg.when_done.setCurrentIndex(dlg.when_done.findData("quit"))
    with qtbot.waitSignal(dlg.accepted):
        dlg.accept()
    ts = dlg.result_settings
    assert ts is not None and (ts.parallel, ts.bwlimit, ts.verify, ts.on_conflict, ts.window, ts.when_done) == (
        8, "50M", "blake3", "rename", "20:00-07:00", "quit",
    )  # fmt: skip
    save_transfer_settings(ts)
    assert load_transfer_settings() == ts
    opts = ts.job_options()
    assert opts.window == "20:00-07:00" and opts.verify == "blake3" and opts.on_conflict == "rename"
    assert ts.run_config().bwlimit == 50 * 1024 * 1024 and ts.run_config().parallel == 8
    other = TransferSettingsDialog(ts)
    qtbot.addWidget(other)
    other.parallel.setValue(1)
    other.reject()
    assert other.result_settings is None


def test_share_dialog_checks_expiry_against_the_backend_limit_and_reports_errors(qtbot, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    assert expiry_error("s3", "download", timedelta(days=8)) is not None
    assert expiry_error("s3", "download", timedelta(days=7)) is None
    assert expiry_error("globus", "grant", timedelta(days=400)) is None
    assert expiry_error("s3", "grant", timedelta(days=1)) == "Access grants exist only on Globus collections"
    dlg = ShareDialog("s3://bucket/report.pdf", "s3", run_now)
    qtbot.addWidget(dlg)
    dlg.amount.setValue(8)  # days
    assert not dlg.create_btn.isEnabled() and "at most" in dlg.error.text()
    dlg.amount.setValue(6)
    assert dlg.create_btn.isEnabled() and dlg.error.text() == ""
    # A memory folder cannot be shared: the real create_share says so in words.
    mem = ShareDialog("memory://x/file.txt", "memory", run_now)
    qtbot.addWidget(mem)
    mem.create_btn.click()
    assert "cannot make share links" in mem.error.text()
    assert mem.url.text() == ""
    with qtbot.waitSignal(mem.rejected):
        mem.reject()


def test_share_dialog_lists_issued_links_with_countdown_copy_and_revoke_state(qtbot, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    soon = Link(
        "download",
        "s3://b/k",
        "https://b.s3/k?X-Amz-Signature=abc",
        "s3",
        expires=datetime.now(UTC) + timedelta(hours=2, minutes=1),
        revoke_note="rotate the signing key",
    )
    grant = Link("grant", "globus://c/d/", "ada@example.org may read", "globus", expires=None, revocable=True)
    ledger.add(soon)
    ledger.add(grant)
    made = Link("upload", "s3://b/in/", "https://b.s3/in?sig", "s3", expires=datetime.now(UTC) + timedelta(days=1),
                revoke_note="rotate the signing key")  # fmt: skip
    requests = []

    def create(target, request):  # type: ignore[no-untyped-def]
        requests.append((target, request))
        ledger.add(made)
        return made

    dlg = ShareDialog("s3://b/in/", "s3", run_now, create=create)
    qtbot.addWidget(dlg)
    assert dlg.table.rowCount() == 2
    assert cell_text(dlg.table, 0, 2) in ("2 h 1 min", "2 h")
    assert cell_text(dlg.table, 1, 2) == "until revoked"
    assert not dlg.table.cellWidget(0, 3).isEnabled() and dlg.table.cellWidget(1, 3).isEnabled()
    assert soon.expires is not None
    assert ShareDialog.countdown(soon, now=soon.expires + timedelta(seconds=1)) == "expired"
    dlg.kind.setCurrentIndex(dlg.kind.findData("upload"))
    dlg.amount.setValue(1)
    dlg.create_btn.click()
    assert requests[0][1].upload and requests[0][1].expires == timedelta(days=1)
    assert dlg.url.text() == made.url and dlg.table.rowCount() == 3
    assert "cannot be revoked early" in dlg.error.text()
    dlg.copy_btn.click()
    assert QApplication.clipboard().text() == made.url


def test_conflict_dialog_answers_and_apply_to_all(qtbot) -> None:  # type: ignore[no-untyped-def]
    src = Entry("/a/x.csv", "x.csv", Kind.FILE, size=10, mtime=T0)
    old = Entry("/b/x.csv", "x.csv", Kind.FILE, size=5, mtime=T0 - timedelta(days=1))
    for policy in ("overwrite", "skip", "rename", "resume", "newer"):
        dlg = ConflictDialog("/b/x.csv", src, old)
        qtbot.addWidget(dlg)
        with qtbot.waitSignal(dlg.accepted):
            dlg.buttons[policy].click()
        assert dlg.answer == policy
    dlg = ConflictDialog("/b/x.csv", src, old)
    qtbot.addWidget(dlg)
    dlg.buttons["overwrite"].click()
    dlg2 = ConflictDialog("/b/x.csv", src, old)
    qtbot.addWidget(dlg2)
    dlg2.reject()
    assert dlg2.answer == "skip"  # closing keeps the existing file

    # Asked from a worker thread, answered in the dialog; "apply to all" comes back with the
    # answer (the engine keeps it with that one job: tests/test_conflict_answers.py).
    bridge = Bridge()
    asker = ConflictAsker(bridge, lambda: None)
    shown: list[str] = []

    def answer(d: QDialog) -> None:
        assert isinstance(d, ConflictDialog)
        label = d.findChild(QLabel)
        assert label is not None
        shown.append(label.text())
        d.for_all.setChecked(True)
        d.buttons["rename"].click()

    bridge.prompt_shown.connect(answer)
    task = Task(1, 7, "file", "/a/x.csv", "/b/x.csv", "x.csv", 10, None, None, TaskState.RUNNING, 0, False,
                None, None, None, None, None)  # fmt: skip
    answers: list[Answer] = []
    t = threading.Thread(target=lambda: answers.append(asker(Conflict(task, src, old, "/b/x.csv"))))
    t.start()
    qtbot.waitUntil(lambda: len(answers) == 1, timeout=10_000)
    t.join()
    assert answers == [Answer("rename", for_all=True)]
    assert "job 7" in shown[0]
    bridge.shutdown()


def test_prompt_dialogs_accept_and_reject(qtbot) -> None:  # type: ignore[no-untyped-def]
    bridge = Bridge()
    prompter = QtPrompter(bridge, lambda: None)
    seen: list[str] = []

    def answer(d: QDialog) -> None:
        if isinstance(d, SecretDialog):
            seen.append(d.prompt_label.text())
            assert d.answer.echoMode() == d.answer.EchoMode.Password
            if "code" in d.prompt_label.text():
                d.reject()
            else:
                d.answer.setText("hunter2")
                d.buttons.accepted.emit()
        elif isinstance(d, HostKeyDialog):
            d.always.click()
        elif isinstance(d, YesNoDialog):
            seen.append(d.prompt_label.text())
            d.yes.click()

    bridge.prompt_shown.connect(answer)
    out: dict[str, object] = {}

    def worker() -> None:
        out["pw"] = prompter.ask("ada@hpc", "Password: ", echo=False)
        try:
            prompter.ask("ada@hpc", "Verification code: ", echo=False)
        except Exception as exc:
            out["code"] = str(exc)
        out["consent"] = prompter.ask(
            "Globus consent", "Globus needs your consent for x. Log in again? [y/N] ", echo=True
        )
        out["key"] = prompter.confirm_host_key("hpc", "ssh-ed25519", "SHA256:abc")

    t = threading.Thread(target=worker)
    t.start()
    qtbot.waitUntil(lambda: "key" in out, timeout=10_000)
    t.join()
    assert out == {"pw": "hunter2", "code": "ada@hpc: cancelled by you", "consent": "y", "key": "save"}
    assert seen == ["Password: ", "Verification code: ", "Globus needs your consent for x. Log in again?"]
    bridge.shutdown()


def test_drop_confirmation_accept_reject(qtbot) -> None:  # type: ignore[no-untyped-def]
    dlg = DropConfirmDialog(
        files=3, folders=1, size=3 * 1024, destination="sftp://hpc/data/", policy="rename", move=True
    )
    qtbot.addWidget(dlg)
    text = dlg.summary.text()
    assert "Move 3 files (3.0 KiB) and 1 folder" in text and "sftp://hpc/data/" in text and "rename" in text
    assert "only after every file has been copied and verified" in text
    with qtbot.waitSignal(dlg.accepted):
        dlg.buttons.accepted.emit()
    dlg2 = DropConfirmDialog(files=1, folders=0, size=1, destination="/x/", policy="skip", move=False)
    qtbot.addWidget(dlg2)
    with qtbot.waitSignal(dlg2.rejected):
        dlg2.buttons.rejected.emit()


def test_properties_dialog_computes_checksums_on_demand(qtbot) -> None:  # type: ignore[no-untyped-def]
    b = MemoryBackend(parse_address("memory://props/"))
    with b.open_write("/f.txt", size=3, token="t") as w:
        w.write(b"abc")
        w.finish()
        w.commit(overwrite=False)
    e = b.stat("/f.txt")
    dlg = PropertiesDialog(e, "memory://props/f.txt", b, run_now)
    qtbot.addWidget(dlg)
    assert dlg.hash_btn.isEnabled()
    dlg.hash_btn.click()
    assert "sha256: ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" in dlg.hashes.text()
    with qtbot.waitSignal(dlg.rejected):
        dlg.reject()
