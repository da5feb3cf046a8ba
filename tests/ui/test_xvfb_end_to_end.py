"""End to end under a real X server (Xvfb), with real input events (xdotool): the window runs a big
file, is paused and resumed from the keyboard, and quits with Enter, which keeps the transfer
running in the background; screenshots (gui-progress-*.png, gui-quit-dialog.png) go to the
test's folder, or with FERRY_SAVE_SCREENSHOTS=1 to docs/screenshots/ for the guide, where a
person looks at them.

The window runs as its own process (``python -m ferry``) on the Xvfb display, as a user would
start it; the test reads the queue database to know when to act."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QImage, QPainter

from ferry.transfers.store import Store
from ui.helpers_ui import xvfb_display

# The guide's copies are refreshed only when asked (FERRY_SAVE_SCREENSHOTS=1): an ordinary run
# writes them to its temporary folder, so running the tests leaves the work tree as it was.
GUIDE_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(
    not (shutil.which("Xvfb") and shutil.which("xdotool") and shutil.which("xwd")),
    reason="needs Xvfb, xdotool and xwd (scripts/system-packages.sh installs them)",
)


@pytest.fixture
def display() -> Iterator[str]:
    with xvfb_display() as d:
        yield d


def wait_for(what: Callable[[], bool], timeout: float, why: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if what():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out: {why}")


def job_state(job_id: int) -> str:
    store = Store()
    try:
        return store.job(job_id).state
    finally:
        store.close()


def saved_partial(job_id: int) -> int:
    store = Store()
    try:
        return int(store.job_value(job_id, "partial_bytes") or 0)
    finally:
        store.close()


def xwd_image(data: bytes) -> QImage:
    """An ``xwd`` dump (ZPixmap, 24 or 32 bits per pixel, as Xvfb writes them) as an image."""
    head = struct.unpack(">25I", data[:100])
    header_size, byte_order, bpp, stride, ncolors = head[0], head[7], head[11], head[12], head[19]
    assert bpp in (24, 32) and byte_order == 0, (bpp, byte_order)
    fmt = QImage.Format.Format_RGB32 if bpp == 32 else QImage.Format.Format_BGR888
    return QImage(data[header_size + 12 * ncolors :], head[4], head[5], stride, fmt).copy()


def shot(display: str, name: str, folder: Path, on_top: str | None = None) -> Path:
    """The screen's top-left 1024x700 as a PNG. A dialog (``on_top``, a window id) is drawn over
    it from its own dump: read through the root window, a window of another depth (Qt's dialogs
    use a 32-bit visual) comes out black."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / name
    xwd = subprocess.run(["xwd", "-root", "-silent", "-display", display], capture_output=True, check=True)
    image = xwd_image(xwd.stdout).convertToFormat(QImage.Format.Format_RGB32)
    if on_top is not None:
        env = dict(os.environ, DISPLAY=display)
        geo = subprocess.run(
            ["xdotool", "getwindowgeometry", "--shell", on_top], env=env, capture_output=True, text=True, check=True
        )
        pos = dict(line.split("=", 1) for line in geo.stdout.split())
        dump = subprocess.run(["xwd", "-id", on_top, "-silent", "-display", display], capture_output=True, check=True)
        painter = QPainter(image)
        painter.drawImage(int(pos["X"]), int(pos["Y"]), xwd_image(dump.stdout))
        painter.end()
    assert image.copy(0, 0, 1024, 700).save(str(out)), out
    return out


def test_big_file_pause_resume_and_quit_with_enter_under_xvfb(display: str, tmp_path: Path) -> None:
    src = tmp_path / "simulation-output" / "run-0042" / "ensemble_member_017.h5"
    src.parent.mkdir(parents=True)
    src.write_bytes(os.urandom(48 * MIB))
    dest = tmp_path / "archive" / "incoming"
    dest.mkdir(parents=True)
    shots = GUIDE_SHOTS if os.environ.get("FERRY_SAVE_SCREENSHOTS") == "1" else tmp_path / "screenshots"
    env = dict(os.environ, DISPLAY=display, QT_QPA_PLATFORM="xcb")
    ferry = [sys.executable, "-m", "ferry"]
    added = subprocess.run(
        [*ferry, "queue", "add", str(src), str(dest) + "/", "--bwlimit", "3M", "--json"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    job_id = int(json.loads(added.stdout)["id"])
    window = subprocess.Popen([*ferry, "--new-window"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    background: int | None = None
    try:
        found = subprocess.run(
            ["xdotool", "search", "--sync", "--onlyvisible", "--name", "^Ferry"],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        wid = found.stdout.split()[0]
        subprocess.run(["xdotool", "windowmove", "--sync", wid, "0", "0"], env=env, check=True)
        subprocess.run(["xdotool", "windowsize", "--sync", wid, "1024", "700"], env=env, check=True)
        subprocess.run(["xdotool", "windowfocus", "--sync", wid], env=env, check=True)

        def key(*keys: str) -> None:  # to the focused window, as typed (no synthetic XSendEvent)
            subprocess.run(["xdotool", "key", *keys], env=env, check=True)

        wait_for(lambda: job_state(job_id) == "running", 30, "the window runs the queued job")
        time.sleep(4)  # a few MiB in: the row moves, the file is far from done
        shot(display, "gui-progress-running.png", shots)

        key("ctrl+shift+p")  # Transfers → Pause all
        wait_for(lambda: job_state(job_id) == "paused" and saved_partial(job_id) > 0, 30, "paused, bytes saved")
        held = saved_partial(job_id)
        assert 0 < held < 48 * MIB
        time.sleep(1.5)  # the row reads the saved bytes
        shot(display, "gui-progress-paused.png", shots)

        key("ctrl+shift+r")  # Resume all
        wait_for(lambda: job_state(job_id) == "running", 30, "resumed")
        time.sleep(2)
        key("ctrl+q")
        asked = subprocess.run(
            ["xdotool", "search", "--sync", "--onlyvisible", "--name", "^Quit Ferry$"],
            env=env, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        time.sleep(2)  # painted
        shot(display, "gui-quit-dialog.png", shots, on_top=asked.stdout.split()[0])
        assert job_state(job_id) == "running"  # asking stops nothing
        key("Return")  # Enter: keep running in the background
        out, _ = window.communicate(timeout=60)
        text = out.decode(errors="replace")
        assert "continue in the background (pid" in text, text
        background = int(text.split("(pid ", 1)[1].split(",", 1)[0])
        wait_for(lambda: job_state(job_id) == "done", 120, "the background run finishes the job")
        assert (dest / src.name).read_bytes() == src.read_bytes()
    finally:
        if window.poll() is None:
            window.kill()
            window.wait(10)
        if background is not None:
            try:
                os.kill(background, 0)
            except OSError:
                pass
            else:
                wait_for(lambda: not Path(f"/proc/{background}").exists() or _zombie(background), 30, "runner exits")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
