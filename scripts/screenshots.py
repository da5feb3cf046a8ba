#!/usr/bin/env python3
"""Screenshots of the desktop window for docs/screenshots/, taken under Xvfb.

    .venv/bin/python scripts/screenshots.py            # re-runs itself under xvfb-run if needed
    .venv/bin/python scripts/screenshots.py --out DIR

Scenes: the main window during a transfer, the site manager, the share dialog, a folder watch
(its dialog, then the watch shipping files with its counters), and an error (a failed job that
says why, next to a folder that cannot be listed). Everything runs against
loopback data in a throwaway home (memory and local backends), never the user's own settings.
Look at the pictures after changing the UI: fonts, clipped text, empty areas.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _under_xvfb() -> None:
    """Run this script again inside xvfb-run when there is no X display."""
    if os.environ.get("DISPLAY") or os.environ.get("FERRY_SCREENSHOTS_CHILD"):
        return
    xvfb = shutil.which("xvfb-run")
    if xvfb is None:
        sys.exit("screenshots.py: no DISPLAY and no xvfb-run (apt-get install xvfb xauth)")
    env = {**os.environ, "FERRY_SCREENSHOTS_CHILD": "1"}
    cmd = [xvfb, "-a", "-s", "-screen 0 1400x900x24 -dpi 96", sys.executable, *sys.argv]
    sys.exit(subprocess.call(cmd, env=env))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = ap.parse_args()
    _under_xvfb()

    home = Path(tempfile.mkdtemp(prefix="ferry-shots-"))
    os.environ.update(
        FERRY_DATA_DIR=str(home / "data"),
        FERRY_CONFIG_DIR=str(home / "config"),
        FERRY_SSH_CONFIG=str(home / "ssh_config"),
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "xcb"),
    )
    (home / "ssh_config").write_text("Host hpc-login\n  HostName login.hpc.example.org\n  User ada\n")
    sys.path.insert(0, str(ROOT / "app"))
    try:
        return _shoot(args.out, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _shoot(out: Path, home: Path) -> int:
    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QFontDatabase
    from PySide6.QtWidgets import QApplication

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(home / "qsettings"))
    app = QApplication(["ferry"])
    if not QFontDatabase.families():
        sys.exit("screenshots.py: no fonts found (apt-get install fonts-dejavu-core): text would be boxes")

    from ferry.backends.memory import get_store
    from ferry.core.errors import PermissionDenied
    from ferry.sharing import ledger
    from ferry.sharing.types import Link
    from ferry.ui.dialogs.share import ShareDialog
    from ferry.ui.dialogs.site_manager import SiteManagerDialog
    from ferry.ui.main_window import MainWindow
    from ferry.ui.settings import TransferSettings
    from ferry.ui.theme import app_icon, apply_theme

    apply_theme(app, "light")
    app.setWindowIcon(app_icon())
    out.mkdir(parents=True, exist_ok=True)

    def settle(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    def save(widget: object, name: str) -> None:
        settle(0.3)
        path = out / name
        widget.grab().save(str(path))  # type: ignore[attr-defined]
        print(f"wrote {path}")

    # Sample data: a results folder here, an archive "bucket" in memory.
    data = home / "project"
    for sub, n, size in (("results", 60, 400_000), ("raw", 8, 3_000_000), ("notes", 3, 2_000)):
        (data / sub).mkdir(parents=True)
        for i in range(n):
            (data / sub / f"{sub}-{i:03d}.dat").write_bytes(os.urandom(size))
    (data / "README.md").write_text("# Run 42\n")
    archive = home / "archive"
    archive.mkdir()
    get_store("demo-archive")

    w = MainWindow(restore=False)
    w.transfer_settings = TransferSettings(confirm_drops=False, on_conflict="skip", bwlimit="6M")
    w.resize(1280, 800)
    w.show()
    w.left.navigate(str(data))
    w.right.navigate(str(archive))
    settle(1.0)
    w.left.message.hide()
    w.queue_transfer([str(data / "results"), str(data / "raw")], str(archive) + "/")
    settle(4.0)
    w.queue_panel.view.expand(w.queue_model.index(0, 0))
    settle(1.5)
    w.left.view.selectRow(2)
    w.right.refresh()  # the folders arriving
    settle(0.5)
    save(w, "main-window-transfer.png")

    sm = SiteManagerDialog(parent=w)
    sm.kind.setCurrentIndex(sm.kind.findData("sftp"))
    sm.name.setText("hpc")
    sm.host.setText("login.hpc.example.org")
    sm.user.setText("ada")
    sm.key.setText("~/.ssh/id_ed25519")
    sm.jump.setText("gateway.example.org")
    sm.sftp_path.setText("/scratch/ada")
    sm.save()
    sm.show()
    save(sm, "site-manager.png")
    sm.close()

    now = datetime.now(UTC)
    ledger.add(Link("download", "s3://lab-archive/run42/report.pdf", "https://…", "s3",
                    expires=now + timedelta(days=2, hours=3), revoke_note="rotate the signing key"))  # fmt: skip
    ledger.add(Link("grant", "globus://0e9c…/shared/run42/", "ada@example.org may read", "globus", revocable=True))
    share = ShareDialog("s3://lab-archive/run42/results/", "s3", lambda *a: None, parent=w)
    share.amount.setValue(9)
    share.show()
    save(share, "share-dialog.png")
    share.close()

    # A folder watch: the dialog, then files written into the folder shipping as they appear.
    from ferry.ui.dialogs.watch import WatchDialog

    w.queue_action("cancel", [j.id for j in w.queue_model.all_jobs()])
    settle(1.0)
    w.clear_finished()
    incoming = data / "incoming"
    incoming.mkdir()
    w.left.navigate(str(incoming))
    w.right.navigate(str(archive))
    settle(1.0)
    w.transfer_settings.bwlimit = ""
    dlg = WatchDialog(str(incoming), str(archive / "incoming"), parent=w)
    dlg.pattern.setText("*.h5")
    dlg.settle.setValue(2.0)
    dlg.show()
    save(dlg, "watch-dialog.png")
    dlg.close()
    w.start_watch(dlg.spec(w.transfer_settings.job_options(recursive=True)))
    settle(2.0)
    for i in range(6):
        tmp = incoming / f".step-{i:04d}.h5.tmp"
        tmp.write_bytes(os.urandom(2_000_000))
        tmp.rename(incoming / f"step-{i:04d}.h5")
        settle(0.4)
    (incoming / ".step-0006.h5.tmp").write_bytes(os.urandom(500_000))  # still being written
    settle(3.0)
    w.left.refresh()
    w.right.navigate(str(archive / "incoming"))
    settle(1.5)
    watch_row = next(r for r, j in enumerate(w.queue_model.jobs()) if j.watch is not None)
    sel = w.queue_panel.view.selectionModel()
    sel.select(w.queue_model.index(watch_row, 0), sel.SelectionFlag.ClearAndSelect | sel.SelectionFlag.Rows)
    save(w, "watch.png")
    for job_id in w.watches.watching():
        w.watches.stop(job_id)

    # An error: a job whose destination refuses writes, and a folder that does not exist.
    get_store("locked").fail_on("open_write", "/", PermissionDenied("Permission denied: /in (read-only)"), times=None)
    w.queue_action("cancel", [j.id for j in w.queue_model.all_jobs()])
    settle(1.0)
    w.transfer_settings.bwlimit = ""
    w.queue_transfer([str(data / "notes")], "memory://locked/in/")
    w.left.navigate(str(data))
    w.right.navigate(str(home / "no-such-folder"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(j.state == "failed" for j in w.queue_model.all_jobs()):
        settle(0.2)
    w.queue_panel.filter.setCurrentIndex(w.queue_panel.filter.findData("failed"))
    settle(0.5)
    w.queue_panel.view.selectionModel().select(
        w.queue_model.index(0, 0),
        w.queue_panel.view.selectionModel().SelectionFlag.ClearAndSelect
        | w.queue_panel.view.selectionModel().SelectionFlag.Rows,
    )
    w.queue_panel.view.expand(w.queue_model.index(0, 0))
    settle(1.0)
    save(w, "error.png")
    w.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
