"""Real icons (issue 20): the panes' toolbar buttons and the common research file types have icons,
the desktop theme's where it has them and Ferry's bundled SVGs otherwise; no text glyphs.
Offscreen, where there is no desktop theme: the bundled SVGs must draw."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QToolButton

from ferry.backends.base import Entry, Kind
from ferry.core.address import Address
from ferry.ui import icons
from ferry.ui.listing_model import ListingModel
from ferry.ui.main_window import MainWindow
from ferry.ui.resources import resource_dir, ui_icon_path

GLYPHS = set("◀▶▲▼⟳✎›‹←→↑↓★✓✗") | {".*"}

RESEARCH_FILES = {
    "run42.h5": "data",
    "model.hdf5": "data",
    "ocean.nc": "data",
    "table.csv": "table",
    "counts.tsv": "table",
    "reads.fastq": "sequence",
    "reads_R1.fq": "sequence",
    "aligned.bam": "sequence",
    "reads.fastq.gz": "sequence",  # a compressed file of a known type keeps it
    "scan.tif": "image",
    "plot.png": "image",
    "photo.JPG": "image",
    "backup.tar.gz": "archive",
    "logs.gz": "archive",
    "bundle.tar": "archive",
    "code.zip": "archive",
    "analysis.py": "code",
    "notebook.ipynb": "code",
    "paper.pdf": "pdf",
    "notes": "file",
    "README.md": "file",
}


def draws(icon: QIcon) -> bool:
    return not icon.isNull() and not icon.pixmap(16, 16).isNull()


def test_every_toolbar_button_and_its_command_has_an_icon_not_a_glyph(window: MainWindow) -> None:
    for pane in (window.left, window.right):
        buttons = [pane.back_btn, pane.fwd_btn, pane.up_btn, pane.refresh_btn, pane.hidden_btn]
        edit = pane.crumbs.findChild(QToolButton, "editPath")
        assert edit is not None
        for b in [*buttons, edit]:
            assert draws(b.icon()), b.objectName()
            assert b.toolButtonStyle() is Qt.ToolButtonStyle.ToolButtonIconOnly, b.objectName()
            assert b.text() not in GLYPHS and not GLYPHS & set(b.text()), (b.objectName(), b.text())
            assert b.toolTip(), b.objectName()
    for key in ("back", "forward", "up", "refresh", "hidden", "path", "mkdir"):
        assert draws(window.action_map[key].icon()), key


@pytest.mark.parametrize(("name", "kind"), sorted(RESEARCH_FILES.items()))
def test_each_research_file_type_has_its_icon(name: str, kind: str) -> None:
    e = Entry(name, name, Kind.FILE, size=1, mtime=datetime.now(UTC))
    assert icons.entry_icon_name(e) == kind
    assert draws(icons.entry_icon(e)), name


def test_folders_links_and_special_files_have_icons() -> None:
    for k, expected in ((Kind.DIR, "folder"), (Kind.LINK, "link"), (Kind.SPECIAL, "special"), (Kind.FILE, "file")):
        e = Entry("x", "x", k)
        assert icons.entry_icon_name(e) == expected
        assert draws(icons.entry_icon(e)), expected
    # Each type looks different from a plain file (not the same picture under another name).
    plain = icons.load("file").pixmap(32, 32).toImage()
    for name in set(RESEARCH_FILES.values()) - {"file"}:
        assert icons.load(name).pixmap(32, 32).toImage() != plain, name


def test_bundled_icons_are_clean_svg_and_all_draw() -> None:
    names = set(icons.THEMED)
    folder = resource_dir() / "icons" / "ui"
    assert {p.stem for p in folder.glob("*.svg")} == names  # one file per icon, none missing or stray
    for name in sorted(names):
        path = ui_icon_path(name)
        root = ET.parse(path).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("viewBox") == "0 0 16 16", name
        text = path.read_text()
        assert "<image" not in text and "<script" not in text and "href" not in text, name  # vectors only
        assert draws(QIcon(str(path))), name


@pytest.fixture
def fake_theme(tmp_path: Path) -> Iterator[None]:
    """A desktop icon theme holding 'go-previous' and 'folder' only."""
    theme = tmp_path / "icons" / "fake"
    (theme / "16x16" / "actions").mkdir(parents=True)
    (theme / "index.theme").write_text(
        "[Icon Theme]\nName=fake\nDirectories=16x16/actions\n\n[16x16/actions]\nSize=16\nType=Fixed\n"
    )
    for name in ("go-previous", "folder"):
        (theme / "16x16" / "actions" / f"{name}.svg").write_text(ui_icon_path("up").read_text())
    paths, name = QIcon.themeSearchPaths(), QIcon.themeName()
    QIcon.setThemeSearchPaths([str(tmp_path / "icons")])
    QIcon.setThemeName("fake")
    yield
    QIcon.setThemeSearchPaths(paths)
    QIcon.setThemeName(name)


def test_the_desktop_theme_comes_first(fake_theme: None) -> None:
    assert icons.load("back").name() == "go-previous"  # the theme's
    assert icons.load("folder").name() == "folder"
    assert icons.load("forward").name() == ""  # not in the theme: Ferry's own SVG
    assert draws(icons.load("forward"))


def test_rows_share_cached_icons(qtbot) -> None:  # type: ignore[no-untyped-def]
    """The model keeps each row's icon with its text: painting a row twice builds nothing."""
    m = ListingModel()
    m.begin_listing(Address("local", "/data"))
    m.add_batch([Entry(f"f{i}.h5", f"f{i}.h5", Kind.FILE, size=1) for i in range(50)])
    m.end_listing(None)
    first = m.data(m.index(0, 0), Qt.ItemDataRole.DecorationRole)
    again = m.data(m.index(0, 0), Qt.ItemDataRole.DecorationRole)
    other = m.data(m.index(7, 0), Qt.ItemDataRole.DecorationRole)
    assert isinstance(first, QIcon) and isinstance(again, QIcon) and isinstance(other, QIcon) and draws(first)
    assert first.cacheKey() == again.cacheKey() == other.cacheKey() == icons.icon("data").cacheKey()
