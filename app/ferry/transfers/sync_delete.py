"""A --delete sync's deletions, made as its job ends by whichever process finishes it.

:func:`ferry.transfers.sync.start_sync_job` saves the deletions with the job (job value
``DELETIONS_KEY``); the scheduler, once every copy of the job has an outcome, calls
:func:`run_pending_deletions`: only if every copy verified (:func:`deletion_refusal`), never
twice, each entry checked unchanged since the comparison just before it goes; what was done is
saved (``DELETED_KEY``) for the process that asked (:func:`deletions_made`). So a sync killed
after its comparison still makes its deletions when ``ferry queue run`` (or the window) finishes
its copies, and never before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ferry.backends.base import Backend, Entry, Kind
from ferry.core.address import parse_address
from ferry.core.errors import FerryError, NotFound, describe
from ferry.core.outcomes import Level
from ferry.transfers.options import JobOptions
from ferry.transfers.store import Store

# Job values: what a --delete sync removes once every copy verified (written when the job starts,
# so whichever process finishes the job makes them: the one that compared, or a later 'ferry
# queue run' after a crash), and then what was removed (read by the process that asked).
DELETIONS_KEY = "sync-deletions"
DELETED_KEY = "sync-deleted"


def deletion_refusal(store: Store, job_id: int, options: JobOptions, *, ending: bool = False) -> str | None:
    """Why the deletions may not go ahead (a copy not done, or checked less than asked), or None.
    ``ending``: asked by the scheduler as the job ends (it is not 'done' yet)."""
    job = store.job(job_id)
    counts = store.outcome_counts(job_id)
    if (job.state != "done" and not ending) or counts.failed_total or counts.open or counts.cancelled:
        return (
            f"job {job_id} did not verify every copy ({counts.failed_total} failed, {counts.open + counts.cancelled} "
            "unfinished): nothing was deleted"
        )
    need = Level.CHECKSUM if options.hash_algo else Level.SIZE
    if need is Level.CHECKSUM and job.route == "direct" and _globus_task(store, job_id, job.dest):
        need = Level.SERVICE  # Globus moved and checked the bytes (a Globus sync): its check is the one there is
    if counts.below(need):
        return f"{counts.below(need)} copies were checked less than {need.value}: nothing was deleted"
    return None


def _globus_task(store: Store, job_id: int, dest: str) -> bool:
    """Whether a Globus task moved the job's bytes: a collection's, or one between saved sites
    naming their collections (the job keeps the task's id)."""
    from ferry.backends.globus.tasks import KEY_TASK

    return parse_address(dest).scheme == "globus" or store.job_value(job_id, KEY_TASK) is not None


@dataclass
class Deleted:
    deleted: int = 0  # files (and links) removed or moved to the backup folder
    kept: int = 0  # changed since the comparison, or could not be removed
    errors: list[str] = field(default_factory=list)


def pending_deletions(store: Store, job_id: int) -> bool:
    """Whether the job is a --delete sync whose deletions are still to be made."""
    return store.job_value(job_id, DELETIONS_KEY) is not None


def run_pending_deletions(store: Store, job_id: int, options: JobOptions, dst: Backend) -> str:
    """Make a sync job's saved deletions as it ends (the scheduler calls this once every copy has
    an outcome): only if every copy verified (:func:`deletion_refusal`), never twice. What was
    done is saved for the process that asked (:func:`deletions_made`); returns a note for the
    job's message."""
    raw = store.job_value(job_id, DELETIONS_KEY)
    if raw is None:
        return ""
    saved = json.loads(raw)
    refusal = deletion_refusal(store, job_id, options, ending=True)
    done = Deleted()
    if refusal is None:
        entries = [
            Entry(
                path=path,
                name=dst.split(path)[1],
                kind=Kind(kind),
                size=size,
                mtime_ns=mtime_ns,
                meta={"etag": etag} if etag else {},
            )
            for path, kind, size, mtime_ns, etag in saved["entries"]
        ]
        done = delete_entries(dst, saved["root"], entries, saved.get("backup"))
    result = {"refused": refusal, "deleted": done.deleted, "kept": done.kept, "errors": done.errors[:100]}
    store.set_job_value(job_id, DELETED_KEY, json.dumps(result))
    store.set_job_value(job_id, DELETIONS_KEY, None)
    if refusal is not None:
        return f"; nothing deleted: {refusal}"
    where = "moved to the backup folder" if saved.get("backup") else "deleted"
    return f"; {done.deleted:,} file(s) {where}" + (f", {done.kept:,} kept" if done.kept else "")


def deletions_made(store: Store, job_id: int) -> tuple[str | None, Deleted] | None:
    """What the job's end did about its deletions: (why none were made or None, what was), or
    None if they were not made (the job has not ended, or had none)."""
    raw = store.job_value(job_id, DELETED_KEY)
    if raw is None:
        return None
    r = json.loads(raw)
    return r["refused"], Deleted(deleted=r["deleted"], kept=r["kept"], errors=list(r["errors"]))


def delete_entries(b: Backend, root: str, deletions: list[Entry], backup: str | None) -> Deleted:
    out = Deleted()
    for entry in reversed(deletions):
        try:
            if entry.kind is Kind.DIR:
                _remove_dir(b, entry, backup is not None)
                continue
            now = b.stat(entry.path)
            if not _unchanged(entry, now):
                out.kept += 1
                out.errors.append(f"kept {b.display(entry.path)}: it changed since the comparison")
                continue
            if backup is not None:
                target = b.join(backup, *_rel_parts(b, root, entry.path))
                b.mkdir(b.split(target)[0], parents=True, exist_ok=True)
                b.rename(entry.path, target, overwrite=True)
            else:
                b.remove(entry.path)
            out.deleted += 1
        except NotFound:
            continue  # already gone: nothing to delete
        except FerryError as exc:
            if entry.kind is not Kind.DIR:
                out.kept += 1
                out.errors.append(f"could not delete {b.display(entry.path)}: {describe(exc)}")
    return out


def _unchanged(listed: Entry, now: Entry) -> bool:
    """Whether the entry found just before deleting is the one the comparison listed. S3 objects
    compare by ETag (the surest sign of the same object); other entries by kind, size and time."""
    if now.kind is not listed.kind or now.size != listed.size:
        return False
    etag_then, etag_now = listed.meta.get("etag"), now.meta.get("etag")
    if etag_then and etag_now:
        return etag_then == etag_now
    return now.exact_mtime_ns == listed.exact_mtime_ns


def _remove_dir(b: Backend, entry: Entry, quiet: bool) -> None:
    try:
        b.remove(entry.path)
    except FerryError:
        if not quiet:
            raise


def _rel_parts(b: Backend, root: str, path: str) -> list[str]:
    parts: list[str] = []
    while path and path != root:
        path, name = b.split(path)
        if not name:
            break
        parts.append(name)
    return list(reversed(parts))
