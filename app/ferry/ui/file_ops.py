"""File operations on what a pane shows: new folder (F7), rename (F2), delete (Del), open,
properties, permissions and share links.

The backend calls run on a worker thread through the window's ``run_async``; questions go through
the window's dialog seams (:class:`~ferry.ui.host.WindowHost`). Opening a remote file downloads it
into the open cache as an ordinary job (:mod:`ferry.ui.open_cache`) and opens it when that job is
done (:meth:`FileOps.job_finished`); an unchanged file opens from the cache at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from ferry.backends.base import Backend, Capabilities, Entry
from ferry.core.address import Address
from ferry.core.units import format_size
from ferry.ui import open_cache
from ferry.ui.actions import can_chmod, can_share
from ferry.ui.host import WindowHost
from ferry.ui.listing_model import display_name
from ferry.ui.pane import Pane
from ferry.ui.transfer_requests import TransferRequests

DELETE_COUNT_CAP = 1_000_000  # files counted before a delete's question says "more than"


def valid_name(name: str) -> bool:
    """A name for one entry in a folder: no separators, NUL, '.' or '..'."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\x00" not in name and os.sep not in name


class FileOps:
    def __init__(self, host: WindowHost, parent: QWidget, transfers: TransferRequests) -> None:
        self.host = host
        self.parent = parent  # of the dialogs
        self.transfers = transfers
        self._opens: dict[int, tuple[Address, Entry]] = {}  # download job -> what it opens when done
        self.opened_path: Path | None = None
        from ferry.ui.edit_back import EditBack

        # Saved edits of an opened remote file go back as a verified job, after asking.
        self.edits = EditBack(
            host, lambda path, addr: transfers.queue_transfer([str(path)], str(addr), on_conflict="overwrite"), parent
        )

    # ---- folders and names
    def new_folder(self) -> None:
        host = self.host
        pane = host.active
        if pane.address is None:
            return
        name = host.ask_text("New folder", "Name of the new folder:")
        if not name:
            return
        if not valid_name(name):
            host.show_error(f"'{display_name(name)}' cannot be a folder name (no '/', NUL or '..')")
            return
        addr = pane.address
        backend = host.pool.get(addr)
        path = backend.join(addr.path, name) if addr.path else name
        host.run_async(lambda: backend.mkdir(path, parents=False, exist_ok=False), lambda _r: pane.refresh(select=name))

    def rename_selected(self) -> None:
        """F2: edit the current name in place; the model hands the new one to :meth:`rename_entry`."""
        view = self.host.active.view
        idx = view.currentIndex()
        if idx.isValid():
            view.edit(idx.siblingAtColumn(0))

    def rename_entry(self, pane: Pane, entry: Entry, new: str) -> bool:
        if not valid_name(new) or pane.address is None:
            self.host.show_error(f"'{display_name(new)}' cannot be a name (no '/', NUL or '..')")
            return False
        backend = self.host.pool.get(pane.address)
        folder, _ = backend.split(entry.path)
        target = backend.join(folder, new) if folder else new
        self.host.run_async(
            lambda: backend.rename(entry.path, target, overwrite=False), lambda _r: pane.refresh(select=new)
        )
        return False  # the listing refreshes when the rename is done

    # ---- delete: count first, ask with the numbers, then remove
    def delete_selection(self) -> None:
        host = self.host
        pane = host.active
        entries = pane.selected_entries()
        if not entries or pane.address is None:
            return
        backend = host.pool.get(pane.address)
        where = str(pane.address)

        def ask(found: tuple[int, int, bool]) -> None:
            if not host.confirm("Delete", _delete_question(entries, where, *found)):
                return
            host.run_async(
                lambda: [backend.remove(e.path, recursive=e.is_dir) for e in entries], lambda _r: pane.refresh()
            )

        host.run_async(lambda: self._count(backend, entries), ask)

    def _count(self, backend: Backend, entries: list[Entry]) -> tuple[int, int, bool]:
        """(files, bytes, capped) under ``entries`` (on a worker thread)."""
        files = size = 0
        for e in entries:
            if not e.is_dir:
                files += 1
                size += e.size or 0
                continue
            for _rel, sub in backend.walk(e.path, self.host.bridge.closing):
                if not sub.is_dir:
                    files += 1
                    size += sub.size or 0
                if files > DELETE_COUNT_CAP:
                    return files, size, True
        return files, size, False

    # ---- dialogs about the selection
    def show_properties(self, *, permissions: bool = False) -> None:
        """Properties of the first selected entry; ``permissions``: opened at its chmod part."""
        from ferry.ui.dialogs.properties import PropertiesDialog

        pane = self.host.active
        entries = pane.selected_entries()
        if not entries or pane.address is None:
            if permissions:
                self.host.say("Select a file or folder to change its permissions")
            return
        e = entries[0]
        dlg = PropertiesDialog(
            e,
            str(pane.model.address_of(e)),
            self.host.pool.get(pane.address),
            self.host.run_async,
            self.parent,
            permissions=permissions,
        )
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()

    def show_permissions(self) -> None:
        """Permissions… (menus): the Properties dialog at its chmod part, on a site that can change
        permissions; elsewhere (S3, Globus) the status bar says it cannot and nothing opens."""
        self._if_site_can(
            can_chmod, "This site cannot change permissions", lambda: self.show_properties(permissions=True)
        )

    def share_selected(self) -> None:
        """Share link… (Ctrl+Shift+L): the share dialog, on a site that declares it can make links
        or grants; elsewhere (local folders, SFTP) the status bar says so and nothing opens."""
        self._if_site_can(can_share, "This site cannot make share links", self._open_share)

    def _open_share(self) -> None:
        from ferry.ui.dialogs.share import ShareDialog

        pane = self.host.active
        addrs = pane.selected_addresses() or ([pane.address] if pane.address else [])
        if not addrs:
            return
        dlg = ShareDialog(str(addrs[0]), addrs[0].scheme, self.host.run_async, parent=self.parent)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()

    def _if_site_can(self, needs: Callable[[Capabilities], bool], cannot: str, then: Callable[[], object]) -> None:
        """Run ``then`` if the active pane's site declares what ``needs`` asks, else say ``cannot``.
        The capabilities are read on a worker (for SFTP that can mean reaching the server); the
        answer counts only if the pane is still in the same place."""
        pane = self.host.active
        address = pane.address
        if address is None:
            return
        pool = self.host.pool

        def decide(caps: Capabilities) -> None:
            if pane.address != address or self.host.active is not pane:
                return  # the person moved on meanwhile
            if needs(caps):
                then()
            else:
                self.host.say(cannot)

        self.host.run_async(lambda: pool.get(address).capabilities, decide)

    # ---- open with the system's application
    def open_selected(self) -> None:
        pane = self.host.active
        entries = [e for e in pane.selected_entries() if e.is_file]
        if entries:
            self.open_entry(pane, entries[0])

    def open_entry(self, pane: Pane, entry: Entry) -> None:
        addr = pane.model.address_of(entry)
        if addr.is_local:
            from ferry.ui.edit_back import open_with_desktop

            if not open_with_desktop(Path(addr.path)):
                self.host.show_error(f"No application on this computer opens {display_name(entry.name)}")
            return
        if open_cache.is_fresh(addr, entry):
            self._open_cached(addr, entry, reused=True)
            return
        if open_cache.is_edited_here(addr, entry):  # never downloaded over an edit not uploaded
            self._open_cached(addr, entry, reused=True, edited=True)
            return
        target = open_cache.prepare(addr)

        def created(job_id: int) -> None:
            self._opens[job_id] = (addr, entry)

        self.transfers.queue_transfer([str(addr)], str(target), on_conflict="overwrite", on_created=created)

    def job_finished(self, job_id: int, state: str) -> None:
        """A job ended: if it was downloading a file to open, open it (when it succeeded)."""
        opening = self._opens.pop(job_id, None)
        if opening is not None and state == "done":
            self._open_cached(*opening)

    def _open_cached(self, addr: Address, entry: Entry, reused: bool = False, edited: bool = False) -> None:
        path = open_cache.cache_path(addr)
        if not reused:
            open_cache.record(addr, entry)
        how = " (your edits, not uploaded yet: save it to upload)" if edited else " (unchanged: from the cache)"
        self.host.say(f"Opening {path}" + (how if reused else ""))
        self.opened_path = path
        self.edits.open(addr, path)  # watched: a save asks to upload it back; no opener is said


def _delete_question(entries: list[Entry], where: str, files: int, size: int, capped: bool) -> str:
    names = ", ".join(display_name(e.name) for e in entries[:3]) + ("…" if len(entries) > 3 else "")
    return (
        f"Delete {len(entries)} item(s) ({names}) from {where}?\n\n"
        f"That is {'more than ' if capped else ''}{files:,} file(s), {format_size(size)}. "
        "This cannot be undone."
    )
