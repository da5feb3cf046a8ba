"""The window's flows as a person does them, under a real X server (Xvfb) with real input events
(xdotool pointer and keys only): a folder dragged from the left pane to the right one, a
file-exists question answered from the keyboard (Enter keeps the file; Shift+Tab then Space
overwrites), and the Transfers panel's right-click menu opening the log view of a failed job.

The window is its own process (``python -m ferry --new-window``) on the Xvfb display, with its
panes set through its settings file as a person's last session would leave them; the test reads
the queue database and the disk to know what happened. Screenshots (gui-drag.png,
gui-conflict-keyboard.png, gui-queue-menu.png, gui-log-view.png) go to the test's folder, or with
FERRY_SAVE_SCREENSHOTS=1 to docs/screenshots/ for the guide.

The drag is a real X drag: Qt runs its own XDND loop within the process, which needs no window
manager; the pointer is moved in steps so that Qt sees the motion that starts and carries it.
Widget positions are those of a 1024x700 window at the screen's origin (the layout the other Xvfb
test relies on too); each step waits for what it caused (a dialog's window, a job's state)
rather than for a fixed time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.core.outcomes import Level
from ferry.transfers.store import Store
from ui.helpers_ui import xvfb_display
from ui.test_xvfb_end_to_end import GUIDE_SHOTS, shot, wait_for, xwd_image

pytestmark = pytest.mark.skipif(
    not (shutil.which("Xvfb") and shutil.which("xdotool") and shutil.which("xwd")),
    reason="needs Xvfb, xdotool and xwd (scripts/system-packages.sh installs them)",
)

# Where things are in a 1024x700 window at (0, 0): the first row of the left pane (just below
# its header) and an empty spot of the right pane. The failed job's row is found on screen.
LEFT_ROW_1 = (48, 101)
RIGHT_EMPTY = (760, 250)


@pytest.fixture
def xdisplay() -> Iterator[str]:
    with xvfb_display() as d:
        yield d


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder with a short path: a pane's breadcrumbs of pytest's long temporary path would
    widen the window past the 1024 pixels the positions above assume."""
    folder = Path(tempfile.mkdtemp(prefix="ferry-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Window:
    """A ``ferry`` window process on ``display``, and xdotool aimed at it."""

    def __init__(self, display: str, left: Path, right: Path) -> None:
        # The panes open where the last session left them: its settings file says so.
        conf = Path(os.environ["XDG_CONFIG_HOME"]) / "Ferry" / "Ferry.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(f"[panes]\nleft\\address={left}\nright\\address={right}\n\n[window]\nseen=true\n")
        self.env = dict(os.environ, DISPLAY=display, QT_QPA_PLATFORM="xcb")
        self.display = display
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ferry", "--new-window"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.wid = self.find("^Ferry")
        self.xdo("windowmove", "--sync", self.wid, "0", "0")
        self.xdo("windowsize", "--sync", self.wid, "1024", "700")
        self.xdo("windowfocus", "--sync", self.wid)

    def xdo(self, *args: str) -> str:
        return subprocess.run(
            ["xdotool", *args], env=self.env, capture_output=True, text=True, check=True, timeout=60
        ).stdout

    def find(self, title: str, timeout: float = 60) -> str:
        """The id of the visible window whose title matches ``title``, once it is there."""
        found = subprocess.run(
            ["xdotool", "search", "--sync", "--onlyvisible", "--name", title],
            env=self.env, capture_output=True, text=True, timeout=timeout, check=True,
        )  # fmt: skip
        return found.stdout.split()[0]

    def visible(self) -> set[str]:
        found = subprocess.run(
            ["xdotool", "search", "--onlyvisible", "--class", "."], env=self.env, capture_output=True, text=True
        )
        return set(found.stdout.split())

    def key(self, *keys: str) -> None:
        self.xdo("key", *keys)

    def click(self, at: tuple[int, int], button: str = "1") -> None:
        self.xdo("mousemove", "--sync", str(at[0]), str(at[1]))
        self.xdo("click", button)

    def drag(self, start: tuple[int, int], end: tuple[int, int]) -> None:
        """Press, move in steps (Qt starts a drag after some motion), release."""
        self.xdo("mousemove", "--sync", str(start[0]), str(start[1]))
        self.xdo("mousedown", "1")
        steps = 12
        for i in range(1, steps + 1):
            x = start[0] + (end[0] - start[0]) * i // steps
            y = start[1] + (end[1] - start[1]) * i // steps
            self.xdo("mousemove", "--sync", str(x), str(y))
            time.sleep(0.1)  # pacing for the motion events; what follows waits for its result
        time.sleep(0.5)
        self.xdo("mouseup", "1")

    def drag_until(self, start: tuple[int, int], end: tuple[int, int], title: str) -> str:
        """Drag, and return the window titled ``title`` that the drop opens. A drag that a busy
        machine loses (the motion came before Qt was ready for it) is tried again, as a person would."""
        for _ in range(3):
            self.drag(start, end)
            try:
                return self.find(title, timeout=20)
            except subprocess.TimeoutExpired:
                continue
        raise AssertionError(f"no {title!r} window after three drags")

    def right_click_menu(self, at: tuple[int, int], tries: int = 5) -> str:
        """Right-click at ``at`` and return the menu's window. The Transfers panel refreshes its
        rows a few times a second: a click that lands while they are rebuilt selects nothing and
        opens no menu, as for a person, who clicks again; so does this, a few times."""
        for _ in range(tries):
            before = self.visible()
            self.click(at, button="3")
            end = time.monotonic() + 8
            while time.monotonic() < end:
                new = self.visible() - before
                if new:
                    (menu,) = new
                    return menu
                time.sleep(0.2)
        names = []
        for wid in sorted(self.visible()):
            named = subprocess.run(["xdotool", "getwindowname", wid], env=self.env, capture_output=True, text=True)
            names.append(named.stdout.strip() or wid)
        # What was on the screen, for whoever reads the failure (a dialog in front, another window).
        raise AssertionError(f"no menu opened on a right-click at {at}; visible windows: {names}")

    def right_click_menu_on_one_of(self, points: list[tuple[int, int]]) -> str:
        """The menu of the first of ``points`` (lines of red text) that is the failed job's row."""
        for at in points[:-1]:
            try:
                return self.right_click_menu(at, tries=2)
            except AssertionError:
                continue  # red text that is not a row (a message): the next line
        return self.right_click_menu(points[-1])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def jobs() -> list[tuple[int, str]]:
    store = Store()
    try:
        return [(j.id, j.state) for j in store.jobs()]
    finally:
        store.close()


def new_job(before: int) -> int:
    """The id of the job that appears after ``before`` jobs (the window makes it on a worker)."""
    wait_for(lambda: len(jobs()) > before, 60, "the window queued the job")
    return jobs()[before][0]


def settled(job_id: int) -> str:
    store = Store()
    try:
        return store.job(job_id).state
    finally:
        store.close()


def red_text(display: str) -> tuple[int, int] | None:
    """A point on the red text of a failed job's row in the Transfers panel (the lower part of
    the window), read from the screen, so that the click does not depend on the font's height."""
    found = red_lines(display)
    return found[0] if found else None


def red_lines(display: str) -> list[tuple[int, int]]:
    """A point on each line of red text in the lower part of the window, top first: the failed
    job's row is one of them (other red text, such as a message, may sit above or below it)."""
    dump = subprocess.run(["xwd", "-root", "-silent", "-display", display], capture_output=True, check=True)
    image = xwd_image(dump.stdout)
    points: list[tuple[int, int]] = []
    for y in range(430, 690):
        if points and y - points[-1][1] < 12:
            continue  # the same line of text
        for x in range(20, 340):
            c = image.pixelColor(x, y)
            if c.red() > 150 and c.green() < 90 and c.blue() < 90:
                points.append((x, y + 3))
                break
    return points


def ink(display: str, left: int, top: int, right: int, bottom: int) -> bool:
    """Whether something dark (text) is drawn in this box of the screen: a listing's row is there."""
    dump = subprocess.run(["xwd", "-root", "-silent", "-display", display], capture_output=True, check=True)
    image = xwd_image(dump.stdout)
    return any(image.pixelColor(x, y).value() < 80 for y in range(top, bottom) for x in range(left, right))


def painted(seconds: float = 1.5) -> None:
    time.sleep(seconds)  # only for the picture: the state was already waited for


def shots_folder(tmp_path: Path) -> Path:
    return GUIDE_SHOTS if os.environ.get("FERRY_SAVE_SCREENSHOTS") == "1" else tmp_path / "screenshots"


def test_drag_a_folder_then_answer_a_conflict_with_the_keyboard(xdisplay: str, place: Path, tmp_path: Path) -> None:
    left, right = place / "instrument", place / "archive"
    run = left / "run-0042"
    (run / "raw").mkdir(parents=True)
    payload = {
        run / "summary.csv": b"t,signal\n0,1.5\n1,1.7\n",
        run / "raw" / "frame_000.bin": os.urandom(300_000),
        run / "raw" / "frame_001.bin": os.urandom(200_000),
    }
    for p, data in payload.items():
        p.write_bytes(data)
    (left / "notes.txt").write_bytes(b"the new notes, longer than the old ones\n")
    right.mkdir()
    existing = right / "notes.txt"
    existing.write_bytes(b"old notes\n")
    os.utime(existing, (time.time() - 86_400, time.time() - 86_400))  # a day older, another size
    shots = shots_folder(tmp_path)
    win = Window(xdisplay, left, right)
    try:
        # 1. Drag the folder (first row, folders on top) onto the right pane; Enter confirms.
        x, y = LEFT_ROW_1
        wait_for(lambda: ink(xdisplay, x - 20, y - 6, x + 40, y + 6), 60, "the left pane lists the folder")
        confirm = win.drag_until(LEFT_ROW_1, RIGHT_EMPTY, "^Copy to ")
        painted()
        shot(xdisplay, "gui-drag.png", shots, on_top=confirm)
        win.key("Return")
        job = new_job(0)
        wait_for(lambda: settled(job) == "done", 120, "the dragged folder is copied")
        for p, data in payload.items():
            assert (right / p.relative_to(left)).read_bytes() == data
        store = Store()
        try:
            files = list(store.tasks(job, kinds=["file"]))
        finally:
            store.close()
        assert len(files) == len(payload)
        assert all(t.checksum_verified and t.level is Level.CHECKSUM for t in files), files

        # 2. F5 on a file the other pane already has (another size, older): the question comes
        #    up with Skip focused; Enter keeps the existing file.
        win.click(LEFT_ROW_1)
        win.key("Down", "F5")  # notes.txt, below the folder
        win.find("^Copy to ")
        win.key("Return")
        ask = win.find("^File already exists$")
        painted()
        shot(xdisplay, "gui-conflict-keyboard.png", shots, on_top=ask)
        win.key("Return")
        skipped = new_job(1)
        wait_for(lambda: settled(skipped) == "done", 60, "the skipped job ends")
        assert existing.read_bytes() == b"old notes\n"
        store = Store()
        try:
            outcome = store.outcome_counts(skipped)
        finally:
            store.close()
        assert sum(outcome.skipped.values()) == 1 and not outcome.copied, outcome

        # 3. Again, and this time Shift+Tab from Skip to Overwrite, then Space presses it.
        win.click(LEFT_ROW_1)
        win.key("Down", "F5")
        win.find("^Copy to ")
        win.key("Return")
        win.find("^File already exists$")
        win.key("shift+Tab", "space")
        replaced = new_job(2)
        wait_for(lambda: settled(replaced) == "done", 60, "the overwriting job ends")
        assert existing.read_bytes() == (left / "notes.txt").read_bytes()
    finally:
        win.close()


def test_queue_menu_shows_the_log_of_a_failed_job(xdisplay: str, place: Path, tmp_path: Path) -> None:
    left, right = place / "instrument", place / "archive"
    left.mkdir()
    right.mkdir()
    gone = left / "calibration.h5"
    gone.write_bytes(os.urandom(4096))
    added = subprocess.run(
        [sys.executable, "-m", "ferry", "queue", "add", str(gone), str(right) + "/", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    job = int(json.loads(added.stdout)["id"])
    gone.unlink()  # the source disappears before the run: the job fails, with a cause to show
    shots = shots_folder(tmp_path)
    win = Window(xdisplay, left, right)
    try:
        wait_for(lambda: settled(job) == "failed", 120, "the window runs the job and it fails")
        seen: list[tuple[int, int]] = []

        def failed_row_shown() -> bool:
            point = red_text(xdisplay)
            if point is not None:
                seen.append(point)
            return point is not None

        wait_for(failed_row_shown, 30, "the failed job's row is painted in red")
        menu = win.right_click_menu_on_one_of(red_lines(xdisplay) or seen[-1:])
        win.key("Up")  # from the bottom: the last entry, Show log…
        painted(1)
        shot(xdisplay, "gui-queue-menu.png", shots, on_top=menu)
        win.key("Return")
        log = win.find(f"^Log of job {job}$")
        painted()
        shot(xdisplay, "gui-log-view.png", shots, on_top=log)
        win.xdo("windowfocus", "--sync", log)  # no window manager here to give a new window the keys
        win.key("Escape")
        wait_for(lambda: log not in win.visible(), 30, "Escape closes the log view")
        assert not (right / gone.name).exists()
    finally:
        win.close()
