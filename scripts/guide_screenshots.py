#!/usr/bin/env python3
"""Screenshots for docs/user-guide.md, taken from the real app on an X server (Xvfb when headless).

Each picture is the real window or dialog, driven the way a person would use it. The profile is
a throwaway one: a made-up home folder with sample research data, an empty queue, no keychain.
Transfers really run, and share links are really signed against a local S3 server (moto). The
desktop (issue 6) screenshots of its own live in scripts/screenshots.py. This script adds the
ones the guide needs beyond those, named ``guide-*.png``.

Usage: .venv/bin/python scripts/guide_screenshots.py [--out docs/screenshots]
Without a display it runs itself again under ``xvfb-run`` (package xvfb).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = "FERRY_GUIDE_SHOTS_CHILD"


def _rerun_under_xvfb() -> int:
    if shutil.which("xvfb-run") is None:
        sys.exit("guide_screenshots: no display and no xvfb-run (apt-get install xvfb xauth)")
    env = {**os.environ, CHILD: "1"}
    cmd = ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24", sys.executable, __file__, *sys.argv[1:]]
    return subprocess.run(cmd, env=env, check=False).returncode


def _profile() -> Path:
    """A throwaway home: sample data that looks like a researcher's, and Ferry's folders inside it."""
    # A fixed, short place, because the paths show in the pictures.
    base = Path(tempfile.gettempdir()) / "ferry-guide"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    home = base / "home" / "alex"
    run = home / "data" / "run42"
    for sub in ("raw", "analysis", "figures"):
        (run / sub).mkdir(parents=True)
    for i in range(1, 13):
        (run / "raw" / f"scan-{i:03d}.h5").write_bytes(os.urandom(200_000 + 37_000 * i))
    for name in ("energies.csv", "summary.csv"):
        (run / "analysis" / name).write_text("step,energy\n" + "".join(f"{i},{i * 0.01:.2f}\n" for i in range(4000)))
    (run / "figures" / "spectrum.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>\n')
    (run / "README.md").write_text("# Run 42\n\nBeamline 7, 2026-11-20. Raw scans in raw/.\n")
    (home / "data" / "run43").mkdir()
    (home / "Documents").mkdir()
    (home / "Desktop").mkdir()
    (home / "archive").mkdir()
    (home / "notes.txt").write_text("remember: verify before deleting the scratch copy\n")
    os.environ.update(
        {
            "HOME": str(home),
            "FERRY_DATA_DIR": str(base / "ferry-data"),
            "FERRY_CONFIG_DIR": str(base / "ferry-config"),
            "XDG_CONFIG_HOME": str(base / "xdg-config"),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
        }
    )
    os.environ.pop("FERRY_QUEUE_DB", None)
    return base


class Shooter:
    def __init__(self, out: Path) -> None:
        from PySide6.QtWidgets import QApplication

        from ferry.ui.theme import app_icon, apply_theme

        app = QApplication.instance() or QApplication(["ferry"])
        assert isinstance(app, QApplication)
        self.app = app
        self.app.setApplicationName("Ferry")
        self.app.setOrganizationName("Ferry")
        self.app.setWindowIcon(app_icon())
        apply_theme(self.app, "light")  # the same look in every picture, whatever the machine's theme
        self.out = out
        self.taken: list[str] = []

    def wait(self, ms: int) -> None:
        from PySide6.QtTest import QTest

        QTest.qWait(ms)

    def wait_until(self, what: str, cond: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise SystemExit(f"guide_screenshots: timed out waiting for {what}")
            self.wait(50)

    def shot(self, widget: object, name: str) -> None:
        from PySide6.QtWidgets import QWidget

        assert isinstance(widget, QWidget)
        widget.show()
        widget.raise_()
        self.wait(400)  # let layouts, spinners and the first timer-driven refresh settle
        path = self.out / name
        if not widget.grab().save(str(path), "PNG"):
            raise SystemExit(f"guide_screenshots: could not save {path}")
        self.taken.append(name)
        print(f"  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def take_window_shots(s: Shooter, home: Path) -> None:
    from ferry.ui.main_window import MainWindow

    window = MainWindow(restore=False)  # a first run: no remembered panes, the welcome hint
    window.resize(1280, 760)
    s.shot(window, "guide-first-run.png")

    # Dragging files onto the other pane: the question Ferry asks first, through the window's own
    # request_transfer (its confirm_transfer seam takes the picture and answers Cancel).
    run42 = home / "data" / "run42"
    window.left.navigate(str(run42 / "raw"), remember=False)
    window.right.navigate(str(home / "archive"), remember=False)
    s.wait_until("the listings", lambda: window.left.model.rowCount() > 0)
    s.wait(300)

    def picture_then_cancel(dlg: object) -> bool:
        s.shot(dlg, "guide-drop-confirm.png")
        return False

    window.confirm_transfer = picture_then_cancel  # type: ignore[method-assign]
    scans = sorted(str(p) for p in (run42 / "raw").iterdir())
    window.request_transfer(scans, str(home / "archive") + "/")
    if "guide-drop-confirm.png" not in s.taken:
        raise SystemExit("guide_screenshots: the window did not ask before the transfer")
    window.left.navigate(str(home / "data"), remember=False)

    # The transfer itself, finished and verified, with its files listed.
    finished: list[int] = []
    window.job_finished.connect(lambda job_id, _state: finished.append(job_id))
    window.queue_transfer([str(run42)], str(home / "archive") + "/")
    s.wait_until("the copy to finish", lambda: bool(finished), timeout=120)
    window.right.refresh()
    s.wait(800)
    view = window.queue_panel.view
    model = view.model()
    if model.rowCount() > 0:
        view.expand(model.index(0, 0))
        s.wait(600)
    window.dock.setVisible(True)
    s.shot(window, "guide-transfers.png")

    # Overnight: the transfer settings with a time window and a bandwidth limit.
    from ferry.ui.dialogs.transfer_settings import TransferSettingsDialog
    from ferry.ui.settings import TransferSettings

    overnight = TransferSettings(window="20:00-07:00", bwlimit="50M", when_done="notify", keep_awake=True)
    ts = TransferSettingsDialog(overnight, parent=window)
    s.shot(ts, "guide-overnight.png")
    ts.close()

    take_dialog_shots(s, window)
    take_share_shot(s, window)
    window.close()


def take_dialog_shots(s: Shooter, window: object) -> None:
    from PySide6.QtWidgets import QWidget

    from ferry.backends.base import Entry, Kind
    from ferry.ui.dialogs.conflict import ConflictDialog
    from ferry.ui.dialogs.prompts import HostKeyDialog, SecretDialog
    from ferry.ui.dialogs.site_manager import SiteManagerDialog

    assert isinstance(window, QWidget)
    sites = SiteManagerDialog(parent=window)
    # Field by field, as a person fills the form (attribute names of SiteManagerDialog's inputs).
    forms: dict[str, dict[str, str]] = {
        "sftp": {
            "name": "cluster",
            "description": "HPC scratch space",
            "host": "login.cluster.example.org",
            "user": "alex",
            "key": "~/.ssh/id_ed25519",
            "sftp_path": "/scratch/alex",
        },
        "s3": {
            "name": "lab-bucket",
            "description": "Group data on the campus object store",
            "bucket": "campus-archive",
            "prefix": "beamline7/",
            "endpoint": "https://s3.campus.example.org",
            "region": "us-east-1",
            "access_key": "AKIAEXAMPLEKEY0001",
        },
        "globus": {
            "name": "facility",
            "description": "The facility's Globus collection",
            "collection": "6c54cade-bde5-45c1-bdea-f4bd71dba2cc",
            "globus_path": "/~/run42/",
        },
    }
    for kind, fields in forms.items():
        sites.new_site()
        sites.kind.setCurrentIndex(sites.kind.findData(kind))
        for attr, value in fields.items():
            getattr(sites, attr).setText(value)
        if not sites.save():  # really saved (to the throwaway sites.toml), so the list fills up
            raise SystemExit(f"guide_screenshots: the {kind} site was not saved: {sites.message.text()}")
        s.shot(sites, f"guide-site-{kind}.png")
    sites.close()

    fingerprint = "SHA256:P3o2mC6zDq0b8nZc2xJfYbq1tUeQ9mX4vW7kL5sR0aE"
    key = HostKeyDialog("login.cluster.example.org", "ssh-ed25519", fingerprint, parent=window)
    s.shot(key, "guide-host-key.png")
    key.close()

    otp = SecretDialog(
        "alex@login.cluster.example.org",
        "Duo two-factor login for alex\n\nEnter a passcode or select one of the following options:\n\n"
        " 1. Duo Push to XXX-XXX-4211\n 2. Phone call to XXX-XXX-4211\n\nPasscode or option (1-2): ",
        True,
        parent=window,
    )
    s.shot(otp, "guide-2fa.png")
    otp.close()

    now = datetime.now(UTC).replace(microsecond=0)
    source = Entry("/home/alex/data/run42/raw/scan-007.h5", "scan-007.h5", Kind.FILE, 459_000, now)
    existing = Entry("/scratch/alex/run42/raw/scan-007.h5", "scan-007.h5", Kind.FILE, 262_144, now - timedelta(days=2))
    conflict = ConflictDialog("cluster:/scratch/alex/run42/raw/scan-007.h5", source, existing, parent=window)
    s.shot(conflict, "guide-conflict.png")
    conflict.close()


def take_share_shot(s: Shooter, window: object) -> None:
    """A real pre-signed link, signed against a local S3 server (moto) with throwaway keys."""
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError:
        print("  (skipped guide-share.png: moto is not installed; pip install -e '.[test]')")
        return
    import socket

    from ferry.ui.dialogs.share import ShareDialog

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY0001",
                "AWS_SECRET_ACCESS_KEY": "example-secret-not-real",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            }
        )
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}")
        s3.create_bucket(Bucket="lab-raw-data")
        s3.put_object(Bucket="lab-raw-data", Key="run42/summary.csv", Body=b"step,energy\n1,0.01\n")
        run_async = window.run_async  # type: ignore[attr-defined]
        dlg = ShareDialog("s3://lab-raw-data/run42/summary.csv", "s3", run_async, parent=window)  # type: ignore[arg-type]
        dlg.amount.setValue(2)
        dlg.unit.setCurrentIndex(dlg.unit.findText("days"))
        dlg.show()
        dlg.create_link()
        s.wait_until("the share link", lambda: dlg.link is not None or bool(dlg.error.text()), timeout=60)
        dlg.reload_links()
        dlg.url.setCursorPosition(0)  # show where the link points, not the end of its signature
        s.shot(dlg, "guide-share.png")
        if dlg.error.text():
            print(f"  note: the share dialog said: {dlg.error.text()}")
        dlg.close()
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    if not os.environ.get("DISPLAY") and not os.environ.get(CHILD):
        return _rerun_under_xvfb()
    os.environ.pop("QT_QPA_PLATFORM", None)  # the real X platform, not offscreen
    args.out.mkdir(parents=True, exist_ok=True)
    base = _profile()
    try:
        shooter = Shooter(args.out.resolve())
        print(f"guide_screenshots: writing into {args.out}")
        take_window_shots(shooter, Path(os.environ["HOME"]))
        print(f"guide_screenshots: {len(shooter.taken)} screenshots")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
