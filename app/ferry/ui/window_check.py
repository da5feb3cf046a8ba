"""The window's part of ``ferry --selftest``: open the main window and close it again.

:mod:`ferry.selftest` runs this in a child process (``ferry --selftest --window-probe``), since Qt
aborts the whole process when it cannot load its platform plug-in; it imports this module only
there, so the self-test itself never loads Qt.
"""

from __future__ import annotations

import os


def open_and_close() -> str:
    """One sentence on what opened; raises with the reason when something a window needs is missing."""
    from PySide6 import __version__ as pyside_version
    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QFontDatabase, QGuiApplication, QIcon
    from PySide6.QtWidgets import QApplication

    from ferry.ui.resources import icon_path

    config = os.environ.get("XDG_CONFIG_HOME")
    if config:  # the throwaway profile check_window made; Linux/Windows honour it, macOS cannot
        for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
            QSettings.setPath(fmt, QSettings.Scope.UserScope, config)
    app = QApplication.instance() or QApplication(["ferry"])
    # With no font found, Qt draws every glyph as a box and warns nobody.
    if not QFontDatabase.families():
        raise RuntimeError("Qt found no fonts: every label would draw as boxes (is fontconfig configured?)")
    icon = QIcon(str(icon_path()))
    if icon.isNull() or icon.pixmap(32, 32).isNull():
        raise RuntimeError(f"the application icon {icon_path()} cannot be drawn (Qt's SVG plug-in missing?)")
    try:
        from ferry.ui.theme import app_icon
    except ImportError:  # an older or newer window module without it: the check above stands
        pass
    else:
        if app_icon().isNull():
            raise RuntimeError(f"the window has no icon: none found where the app looks, near {icon_path()}")
    from ferry.ui.main_window import MainWindow

    window = MainWindow()
    try:
        window.show()
        app.processEvents()
        if not window.isVisible():
            raise RuntimeError("the main window did not become visible")
        title = window.windowTitle()
    finally:
        window.close()  # closeEvent stops the window's queue runner and joins its workers
        window.deleteLater()
        app.processEvents()
    return f"PySide6 {pyside_version} on '{QGuiApplication.platformName()}'; main window '{title}' opened and closed"
