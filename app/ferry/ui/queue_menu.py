"""The transfers panel's right-click entries that are not job control: show the log of the chosen
jobs (read on a worker thread), and open a job's destination in the active pane.

Pause, resume, cancel, retry and the queue's order go through :class:`~ferry.ui.job_control.JobControl`
like the panel's buttons; copying addresses needs only the panel's rows (``queue_actions.addresses_text``).
"""

from __future__ import annotations

import os

from PySide6.QtWidgets import QWidget

from ferry.ui import queue_actions
from ferry.ui.host import WindowHost


class QueueMenu:
    def __init__(self, host: WindowHost, parent: QWidget) -> None:
        self.host = host
        self.parent = parent  # of the log view
        self.last_log: QWidget | None = None  # the log view shown last (tests read it)

    def show_log(self, job_ids: list[int]) -> None:
        from ferry.transfers.store import Store

        store_path = self.host.store_path

        def work() -> str:
            store = Store(store_path)
            try:
                known = {j.id for j in store.jobs(ids=job_ids)}  # another process may have cleared one
                return "\n\n".join(
                    queue_actions.log_text(queue_actions.job_log(store, j)) for j in job_ids if j in known
                )
            finally:
                store.close()

        def done(text: str) -> None:
            from ferry.ui.dialogs.job_log import JobLogDialog

            title = f"Log of job {job_ids[0]}" if len(job_ids) == 1 else f"Log of {len(job_ids)} jobs"
            dlg = JobLogDialog(title, text or "These jobs are no longer in the queue.", self.parent)
            self.last_log = dlg
            dlg.show()

        self.host.run_async(work, done)

    def open_destination(self, dest: str) -> None:
        """The active pane goes to the job's destination folder (a file's folder, for one file)."""
        target = dest
        if "://" not in dest and os.path.isfile(dest):
            target = os.path.dirname(dest)
        self.host.active.navigate(target)
