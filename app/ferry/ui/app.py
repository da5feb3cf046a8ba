"""``ferry`` with no arguments (or ``--demo``, or one path/URL): the desktop window."""

from __future__ import annotations

import os
import sys

NO_DISPLAY = (
    "ferry: no display is available for the desktop window (DISPLAY and WAYLAND_DISPLAY are unset).\n"
    "Use the command line instead: 'ferry --help' lists the commands (ferry cp, ferry ls, ferry queue, ...).\n"
    "To run the window anyway, set QT_QPA_PLATFORM (e.g. QT_QPA_PLATFORM=offscreen for testing).\n"
)

USAGE = "usage: ferry [--demo | --new-window] [PATH_OR_URL]\n"
DESKTOP_FILE = "io.github.ferry.Ferry"  # packaging/linux/io.github.ferry.Ferry.desktop


def has_display() -> bool:
    if os.environ.get("QT_QPA_PLATFORM"):
        return True
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _quit_on_signals(app: object, window: object) -> None:
    """Ctrl+C or SIGTERM closes the window cleanly (files in flight resume next time), without
    the quit question: nobody may be there to answer it (a logout, a service manager).

    Python runs signal handlers only when it gets control, and Qt's event loop is C++: a
    timer gives Python a moment a few times a second.
    """
    import signal

    from PySide6.QtCore import QTimer

    def close() -> None:
        window.shutdown()  # type: ignore[attr-defined]  # stopped first: closing then asks nothing
        window.close()  # type: ignore[attr-defined]

    def stop(signum: int, frame: object) -> None:
        QTimer.singleShot(0, close)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    tick = QTimer(app)  # type: ignore[arg-type]
    tick.timeout.connect(lambda: None)
    tick.start(250)


def main(argv: list[str]) -> int:
    demo = "--demo" in argv
    new_window = "--new-window" in argv
    rest = [a for a in argv if a not in ("--demo", "--new-window")]
    if any(a.startswith("-") for a in rest) or len(rest) > 1:
        sys.stderr.write(USAGE + "Run 'ferry --help' for the command line.\n")
        return 2
    if not has_display():
        sys.stderr.write(NO_DISPLAY)
        return 2

    from PySide6.QtWidgets import QApplication

    from ferry.ui.single_instance import InstanceServer, send_to_running
    from ferry.ui.theme import app_icon, apply_theme

    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "ferry"])
    assert isinstance(app, QApplication)
    app.setApplicationName("Ferry")
    app.setOrganizationName("Ferry")
    app.setDesktopFileName(DESKTOP_FILE)  # Wayland/X11 match the window to the installed .desktop file
    app.setWindowIcon(app_icon())
    if not demo and not new_window and send_to_running(rest):
        sys.stdout.write("Opened in the running Ferry window.\n")
        return 0

    from ferry.ui.main_window import MainWindow
    from ferry.ui.settings import settings

    apply_theme(app, str(settings().value("view/theme", "system")))
    servers = None
    if demo:
        from ferry.ui.demo import DemoServers

        servers = DemoServers()
        try:
            servers.start()
        except Exception as exc:  # say what failed; the window can still open locally
            sys.stderr.write(f"ferry --demo: {exc}\n")
    window = MainWindow(restore=not demo)
    instance = InstanceServer(window.open_locations) if not new_window else None
    from ferry.ui.links import install_file_open_handler

    install_file_open_handler(app, window.open_location)
    window.show()
    _quit_on_signals(app, window)
    if servers is not None:
        servers.open_in(window)
    elif rest:
        window.open_location(rest[0])
    try:
        return int(app.exec())
    finally:
        window.shutdown()
        if instance is not None:
            instance.close()
        if servers is not None:
            servers.stop()
