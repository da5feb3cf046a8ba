"""The window's side of job control: the transfers panel's and the Transfers menu's actions, and
folder watches.

Pause, resume, cancel, retry and clear run on a worker thread through
:mod:`ferry.ui.queue_actions` (the engine's :mod:`ferry.transfers.control`, as ``ferry queue``);
the window's runner then acts on the changed store. Fix is a retry after whatever the failed
job's action asks the person to do. A folder watch is a :class:`~ferry.transfers.watch.Watcher`
started and stopped through the window's :class:`~ferry.ui.watch_service.WatchManager`.
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from ferry.core.errors import Action, UsageError
from ferry.transfers.control import QueueAction
from ferry.transfers.watch import WatchSpec
from ferry.ui import queue_actions
from ferry.ui.host import WindowHost
from ferry.ui.queue_model import fix_for

STOP, FIX = "stop", "fix"  # the panel's keys beside the engine's QueueAction values

# What a person is asked to do before Fix retries, for the actions that need a hand.
_BEFORE_RETRY = {
    Action.FREE_SPACE: ("Free space", "Free some space on the destination, then press OK to retry."),
    Action.CHECK_PERMISSIONS: (
        "Check permissions",
        "Make sure you may write to the destination folder, then press OK to retry.",
    ),
}


class JobControl:
    def __init__(self, host: WindowHost, parent: QWidget) -> None:
        self.host = host
        self.parent = parent  # of the watch dialog

    # ---- the panel's and the menu's buttons
    def queue_action(self, key: str, job_ids: list[int]) -> None:
        """``key``: a :class:`QueueAction` value, ``stop`` (a watch) or ``fix`` (a failed job's suggestion)."""
        if key == STOP:
            self.stop_watches(job_ids)
            return
        if key == FIX:
            self._fix(job_ids)
            return
        try:
            action = QueueAction(key)
        except ValueError:
            raise UsageError(f"Unknown action {key}") from None
        self._apply(action, job_ids)

    def _apply(self, action: QueueAction, job_ids: list[int]) -> None:
        from ferry.transfers.store import Store

        host = self.host
        store_path, pool = host.store_path, host.pool

        def work() -> int:
            store = Store(store_path)
            try:
                return queue_actions.apply(store, action, job_ids, pool)
            finally:
                store.close()

        def done(n: int) -> None:
            retried = action is QueueAction.RETRY
            host.say(f"{n:,} file(s) queued again" if retried else f"{action.value.capitalize()}: {n} job(s)")
            if action in (QueueAction.RESUME, QueueAction.RETRY):
                host.service.start()
            host.poller.poke()

        host.run_async(work, done)

    def _fix(self, job_ids: list[int]) -> None:
        jobs = [j for j in self.host.queue_model.all_jobs() if j.id in job_ids]
        fixes = [fix_for(j.error_action) for j in jobs]
        self.fix_job(next((f[0] for f in fixes if f is not None), Action.RETRY), job_ids)

    def fix_job(self, action: Action, job_ids: list[int]) -> None:
        """The failed row's suggestion: retrying reconnects, which asks again (log in, trust key)."""
        ask = _BEFORE_RETRY.get(action)
        if ask is not None and not self.host.confirm(*ask):
            return
        if action in (Action.LOGIN, Action.TRUST_HOST_KEY):
            self.host.pool.close_all()  # a fresh connection asks for the password / host key again
        self._apply(QueueAction.RETRY, job_ids)

    def clear_finished(self) -> None:
        from ferry.transfers.store import Store

        host = self.host
        store_path = host.store_path

        def work() -> int:
            store = Store(store_path)
            try:
                return queue_actions.clear_finished(store)
            finally:
                store.close()

        def done(n: int) -> None:
            host.say(f"Removed {n} finished job(s)")
            host.poller.poke()

        host.run_async(work, done)

    # ---- folder watches
    def watch_target(self) -> str | None:
        """The local folder to watch: the one selected folder, else the active pane's folder."""
        pane = self.host.active
        chosen = pane.selected_entries()
        addr = pane.model.address_of(chosen[0]) if len(chosen) == 1 and chosen[0].is_dir else pane.address
        if addr is None or not addr.is_local:
            return None
        return addr.path

    def watch_folder(self) -> None:
        from ferry.ui.dialogs.watch import WatchDialog

        host = self.host
        folder = self.watch_target()
        if folder is None:
            host.show_error("Only a folder on this computer can be watched: open or select one first.")
            return
        other = host.other.address
        dest = "" if other is None else (other.path if other.is_local else str(other))
        dlg = WatchDialog(folder, dest, self.parent)
        if not host.exec_watch_dialog(dlg):
            return
        self.start_watch(dlg.spec(host.transfer_settings.job_options(recursive=True)))

    def start_watch(self, spec: WatchSpec) -> None:
        """Start a watch on a worker thread (it checks the folders and may log in)."""
        host = self.host

        def done(job_id: int) -> None:
            host.say(f"Watching {spec.source} → {spec.dest} (job {job_id})")
            host.job_queued(job_id, watch=True)

        host.run_async(lambda: host.watches.start(spec), done)

    def stop_watches(self, job_ids: list[int]) -> None:
        host = self.host
        ids = [j for j in job_ids if host.watches.running(j)]

        def work() -> int:
            for j in ids:
                host.watches.stop(j)
            return len(ids)

        def done(n: int) -> None:
            host.say(f"Stopped {n} watch(es); what was queued still arrives")
            host.service.start()  # the feed is released: the window's runner ships what was queued
            host.poller.poke()

        host.run_async(work, done)
