"""What a drop, F5/F6 or "Download to…" becomes: a confirmation of what will happen, then a job.

The job itself is made by the engine (:func:`ferry.transfers.jobs.new_job`, as for ``ferry cp``)
on a worker thread; the options come from the window's transfer settings. A move is the job's own
option: the engine deletes each source once its copy is verified, whether or not the window is
still open. Whether a move needs the person's consent (its copies checked below checksum level)
is the engine's rule too: :class:`~ferry.transfers.options.JobOptions` refuses such a move unless
``allow_unverified_move`` is set, and only then does the window ask.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from PySide6.QtWidgets import QWidget

from ferry.backends.base import Backend, Entry
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import UsageError, describe
from ferry.transfers.options import JobOptions
from ferry.ui.dialogs.drop_confirm import DropConfirmDialog
from ferry.ui.host import WindowHost
from ferry.ui.settings import save_transfer_settings


class TransferRequests:
    def __init__(self, host: WindowHost, parent: QWidget) -> None:
        self.host = host
        self.parent = parent  # of the confirmation dialog

    def copy_selection(self, move: bool) -> None:
        """F5 (copy) and F6 (move): the active pane's selection into the other pane's folder."""
        host = self.host
        srcs = [str(a) for a in host.active.selected_addresses()]
        if not srcs:
            host.say("Select something to copy first")
            return
        dest = host.other.address
        if dest is None:
            return
        dest_text = dest.path + os.sep if dest.is_local else str(dest).rstrip("/") + "/"
        self.request_transfer(srcs, dest_text, move=move)

    def download_selection(self) -> None:
        """Where a drag to the desktop cannot work (a remote pane), "Download to…" does the same."""
        srcs = [str(a) for a in self.host.active.selected_addresses()]
        if not srcs:
            self.host.say("Select something to download first")
            return
        folder = self.host.choose_folder("Download to")
        if folder:
            self.request_transfer(srcs, folder.rstrip(os.sep) + os.sep)

    def request_transfer(self, sources: list[str], dest: str, *, move: bool = False) -> bool:
        """A drop or F5/F6: show what will happen, then queue the job in the background."""
        if not sources:
            return False
        ts = self.host.transfer_settings
        if ts.confirm_drops:
            files, folders, size = self.summarise(sources)
            dlg = DropConfirmDialog(
                files=files,
                folders=folders,
                size=size,
                destination=dest,
                policy=ts.on_conflict,
                move=move,
                parent=self.parent,
            )
            self.count_folders(sources, dlg)
            if not self.host.confirm_transfer(dlg):
                return False
            if dlg.dont_ask.isChecked():
                ts.confirm_drops = False
                save_transfer_settings(ts)
        self.queue_transfer(sources, dest, move=move)
        return True

    def summarise(self, sources: list[str]) -> tuple[int, int, int]:
        """(files, folders, bytes) for the confirmation, from listings already on screen."""
        known = self._shown_entries()
        files = folders = size = 0
        for s in sources:
            is_dir, n = _measure(s, known.get(s))
            folders += is_dir
            files += not is_dir
            size += n
        return files, folders, size

    def count_folders(self, sources: list[str], dlg: DropConfirmDialog) -> None:
        """Count what the folders among ``sources`` hold, on a worker thread, into ``dlg``.

        The dialog shows "counting…" meanwhile; closing it cancels the count, and a tree bigger
        than :data:`COUNT_LIMIT` files is reported as "more than" that many."""
        if not dlg.folders:
            return
        known = self._shown_entries()
        folders = [s for s in sources if _is_folder(s, known.get(s))]
        pool, cancel, limit = self.host.pool, dlg.cancel, COUNT_LIMIT

        def work() -> tuple[int, int, bool]:
            from ferry.credentials.sites import resolve_address

            tally = Tally(limit)
            for text in folders:
                address = resolve_address(text)
                tally.walk(pool.get(address), address, cancel)
            return tally.files, tally.size, tally.capped

        def failed(exc: BaseException) -> None:
            dlg.set_count_failed(describe(exc))

        self.host.run_async(work, lambda r: dlg.set_folder_contents(*r), failed)

    def _shown_entries(self) -> dict[str, Entry]:
        known: dict[str, Entry] = {}
        for p in (self.host.left, self.host.right):
            if p.model.address is not None:
                for e in p.model.all_entries():
                    known[str(p.model.address_of(e))] = e
        return known

    def move_options(self, options: JobOptions) -> JobOptions | None:
        """``options`` for a move, or None when the person declined: the engine refuses a move
        whose copies are checked below checksum level unless the person accepted it."""
        try:
            return dataclasses.replace(options, move=True)
        except UsageError:
            pass
        if not self.host.confirm(
            "Move without a checksum",
            f"Your transfer settings check files by {options.verify}, not by checksum. Delete each source "
            "once its copy has the right size?",
        ):
            return None
        return dataclasses.replace(options, move=True, allow_unverified_move=True)

    def queue_transfer(
        self,
        sources: list[str],
        dest: str,
        *,
        move: bool = False,
        on_conflict: str | None = None,
        on_created: Callable[[int], object] | None = None,
    ) -> None:
        """Create the job in the engine, on a worker thread."""
        from ferry.transfers import jobs
        from ferry.transfers.store import Store

        host = self.host
        options = host.transfer_settings.job_options(recursive=True, on_conflict=on_conflict)
        if move:
            moving = self.move_options(options)
            if moving is None:
                return
            options = moving
        pool, store_path = host.pool, host.store_path

        def work() -> int:
            store = Store(store_path)
            try:
                return jobs.new_job(store, pool, sources, dest, options)
            finally:
                store.close()

        def done(job_id: int) -> None:
            if on_created is not None:
                on_created(job_id)
            verb = "Move" if move else "Job"
            host.say(f"{verb} {job_id} queued: {len(sources)} item(s) → {dest}")
            host.job_queued(job_id)

        host.run_async(work, done)


# The most files a confirmation counts before it says "more than N files" (a huge tree is not
# walked to the end just to fill in a dialog).
COUNT_LIMIT = 100_000


class Tally:
    """Files and bytes under folders, walked without following links, up to ``limit`` files."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.files = self.size = 0
        self.capped = False

    def walk(self, backend: Backend, top: Address, cancel: CancelToken) -> None:
        stack = [top]
        while stack and not self.capped:
            folder = stack.pop()
            for e in backend.list(folder.path, cancel):
                cancel.check()
                if e.is_dir:
                    stack.append(folder.join(e.name))
                elif self.files >= self.limit:
                    self.capped = True
                    return
                else:
                    self.files += 1
                    self.size += e.size or 0


def _is_folder(source: str, shown: Entry | None) -> bool:
    return _measure(source, shown)[0]


def _measure(source: str, shown: Entry | None) -> tuple[bool, int]:
    """(is a folder, bytes) of one source: from its listed entry, else from the local disk."""
    if shown is not None:
        return (True, 0) if shown.is_dir else (False, shown.size or 0)
    if "://" in source:
        return False, 0
    if os.path.isdir(source):
        return True, 0
    try:
        return False, os.lstat(source).st_size
    except OSError:
        return False, 0
