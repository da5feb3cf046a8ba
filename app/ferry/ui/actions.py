"""The window's commands as one table: name, menu text, shortcut, tooltip, menu, one row each.

:func:`build_actions` makes a ``QAction`` per row, puts it in its menu, adds it to the window
(its shortcut works anywhere in the window) and, for ``panes`` rows, to both listings (their
right-click menu). What a command does is the window's to say: it passes one callable per name,
and a name without one (or one without a row) is a programming error caught at start-up. Tests
and Help find an action by its name (``window.action_map["copy"]``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QWidget

from ferry.backends.base import Backend, Capabilities
from ferry.core.address import Address
from ferry.ui.icons import command_icon

THEME_MODES = ("system", "light", "dark")


@dataclass(frozen=True)
class Command:
    key: str  # the action's name: ``action_<key>`` as its object name, the key of ``action_map``
    text: str
    shortcut: str
    tip: str
    panes: bool = False  # also in both listings' right-click menus
    # What the site must declare for the command to appear in a listing's right-click menu
    # (the menu bar and the shortcut keep it; the command itself says why a site cannot).
    needs: Callable[[Capabilities], bool] | None = None
    local: bool = False  # in a listing's right-click menu only while it shows this computer


def can_share(caps: Capabilities) -> bool:
    """Pre-signed links (S3) or access grants (Globus): the site has something to share with."""
    return caps.presign or caps.acl_share


def can_chmod(caps: Capabilities) -> bool:
    """Permission bits the site keeps and changes (the local disk, SFTP servers)."""
    return caps.modes


SEPARATOR = None

MENUS: tuple[tuple[str, tuple[Command | None, ...]], ...] = (
    (
        "&File",
        (
            Command("copy", "Copy to other pane", "F5", "Copy the selection to the other pane's folder", True),
            Command(
                "move",
                "Move to other pane",
                "F6",
                "Move the selection: sources are deleted only after the copy is verified",
                True,
            ),
            Command("mkdir", "New folder…", "F7", "Create a folder here", True),
            Command("rename", "Rename", "F2", "Rename the selected item", True),
            Command("delete", "Delete…", "Del", "Delete the selection (asks first)", True),
            Command("open", "Open", "Ctrl+O", "Open with the system's application (remote files via the cache)", True),
            Command(
                "download",
                "Download to…",
                "Ctrl+Shift+D",
                "Copy the selection to a folder on this computer that you choose",
                True,
            ),
            Command("properties", "Properties…", "Alt+Return", "Size, times and checksums", True),
            Command(
                "permissions",
                "Permissions…",
                "Ctrl+Shift+A",  # attributes, as file managers call them
                "Change who may read, write and run the selection (chmod; local disks and SFTP)",
                True,
                can_chmod,
            ),
            Command(
                "share", "Share link…", "Ctrl+Shift+L", "Make a download or upload link (S3, Globus)", True, can_share
            ),
            Command(
                "watch",
                "Watch this folder…",
                "Ctrl+Shift+W",
                "Ship each new file in this local folder as soon as it is complete",
                True,
                local=True,
            ),
            SEPARATOR,
            Command("quit", "Quit", "Ctrl+Q", "Quit Ferry (running files resume next time)"),
        ),
    ),
    (
        "&Go",
        (
            Command("refresh", "Refresh", "Ctrl+R", "List the folder again", True),
            Command("back", "Back", "Alt+Left", "Previous folder"),
            Command("forward", "Forward", "Alt+Right", "Next folder"),
            Command("up", "Up", "Alt+Up", "Parent folder"),
            Command("path", "Edit path", "Ctrl+L", "Type a path or address"),
            Command("filter", "Filter", "Ctrl+F", "Filter names in this pane"),
            Command("hidden", "Show hidden files", "Ctrl+H", "Show or hide names starting with a dot"),
            Command("switch", "Switch pane", "Ctrl+Tab", "Move to the other pane (Tab in a listing)"),
            Command("same", "Same folder in other pane", "Ctrl+=", "Show this folder in the other pane too"),
        ),
    ),
    (
        "&Sites",
        (Command("sites", "Site manager…", "Ctrl+Shift+M", "Add or edit SFTP, S3, Globus and local sites"),),
    ),
    (
        "&Transfers",
        (
            Command("transfers", "Show transfers", "Ctrl+T", "Show or hide the transfers panel"),
            Command(
                "settings", "Transfer settings…", "Ctrl+,", "Parallel files, bandwidth, verification, conflicts, timing"
            ),
            Command("pause_all", "Pause all", "Ctrl+Shift+P", "Pause every job"),
            Command("resume_all", "Resume all", "Ctrl+Shift+R", "Resume every paused job"),
            Command("clear", "Clear finished", "Ctrl+Shift+K", "Remove done and cancelled jobs"),
            Command(
                "compare",
                "Compare panes…",
                "Ctrl+Shift+C",
                "Compare the two panes' folders (only here, only there, different, same) and synchronise",
            ),
        ),
    ),
    (
        "&View",
        tuple(
            Command(f"theme_{mode}", f"{mode.capitalize()} colours", f"Ctrl+Shift+{n}", f"Use {mode} colours")
            for n, mode in enumerate(THEME_MODES, start=1)
        ),
    ),
    ("&Help", (Command("shortcuts", "Keyboard shortcuts", "F1", "List every shortcut"),)),
)


def command_keys() -> list[str]:
    return [c.key for _title, commands in MENUS for c in commands if c is not None]


def _make(window: QMainWindow, command: Command, slot: Callable[[], object]) -> QAction:
    a = QAction(command.text, window)
    a.setObjectName(f"action_{command.key}")
    shown = command_icon(command.key)
    if shown is not None:
        a.setIcon(shown)
    a.setShortcut(QKeySequence(command.shortcut))
    a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    seq = a.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
    a.setToolTip(f"{command.tip} ({seq})" if seq else command.tip)
    a.setStatusTip(command.tip)
    a.triggered.connect(lambda _=False: slot())
    window.addAction(a)
    return a


class _Pool(Protocol):
    def get(self, address: Address) -> Backend: ...


RunAsync = Callable[[Callable[[], Any], Callable[[Any], object], Callable[[BaseException], object]], object]


class SiteOffers(QObject):
    """Which commands each listing's right-click menu offers, from its site's declared capabilities.

    The capabilities are read on a worker thread after each listing (reading them can reach the
    server: an SFTP host's checksum tools, a Globus collection's HTTPS server); until they are
    known, a command that needs something is left out of the menu rather than offered in vain."""

    def __init__(self, run_async: RunAsync, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.run_async = run_async
        self.known: dict[int, Capabilities] = {}  # id(listing) -> its site's capabilities
        self._asked: dict[int, int] = {}  # id(listing) -> the latest question's number
        self.gated: dict[int, list[tuple[QAction, Callable[[Capabilities], bool]]]] = {}
        self._watched: dict[int, QWidget] = {}  # id(listing or its viewport) -> listing
        # The listing the window's commands act on (set by the window): the menu bar's commands
        # that need something are greyed out while it is shown, when that listing's site lacks it.
        self.active: Callable[[], QWidget | None] = lambda: None
        self.local: dict[int, bool] = {}  # id(listing) -> whether it shows this computer

    def capabilities(self, listing: QWidget | None) -> Capabilities | None:
        """What the listing's site declares, once read (None until then)."""
        return None if listing is None else self.known.get(id(listing))

    def learn(self, listing: QWidget, pool: _Pool, address: Address | None) -> None:
        key = id(listing)
        self.known.pop(key, None)
        asked = self._asked[key] = self._asked.get(key, 0) + 1
        self.local[key] = address is not None and address.is_local
        if address is None:
            return

        def done(caps: Capabilities) -> None:
            if self._asked.get(key) == asked:  # not a site the listing has since left
                self.known[key] = caps

        self.run_async(lambda: pool.get(address).capabilities, done, lambda _exc: None)

    def gate(self, listing: QWidget, action: QAction, needs: Callable[[Capabilities], bool]) -> None:
        if id(listing) not in self.gated:
            # A right-click reaches a scrolling view through its viewport, a menu key the view.
            viewport = getattr(listing, "viewport", None)
            for w in (listing, viewport() if callable(viewport) else None):
                if isinstance(w, QWidget):
                    self._watched[id(w)] = listing
                    w.installEventFilter(self)
        self.gated.setdefault(id(listing), []).append((action, needs))

    def gate_local(self, listing: QWidget, action: QAction) -> None:
        """``action`` is in the listing's menu only while the listing shows this computer."""
        key = id(listing)
        self.gate(listing, action, lambda _caps: self.local.get(key, False))

    def offered(self, listing: QWidget) -> list[str]:
        """The listing's right-click menu as it would be shown now (texts without the shortcut
        shown beside them; for tests and Help)."""
        self.update_menu(listing)
        return [a.text().split("\t")[0] for a in listing.actions() if a.isVisible()]

    def update_menu(self, listing: QWidget) -> None:
        caps = self.known.get(id(listing))
        for action, needs in self.gated.get(id(listing), []):
            action.setVisible(caps is not None and needs(caps))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ContextMenu:
            listing = self._watched.get(id(watched))
            if listing is not None:
                self.update_menu(listing)
        return False


def _grey_out_while_shown(menu: QMenu, gated: list[tuple[QAction, Command]], offers: SiteOffers) -> None:
    """While ``menu`` is open, its commands that need something are enabled only if the active
    listing's site declares it. They are enabled again when it closes, so that their shortcut
    still runs them: the command then says why the site cannot (a disabled action's shortcut
    would do nothing at all)."""

    def shown() -> None:
        caps = offers.capabilities(offers.active())
        for action, command in gated:
            assert command.needs is not None
            action.setEnabled(caps is not None and command.needs(caps))

    def hidden() -> None:
        for action, _command in gated:
            action.setEnabled(True)

    menu.aboutToShow.connect(shown)
    menu.aboutToHide.connect(hidden)


def _menu_copy(listing: QWidget, command: Command, slot: Callable[[], object]) -> QAction:
    """The listing's own copy of a command whose presence depends on the site. The window's
    action keeps the shortcut (two actions with one shortcut would be ambiguous); the copy shows
    it beside its text, as the other entries of the menu do."""
    seq = QKeySequence(command.shortcut).toString(QKeySequence.SequenceFormat.NativeText)
    a = QAction(f"{command.text}\t{seq}" if seq else command.text, listing)
    a.setObjectName(f"menu_{command.key}")
    a.setStatusTip(command.tip)
    a.triggered.connect(lambda _=False: slot())
    return a


def build_actions(
    window: QMainWindow,
    listings: Sequence[QWidget],
    slots: Mapping[str, Callable[[], object]],
    offers: SiteOffers | None = None,
) -> dict[str, QAction]:
    """Every command of :data:`MENUS` as a QAction in the window's menu bar, by name. With
    ``offers``, a command that ``needs`` something appears in a listing's right-click menu only
    when that listing's site declares it."""
    keys = command_keys()
    missing, extra = set(keys) - set(slots), set(slots) - set(keys)
    if missing or extra:
        raise ValueError(f"commands without a slot: {sorted(missing)}; slots without a command: {sorted(extra)}")
    actions: dict[str, QAction] = {}
    bar = window.menuBar()
    for title, commands in MENUS:
        menu = bar.addMenu(title)
        gated: list[tuple[QAction, Command]] = []
        for command in commands:
            if command is None:
                menu.addSeparator()
                continue
            action = actions[command.key] = _make(window, command, slots[command.key])
            menu.addAction(action)
            if command.needs is not None:
                gated.append((action, command))
            if command.panes:
                for listing in listings:
                    if (command.needs is not None or command.local) and offers is not None:
                        copy = _menu_copy(listing, command, slots[command.key])
                        if command.needs is not None:
                            offers.gate(listing, copy, command.needs)
                        else:
                            offers.gate_local(listing, copy)
                        listing.addAction(copy)
                    else:
                        listing.addAction(action)
        if gated and offers is not None:
            _grey_out_while_shown(menu, gated, offers)
    return actions


def shortcut_lines(actions: Mapping[str, QAction]) -> list[str]:
    """One line per shortcut for Help, in menu order, and Tab (which switches panes in a listing)."""
    lines = [
        f"{a.shortcut().toString(QKeySequence.SequenceFormat.NativeText):>14}   {a.text()}"
        for a in actions.values()
        if not a.shortcut().isEmpty()
    ]
    lines.append(f"{'Tab':>14}   Switch pane")
    return lines
