"""ferry:// links, file:// URLs and macOS open events reach the window as locations; anything
else is refused with a sentence, and the desktop file name matches the packaged .desktop file."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from PySide6.QtCore import QCoreApplication, QUrl
from PySide6.QtGui import QFileOpenEvent

from ferry.core.errors import UsageError
from ferry.ui.links import install_file_open_handler, location_from_argument, parse_ferry_url
from ferry.ui.main_window import MainWindow

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("link", "location"),
    [
        ("ferry://open?url=sftp%3A%2F%2Fhpc.example.org%2Fscratch%2Fme", "sftp://hpc.example.org/scratch/me"),
        ("ferry://open/?url=s3%3A%2F%2Fbucket%2Fraw%2F", "s3://bucket/raw/"),
        ("FERRY://OPEN?url=globus%3A%2F%2F6c54cade-bde5-45c1-bdea-f4bd71dba2cc%2F~%2Frun42",
         "globus://6c54cade-bde5-45c1-bdea-f4bd71dba2cc/~/run42"),
        ("ferry://open?url=file%3A%2F%2F%2Fdata%2Frun%252042", "/data/run 42"),
        ("ferry://open?url=%2Fhome%2Fme%2Fdata%20set", "/home/me/data set"),
    ],
)  # fmt: skip
def test_ferry_links_give_the_location_they_carry(link: str, location: str) -> None:
    assert parse_ferry_url(link) == location
    assert location_from_argument(link) == location


@pytest.mark.parametrize(
    ("link", "why"),
    [
        ("ferry://copy?url=sftp%3A%2F%2Fh%2Fp", "only action is 'open'"),
        ("ferry://open?url=http%3A%2F%2Fevil.example%2F", "http://"),
        ("ferry://open?url=javascript%3Aalert(1)", "URL or an absolute path"),
        ("ferry://open?url=ferry%3A%2F%2Fopen%3Furl%3D%252Ftmp", "ferry://"),
        ("ferry://open?url=sftp%3A%2F%2Fh%2Fp&url=s3%3A%2F%2Fb", "exactly one url="),
        ("ferry://open?url=sftp%3A%2F%2Fh%2Fp&then=cp", "exactly one url="),
        ("ferry://open", "exactly one url="),
        ("ferry://open?url=relative%2Fpath", "absolute path"),
        ("ferry://open?url=%2Ftmp%0Arm", "control characters"),
        ("ferry://open?url=file%3A%2F%2Fother-host%2Fdata", "another computer"),
        ("ferry://sftp/host/path", "only action is 'open'"),
    ],
)
def test_anything_else_is_refused_with_the_form(link: str, why: str) -> None:
    with pytest.raises(UsageError) as err:
        location_from_argument(link)
    assert why in str(err.value)
    if "another computer" not in why:
        assert "ferry://open?url=" in str(err.value)


def test_plain_arguments_pass_through_and_file_urls_become_paths() -> None:
    assert location_from_argument("sftp://hpc/scratch") == "sftp://hpc/scratch"
    assert location_from_argument("~/data") == "~/data"
    assert location_from_argument("file:///home/me/a%20b") == "/home/me/a b"


def test_the_desktop_file_name_matches_the_packaged_desktop_file() -> None:
    from ferry.ui.app import DESKTOP_FILE

    desktop = REPO / "packaging" / "linux" / f"{DESKTOP_FILE}.desktop"
    assert desktop.exists()
    assert "x-scheme-handler/ferry" in desktop.read_text()


def test_a_ferry_link_and_a_macos_open_event_open_the_folder_in_the_window(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    target = tmp_path / "run 42"
    target.mkdir()
    (target / "inside.txt").write_text("x")
    window._set_active(window.left)
    with qtbot.waitSignal(window.left.listed, timeout=20_000):
        window.open_location(f"ferry://open?url={quote(str(target), safe='')}")
    assert window.left.address is not None and window.left.address.path == str(target)

    other = tmp_path / "from finder"
    other.mkdir()
    app = QCoreApplication.instance()
    assert app is not None
    handler = install_file_open_handler(app, window.open_location)
    try:
        with qtbot.waitSignal(window.left.listed, timeout=20_000):
            QCoreApplication.sendEvent(app, QFileOpenEvent(QUrl.fromLocalFile(str(other))))
        assert window.left.address is not None and window.left.address.path == str(other)
    finally:
        app.removeEventFilter(handler)

    errors: list[str] = []
    window.show_error = lambda text, detail="": errors.append(text)  # type: ignore[method-assign]
    window.open_location("ferry://open?url=http%3A%2F%2Fevil.example%2F")
    assert errors and "cannot open the link" in errors[0]
    assert window.left.address.path == str(other)  # nothing navigated
