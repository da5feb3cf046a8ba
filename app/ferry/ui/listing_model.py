"""The folder listing shown in a pane: Name, Size, Modified, Kind.

Sorting and filtering happen in this model on plain Python lists (a ``QSortFilterProxyModel``
would call back into Python for every comparison: seconds for 100,000 rows). Entries arrive in
batches from a background listing and are appended as they come, so a huge folder fills in
while the pane stays usable; when the listing ends the final order is applied in one layout
change. Drags carry Ferry addresses (and ``file://`` URLs for local files); drops are handed to
``drop_handler`` and never start anything by themselves.
"""

from __future__ import annotations

import fnmatch
import heapq
import json
import os
import re
import stat as stat_mod
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from PySide6.QtCore import (
    QAbstractItemModel,
    QMimeData,
    QModelIndex,
    QModelRoleData,
    QModelRoleDataSpan,
    QPersistentModelIndex,
    Qt,
    QUrl,
)
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from ferry.backends.base import Entry, Kind
from ferry.core.address import Address
from ferry.core.units import format_size
from ferry.ui.icons import entry_icon

MIME_ADDRESSES = "application/x-ferry-addresses"
RUN = 2048
COLUMNS = ("Name", "Size", "Modified", "Kind")
NAME, SIZE, MODIFIED, KIND = range(4)
EntryRole = Qt.ItemDataRole.UserRole + 1
DISPLAY, DECORATION = Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.DecorationRole
ALIGN = Qt.ItemDataRole.TextAlignmentRole
RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_DROP_ONLY = Qt.ItemFlag.ItemIsDropEnabled
_CELL_FLAGS = _DROP_ONLY | Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsDragEnabled
_NAME_FLAGS = _CELL_FLAGS | Qt.ItemFlag.ItemIsEditable  # renaming edits the name in place
# Roles this model never sets: answered "nothing" without a trip through data().
_PLAIN_ROLES = frozenset(
    {
        Qt.ItemDataRole.FontRole,
        Qt.ItemDataRole.BackgroundRole,
        Qt.ItemDataRole.ForegroundRole,
        Qt.ItemDataRole.CheckStateRole,
        Qt.ItemDataRole.SizeHintRole,
    }
)

Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()  # the invisible root, as a default argument
DropHandler = Callable[[list[str], str, bool], bool]  # sources, destination folder, move → accepted


def kind_text(e: Entry) -> str:
    if e.kind is Kind.LINK:
        return f"→ {e.link_target}" if e.link_target else "Link"
    if e.kind is Kind.DIR:
        return "Folder"
    if e.kind is Kind.SPECIAL:
        return "Special file"
    storage = e.meta.get("storage_class") or e.meta.get("StorageClass")
    if storage:
        return storage
    ext = os.path.splitext(e.name)[1].lstrip(".")
    return f"{ext.upper()} file" if ext else "File"


def display_name(name: str) -> str:
    """Control characters in hostile names are shown escaped, never interpreted."""
    if name.isprintable():
        return name
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def row_texts(e: Entry) -> tuple[str, str, str, str]:
    """What the four columns show for ``e``."""
    return (
        display_name(e.name),
        "" if e.is_dir else format_size(e.size),
        e.mtime.astimezone().strftime("%Y-%m-%d %H:%M") if e.mtime else "",
        kind_text(e),
    )


def mode_text(mode: int) -> str:
    """``rw-r--r-- (644)``: ls's nine letters (s/S/t/T for setuid, setgid, sticky) and the octal."""
    bits = stat_mod.S_IMODE(mode)
    return f"{stat_mod.filemode(bits)[1:]} ({bits:03o})"


def tooltip(e: Entry, column: int) -> str | None:
    if column == KIND and e.mode is not None:
        return f"Permissions {mode_text(e.mode)}"
    if column == MODIFIED and e.mtime:
        return e.mtime.astimezone().isoformat(sep=" ", timespec="seconds")
    if column == SIZE and e.size is not None:
        return f"{e.size:,} bytes"
    if column == NAME and e.link_target:
        return f"Link to {e.link_target}"
    return None


def _sort_key(column: int) -> Callable[[Entry], tuple[object, ...]]:
    # Folders are put first by the callers (see _folders_first), in either order.
    if column == SIZE:
        return lambda e: (e.size if e.size is not None else -1, e.name.casefold())
    if column == MODIFIED:
        return lambda e: (e.mtime.timestamp() if e.mtime else 0.0, e.name.casefold())
    if column == KIND:
        return lambda e: (kind_text(e).casefold(), e.name.casefold())
    return lambda e: (e.name.casefold(), e.name)


def _folders_first(entries: list[Entry]) -> tuple[list[Entry], list[Entry]]:
    """Folders and the rest, each in its order: folders stay on top whatever the sort, as in
    file managers (a reversed key with the folder flag in it put them at the bottom)."""
    folders = [e for e in entries if e.is_dir]
    return folders, [e for e in entries if not e.is_dir] if folders else entries


GLOB_CHARS = frozenset("*?[")


def name_matcher(text: str) -> Callable[[str], bool] | None:
    """What the filter box shows: ``None`` for everything; a glob (``*.h5``, ``run_0??``) when
    the text has ``*``, ``?`` or ``[`` (matched against the whole name); else a substring.
    Case is ignored either way."""
    if not text:
        return None
    if GLOB_CHARS.isdisjoint(text):
        folded = text.casefold()
        return lambda name: folded in name.casefold()
    match = re.compile(fnmatch.translate(text), re.IGNORECASE).match
    return lambda name: match(name) is not None


class ListingModel(QAbstractItemModel):
    """A flat table model; ``address`` is the folder listed."""

    def __init__(self, parent: object | None = None) -> None:
        super().__init__(parent)  # type: ignore[arg-type]
        self.address: Address | None = None
        self._all: list[Entry] = []
        self._rows: list[Entry] = []
        self._filter = ""
        self._match: Callable[[str], bool] | None = None
        self._show_hidden = False
        self._sort_column = NAME
        self._sort_order = Qt.SortOrder.AscendingOrder
        self._sorted = True  # False while batches are being appended
        self.drop_handler: DropHandler | None = None
        # Per row: its display text and its icon (by kind and file type), made once, not per paint.
        self._display: dict[int, tuple[Entry, tuple[str, str, str, str], QIcon | None]] = {}
        self._with_icons = QApplication.instance() is not None

    # ---- Qt model interface ----
    def index(self, row: int, column: int, parent: Index = _ROOT) -> QModelIndex:
        if parent.isValid() or not (0 <= row < len(self._rows)) or not (0 <= column < len(COLUMNS)):
            return QModelIndex()
        return self.createIndex(row, column)

    def parent(self, child: Index = _ROOT) -> QModelIndex:  # type: ignore[override]
        return QModelIndex()

    def rowCount(self, parent: Index = _ROOT) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: Index = _ROOT) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def hasChildren(self, parent: Index = _ROOT) -> bool:
        return not parent.isValid() and bool(self._rows)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole and 0 <= section < 4:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        e = self._rows[index.row()]
        col = index.column()
        if role == DISPLAY:
            return self._display_row(index.row())[col]
        if role == Qt.ItemDataRole.EditRole and col == NAME:
            return e.name
        if role == DECORATION and col == NAME:
            return self._row_icon(index.row())
        if role == Qt.ItemDataRole.ToolTipRole:
            return tooltip(e, col)
        if role == ALIGN and col == SIZE:
            return RIGHT
        if role == EntryRole:
            return e
        return None

    def multiData(self, index: Index, roleDataSpan: QModelRoleDataSpan | QModelRoleData, /) -> None:
        """All roles of one cell in one call, from a per-row cache of display strings.

        A view asks ~7 roles per cell while painting; each separate data() call is a trip from
        C++ into Python that must take the GIL (and wait for it while workers run), and date
        formatting is slow, so painting answers everything here at once from cached text.
        """
        cells = [roleDataSpan] if isinstance(roleDataSpan, QModelRoleData) else roleDataSpan
        n = len(cells) if isinstance(cells, list) else cells.size()
        row, col = index.row(), index.column()
        shown = self._display_row(row) if index.isValid() and 0 <= row < len(self._rows) else None
        for k in range(n):
            rd = cells[k]  # type: ignore[index]  # the span is indexable at run time; the stubs say not
            role = rd.role()
            if shown is None:
                rd.clearData()
            elif role == DISPLAY:
                rd.setData(shown[col])
            elif role == DECORATION:
                icon = self._row_icon(row) if col == NAME else None
                if icon is None:
                    rd.clearData()
                else:
                    rd.setData(icon)
            elif role == ALIGN:
                if col == SIZE:
                    rd.setData(RIGHT)
                else:
                    rd.clearData()
            elif role in _PLAIN_ROLES:
                rd.clearData()
            else:
                value = self.data(index, role)
                if value is None:
                    rd.clearData()
                else:
                    rd.setData(value)

    def _display_row(self, row: int) -> tuple[str, str, str, str]:
        return self._cached(row)[1]

    def _row_icon(self, row: int) -> QIcon | None:
        return self._cached(row)[2]

    def _cached(self, row: int) -> tuple[Entry, tuple[str, str, str, str], QIcon | None]:
        e = self._rows[row]
        cached = self._display.get(id(e))
        if cached is None or cached[0] is not e:
            if len(self._display) > 4096:
                self._display.clear()
            shown = entry_icon(e) if self._with_icons else None
            cached = self._display[id(e)] = (e, row_texts(e), shown)
        return cached

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return _DROP_ONLY
        return _NAME_FLAGS if index.column() == NAME else _CELL_FLAGS

    def setData(self, index: Index, value: object, role: int = Qt.ItemDataRole.EditRole) -> bool:
        """Renaming is requested here and done by the pane in the background."""
        if role != Qt.ItemDataRole.EditRole or not index.isValid() or index.column() != NAME:
            return False
        new = str(value).strip()
        e = self._rows[index.row()]
        if not new or new == e.name or self.rename_handler is None:
            return False
        return self.rename_handler(e, new)

    rename_handler: Callable[[Entry, str], bool] | None = None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self._sort_column, self._sort_order = column, order
        self._relayout()

    # ---- contents ----
    def entry(self, row: int) -> Entry:
        return self._rows[row]

    def entries(self) -> Sequence[Entry]:
        return self._rows

    def all_entries(self) -> Sequence[Entry]:
        return self._all

    def address_of(self, e: Entry) -> Address:
        assert self.address is not None
        return replace(self.address, path=e.path, trailing_slash=False)

    def sort_state(self) -> tuple[int, Qt.SortOrder]:
        return self._sort_column, self._sort_order

    def begin_listing(self, address: Address) -> None:
        """A new folder: clear now, batches follow."""
        self.beginResetModel()
        self.address = address
        self._all, self._rows = [], []
        self._sorted = True
        self.endResetModel()

    def add_batch(self, batch: Sequence[Entry]) -> None:
        """Append a batch as it arrives (order fixed up at :meth:`end_listing`)."""
        shown = [e for e in batch if self._visible(e)]
        self._all.extend(batch)
        if not shown:
            return
        first = len(self._rows)
        self.beginInsertRows(QModelIndex(), first, first + len(shown) - 1)
        self._rows.extend(shown)
        self.endInsertRows()
        self._sorted = False

    def end_listing(self, presorted: list[Entry] | None = None) -> None:
        """The listing is complete; ``presorted`` (sorted off the UI thread) saves the sort."""
        if presorted is not None and len(presorted) == len(self._all):
            self._all = presorted
            shown = self._shown(presorted)
            if self.persistentIndexList():
                self.layoutAboutToBeChanged.emit()
                self._remap(shown)
                self.layoutChanged.emit()
            else:  # nothing selected yet: a reset is cheaper than a layout change
                self.beginResetModel()
                self._rows = shown
                self.endResetModel()
        elif not self._sorted:
            self._relayout()
        self._sorted = True

    def set_entries(self, entries: Sequence[Entry], address: Address | None = None) -> None:
        if address is not None:
            self.address = address
        self.beginResetModel()
        self._all = list(entries)
        self._rows = self._ordered([e for e in self._all if self._visible(e)])
        self.endResetModel()

    def set_filter(self, text: str) -> None:
        self._filter = text
        self._match = name_matcher(text)
        self._refilter()

    def set_show_hidden(self, show: bool) -> None:
        self._show_hidden = show
        self._refilter()

    def _shown(self, entries: list[Entry]) -> list[Entry]:
        """The entries that pass the filter, in their order (fast paths: 100,000 calls add up)."""
        match = self._match
        if match is None:
            return entries if self._show_hidden else [e for e in entries if not e.name.startswith(".")]
        if self._show_hidden:
            return [e for e in entries if match(e.name)]
        return [e for e in entries if not e.name.startswith(".") and match(e.name)]

    def _visible(self, e: Entry) -> bool:
        if not self._show_hidden and e.name.startswith("."):
            return False
        return self._match is None or self._match(e.name)

    def _ordered(self, entries: list[Entry]) -> list[Entry]:
        key, rev = _sort_key(self._sort_column), self._sort_order == Qt.SortOrder.DescendingOrder
        folders, rest = _folders_first(entries)
        if not folders:
            rest.sort(key=key, reverse=rev)
            return rest
        return sorted(folders, key=key, reverse=rev) + sorted(rest, key=key, reverse=rev)

    def sorter(self) -> Callable[[list[Entry]], list[Entry]]:
        """A function that sorts a list the way this model does (safe to call on any thread)."""
        key, rev = _sort_key(self._sort_column), self._sort_order == Qt.SortOrder.DescendingOrder

        def do(entries: list[Entry]) -> list[Entry]:
            # Sorted in small runs merged in Python: one list.sort() of 100,000 tuples holds the
            # GIL for ~0.1-0.2 s (its comparisons never return to the interpreter), which the UI
            # thread would feel as a freeze; runs of 2,048 hold it for a millisecond or two each.
            folders, rest = _folders_first(entries)
            return merged(folders) + merged(rest) if folders else merged(rest)

        def merged(entries: list[Entry]) -> list[Entry]:
            if len(entries) <= RUN:
                return sorted(entries, key=key, reverse=rev)
            runs = []
            for i in range(0, len(entries), RUN):
                runs.append(sorted(entries[i : i + RUN], key=key, reverse=rev))
                time.sleep(0)  # hand the GIL to the UI thread between runs
            return list(heapq.merge(*runs, key=key, reverse=rev))

        return do

    def _relayout(self) -> None:
        self.layoutAboutToBeChanged.emit()
        self._remap(self._ordered(self._shown(self._all)))
        self.layoutChanged.emit()

    def _refilter(self) -> None:
        self.beginResetModel()
        self._rows = self._ordered(self._shown(self._all))
        self.endResetModel()

    def _remap(self, new_rows: list[Entry]) -> None:
        """Swap in a new order keeping selections and current items on the same entries."""
        old = self.persistentIndexList()
        if old:
            where = {id(e): i for i, e in enumerate(new_rows)}
            new_idx = []
            for idx in old:
                r = where.get(id(self._rows[idx.row()])) if idx.row() < len(self._rows) else None
                new_idx.append(QModelIndex() if r is None else self.createIndex(r, idx.column()))
            self._rows = new_rows
            self.changePersistentIndexList(old, new_idx)
        else:
            self._rows = new_rows

    # ---- drag and drop ----
    def supportedDropActions(self) -> Qt.DropAction:
        return Qt.DropAction.CopyAction | Qt.DropAction.MoveAction

    def supportedDragActions(self) -> Qt.DropAction:
        return Qt.DropAction.CopyAction | Qt.DropAction.MoveAction

    def mimeTypes(self) -> list[str]:
        return [MIME_ADDRESSES, "text/uri-list"]

    def mimeData(self, indexes: Sequence[QModelIndex]) -> QMimeData:
        rows = sorted({i.row() for i in indexes if i.isValid()})
        addrs = [self.address_of(self._rows[r]) for r in rows]
        md = QMimeData()
        md.setData(MIME_ADDRESSES, json.dumps([str(a) for a in addrs]).encode("utf-8", "surrogateescape"))
        local = [QUrl.fromLocalFile(a.path) for a in addrs if a.is_local]
        if local:
            md.setUrls(local)
        md.setText("\n".join(str(a) for a in addrs))
        return md

    def canDropMimeData(self, data: QMimeData, action: Qt.DropAction, row: int, column: int, parent: Index) -> bool:
        return self.address is not None and bool(sources_from_mime(data))

    def dropMimeData(self, data: QMimeData, action: Qt.DropAction, row: int, column: int, parent: Index) -> bool:
        if self.address is None or self.drop_handler is None:
            return False
        sources = sources_from_mime(data)
        if not sources:
            return False
        dest = self.address
        if parent.isValid():  # dropped onto a folder row: into that folder
            e = self._rows[parent.row()]
            if e.is_dir:
                dest = self.address_of(e)
        dest_text = str(replace(dest, trailing_slash=True)) if dest.is_local else str(dest).rstrip("/") + "/"
        return self.drop_handler(sources, dest_text, action == Qt.DropAction.MoveAction)


def sources_from_mime(data: QMimeData) -> list[str]:
    """Ferry addresses from a pane, or local paths from a file manager's ``file://`` URLs."""
    if data.hasFormat(MIME_ADDRESSES):
        raw = bytes(data.data(MIME_ADDRESSES).data()).decode("utf-8", "surrogateescape")
        try:
            found = json.loads(raw)
        except ValueError:
            return []
        return [str(s) for s in found if isinstance(s, str)]
    if data.hasUrls():
        return [u.toLocalFile() for u in data.urls() if u.isLocalFile() and u.toLocalFile()]
    return []


def mtime_text(dt: datetime | None) -> str:
    return dt.astimezone().strftime("%Y-%m-%d %H:%M:%S") if dt else "unknown"
