"""One task, start to finish: conflict policy, the byte stream, verification, atomic commit.

Per file the strategy is (after rclone's ``operations.Copy``):

* both ends the same endpoint with a kernel/server copy, and no checksum asked: let it copy;
* otherwise stream: read the source once, hash those same bytes as they pass (never a second read
  of the source just to hash it), write to a partial file; the destination is checked by an
  independent means (read-back of what landed, or the server's own checksum), sizes always.

A mismatch retries the file once from zero, then fails it loudly. The file appears under its
final name only after verification, by an atomic rename that never replaces a file the policy
says to keep.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from ferry.backends.base import (
    Backend,
    Entry,
    EvidenceCheck,
    Kind,
    Reader,
    ServerCopier,
    Writer,
    reader_features,
    temp_name,
)
from ferry.core.cancel import CancelToken
from ferry.core.errors import (
    AlreadyExists,
    ChecksumMismatch,
    CommitInDoubt,
    FerryError,
    LinkInTheWay,
    NotFound,
    Transient,
    Unsupported,
)
from ferry.core.hashing import Hasher, new_hasher
from ferry.core.outcomes import (
    FOLDER,
    NOT_VERIFIED,
    Evidence,
    Level,
    SkipReason,
    Verification,
)
from ferry.core.progress import Accounting
from ferry.transfers.bandwidth import Limiters
from ferry.transfers.options import (
    CHOOSE_POLICY_HINT,
    CONFLICT_ANSWER_KEY,
    CONFLICT_POLICIES,
    ConflictUnanswered,
    JobOptions,
)
from ferry.transfers.store import Store, Task

CHUNK = 1 << 20
SMALL_BUFFER = 64 << 10  # the least a file's read buffer is given


@dataclass(frozen=True)
class Conflict:
    """What the person is asked when ``--on-conflict ask`` meets an existing file."""

    task: Task
    source: Entry
    existing: Entry
    display: str


@dataclass(frozen=True)
class Answer:
    """A person's answer to one conflict: a policy other than "ask", and whether it stands for
    every remaining conflict of this job (kept with the job, so it survives a restart of the job
    and never reaches another job)."""

    policy: str
    for_all: bool = False


# Asked one conflict at a time; returns an Answer, or a bare policy name for this file only.
AskFn = Callable[[Conflict], "Answer | str"]

# One question at a time, whichever job asks: a second conflict of the same job then sees an
# "apply to all" given meanwhile instead of asking again.
_ASKING = threading.Lock()


class NotKept(StrEnum):
    """What of a file's metadata its copy could not keep (the note beside says why)."""

    PERMISSIONS = "permissions"
    MTIME = "mtime"  # the modification time (a server that refused to set it)
    HOLES = "holes"  # a sparse source's holes: every byte written
    HARD_LINK = "hard-link"  # copied as a file of its own, not as another name of its twin
    XATTRS = "xattrs"  # extended attributes (POSIX ACLs among them)
    NAME = "name"  # the name, mapped to one the destination can hold (an S3 key's control characters)


@dataclass(frozen=True)
class Outcome:
    """How one task ended, as values: ``done`` with its Verification, or ``skipped`` with a reason."""

    state: str  # done or skipped
    verification: Verification = NOT_VERIFIED
    hash: str | None = None  # the stream's hash, when one was computed and checked
    dst: str | None = None  # set when the policy renamed the destination
    skip_reason: SkipReason | None = None
    not_kept: tuple[NotKept, ...] = ()  # said in the verification's note too

    @property
    def hash_algo(self) -> str | None:
        return self.verification.algo if self.hash else None

    @property
    def verified(self) -> str:
        """The note for people."""
        return self.verification.note

    @classmethod
    def skipped(cls, reason: SkipReason, note: str) -> Outcome:
        return cls("skipped", Verification(Level.NONE, note=note), skip_reason=reason)


def unchecked(verify: str) -> Verification:
    """A copy that was not hashed: its size was compared (``--verify size``) or nothing was."""
    if verify == "none":
        return NOT_VERIFIED
    return Verification(Level.SIZE, note="size only")


class _Tee:
    """The stream's hasher and the source's evidence check, fed the same bytes in one call."""

    __slots__ = ("_check", "_hasher")

    def __init__(self, hasher: Hasher, check: EvidenceCheck) -> None:
        self._hasher, self._check = hasher, check

    def update(self, data: bytes | bytearray | memoryview, /) -> object:
        self._hasher.update(data)
        self._check.update(data)
        return None

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()


@dataclass
class _Twin:
    """The first file of a set of hard links this job copies: the others wait for it, then
    become other names of its copy."""

    src: str
    done: threading.Event = field(default_factory=threading.Event)
    dst: str | None = None  # its copy, once committed
    outcome: Outcome | None = None


class _HardLinks:
    """One job's hard links by (device, inode) of the source: the first name is copied, the
    others linked to its copy (or reported where the destination cannot link)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first: dict[tuple[int, int], _Twin] = {}
        self._done: dict[str, Task] | None = None  # the job's copied files by hard-link group

    def copied_before(self, store: Store, job_id: int, group: str) -> Task | None:
        """A file of ``group`` (the planner's ``inode:DEV:INO``) an earlier run of this job copied;
        the job's done files are read once per run, and only when a job has hard links."""
        with self.lock:
            if self._done is None:
                done = store.tasks(job_id, states=("done",), kinds=("file",))
                self._done = {t.extra: t for t in done if t.extra}
            return self._done.get(group)

    def claim(self, inode: tuple[int, int], src: str) -> tuple[_Twin, bool]:
        """The twin for ``inode`` and whether this caller is the first (and copies it)."""
        with self.lock:
            twin = self.first.get(inode)
            if twin is not None:
                return twin, False
            twin = self.first[inode] = _Twin(src)
            return twin, True

    def settle(self, inode: tuple[int, int], twin: _Twin) -> None:
        """The first name's attempt ended: the others may go on. One that failed is forgotten,
        so the next name (or its own retry) copies the file and the rest link to that."""
        with self.lock:
            if twin.dst is None and self.first.get(inode) is twin:
                del self.first[inode]
        twin.done.set()


class _LinkDecisions:
    """What this run decided for each symbolic link found inside the destination where a folder
    must go (True: the link itself was replaced), so the folder's own task and the tasks of
    everything in it decide once and alike: one question, one replacement."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replaced: dict[str, bool] = {}


@dataclass
class CopyContext:
    src: Backend
    dst: Backend
    options: JobOptions
    accounting: Accounting
    limiters: Limiters
    ask: AskFn | None = None
    store: Store | None = None  # for writers that keep resume state in the queue (S3 UploadId)
    links: _LinkDecisions = field(default_factory=_LinkDecisions)
    hard_links: _HardLinks = field(default_factory=_HardLinks)


class _TaskSlot:
    """A task's row in ``task_resume``: what a backend needs to continue an upload after a crash."""

    def __init__(self, store: Store, task_id: int) -> None:
        self._store, self._id = store, task_id

    def load(self) -> dict[str, object] | None:
        return self._store.task_resume(self._id)

    def save(self, data: dict[str, object] | None) -> None:
        self._store.set_task_resume(self._id, data)


def run_task(task: Task, ctx: CopyContext, cancel: CancelToken) -> Outcome:
    """One task. A symbolic link inside the destination where one of its folders must be (the
    destination raises LinkInTheWay rather than follow it) is a conflict for the policy: kept (the
    task is skipped, saying so) or replaced itself, never written through."""
    try:
        return _run_task(task, ctx, cancel)
    except LinkInTheWay as exc:
        if not _replaced(task, ctx, exc.link):
            return _left_out(task, ctx, SkipReason.POLICY, _kept_note(task, ctx, exc.link))
    try:
        return _run_task(task, ctx, cancel)
    except LinkInTheWay as exc:
        again = (
            f"{ctx.dst.display(exc.link)} was a symbolic link again after it was replaced: nothing written through it"
        )
        return _left_out(task, ctx, SkipReason.UNSAFE_NAME, again)


def _run_task(task: Task, ctx: CopyContext, cancel: CancelToken) -> Outcome:
    if task.kind == "dir":
        return _make_dir(task, ctx)
    if task.kind == "link":
        return _make_link(task, ctx, cancel)
    if task.kind == "file":
        return _copy_file(task, ctx, cancel)
    raise Unsupported(f"Cannot transfer a {task.kind}")


def _stat_or_none(backend: Backend, path: str) -> Entry | None:
    quick = backend.features.quick_stat  # the local disk answers without an exception
    if quick is not None:
        return quick.stat_or_none(path)
    try:
        return backend.stat(path)
    except NotFound:
        return None


def _make_dir(task: Task, ctx: CopyContext) -> Outcome:
    existing = _stat_or_none(ctx.dst, task.dst)
    if existing is not None and existing.kind is Kind.LINK:
        raise LinkInTheWay(f"A symbolic link is in the way of folder {ctx.dst.display(task.dst)}", task.dst)
    if existing is not None and not existing.is_dir:
        raise AlreadyExists(f"A file is in the way of folder {ctx.dst.display(task.dst)}")
    if existing is None:
        ctx.dst.mkdir(task.dst, parents=True, exist_ok=True)
    lost, notes = _keep_folder_attributes(task, ctx, existing)
    return Outcome("done", FOLDER.with_note("; ".join(notes)), not_kept=lost)


_OWNER_WX = 0o300  # a folder the job fills must stay writable and searchable by its owner


def _keep_folder_attributes(
    task: Task, ctx: CopyContext, existing: Entry | None
) -> tuple[tuple[NotKept, ...], list[str]]:
    """The source folder's permission bits (setgid included) and, with ``--xattrs``, its extended
    attributes, set on the folder just made (or found): what could not be kept is returned."""
    opts = ctx.options
    if ctx.dst.capabilities.prefix_folders:
        return (), []  # (S3: a folder is a key prefix, nothing to keep on it; its files say what they lost)
    if not ((opts.preserve_permissions and ctx.src.capabilities.modes) or opts.xattrs):
        return (), []  # (S3 prefixes have no permissions: no request to find none)
    try:
        source = ctx.src.stat(task.src)
    except NotFound:
        return (), []
    lost: list[NotKept] = []
    notes: list[str] = []
    if opts.preserve_permissions and source.mode is not None:
        mode = source.mode
        if not ctx.dst.capabilities.modes:
            lost.append(NotKept.PERMISSIONS)
            notes.append(f"permissions {mode:04o} not kept: {ctx.dst.scheme} folders have none")
        else:
            if mode & _OWNER_WX != _OWNER_WX:
                lost.append(NotKept.PERMISSIONS)
                notes.append(f"permissions {mode:04o} kept as {mode | _OWNER_WX:04o}: the folder must stay writable")
                mode |= _OWNER_WX
            if existing is None or existing.mode != mode:
                try:
                    ctx.dst.set_mode(task.dst, mode)
                except FerryError as exc:  # the folder is there: only its bits are not
                    lost.append(NotKept.PERMISSIONS)
                    notes.append(f"permissions {mode:04o} not kept: {exc.message}")
    if opts.xattrs:
        refused = _copy_xattrs(ctx, source, lambda attrs: ctx.dst.set_xattrs(task.dst, attrs))
        if refused:
            lost.append(NotKept.XATTRS)
            notes.append(refused)
    return tuple(lost), notes


def _copy_xattrs(ctx: CopyContext, source: Entry, put: Callable[[dict[str, bytes]], Sequence[str]]) -> str:
    """``--xattrs``: the source's extended attributes handed to ``put``; a sentence for people
    about what was not kept (empty when everything was)."""
    if not (ctx.src.capabilities.xattrs and ctx.dst.capabilities.xattrs):
        return f"extended attributes not copied: only between local disks ({ctx.src.scheme} to {ctx.dst.scheme})"
    try:
        attrs = ctx.src.get_xattrs(source.path)
    except FerryError as exc:
        return f"extended attributes not read: {exc.message}"
    if not attrs:
        return ""
    refused = put(attrs)
    if refused:
        return f"extended attributes not kept (refused by the destination): {', '.join(refused)}"
    return ""


def keep_attributes(ctx: CopyContext, source: Entry, writer: Writer) -> tuple[tuple[NotKept, ...], list[str]]:
    """Before anything is written: the source's time, permission bits, holes and (``--xattrs``)
    extended attributes handed to the writer. Returns what the destination cannot keep, with a
    sentence for people each."""
    opts = ctx.options
    if opts.preserve_mtime:
        # The file's own time: an S3 source's kept one (metadata), not the store's upload time.
        writer.set_mtime(source.own_mtime, source.own_mtime_ns)  # S3 multipart: metadata goes with the first request
    lost: list[NotKept] = []
    notes: list[str] = []
    if source.mode is not None and not writer.set_mode(source.mode, umask=not opts.preserve_permissions):
        lost.append(NotKept.PERMISSIONS)
        notes.append(f"permissions {source.mode:04o} not kept: {ctx.dst.scheme} cannot store them")
    if source.sparse and not writer.set_sparse():
        lost.append(NotKept.HOLES)
        notes.append(f"holes not kept: {ctx.dst.scheme} stores every byte")
    if opts.xattrs:
        refused = _copy_xattrs(ctx, source, writer.set_xattrs)
        if refused:
            lost.append(NotKept.XATTRS)
            notes.append(refused)
    return tuple(lost), notes


def _replaced(task: Task, ctx: CopyContext, link: str) -> bool:
    """Apply the conflict policy to a link standing where a folder of ``task`` must be: True if
    the link itself is gone (replaced, or found gone), False if it is kept. Decided once per link
    and run; an unanswered ``ask`` raises (ConflictUnanswered), as for a file."""
    with ctx.links.lock:
        replaced = ctx.links.replaced.get(link)
        if replaced is None:
            replaced = ctx.links.replaced[link] = _replace_link(task, ctx, link)
    return replaced


def _replace_link(task: Task, ctx: CopyContext, link: str) -> bool:
    existing = _stat_or_none(ctx.dst, link)
    if existing is None or existing.kind is not Kind.LINK:
        return True  # gone or replaced meanwhile: the task tries again
    src = _source_folder(task, ctx, link)
    if src is None:
        return False
    decision = _decide(task, ctx, ctx.src.stat(src), existing)
    if decision != "overwrite":
        return False  # skip, newer (the link is newer), rename (not for folders): kept
    ctx.dst.remove(link)  # the link itself: a removal never follows it
    return True


def _source_folder(task: Task, ctx: CopyContext, link: str) -> str | None:
    """The source folder that lands where ``link`` (``task.dst`` or a folder above it) stands."""
    src, dst = task.src, task.dst
    while dst != link:
        parent = ctx.dst.split(dst)[0]
        if parent == dst:
            return None
        src, dst = ctx.src.split(src)[0], parent
    return src


def _kept_note(task: Task, ctx: CopyContext, link: str) -> str:
    where = "in place of this folder" if link == task.dst else f"where folder {ctx.dst.display(link)} must be"
    return f"kept: a symbolic link stands {where} (nothing is written through it)"


def _left_out(task: Task, ctx: CopyContext, reason: SkipReason, note: str) -> Outcome:
    if task.kind == "file":
        ctx.accounting.file_finished("skipped", task.size or 0)
    return Outcome.skipped(reason, note)


def _unique_name(backend: Backend, path: str) -> str:
    folder, name = backend.split(path)
    stem, ext = os.path.splitext(name)
    if stem.startswith(".") and not ext:
        stem, ext = name, ""
    for i in range(1, 10_000):
        candidate = backend.join(folder, f"{stem} ({i}){ext}")
        if _stat_or_none(backend, candidate) is None:
            return candidate
    raise AlreadyExists(f"No free name for {backend.display(path)}")


def _mtime_close(a: datetime | None, b: datetime | None, tolerance: float) -> bool:
    if a is None or b is None:
        return False
    return abs((a - b).total_seconds()) <= tolerance


def _same(source: Entry, existing: Entry, tolerance: float) -> bool:
    """The same file by size and modification time (the file's own: an S3 object's kept time where
    it has one, else the store's upload time). A link or a folder is never the same as a file (a
    link's size is its target's length)."""
    return (
        existing.kind is source.kind
        and source.size == existing.size
        and _mtime_close(source.own_mtime, existing.own_mtime, tolerance)
    )


def _decide(task: Task, ctx: CopyContext, source: Entry, existing: Entry) -> str:
    """Apply the conflict policy: returns skip, overwrite, rename or resume."""
    policy = ctx.options.on_conflict
    if policy == "ask":
        policy = _answer(task, ctx, source, existing)
    tolerance = max(ctx.src.capabilities.mtime_precision, ctx.dst.capabilities.mtime_precision)
    if policy == "newer":
        mine, theirs = source.own_mtime, existing.own_mtime  # kept times where known (S3 metadata)
        newer = mine is not None and theirs is not None and (mine - theirs).total_seconds() > tolerance
        return "overwrite" if newer else "skip"
    if policy == "different":
        return "skip" if _same(source, existing, tolerance) else "overwrite"
    if policy == "resume":
        if (
            existing.kind is Kind.FILE
            and existing.size is not None
            and source.size is not None
            and existing.size < source.size
            and ctx.dst.capabilities.resume_write
        ):
            return "resume"
        return "skip" if _same(source, existing, tolerance) else "overwrite"
    if policy in ("skip", "overwrite", "rename"):
        return policy
    raise AlreadyExists(f"Unknown conflict decision {policy!r}")


def _stored_answer(ctx: CopyContext, job_id: int) -> str | None:
    return ctx.store.job_value(job_id, CONFLICT_ANSWER_KEY) if ctx.store is not None else None


def _answer(task: Task, ctx: CopyContext, source: Entry, existing: Entry) -> str:
    """``ask``: the job's "apply to all" answer if it has one, else the person's answer, else (no
    one to ask) a ConflictUnanswered failure that front ends count rather than list."""
    stored = _stored_answer(ctx, task.job_id)
    if stored:
        return stored
    if ctx.ask is None:
        raise ConflictUnanswered(
            f"{ctx.dst.display(existing.path)} exists and no one is there to ask: it differs from the source "
            f"(retry with {CHOOSE_POLICY_HINT}|resume)"
        )
    with _ASKING:
        stored = _stored_answer(ctx, task.job_id)  # answered for all while this question waited
        if stored:
            return stored
        reply = ctx.ask(Conflict(task, source, existing, ctx.dst.display(existing.path)))
        answer = reply if isinstance(reply, Answer) else Answer(reply)
        if answer.policy == "ask" or answer.policy not in CONFLICT_POLICIES:
            raise AlreadyExists(f"Unknown conflict decision {answer.policy!r}")
        if answer.for_all and ctx.store is not None:
            ctx.store.set_job_value(task.job_id, CONFLICT_ANSWER_KEY, answer.policy)
    return answer.policy


def _skip(ctx: CopyContext, source: Entry, reason: SkipReason, why: str) -> Outcome:
    ctx.accounting.file_finished("skipped", source.size or 0)
    return Outcome.skipped(reason, why)


def _make_link(task: Task, ctx: CopyContext, cancel: CancelToken) -> Outcome:
    target = task.extra or ""
    dst = task.dst
    existing = _stat_or_none(ctx.dst, dst)
    if existing is not None:
        if existing.kind is Kind.LINK and existing.link_target == target:
            return Outcome.skipped(SkipReason.IDENTICAL, "link already there")
        source = ctx.src.stat(task.src)
        decision = _decide(task, ctx, source, existing)
        if decision == "skip":
            return Outcome.skipped(SkipReason.POLICY, "skipped: destination exists")
        if decision == "rename":
            dst = _unique_name(ctx.dst, dst)
        elif existing.is_dir:
            raise AlreadyExists(f"A folder is in the way of link {ctx.dst.display(dst)}")
        else:
            ctx.dst.remove(dst)
    try:
        ctx.dst.symlink(target, dst)
    except NotFound:
        # Its folder's own task may still be waiting for another worker: make the folder here.
        ctx.dst.mkdir(ctx.dst.split(dst)[0], parents=True, exist_ok=True)
        ctx.dst.symlink(target, dst)
    return Outcome("done", Verification(Level.NONE, note="link"), dst=dst if dst != task.dst else None)


def _verify_existing(task: Task, ctx: CopyContext, source: Entry, existing: Entry, cancel: CancelToken) -> Outcome:
    """After a crash, a task may already have been renamed into place: check it rather than redo it."""
    algo = ctx.options.hash_algo
    if algo is None:
        ctx.accounting.add_bytes(source.size or 0)
        ctx.accounting.file_finished("done")
        return Outcome("done", unchecked(ctx.options.verify).with_note("finished before restart"))
    src_hash = ctx.src.hash(source.path, algo, cancel) if algo in ctx.src.capabilities.hashes else None
    dst_hash = ctx.dst.hash(existing.path, algo, cancel) if algo in ctx.dst.capabilities.hashes else None
    if src_hash is None or src_hash != dst_hash:
        raise ChecksumMismatch(f"{ctx.dst.display(existing.path)} differs from its source after restart")
    ctx.accounting.add_bytes(source.size or 0)
    ctx.accounting.file_finished("done")
    v = Verification(Level.CHECKSUM, algo, (Evidence.AFTER_RESTART,), f"{algo} match (checked after restart)")
    return Outcome("done", v, src_hash)


def _landed_in_doubt(
    task: Task, ctx: CopyContext, source: Entry, existing: Entry | None, cancel: CancelToken
) -> Outcome | None:
    """The previous attempt's rename into place was sent and its answer lost (it failed as
    :class:`CommitInDoubt`): the file under the name may be this task's own. It is only if this
    task's partial file (its name carries the task's id) is gone and the file there holds what the
    source holds, by a hash of both ends (the destination's own hash where it computes one, else
    read back here); size alone never says so. Then it counts as copied and checked; otherwise
    None, and the conflict policy applies to it as to anyone's file."""
    if task.error_kind != CommitInDoubt.kind or existing is None or existing.kind is not Kind.FILE:
        return None
    if existing.size != source.size:
        return None
    folder, name = ctx.dst.split(task.dst)
    if _stat_or_none(ctx.dst, ctx.dst.join(folder, temp_name(name, str(task.id)))) is not None:
        return None  # the rename was not done: the partial file is sent on as always
    algo = ctx.options.hash_algo or "sha256"  # checked even under --verify none: it decides whose file it is
    src_hash, _ = _hash_of(ctx.src, source.path, algo, cancel)
    dst_hash, how = _hash_of(ctx.dst, existing.path, algo, cancel)
    if src_hash != dst_hash:
        return None
    ctx.accounting.add_bytes(source.size or 0)
    ctx.accounting.file_finished("done")
    note = f"{algo} match (the rename's answer was lost; the file in place was {how})"
    return Outcome("done", Verification(Level.CHECKSUM, algo, (Evidence.AFTER_RESTART,), note), src_hash)


def _hash_of(backend: Backend, path: str, algo: str, cancel: CancelToken) -> tuple[str, str]:
    """``algo`` of the file at ``path``: the backend's own hash where it computes one, else the
    file read and hashed here. Returns the digest and how it was taken (for the record)."""
    if algo in backend.capabilities.hashes:
        try:
            return backend.hash(path, algo, cancel), f"hashed by {backend.scheme}'s own {algo}"
        except Unsupported:
            pass
    hasher = new_hasher(algo)
    view = memoryview(bytearray(CHUNK))
    with backend.open_read(path, 0) as f:
        while n := f.readinto(view):
            cancel.check()
            hasher.update(view[:n])
    return hasher.hexdigest(), "read back and hashed"


def _copy_file(task: Task, ctx: CopyContext, cancel: CancelToken) -> Outcome:
    try:
        source = ctx.src.stat(task.src)
    except NotFound:
        raise NotFound(f"Source vanished: {ctx.src.display(task.src)}") from None
    if not source.is_file:
        raise Unsupported(f"{ctx.src.display(task.src)} is no longer a regular file")

    dst = task.dst
    # Under --on-conflict overwrite a file that appears between this check and the commit would be
    # replaced anyway: the commit needs no no-overwrite guard (on S3 stores that ignore
    # If-None-Match, like rclone serve s3, that guard is one HEAD per file).
    overwrite = ctx.options.on_conflict == "overwrite"
    resume = ctx.dst.capabilities.resume_write
    existing = _stat_or_none(ctx.dst, dst)
    landed = _landed_in_doubt(task, ctx, source, existing, cancel)
    if landed is not None:
        return landed
    if existing is not None:
        if existing.is_dir:
            raise AlreadyExists(f"A folder is in the way of {ctx.dst.display(dst)}")
        tolerance = max(ctx.src.capabilities.mtime_precision, ctx.dst.capabilities.mtime_precision)
        same = _same(source, existing, tolerance)
        if task.interrupted and same:
            return _verify_existing(task, ctx, source, existing, cancel)
        if same and ctx.options.on_conflict not in ("overwrite", "rename"):
            # Same size and modification time (within both ends' precision): a re-run skips it
            # quietly, never asks. Only overwrite and rename say to write it all the same.
            return _skip(ctx, source, SkipReason.IDENTICAL, "already there, identical")
        decision = _decide(task, ctx, source, existing)
        if decision == "skip":
            why = "a symbolic link is in its place" if existing.kind is Kind.LINK else "destination exists"
            return _skip(ctx, source, SkipReason.POLICY, f"skipped: {why}")
        if decision == "rename":
            dst = _unique_name(ctx.dst, dst)
        elif decision == "overwrite":
            overwrite = True
        elif decision == "resume":
            # Adopt the shorter existing file as our partial file; it is verified as a whole.
            folder, name = ctx.dst.split(dst)
            ctx.dst.rename(dst, ctx.dst.join(folder, temp_name(name, str(task.id))), overwrite=True)

    outcome = _copy_or_link(task, ctx, source, dst, overwrite, resume, cancel)
    ctx.accounting.file_finished("done")
    return outcome if dst == task.dst else replace(outcome, dst=dst)


def _copy_or_link(
    task: Task, ctx: CopyContext, source: Entry, dst: str, overwrite: bool, resume: bool, cancel: CancelToken
) -> Outcome:
    """A file with other names in this job (hard links): the first name is copied, the others
    become other names of that copy where the destination can link; elsewhere each is copied
    and its record says it is no longer a link."""
    if source.inode is None or source.nlink < 2:
        return _copy_twice(task, ctx, source, dst, overwrite, resume, cancel)
    twin, first = ctx.hard_links.claim(source.inode, source.path)
    if first:
        earlier = _copied_before(task, ctx, source)
        if earlier is None:
            try:
                outcome = _copy_twice(task, ctx, source, dst, overwrite, resume, cancel)
                twin.dst, twin.outcome = dst, outcome
            finally:
                ctx.hard_links.settle(source.inode, twin)
            return outcome
        twin.dst, twin.outcome = earlier
        ctx.hard_links.settle(source.inode, twin)
    return _link_to_twin(task, ctx, source, twin, dst, overwrite, resume, cancel)


def _copied_before(task: Task, ctx: CopyContext, source: Entry) -> tuple[str, Outcome] | None:
    """Another name of this file that an earlier run of this job copied (the run stopped, or this
    name failed then): where it is and how it was checked, if it is still there as copied."""
    if ctx.store is None or not task.extra or not ctx.dst.capabilities.hard_links:
        return None
    earlier = ctx.hard_links.copied_before(ctx.store, task.job_id, task.extra)
    if earlier is None or earlier.id == task.id:
        return None
    landed = _stat_or_none(ctx.dst, earlier.dst)
    if landed is None or landed.kind is not Kind.FILE or landed.size != source.size:
        return None
    return earlier.dst, Outcome("done", earlier.verification or NOT_VERIFIED, earlier.hash)


def _link_to_twin(
    task: Task,
    ctx: CopyContext,
    source: Entry,
    twin: _Twin,
    dst: str,
    overwrite: bool,
    resume: bool,
    cancel: CancelToken,
) -> Outcome:
    """Another name of a file this job copies: a link to that copy, or a copy of its own (said)."""
    if ctx.dst.capabilities.hard_links:
        while not twin.done.wait(0.2):  # its first name is being copied right now
            cancel.check()
        if twin.dst is not None and twin.outcome is not None:
            try:
                ctx.dst.hard_link(twin.dst, dst, overwrite=overwrite)
            except NotFound:  # its folder's own task may still be waiting for another worker
                ctx.dst.mkdir(ctx.dst.split(dst)[0], parents=True, exist_ok=True)
                ctx.dst.hard_link(twin.dst, dst, overwrite=overwrite)
            ctx.accounting.add_bytes(source.size or 0)
            v = twin.outcome.verification.with_note(f"a hard link to {ctx.dst.display(twin.dst)}, as at the source")
            return Outcome("done", v, twin.outcome.hash, not_kept=twin.outcome.not_kept)
        why = f"{ctx.src.display(twin.src)}, another name of this file, was not copied"
    else:
        why = f"{ctx.dst.scheme} cannot make hard links"
    outcome = _copy_twice(task, ctx, source, dst, overwrite, resume, cancel)
    note = f"a hard link of {ctx.src.display(twin.src)} at the source, copied as a file of its own: {why}"
    return replace(
        outcome, verification=outcome.verification.with_note(note), not_kept=(*outcome.not_kept, NotKept.HARD_LINK)
    )


def _refused(
    ctx: CopyContext, source: Entry, why: str, lost: tuple[NotKept, ...], notes: list[str]
) -> tuple[tuple[NotKept, ...], list[str]]:
    """The destination refused to set the time and permission bits it was given at commit."""
    more: list[NotKept] = []
    names: list[str] = []
    if ctx.options.preserve_mtime:
        more.append(NotKept.MTIME)
        names.append("modification time")
    if source.mode is not None and ctx.options.preserve_permissions:
        more.append(NotKept.PERMISSIONS)
        names.append("permissions")
    what = " and ".join(names) or "attributes"
    return (*lost, *(k for k in more if k not in lost)), [*notes, f"{what} not kept: {why}"]


def _copy_twice(
    task: Task, ctx: CopyContext, source: Entry, dst: str, overwrite: bool, resume: bool, cancel: CancelToken
) -> Outcome:
    try:
        return _transfer(task, ctx, source, dst, overwrite, resume, cancel)
    except ChecksumMismatch:
        # Once more from zero: a flipped bit in transit should not fail an overnight run.
        return _transfer(task, ctx, source, dst, overwrite, False, cancel)


def _open_writer(ctx: CopyContext, dst: str, source: Entry, token: str, resume: bool, readback: str | None) -> Writer:
    kw: dict[str, Any] = {}
    if ctx.dst.keeps_resume_state and ctx.store is not None and token.isdigit():
        kw["resume_slot"] = _TaskSlot(ctx.store, int(token))
    try:
        return ctx.dst.open_write(dst, size=source.size, token=token, resume=resume, readback=readback, **kw)
    except NotFound:
        # The planner emits folders first, but workers run in parallel: make the parent here.
        ctx.dst.mkdir(ctx.dst.split(dst)[0], parents=True, exist_ok=True)
        return ctx.dst.open_write(dst, size=source.size, token=token, resume=resume, readback=readback, **kw)


class _Progress:
    """Bytes this attempt has counted, so a failed attempt rewinds them rather than lies. They
    are also the file's bytes in flight for its job's row (until the scheduler settles it)."""

    __slots__ = ("_accounting", "_job", "_task", "counted")

    def __init__(self, accounting: Accounting, job: int, task: int) -> None:
        self._accounting, self._job, self._task, self.counted = accounting, job, task, 0
        accounting.begin(job, task)

    def __call__(self, n: int) -> None:
        self.counted += n
        self._accounting.add_bytes(n, self._job, self._task)

    def resumed(self, n: int) -> None:
        """The partial file's ``n`` bytes, already there: in flight, but not speed."""
        if n:
            self.counted += n
            self._accounting.add_resumed(n, self._job, self._task)

    def rewind(self) -> None:
        # The run's total only: what the file holds in flight is settled with its result.
        self._accounting.add_bytes(-self.counted)


@dataclass
class _Streamed:
    """What a strategy moved: the byte count, the stream's hash, the source's evidence check."""

    copied: int
    src_hash: str | None = None
    check: EvidenceCheck | None = None


def _transfer(
    task: Task, ctx: CopyContext, source: Entry, dst: str, overwrite: bool, resume: bool, cancel: CancelToken
) -> Outcome:
    """One attempt: a strategy moves the bytes (server-side, or streamed: chunked, hash-feeding or
    buffer-lending), then verification and the commit happen in one place."""
    opts = ctx.options
    algo = opts.hash_algo
    readback = algo if algo and ctx.dst.capabilities.readback else None
    size = source.size or 0
    writer = _open_writer(ctx, dst, source, str(task.id), resume, readback)
    if writer.offset > size:  # a partial longer than the source: the source changed; start over
        writer.abort(keep_partial=False)
        writer = _open_writer(ctx, dst, source, str(task.id), False, readback)
    progress = _Progress(ctx.accounting, task.job_id, task.id)
    try:
        with writer:
            lost, notes = keep_attributes(ctx, source, writer)
            copier = ctx.src.features.server_copier
            if algo is None and copier is not None and ctx.src.endpoint == ctx.dst.endpoint:
                moved = _server_side(copier, ctx, source, writer, progress, cancel)
            else:
                moved = _streamed(ctx, source, writer, progress, cancel)
            verification = _verify_and_commit(ctx, source, dst, writer, moved, overwrite)
            if writer.attributes_refused:
                lost, notes = _refused(ctx, source, writer.attributes_refused, lost, notes)
    except BaseException:
        progress.rewind()
        raise
    if opts.verify != "none" and verification.level is not Level.CHECKSUM:
        _check_landed_size(ctx, dst, size)
    if source.name != ctx.src.split(source.path)[1]:  # the backend mapped it (its name note says from what)
        lost = (*lost, NotKept.NAME)
    return Outcome("done", verification.with_note("; ".join(notes)), moved.src_hash, not_kept=lost)


def _server_side(
    copier: ServerCopier, ctx: CopyContext, source: Entry, writer: Writer, progress: _Progress, cancel: CancelToken
) -> _Streamed:
    progress.resumed(writer.offset)
    before = progress.counted
    copier.server_copy(source.path, writer, _limited(progress, ctx, cancel), cancel)
    return _Streamed(writer.offset + progress.counted - before)


def _streamed(ctx: CopyContext, source: Entry, writer: Writer, progress: _Progress, cancel: CancelToken) -> _Streamed:
    """Read the source once, hash those bytes as they pass (with the source store's evidence
    check beside), and write them; a resumed partial's prefix is re-read into the hash first."""
    algo = ctx.options.hash_algo
    # The source's own recorded hash of this algorithm (Ferry's SHA-256 stored with an S3 object)
    # is compared with the stream's hash anyway: no second pass over the same bytes to check it.
    check = _source_check(ctx, source) if algo and not source.hashes.get(algo) else None
    hasher: Hasher | None = new_hasher(algo) if algo else None
    if hasher is not None and check is not None:
        hasher = _Tee(hasher, check)  # the source's evidence sees exactly the bytes hashed
    if hasher is not None:
        # A writer whose destination check is its own (S3: Content-MD5 and ETags) may take this
        # stream hash rather than hashing the same bytes a second time.
        writer.share_stream_hasher(hasher)
    chunk = ctx.limiters.chunk_hint(CHUNK) if ctx.limiters else CHUNK
    # A buffer no bigger than the file needs (one byte over, so the read that finds the end is
    # not a second full-size one): allocating and zeroing 1 MiB for each 4 KiB file was a sixth
    # of the engine's CPU time on small files.
    start = writer.offset
    view = memoryview(bytearray(min(chunk, max(SMALL_BUFFER, (source.size or 0) - start + 1))))
    if start and (hasher is not None or not ctx.src.capabilities.range_read):
        _read_prefix(ctx, source, writer, hasher, view[:chunk], cancel)
    progress.resumed(start)
    copied = start + _stream_body(ctx, source, writer, hasher, view, chunk, progress, cancel)
    return _Streamed(copied, hasher.hexdigest() if hasher is not None else None, check)


def _read_prefix(
    ctx: CopyContext, source: Entry, writer: Writer, hasher: Hasher | None, view: memoryview, cancel: CancelToken
) -> None:
    """Resuming: the prefix already on the destination still has to enter the hash."""
    start = writer.offset
    got = 0
    with ctx.src.open_read(source.path, 0, start) as f:
        while got < start:
            cancel.check()
            n = f.readinto(view[: min(len(view), start - got)])
            if not n:
                break
            if hasher is not None:
                hasher.update(view[:n])
            writer.feed_prefix(view[:n])
            got += n
    if got != start:
        raise Transient(f"Source shrank while resuming: {ctx.src.display(source.path)}")


def _stream_body(
    ctx: CopyContext,
    source: Entry,
    writer: Writer,
    hasher: Hasher | None,
    view: memoryview,
    chunk: int,
    progress: _Progress,
    cancel: CancelToken,
) -> int:
    start = writer.offset
    with ctx.src.open_read(source.path, start) as f:
        declared = reader_features(f)
        # A reader that hashes what it returns, in order, on its own threads (S3's parallel
        # ranges) takes the hasher: hashing then overlaps this loop's writes.
        fed = hasher is not None and declared.feeds_hasher and f.feed_hasher(hasher)  # type: ignore[attr-defined]
        loop_hasher = None if fed else hasher
        # Such a reader may also lend its own buffers: written as they are, not copied into ours
        # (the bandwidth limiter keeps the chunked loop, to pace evenly).
        lend = declared.lends_buffers and loop_hasher is None and not ctx.limiters
        if hasher is not None and not start and (loop_hasher is not None or lend):
            # What is written is exactly what was hashed (here, or by the reader into the buffers
            # it lends): a writer that reads back may compare each write with what landed
            # instead of hashing the file a second time.
            writer.compare_writes(hasher)
        if lend:
            return _write_lent(f.next_view, writer.write, chunk, cancel, progress)  # type: ignore[attr-defined]
        return _write_loop(f, writer, view, loop_hasher, ctx.limiters, progress, cancel)


def _write_loop(
    f: Reader,
    writer: Writer,
    view: memoryview,
    hasher: Hasher | None,
    limiters: Limiters | None,
    progress: _Progress,
    cancel: CancelToken,
) -> int:
    readinto, write = f.readinto, writer.write
    total = 0
    while True:
        cancel.check()
        n = readinto(view)
        if not n:
            return total
        chunk_view = view[:n]
        if hasher is not None:
            hasher.update(chunk_view)
        if limiters:
            limiters.consume(n, cancel)
        write(chunk_view)
        total += n
        progress(n)


def _verify_and_commit(
    ctx: CopyContext, source: Entry, dst: str, writer: Writer, moved: _Streamed, overwrite: bool
) -> Verification:
    """Sizes, the destination's check, the source store's evidence, then the commit: the file
    appears under its name only when nothing disagreed."""
    opts = ctx.options
    algo = opts.hash_algo
    size = source.size or 0
    dst_hash = writer.finish()
    if moved.copied != size:
        raise Transient(
            f"Source changed size during the copy ({size} -> {moved.copied} bytes): {ctx.src.display(source.path)}"
        )
    if algo is not None and dst_hash is not None and dst_hash != moved.src_hash:
        writer.abort(keep_partial=False)
        raise ChecksumMismatch(
            f"Checksum mismatch for {ctx.dst.display(dst)}: {algo} of the source {moved.src_hash}, "
            f"destination {dst_hash}"
        )
    from_source = _source_side(ctx, source, algo, moved.src_hash, moved.check, writer)
    writer.commit(overwrite=overwrite, mtime=source.own_mtime if opts.preserve_mtime else None)
    verification = _landed_side(opts.verify, algo, dst_hash, writer, from_source)
    name_note = source.meta.get("name_note")
    return verification.with_note(name_note) if name_note else verification


def _check_landed_size(ctx: CopyContext, dst: str, size: int) -> None:
    """No checksum of what landed: at least the size of what now stands under the final name must
    be right."""
    landed = _stat_or_none(ctx.dst, dst)
    if landed is None or landed.size != size:
        if landed is not None:
            ctx.dst.remove(dst)  # ours, just written, and wrong: never leave it under the final name
        raise ChecksumMismatch(
            f"{ctx.dst.display(dst)} has {landed.size if landed else 'no'} bytes after the copy, expected {size}"
        )


def _source_check(ctx: CopyContext, source: Entry) -> EvidenceCheck | None:
    """The source store's own evidence about this object, fed the stream (None: the source is not
    a store that keeps any, such as a local disk or an SSH host, whose stream is the file)."""
    evidence = ctx.src.features.source_evidence
    return evidence.evidence_for(source) if evidence is not None else None


def _source_side(
    ctx: CopyContext,
    source: Entry,
    algo: str | None,
    src_hash: str | None,
    check: EvidenceCheck | None,
    writer: Writer,
) -> Verification | None:
    """Were the bytes read what the source holds? Raises on a mismatch (before anything is
    committed); returns the evidence for it, or a Verification capped at size saying why not."""
    if algo is None:
        return None
    evidence: list[Evidence] = []
    notes: list[str] = []
    recorded = source.hashes.get(algo)
    if recorded:
        if recorded != src_hash:
            # The source kept a hash from when it was written (S3 metadata): its bytes changed since.
            writer.abort(keep_partial=False)
            raise ChecksumMismatch(
                f"{ctx.src.display(source.path)} no longer matches the {algo} recorded when it was "
                f"stored ({recorded}); read {src_hash}"
            )
        evidence.append(Evidence.SOURCE_RECORD)
        notes.append("matches the source's recorded checksum")
    if check is not None:
        got = check.result()
        if got.evidence is not None and not got.matched:
            writer.abort(keep_partial=False)
            raise ChecksumMismatch(
                f"{ctx.src.display(source.path)} arrived different from what the server holds"
                + (f" ({got.note})" if got.note else "")
            )
        if got.evidence is not None:
            evidence.append(got.evidence)
            if got.note:
                notes.append(got.note)
        elif not recorded:
            return Verification(Level.SIZE, algo, (), got.note or "the source keeps no checksum to compare with")
    return Verification(Level.CHECKSUM, algo, tuple(evidence), "; ".join(notes))


def _landed_side(
    verify: str, algo: str | None, dst_hash: str | None, writer: Writer, from_source: Verification | None
) -> Verification:
    """Combine what the destination confirmed (read after commit) with the source side."""
    if algo is None:
        return unchecked(verify)
    note = writer.verified_note
    if dst_hash is None or not writer.evidence:
        why = note or "the destination offers no independent check"
        return Verification(Level.SIZE, algo, (), f"size only ({why})")
    head = f"{algo} match" + (f" ({note})" if note else "")
    v = Verification(Level.CHECKSUM, algo, writer.evidence, head)
    if from_source is None:
        return v
    if from_source.level is not Level.CHECKSUM:
        return Verification(Level.SIZE, algo, writer.evidence, f"size only ({from_source.note})")
    v = v.with_evidence(*from_source.evidence)
    return v.with_note(from_source.note) if from_source.note else v


def _write_lent(
    views: Callable[[], memoryview],
    write: Callable[[memoryview], None],
    chunk: int,
    cancel: CancelToken,
    on_bytes: Callable[[int], None],
) -> int:
    """Write what a reader lends (its own buffers, each valid until the next call), in pieces of
    ``chunk`` so progress and the read-back move as they do for the copy's own buffer."""
    total = 0
    while True:
        cancel.check()
        lent = views()
        if not lent:
            return total
        for lo in range(0, len(lent), chunk):
            piece = lent[lo : lo + chunk]
            write(piece)
            total += len(piece)
            on_bytes(len(piece))


def _limited(on_bytes: Callable[[int], None], ctx: CopyContext, cancel: CancelToken) -> Callable[[int], None]:
    if not ctx.limiters:
        return on_bytes

    def both(n: int) -> None:
        ctx.limiters.consume(n, cancel)
        on_bytes(n)

    return both
