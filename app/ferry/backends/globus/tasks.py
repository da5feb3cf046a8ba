"""Globus tasks: one delegated transfer task per Ferry job, and delete tasks.

The life of a delegated job (:class:`GlobusDelegation`):

1. A ``submission_id`` is fetched and saved with the job (``globus.submission_id``) *before*
   the task is submitted. After a crash between submitting and recording the task id, the same
   submission is sent again: the service answers ``Duplicate`` with the original task, so the
   data is never submitted twice.
2. The task id is stored (``globus.task_id``); a later run finds it and reattaches instead of
   submitting.
3. The task is followed on a slow poll (``FERRY_GLOBUS_POLL`` seconds at first, backing off to a
   minute), on this job's own thread — never a sleeping wait on a UI thread. Bytes and files
   feed Ferry's accounting; new fault events are reported with the service's words.
4. Cancelling the Ferry job cancels the task. Pausing or stopping Ferry only detaches: the
   service keeps working (that is the point of Globus) and the next run reattaches.
5. At the end the task's successful-transfers list becomes one row per file, verified
   ``checksum verified by Globus`` when checksums were on; a failed task leaves its roots failed
   with the service's message, so ``ferry queue retry`` submits a new task (with a sync level
   that skips what already arrived).

All of it is reported through the :class:`~ferry.backends.base.DelegationSink` the engine hands
over: saved values, rows, progress and notes. This module never sees the queue.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ferry.backends.base import DelegatedJob, DelegatedRow, DelegationSink
from ferry.backends.globus.errors import map_error
from ferry.core.cancel import CancelToken
from ferry.core.errors import Cancelled, FerryError, Transient, Unsupported
from ferry.core.outcomes import NOT_VERIFIED, Evidence, Level, TaskState, Verification

if TYPE_CHECKING:
    from ferry.backends.globus.service import Collection

log = logging.getLogger(__name__)

VERIFIED_BY_GLOBUS = "checksum verified by Globus"
_GLOBUS_CHECKED = Verification(Level.SERVICE, None, (Evidence.GLOBUS,), VERIFIED_BY_GLOBUS)
TERMINAL = ("SUCCEEDED", "FAILED")
KEY_SUBMISSION = "globus.submission_id"
KEY_TASK = "globus.task_id"
KEY_OPTIONS = "globus.options"  # JSON: encrypt, notify, deadline, label, sync_level (ferry globus transfer)

# Ferry's conflict policies as Globus sync levels. "ask" cannot stop a service task to ask, so
# existing files are kept (the safe reading); "rename" has no service equivalent.
SYNC_LEVELS: dict[str, str | None] = {
    "ask": "exists",
    "skip": "exists",
    "overwrite": None,
    "newer": "mtime",
    "different": "checksum",
    "resume": "checksum",
}


def poll_interval(backend: Collection) -> float:
    return backend.settings.poll


POLL_MAX = 60.0


def _wait(cancel: CancelToken | None, seconds: float) -> None:
    if cancel is None:
        time.sleep(seconds)
    else:
        cancel.wait(seconds)


def _retrying(backend: Collection, what: str, fn: Any, cancel: CancelToken | None) -> Any:
    """A status call that may fail for a while (laptop asleep, network down): keep trying."""
    delay = poll_interval(backend)
    while True:
        try:
            return backend.call(what, fn)
        except Transient as exc:
            if cancel is not None and cancel.cancelled:
                raise Cancelled("stopped") from None
            log.warning("%s (will try again)", exc.message)
            _wait(cancel, delay)
            delay = min(POLL_MAX, delay * 2)


def nice_status(task: dict[str, Any]) -> str:
    status = str(task.get("status", "?"))
    nice = task.get("nice_status")
    if nice and nice not in ("OK", "Queued"):
        return f"{status} ({nice})"
    return status


def task_failure_message(backend: Collection, task: dict[str, Any]) -> str:
    """The service's own words for why a task failed: its fatal error, else its last error event."""
    fatal = task.get("fatal_error") or {}
    if isinstance(fatal, dict) and (fatal.get("description") or fatal.get("code")):
        return f"Globus task {task.get('task_id')} failed: {fatal.get('description') or fatal.get('code')}"
    for event in _error_events(backend, str(task.get("task_id")), limit=10):
        return f"Globus task {task.get('task_id')} failed: {event_text(event)}"
    return f"Globus task {task.get('task_id')} failed ({task.get('nice_status') or 'no reason given'})"


def event_text(event: dict[str, Any]) -> str:
    desc = str(event.get("description") or event.get("code") or "error")
    details = event.get("details")
    if isinstance(details, str) and details.strip():
        first = details.strip().splitlines()[0][:300]
        return f"{desc}: {first}"
    return desc


def _error_events(backend: Collection, task_id: str, limit: int = 100) -> Iterator[dict[str, Any]]:
    try:
        res = backend.call(
            "reading the task's events",
            lambda tc: tc.task_event_list(task_id, limit=limit, query_params={"filter": "is_error:1"}),
        )
    except FerryError:
        return
    for event in res.get("DATA") or []:
        if event.get("is_error", True):
            yield dict(event)


class GlobusDelegation:
    """One Ferry job as one Globus transfer task (see the module's docstring)."""

    def __init__(self, src: Collection, dst: Collection) -> None:
        self.src = src
        self.dst = dst
        self.backend = src  # whose Transfer client talks to the service (the same account)

    # ---- the job ----
    def run_job(self, job: DelegatedJob, sink: DelegationSink) -> None:
        import json

        extra: dict[str, Any] = json.loads(sink.value(KEY_OPTIONS) or "{}")
        try:
            task_id = sink.value(KEY_TASK)
            if task_id:
                task = self._get_task(task_id, sink.cancel)
                if task["status"] in TERMINAL and any(True for _ in sink.open_rows()):
                    # 'ferry queue retry' put failed rows back: this is a new attempt.
                    sink.set_value(KEY_TASK, None)
                    sink.set_value(KEY_SUBMISSION, None)
                    task_id = None
                    extra.setdefault("sync_level", "checksum")  # keep what already arrived
                else:
                    sink.job_changed(f"reattached to Globus task {task_id}")
            if not task_id:
                task_id = self._submit(job, sink, extra)
            task = self._follow(sink, task_id)
        except Cancelled:
            return
        except FerryError as exc:
            self._record_roots(job, sink, TaskState.FAILED, exc.message)
            return
        if sink.cancel.cancelled and task["status"] not in TERMINAL:
            if sink.cancel.reason == "cancel":
                self._cancel(task_id)
                self._record_transferred(job, sink, task_id)
                self._record_roots(job, sink, TaskState.CANCELLED, f"Globus task {task_id} cancelled")
            return  # paused or stopped: the service keeps going; the next run reattaches
        self._record_transferred(job, sink, task_id)
        if task["status"] == "SUCCEEDED":
            self._record_kept(job, sink, extra.get("sync_level") or task.get("sync_level"))
            self._record_roots(job, sink, TaskState.DONE, None)
        else:
            self._record_roots(job, sink, TaskState.FAILED, task_failure_message(self.backend, task))

    def _submit(self, job: DelegatedJob, sink: DelegationSink, extra: dict[str, Any]) -> str:
        """Save the submission id, then submit: a crash in between resubmits the same id (harmless)."""
        from globus_sdk import TransferData

        policy = job.on_conflict
        if policy == "rename":
            raise Unsupported(
                "Globus tasks cannot keep both copies under a new name: choose --on-conflict skip, "
                "overwrite, newer or different for Globus-to-Globus copies"
            )
        submission_id = sink.value(KEY_SUBMISSION)
        if not submission_id:
            res = self.backend.call("preparing the transfer", lambda tc: tc.get_submission_id())
            submission_id = str(res["value"])
            sink.set_value(KEY_SUBMISSION, submission_id)
        if policy == "ask":
            note = (
                "a Globus task cannot stop to ask: files that already exist are kept "
                "(--on-conflict overwrite, newer or different replaces them)"
            )
            log.warning("%s", note)
            sink.job_changed(note)
        sync_level = extra.get("sync_level") or SYNC_LEVELS.get(policy)
        encrypt = extra.get("encrypt")
        if encrypt is None:
            encrypt = self._collection_forces_encryption()
        notify = set(extra.get("notify", ["failed", "inactive"]))
        kwargs: dict[str, Any] = {
            "label": (extra.get("label") or job.label or f"Ferry job {job.id}")[:128],
            "submission_id": submission_id,
            "verify_checksum": job.checksums,
            "preserve_timestamp": job.preserve_mtime,
            "encrypt_data": bool(encrypt),
            "notify_on_succeeded": "succeeded" in notify,
            "notify_on_failed": "failed" in notify,
            "notify_on_inactive": "inactive" in notify,
        }
        if sync_level:
            kwargs["sync_level"] = sync_level
        if extra.get("deadline"):
            kwargs["deadline"] = str(extra["deadline"])
        tdata = TransferData(self.src.collection, self.dst.collection, **kwargs)
        for src_path, dst_path, _rel in job.roots:
            entry = self.src.stat(src_path)
            tdata.add_item(src_path, dst_path, recursive=entry.is_dir)
        res = self.backend.call("submitting the Globus transfer", lambda tc: tc.submit_transfer(tdata))
        task_id = str(res["task_id"])
        sink.set_value(KEY_TASK, task_id)
        if res.get("code") == "Duplicate":
            log.info("submission %s was already accepted as task %s", submission_id, task_id)
        sink.job_changed(f"Globus task {task_id} submitted")
        return task_id

    def _collection_forces_encryption(self) -> bool:
        for b in (self.src, self.dst):
            try:
                if b.collection_doc().get("force_encryption"):
                    return True
            except FerryError:
                pass
        return False

    def _get_task(self, task_id: str, cancel: CancelToken | None) -> dict[str, Any]:
        res = _retrying(self.backend, "checking the Globus task", lambda tc: tc.get_task(task_id), cancel)
        return dict(res.data)

    def _follow(self, sink: DelegationSink, task_id: str) -> dict[str, Any]:
        """Poll the task until it ends or ``sink.cancel`` fires; feed progress and faults."""
        acc = sink.accounting
        seen_files = seen_bytes = seen_skipped = seen_faults = 0
        total_known = 0
        inactive_said = False
        delay = poll_interval(self.backend)
        while True:
            task = self._get_task(task_id, sink.cancel)
            files_total = int(task.get("files") or 0)
            if files_total > total_known:
                acc.add_total(files_total - total_known, 0)
                total_known = files_total
            transferred = int(task.get("bytes_transferred") or 0)
            if transferred > seen_bytes:
                # The service reports no byte total for a task, only files: progress is by files.
                acc.add_bytes(transferred - seen_bytes)
                seen_bytes = transferred
            done_files = int(task.get("files_transferred") or 0)
            for _ in range(max(0, done_files - seen_files)):
                acc.file_finished("done")
            seen_files = max(seen_files, done_files)
            skipped = int(task.get("files_skipped") or 0)
            for _ in range(max(0, skipped - seen_skipped)):
                acc.file_finished("skipped")
            seen_skipped = max(seen_skipped, skipped)
            faults = int(task.get("faults") or 0)
            if faults > seen_faults:
                for event in _error_events(self.backend, task_id, limit=faults - seen_faults):
                    note = f"Globus task {task_id} is retrying after: {event_text(event)}"
                    log.warning("%s", note)  # shown by the CLI as a warning line, kept out of JSON
                    sink.job_changed(note)
                seen_faults = faults
            if task.get("status") == "INACTIVE" and not inactive_said:
                note = f"Globus task {task_id} is {nice_status(task)}; Globus resumes it when the cause is fixed"
                log.warning("%s", note)
                sink.job_changed(note)
            inactive_said = task.get("status") == "INACTIVE"
            if task.get("status") in TERMINAL or sink.cancel.cancelled:
                return task
            _wait(sink.cancel, delay)
            delay = min(POLL_MAX, delay * 1.5)

    def _cancel(self, task_id: str) -> None:
        try:
            self.backend.call("cancelling the Globus task", lambda tc: tc.cancel_task(task_id))
        except FerryError as exc:
            log.warning("could not cancel Globus task %s: %s", task_id, exc.message)

    # ---- recording ----
    def _rel_for(self, job: DelegatedJob, dst_path: str) -> str:
        for _src, root_dst, rel in job.roots:
            root = root_dst.rstrip("/")
            if dst_path.rstrip("/") == root:
                return rel
            if dst_path.startswith(root + "/"):
                return posixpath.join(rel, dst_path[len(root) + 1 :])
        return posixpath.basename(dst_path)

    def _record_transferred(self, job: DelegatedJob, sink: DelegationSink, task_id: str) -> None:
        """The task's successful transfers become done rows (checked by Globus when checksums were on)."""
        how = _GLOBUS_CHECKED if job.checksums else NOT_VERIFIED
        batch: list[DelegatedRow] = []
        for item in self._successful(task_id):
            src, dst = str(item.get("source_path", "")), str(item.get("destination_path", ""))
            if not src or src.endswith("/"):
                continue  # folders are listed with a trailing slash by some servers
            batch.append(DelegatedRow("file", src, dst, self._rel_for(job, dst), item.get("size"), None))
            if len(batch) >= 1000:
                sink.finish_rows(batch, TaskState.DONE, verification=how)
                batch = []
        if batch:
            sink.finish_rows(batch, TaskState.DONE, verification=how)

    def _record_kept(self, job: DelegatedJob, sink: DelegationSink, sync_level: Any) -> None:
        """Planned rows (a sync's differences) the task did not transfer under a sync level weaker
        than checksum: the service kept the destination's file (under "mtime", one not older), so
        they end skipped, saying so, never 'verified'. (Under "checksum" the service found the
        checksums equal.)"""
        if sync_level in (None, "checksum", 3):
            return
        roots = {src for src, _dst, _rel in job.roots}
        kept = [r for r in sink.open_rows() if r.kind == "file" and r.src not in roots]
        if kept:
            why = f"kept the destination's file: Globus (sync level {sync_level}) found nothing to copy"
            sink.finish_rows(kept, TaskState.SKIPPED, error=why)

    def _successful(self, task_id: str) -> Iterator[dict[str, Any]]:
        marker: Any = None
        while True:
            res = self.backend.call(
                "reading what the Globus task transferred",
                lambda tc, m=marker: (
                    tc.task_successful_transfers(task_id, marker=m) if m else tc.task_successful_transfers(task_id)
                ),  # type: ignore[misc]
            )
            yield from (dict(x) for x in res.get("DATA") or [])
            marker = res.get("next_marker")
            if not marker:
                return

    def _record_roots(self, job: DelegatedJob, sink: DelegationSink, state: TaskState, error: str | None) -> None:
        """Each root (what the person asked to copy) ends done, failed or cancelled, and so does any
        row still open (put back by a retry but not in this task's list)."""
        verified = _GLOBUS_CHECKED if job.checksums else NOT_VERIFIED
        rows: list[DelegatedRow] = []
        for src_path, dst_path, rel in job.roots:
            try:
                is_dir = self.src.stat(src_path).is_dir
            except FerryError:
                is_dir = False
            rows.append(DelegatedRow("dir" if is_dir else "file", src_path, dst_path, rel))
        rows.extend(sink.open_rows())
        if rows:
            sink.finish_rows(rows, state, verification=verified, error=error)
        if state is TaskState.FAILED and error:
            sink.job_changed(error)


# ---------------------------------------------------------------- delete tasks


def run_delete(
    backend: Collection, paths: list[str], *, recursive: bool, cancel: CancelToken | None = None
) -> dict[str, Any]:
    """Delete through a delete task, followed to its end like a transfer; raise with the service's words."""
    from globus_sdk import DeleteData

    res = backend.call("preparing the delete", lambda tc: tc.get_submission_id())
    ddata = DeleteData(backend.collection, recursive=recursive, submission_id=str(res["value"]), label="Ferry delete")
    for p in paths:
        ddata.add_item(p)
    sub = backend.call(f"deleting {backend.display(paths[0])}", lambda tc: tc.submit_delete(ddata))
    task_id = str(sub["task_id"])
    delay = poll_interval(backend)
    while True:
        task = dict(_retrying(backend, "checking the delete task", lambda tc: tc.get_task(task_id), cancel).data)
        if task.get("status") == "SUCCEEDED":
            return task
        if task.get("status") == "FAILED":
            msg = task_failure_message(backend, task)
            raise map_error(FerryError(msg), "deleting") if "PermissionDenied" not in msg else _permission(msg)
        if cancel is not None and cancel.cancelled:
            backend.call("cancelling the delete", lambda tc: tc.cancel_task(task_id))
            raise Cancelled("delete cancelled")
        _wait(cancel, delay)
        delay = min(POLL_MAX, delay * 1.5)


def _permission(msg: str) -> FerryError:
    from ferry.core.errors import PermissionDenied

    return PermissionDenied(msg)


def iso_deadline(text: str) -> str:
    """``--deadline`` as the service wants it: an ISO time (a duration like 2d counts from now)."""
    from ferry.core.units import parse_duration

    try:
        secs = parse_duration(text)
    except Exception:
        secs = None
    if secs is not None:
        return datetime.fromtimestamp(time.time() + secs, UTC).isoformat(timespec="seconds")
    return datetime.fromisoformat(text).astimezone(UTC).isoformat(timespec="seconds")
