"""Deleting a source once its copy is proven: Move jobs (``ferry mv``, the window's F6 and
drag-with-move) and ``ferry watch --delete-after-verify`` share this one rule.

A source file is deleted only when its task is recorded done at the level the job requires
(``checksum``, unless the person accepted less), and, just before, when the source still is what
was copied: re-hashed and compared with the recorded hash at checksum level, its size compared
with the recorded size and with its copy's below that. A folder goes only once it is empty, that
is when everything in it was moved.

A Move job runs :func:`run_move` after its last file finished, before the job completes. Its
progress is kept with the job (``job_values``), so a restart after ``kill -9`` continues the
deletions where they stopped and never deletes a source whose copy was not proven.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from ferry.backends.base import Backend, Kind
from ferry.core.cancel import CancelToken
from ferry.core.errors import Cancelled, FerryError, NotFound, describe
from ferry.core.hashing import hash_stream
from ferry.core.outcomes import Level
from ferry.transfers.options import JobOptions
from ferry.transfers.store import Job, Store, Task

MOVE_KEY = "move"  # job_values: the move's progress (MoveProgress as JSON)
SAVE_EVERY = 1.0  # seconds between two saves of the progress while deleting


class Removed(StrEnum):
    DELETED = "deleted"
    GONE = "gone"  # no longer there: deleted before a restart, or by someone else
    KEPT = "kept"


class KeepReason(StrEnum):
    NOT_COPIED = "not-copied"  # skipped, failed or cancelled: there is no proven copy
    BELOW_LEVEL = "below-level"  # copied, but checked less than the move requires
    CHANGED = "changed"  # the source (or its copy) changed after the copy
    ERROR = "error"  # the source could not be checked or deleted


_KEEP_WORDS = {
    KeepReason.NOT_COPIED: "not copied",
    KeepReason.BELOW_LEVEL: "not checksum-checked",
    KeepReason.CHANGED: "changed after the copy",
    KeepReason.ERROR: "could not be deleted",
}


@dataclass(frozen=True)
class Removal:
    result: Removed
    reason: KeepReason | None = None
    note: str = ""  # for people: why it was kept

    @classmethod
    def kept(cls, reason: KeepReason, note: str) -> Removal:
        return cls(Removed.KEPT, reason, note)


def required_level(options: JobOptions) -> Level:
    """The least a copy must have been checked for its source to go."""
    return Level.NONE if options.allow_unverified_move else Level.CHECKSUM


def source_hash(src: Backend, path: str, algo: str, cancel: CancelToken | None = None) -> str:
    """The source's checksum: by the backend if it can (on the server), else read here."""
    if algo in src.capabilities.hashes:
        return src.hash(path, algo, cancel)
    with src.open_read(path) as f:
        return hash_stream(f, algo, cancel)[0]


def remove_source(
    src: Backend, dst: Backend, task: Task, lowest: Level, cancel: CancelToken | None = None
) -> Removal:
    """Delete the source of a file task whose copy is proven (see the module's docstring)."""
    if task.state != "done":
        return Removal.kept(KeepReason.NOT_COPIED, f"not copied ({task.state})")
    checksum = task.checksum_verified
    if not checksum and not (task.level or Level.NONE).at_least(lowest):
        return Removal.kept(KeepReason.BELOW_LEVEL, f"not verified by checksum ({task.verified or 'not checked'})")
    try:
        entry = src.stat(task.src)
    except NotFound:
        return Removal(Removed.GONE)
    except FerryError as exc:
        return Removal.kept(KeepReason.ERROR, describe(exc))
    if not entry.is_file:
        return Removal.kept(KeepReason.CHANGED, "it is no longer a regular file")
    try:
        landed = dst.stat(task.dst)
    except NotFound:
        return Removal.kept(KeepReason.CHANGED, "its copy is no longer at the destination")
    except FerryError as exc:
        return Removal.kept(KeepReason.ERROR, f"its copy could not be checked: {describe(exc)}")
    if landed.size != entry.size or (not checksum and entry.size != task.size):
        return Removal.kept(KeepReason.CHANGED, "sizes no longer match")
    try:
        if checksum:
            assert task.hash_algo is not None
            # Re-read: what is deleted must be exactly the bytes that were verified.
            if source_hash(src, task.src, task.hash_algo, cancel) != task.hash:
                return Removal.kept(KeepReason.CHANGED, "it changed after it was copied")
        src.remove(task.src)
    except NotFound:
        return Removal(Removed.GONE)
    except Cancelled:
        raise
    except FerryError as exc:
        return Removal.kept(KeepReason.ERROR, f"could not delete it: {describe(exc)}")
    return Removal(Removed.DELETED)


def remove_link(src: Backend, dst: Backend, task: Task) -> Removal:
    """A link moves when its copy at the destination points where the source link points."""
    if task.state != "done":
        return Removal.kept(KeepReason.NOT_COPIED, f"not copied ({task.state})")
    try:
        there = dst.stat(task.dst)
        here = src.stat(task.src)
        if there.kind is not Kind.LINK or here.kind is not Kind.LINK or there.link_target != here.link_target:
            return Removal.kept(KeepReason.CHANGED, "the link changed after the copy")
        src.remove(task.src)
    except NotFound:
        return Removal(Removed.GONE)
    except FerryError as exc:
        return Removal.kept(KeepReason.ERROR, f"could not delete it: {describe(exc)}")
    return Removal(Removed.DELETED)


@dataclass
class MoveProgress:
    """How far a Move job's deletions got, kept with the job so a restart continues them."""

    next_task: int = 0  # tasks below this id have been dealt with
    moved: int = 0  # sources deleted (or found gone) after their copy was proven
    kept: dict[str, int] = field(default_factory=dict)  # KeepReason -> sources kept
    folders_removed: int = 0
    folders_kept: int = 0  # something was left in them
    finished: bool = False

    @property
    def kept_total(self) -> int:
        return sum(self.kept.values())

    def count_kept(self, reason: KeepReason) -> None:
        self.kept[reason.value] = self.kept.get(reason.value, 0) + 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MoveProgress:
        data = json.loads(text)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def describe(self) -> str:
        """One line for people: ``moved 10 file(s) and 2 folder(s); kept 1 source file(s): 1 not
        checksum-checked``."""
        text = f"moved {self.moved:,} file(s)"
        if self.folders_removed:
            text += f" and {self.folders_removed:,} folder(s)"
        if self.kept_total:
            why = ", ".join(f"{n:,} {_keep_words(r)}" for r, n in sorted(self.kept.items()) if n)
            text += f"; kept {self.kept_total:,} source file(s): {why}"
        if self.folders_kept:
            text += f"; kept {self.folders_kept:,} folder(s) that still hold something"
        return text


def _keep_words(value: str) -> str:
    try:
        return _KEEP_WORDS[KeepReason(value)]
    except ValueError:
        return value  # written by a newer Ferry


def progress(store: Store, job_id: int) -> MoveProgress | None:
    text = store.job_value(job_id, MOVE_KEY)
    return None if text is None else MoveProgress.from_json(text)


def restart(store: Store, job_id: int) -> None:
    """Deal with every source again on the job's next completion (after a retry)."""
    store.set_job_value(job_id, MOVE_KEY, None)


def run_move(
    store: Store, job: Job, src: Backend, dst: Backend, cancel: CancelToken
) -> MoveProgress:
    """Delete the proven sources of a finished job, then its emptied folders (deepest first)."""
    p = progress(store, job.id) or MoveProgress()
    if p.finished:
        return p
    lowest = required_level(job.options)
    saved = time.monotonic()
    for task in store.tasks(job.id, kinds=("file", "link")):
        if task.id < p.next_task:
            continue
        cancel.check()
        r = remove_link(src, dst, task) if task.kind == "link" else remove_source(src, dst, task, lowest, cancel)
        if r.result is Removed.KEPT:
            p.count_kept(r.reason or KeepReason.ERROR)
        else:
            p.moved += 1
        p.next_task = task.id + 1
        if time.monotonic() - saved >= SAVE_EVERY:
            store.set_job_value(job.id, MOVE_KEY, p.to_json())
            saved = time.monotonic()
    store.set_job_value(job.id, MOVE_KEY, p.to_json())
    # Folders: children before parents (tasks are planned depth-first, parents first). Counted
    # afresh on every pass, so a restart in the middle counts none twice.
    folders = MoveProgress(**{**asdict(p), "folders_removed": 0, "folders_kept": 0})
    for task in store.tasks(job.id, states=("done",), kinds=("dir",), order_desc=True):
        cancel.check()
        try:
            src.remove(task.src)
        except NotFound:
            pass
        except FerryError:
            folders.folders_kept += 1
            continue
        folders.folders_removed += 1
    folders.finished = True
    store.set_job_value(job.id, MOVE_KEY, folders.to_json())
    return folders
