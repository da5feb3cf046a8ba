"""Linux desktop integration: the .desktop entry and the AppStream metainfo, parsed and checked."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import ferry

ROOT = Path(__file__).resolve().parents[2]
LINUX = ROOT / "packaging" / "linux"
APP_ID = "io.github.ferry.Ferry"
DESKTOP = LINUX / f"{APP_ID}.desktop"
METAINFO = LINUX / f"{APP_ID}.metainfo.xml"
# https://specifications.freedesktop.org/menu-spec/latest/apa.html (main and the additional ones used)
REGISTERED_CATEGORIES = {"Network", "FileTransfer", "Science", "Utility", "System"}


def parse_desktop(text: str) -> dict[str, dict[str, str]]:
    """A strict reader for the Desktop Entry format: groups, KEY=VALUE, comments; nothing else."""
    groups: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if m := re.fullmatch(r"\[([^\[\]]+)\]", line):
            assert m.group(1) not in groups, f"line {n}: group [{m.group(1)}] twice"
            current = groups[m.group(1)] = {}
            continue
        m = re.fullmatch(r"([A-Za-z0-9-]+(?:\[[^\]]+\])?)=(.*)", line)
        assert m and current is not None, f"line {n} is not KEY=VALUE inside a group: {line!r}"
        assert m.group(1) not in current, f"line {n}: key {m.group(1)} twice"
        assert m.group(2) == m.group(2).strip(), f"line {n}: stray spaces around the value"
        current[m.group(1)] = m.group(2)
    return groups


def test_desktop_entry() -> None:
    text = DESKTOP.read_text(encoding="utf-8")
    groups = parse_desktop(text)
    assert next(iter(groups)) == "Desktop Entry"
    entry = groups["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Ferry"
    assert entry["Exec"] == "ferry %U"  # %U: several URLs (sftp://, s3://, ferry://) or paths
    assert entry["Icon"] == APP_ID
    assert entry["Terminal"] == "false"
    # Qt's X11 windows carry WM_CLASS ("ferry", "Ferry") (the app sets its name to "Ferry"): docks
    # match the running window to this entry by it. On Wayland the app id is the desktop file name.
    assert entry["StartupWMClass"] == "Ferry"
    assert entry["MimeType"] == "x-scheme-handler/sftp;x-scheme-handler/s3;x-scheme-handler/ferry;"
    for key in ("Categories", "Keywords", "MimeType", "Actions"):
        assert entry[key].endswith(";"), f"{key} lists must end with ';'"
    categories = set(entry["Categories"].rstrip(";").split(";"))
    assert categories <= REGISTERED_CATEGORIES and "Network" in categories  # FileTransfer requires Network
    for action in entry["Actions"].rstrip(";").split(";"):
        group = groups[f"Desktop Action {action}"]
        assert group["Name"] and group["Exec"].startswith("ferry ")
    assert set(groups) == {"Desktop Entry"} | {f"Desktop Action {a}" for a in entry["Actions"].rstrip(";").split(";")}


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils is not installed")
def test_desktop_entry_passes_desktop_file_validate() -> None:
    res = subprocess.run(["desktop-file-validate", str(DESKTOP)], capture_output=True, text=True, check=False)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


def test_metainfo_structure() -> None:
    root = ET.parse(METAINFO).getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"

    def one(path: str) -> ET.Element:
        found = root.findall(path)
        assert len(found) == 1, f"{path}: expected exactly one, found {len(found)}"
        return found[0]

    assert one("id").text == APP_ID
    assert one("metadata_license").text == "CC0-1.0"
    assert one("project_license").text == "MIT"
    assert one("name").text == "Ferry"
    summary = one("summary").text or ""
    assert 0 < len(summary) <= 60 and not summary.endswith(".")
    description = one("description")
    assert description.findall("p") and all((p.text or "").strip() for p in description.findall("p"))
    launchable = one("launchable")
    assert launchable.get("type") == "desktop-id" and launchable.text == DESKTOP.name
    assert one("provides/binary").text == "ferry"
    schemes = {m.text for m in root.findall("provides/mediatype")}
    desktop_types = set(parse_desktop(DESKTOP.read_text())["Desktop Entry"]["MimeType"].rstrip(";").split(";"))
    assert schemes == desktop_types
    assert one("content_rating").get("type") == "oars-1.1"
    releases = root.findall("releases/release")
    assert releases and releases[0].get("version") == ferry.__version__  # newest first, and it is this one
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", releases[0].get("date") or "")
    shot = one("screenshots/screenshot[@type='default']/image").text or ""
    assert shot.startswith("https://")
    # The screenshot it names is one the project actually takes.
    assert (ROOT / "docs" / "screenshots" / shot.rsplit("/", 1)[-1]).is_file(), shot


@pytest.mark.skipif(shutil.which("appstreamcli") is None, reason="appstreamcli (package appstream) is not installed")
def test_metainfo_passes_appstreamcli() -> None:
    res = subprocess.run(
        ["appstreamcli", "validate", "--no-net", str(METAINFO)], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
