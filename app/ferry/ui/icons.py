"""Icons for the panes' buttons, the menus and the listing's file types: the desktop theme's icon
where it has one (freedesktop names, ``QIcon.fromTheme``), else Ferry's own small SVGs in
``resources/icons/ui`` (bundled with the app: see ``packaging/ferry.spec``).

Each icon is built once and kept: a listing's rows share a handful of ``QIcon`` objects, and the
model keeps each row's icon with its display text, so painting never builds or looks one up.
"""

from __future__ import annotations

import os
from functools import cache

from PySide6.QtGui import QIcon

from ferry.backends.base import Entry, Kind
from ferry.ui.resources import ui_icon_path

# name -> the freedesktop theme names tried first, in order (the bundled SVG is resources/icons/ui/NAME.svg)
THEMED: dict[str, tuple[str, ...]] = {
    # the panes' buttons and the matching menu commands
    "back": ("go-previous",),
    "forward": ("go-next",),
    "up": ("go-up",),
    "refresh": ("view-refresh",),
    "hidden": ("view-hidden",),
    "edit": ("document-edit", "edit-rename"),
    # kinds and file types
    "folder": ("folder",),
    "file": ("text-x-generic",),
    "link": ("emblem-symbolic-link", "inode-symlink"),
    "special": ("dialog-warning",),
    "data": ("application-x-hdf", "application-x-netcdf"),
    "table": ("text-csv", "x-office-spreadsheet"),
    "sequence": (),  # no freedesktop name for sequencing reads
    "image": ("image-x-generic",),
    "archive": ("package-x-generic", "application-x-archive"),
    "code": ("text-x-python", "text-x-script"),
    "pdf": ("application-pdf",),
}

# File name endings (lower case) -> icon name.
TYPES: dict[str, str] = {
    **dict.fromkeys((".h5", ".hdf5", ".hdf", ".he5", ".nc", ".nc4", ".cdf", ".zarr"), "data"),
    **dict.fromkeys((".csv", ".tsv", ".tab"), "table"),
    **dict.fromkeys((".fastq", ".fq", ".bam", ".sam", ".cram", ".fasta", ".fa", ".vcf"), "sequence"),
    **dict.fromkeys((".tif", ".tiff", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".bmp", ".webp"), "image"),
    **dict.fromkeys((".gz", ".tgz", ".tar", ".zip", ".bz2", ".xz", ".zst", ".7z"), "archive"),
    **dict.fromkeys((".py", ".ipynb", ".r", ".jl", ".sh", ".m", ".c", ".cpp", ".f90"), "code"),
    ".pdf": "pdf",
}
_COMPRESSED = frozenset((".gz", ".bz2", ".xz", ".zst"))

# The window's commands that carry an icon (menu items beside the panes' buttons).
COMMANDS: dict[str, str] = {
    "back": "back",
    "forward": "forward",
    "up": "up",
    "refresh": "refresh",
    "hidden": "hidden",
    "path": "edit",
    "mkdir": "folder",
}


def load(name: str) -> QIcon:
    """The theme's icon for ``name`` if the desktop has one, else the bundled SVG (not cached)."""
    for themed in THEMED.get(name, ()):
        if QIcon.hasThemeIcon(themed):
            return QIcon.fromTheme(themed)
    return QIcon(str(ui_icon_path(name)))


@cache
def icon(name: str) -> QIcon:
    """``name``'s icon, built once per process."""
    return load(name)


def type_name(file_name: str) -> str:
    """The icon name for a file called ``file_name``: its type by ending, ``file`` otherwise.
    A compressed file of a known type keeps that type (``reads.fastq.gz`` is reads)."""
    stem, ext = os.path.splitext(file_name.lower())
    if ext in _COMPRESSED:
        inner = TYPES.get(os.path.splitext(stem)[1])
        if inner is not None:
            return inner
    return TYPES.get(ext, "file")


def entry_icon_name(e: Entry) -> str:
    if e.kind is Kind.DIR:
        return "folder"
    if e.kind is Kind.LINK:
        return "link"
    if e.kind is Kind.SPECIAL:
        return "special"
    return type_name(e.name)


def entry_icon(e: Entry) -> QIcon:
    return icon(entry_icon_name(e))


def command_icon(key: str) -> QIcon | None:
    """The icon of one of the window's commands, or None for those shown as text only."""
    name = COMMANDS.get(key)
    return icon(name) if name is not None else None
