"""Light and dark palettes: follow the system's colour scheme unless the person chose one."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication

from ferry.ui.resources import resource_dir

MODES = ("system", "light", "dark")


def _repo_resources() -> Path:
    return resource_dir()  # one place knows where resources/ is (bundle or checkout)


def app_icon() -> QIcon:
    """The packaging engineer's icon, if it is installed next to the source."""
    icons = _repo_resources() / "icons"
    icon = QIcon()
    for name in ("ferry.svg", "ferry-256.png", "ferry-128.png", "ferry-64.png", "ferry-32.png", "ferry.png"):
        if (icons / name).exists():
            icon.addFile(str(icons / name))
    return icon


def system_is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is not None:
        return bool(scheme() == Qt.ColorScheme.Dark)
    return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128


def dark_palette() -> QPalette:
    p = QPalette()
    base, alt, text = QColor(37, 37, 38), QColor(45, 45, 48), QColor(220, 220, 220)
    for role, color in (
        (QPalette.ColorRole.Window, QColor(45, 45, 48)),
        (QPalette.ColorRole.WindowText, text),
        (QPalette.ColorRole.Base, base),
        (QPalette.ColorRole.AlternateBase, alt),
        (QPalette.ColorRole.ToolTipBase, QColor(60, 60, 64)),
        (QPalette.ColorRole.ToolTipText, text),
        (QPalette.ColorRole.Text, text),
        (QPalette.ColorRole.Button, QColor(55, 55, 58)),
        (QPalette.ColorRole.ButtonText, text),
        (QPalette.ColorRole.BrightText, QColor(255, 80, 80)),
        (QPalette.ColorRole.Highlight, QColor(38, 110, 200)),
        (QPalette.ColorRole.HighlightedText, QColor(255, 255, 255)),
        (QPalette.ColorRole.Link, QColor(100, 160, 255)),
        (QPalette.ColorRole.PlaceholderText, QColor(140, 140, 140)),
    ):
        p.setColor(role, color)
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(120, 120, 120))
    return p


def active_pane_colors(palette: QPalette, active: bool) -> tuple[QColor, QColor]:
    """(strip, text) colours marking a pane active or not: the selection colour for the active
    one, the window colour (no strip) for the other, in light and dark themes alike."""
    if active:
        return palette.color(QPalette.ColorRole.Highlight), palette.color(QPalette.ColorRole.HighlightedText)
    return palette.color(QPalette.ColorRole.Window), palette.color(QPalette.ColorRole.WindowText)


def apply_theme(app: QApplication, mode: str = "system") -> str:
    """Apply ``mode``; returns the scheme actually used ("light" or "dark")."""
    app.setStyle("Fusion")  # the same look everywhere, and palettes apply fully
    dark = system_is_dark() if mode == "system" else mode == "dark"
    app.setPalette(dark_palette() if dark else app.style().standardPalette())
    qss = _repo_resources() / "styles" / "ferry.qss"
    if qss.exists():
        app.setStyleSheet(qss.read_text(encoding="utf-8"))
    return "dark" if dark else "light"
