"""One-way sync: the comparison becomes one verified job in the queue, then (``--delete``) what
the source no longer has is removed from the destination, only once every copy verified.

:func:`plan_sync` runs :func:`ferry.transfers.compare.compare` over the whole of both trees
before anything changes, so a source listing that fails stops the sync with nothing done, and the
safety checks (:func:`check_deletions`: an empty source, more deletions than allowed) see the
whole plan. :func:`create_sync_job` records the copies as an already planned job
(``jobs.create_job``, then its tasks), so an interrupted sync is finished by ``ferry queue run``
like any copy; its deletions are made by :func:`apply_deletions` only after the job ended
``done`` with every file verified, each entry re-checked just before it goes (one that changed
since the comparison is kept). A sync interrupted before its deletions makes them when run
again: the comparison then finds the copies in place.

The plan holds the differences (tasks and deletions), never the identical files: its memory is
proportional to what changed, the comparison's to the depth of the trees.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum

from ferry.backends.base import Backend, Entry, Kind
from ferry.backends.registry import BackendPool
from ferry.core.address import Address, parse_address
from ferry.core.cancel import CancelToken
from ferry.core.errors import NotFound, UsageError
from ferry.core.outcomes import SkipReason
from ferry.transfers.compare import By, Item, Side, State, Totals, compare, open_side, sorted_walk
from ferry.transfers.delegated import find_delegation, globus_site_route
from ferry.transfers.options import JobOptions, Route
from ferry.transfers.planner import Root, folds_case, mtime_us, unsafe_reason
from ferry.transfers.store import NewTask, Store, runner_id
from ferry.transfers.sync_delete import (
    DELETIONS_KEY,
    Deleted,
    delete_entries,
    deletion_refusal,
    deletions_made,
    pending_deletions,
    run_pending_deletions,
)

SYNC_KEY = "sync"  # job value: what the sync will do after its copies (for people and `queue show`)
# Job value of a sync recorded by 'ferry queue add --sync': compared when the queue runs it.
SPEC_KEY = "sync-spec"
_BATCH = 2000


class Action(StrEnum):
    COPY = "copy"  # only in the source
    REPLACE = "replace"  # in both, different
    DELETE = "delete"  # only in the destination (with --delete)


TaskSink = Callable[[list[NewTask]], None]


@dataclass
class SyncPlan:
    src: Side
    dst_backend: Backend
    dst_root: str
    dst_exists: bool
    # The copies: handed to ``sink`` in batches as the comparison goes (into the job), else kept.
    sink: TaskSink | None = None
    tasks: list[NewTask] = field(default_factory=list)
    record_actions: bool = False
    actions: list[tuple[Action, str, int | None]] = field(default_factory=list)  # for the dry run
    deletions: list[Entry] = field(default_factory=list)  # walk order: a folder before its contents
    totals: Totals = field(default_factory=Totals)
    src_files: int = 0
    dst_files: int = 0
    copies: int = 0  # files (and links) to copy that the destination does not have
    replaces: int = 0  # files to copy over a different one
    bytes: int = 0
    tasks_total: int = 0
    # Destination paths copied, casefolded: kept only where the destination folds case.
    copied_folded: set[str] | None = None

    @property
    def delete_files(self) -> int:
        return sum(1 for e in self.deletions if e.kind is not Kind.DIR)

    def add_task(self, task: NewTask) -> None:
        self.tasks.append(task)
        self.tasks_total += 1
        if self.copied_folded is not None:
            self.copied_folded.add(task.dst.casefold())
        if self.sink is not None and len(self.tasks) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if self.sink is not None and self.tasks:
            self.sink(self.tasks)
            self.tasks = []


def plan_sync(
    pool: BackendPool,
    src: Address,
    dst: Address,
    *,
    by: By,
    delete: bool,
    cancel: CancelToken | None = None,
    sink: TaskSink | None = None,
    record_actions: bool = False,
) -> SyncPlan:
    """Compare the whole of both trees and decide every copy and deletion; changes nothing but
    what ``sink`` does with the copies (batches of tasks, as they are decided). Without a sink the
    tasks are kept in ``plan.tasks``; ``record_actions`` keeps one line per file for a dry run."""
    src_side, dst_side, exists = sides(pool, src, dst)
    dst_b = dst_side.backend
    plan = SyncPlan(src_side, dst_b, dst.path, exists, sink=sink, record_actions=record_actions)
    if delete and folds_case(dst_b, dst.path):
        plan.copied_folded = set()
    root_rel = dst_b.split(dst.path)[1] or "sync"
    if exists:
        items = compare(src_side, dst_side, by=by, recursive=True, cancel=cancel, totals=plan.totals)
    else:
        items = _all_new(src_side, cancel)
    for item in items:
        plan.totals.add(item)
        _count(plan, item)
        _decide(plan, item, root_rel, delete)
    plan.flush()
    if plan.copied_folded is not None:
        _keep_case_twins(plan, plan.copied_folded)
    return plan


def sides(pool: BackendPool, src: Address, dst: Address) -> tuple[Side, Side, bool]:
    """Check a sync request (UsageError, nothing changed): the source and destination as sides, and
    whether the destination exists yet."""
    src_b, dst_b = pool.get(src), pool.get(dst)
    src_side = open_side(src_b, src.path, "Source")
    if not src_side.is_dir:
        raise UsageError(f"Sync works on folders: {src} is a file (copy it with 'ferry cp')")
    if src_b.endpoint == dst_b.endpoint and _overlap(dst_b, src.path, dst.path):
        raise UsageError(f"{src} and {dst} overlap: sync needs two separate folders")
    try:
        dst_side = open_side(dst_b, dst.path, "Destination")
        exists = True
    except UsageError:
        if _exists(dst_b, dst.path):
            raise
        dst_side, exists = Side(dst_b, dst.path, True), False
    if not dst_side.is_dir:
        raise UsageError(f"Destination {dst} is a file: sync needs a folder")
    return src_side, dst_side, exists


def _all_new(side: Side, cancel: CancelToken | None) -> Iterator[Item]:
    for key, entry in sorted_walk(side.backend, side.root, cancel=cancel):
        yield Item("/".join(key), State.ONLY_A, entry, None)


def _exists(backend: Backend, path: str) -> bool:
    try:
        backend.stat(path)
    except NotFound:
        return False
    return True


def _overlap(backend: Backend, a: str, b: str) -> bool:
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    sep = os.sep if backend.scheme == "local" else "/"
    return a == b or a.startswith(b.rstrip(sep) + sep) or b.startswith(a.rstrip(sep) + sep)


def _count(plan: SyncPlan, item: Item) -> None:
    if item.a is not None and item.a.kind is not Kind.DIR:
        plan.src_files += 1
    if item.b is not None and item.b.kind is not Kind.DIR:
        plan.dst_files += 1


def _decide(plan: SyncPlan, item: Item, root_rel: str, delete: bool) -> None:
    if item.state is State.ONLY_B:
        if delete and item.b is not None:
            plan.deletions.append(item.b)
            if item.b.kind is not Kind.DIR and plan.record_actions:
                plan.actions.append((Action.DELETE, item.rel, item.b.size))
        return
    if item.state is State.SAME or item.a is None:
        return
    if item.state is State.DIFFERENT and item.a.kind is Kind.DIR:
        return  # a folder where the destination has a file: the copies into it fail, saying why
    # (A file where the destination has a folder is planned too: its copy fails, so no deletion follows.)
    action = Action.COPY if item.state is State.ONLY_A else Action.REPLACE
    task = _task(plan, item, item.a, f"{root_rel}/{item.rel}")
    plan.add_task(task)
    if item.a.kind is Kind.DIR or task.state != "queued":
        return
    if action is Action.COPY:
        plan.copies += 1
    else:
        plan.replaces += 1
    plan.bytes += item.a.size or 0
    if plan.record_actions:
        plan.actions.append((action, item.rel, item.a.size))


def _task(plan: SyncPlan, item: Item, e: Entry, rel: str) -> NewTask:
    dst_b = plan.dst_backend
    dst = dst_b.join(plan.dst_root, *item.rel.split("/"))
    mt = mtime_us(e.mtime)
    refused = _refusal(dst_b, item.rel, e)
    if refused is not None:
        why, note = refused
        return NewTask("file", e.path, dst, rel, e.size, mt, state="skipped", error=note, skip_reason=why)
    if e.kind is Kind.FILE:
        return NewTask("file", e.path, dst, rel, e.size, mt)
    if e.kind is Kind.DIR:
        return NewTask("dir", e.path, dst, rel, None, mt)
    if e.kind is Kind.LINK and dst_b.capabilities.symlinks and e.link_target is not None:
        return NewTask("link", e.path, dst, rel, None, mt, e.link_target)
    what = "symbolic link: the destination cannot store links" if e.kind is Kind.LINK else "special file"
    return NewTask(
        e.kind.value, e.path, dst, rel, None, mt, state="skipped", error=what, skip_reason=SkipReason.UNSUPPORTED_TYPE
    )


_KNOWN_SKIPS = {r.value: r for r in SkipReason}


def _refusal(dst_b: Backend, rel: str, e: Entry) -> tuple[SkipReason, str] | None:
    """Why a name is left out, as the planner would: refused by the source's listing itself (S3:
    a key that is also a folder, ...), one that would leave the destination folder, or one the
    destination cannot hold (S3 keys are UTF-8: a local name that is not)."""
    skip = e.meta.get("skip")
    if skip:
        return _KNOWN_SKIPS.get(skip, SkipReason.UNSAFE_NAME), e.meta.get("name_note") or skip
    for name in rel.split("/"):
        reason = unsafe_reason(name)
        if reason:
            return SkipReason.UNSAFE_NAME, reason
        if dst_b.scheme == "s3" and not _is_text(name):
            return SkipReason.UNREPRESENTABLE, f"{name!r} is not valid UTF-8, which an S3 key must be"
    return None


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _keep_case_twins(plan: SyncPlan, copied: set[str]) -> None:
    """On a destination that does not tell case apart, ``data.txt`` and a copied ``Data.txt`` are
    one file: deleting the first would delete the copy."""
    plan.deletions = [e for e in plan.deletions if e.path.casefold() not in copied]


# ---------------------------------------------------------------- safety


def check_deletions(plan: SyncPlan, max_delete: int | None) -> None:
    """Refuse (UsageError, nothing changed) a deletion that looks like a wrong path."""
    n = plan.delete_files
    if not n:
        return
    if plan.src_files == 0:
        raise UsageError(
            f"The source {plan.src.backend.display(plan.src.root)} is empty: refusing to delete all {n:,} "
            "file(s) of the destination (sync without --delete, or remove them yourself)"
        )
    if max_delete is not None:
        if n > max_delete:
            raise UsageError(
                f"Sync would delete {n:,} file(s), more than --max-delete {max_delete:,}: nothing was changed"
            )
        return
    if n * 2 > plan.dst_files:
        raise UsageError(
            f"Sync would delete {n:,} of the destination's {plan.dst_files:,} file(s), more than half: nothing was "
            f"changed (check the paths; to allow it, add --max-delete {n})"
        )


def check_backup_dir(plan: SyncPlan, backup: Address | None) -> None:
    """The backup folder must be on the destination's site and outside both trees."""
    if backup is None:
        return
    b = plan.dst_backend
    if backup.endpoint != b.endpoint:
        raise UsageError(f"--backup-dir must be on the destination's site ({b.endpoint}), not {backup}")
    if _overlap(b, backup.path, plan.dst_root):
        raise UsageError(f"--backup-dir {b.display(backup.path)} must not be inside the destination (or hold it)")
    if plan.src.backend.endpoint == b.endpoint and _overlap(b, backup.path, plan.src.root):
        raise UsageError(f"--backup-dir {b.display(backup.path)} must not be inside the source (or hold it)")


# ---------------------------------------------------------------- the job


def new_sync_job(store: Store, src: Address, dst: Address, plan_root: Root, options: JobOptions) -> int:
    """An empty sync job, already counted as planned and held paused while the comparison adds its
    copies (:func:`task_sink`): a sync killed while comparing leaves a paused job holding only real
    differences, never a job that would walk and copy the whole tree."""
    from ferry.transfers.jobs import create_job

    job_id = create_job(store, [src], dst, [plan_root], options, state="paused")
    store.set_job_state(job_id, "paused", "sync: comparing (run the same 'ferry sync' again if this stays)")
    store.mark_planned(job_id)
    return job_id


def sync_root(pool: BackendPool, src: Address, dst: Address) -> Root:
    src_b, dst_b = pool.get(src), pool.get(dst)
    return Root(src_b, src_b.stat(src.path), dst_b, dst.path, dst_b.split(dst.path)[1] or "sync")


def task_sink(store: Store, job_id: int) -> TaskSink:
    def add(batch: list[NewTask]) -> None:
        store.add_tasks(job_id, batch)

    return add


def start_sync_job(store: Store, job_id: int, info: dict[str, object], plan: SyncPlan | None = None) -> None:
    """The comparison is complete and allowed: the job is this process's to run now. Its
    deletions (``plan.deletions``) are kept with it, for whichever process finishes it."""
    store.set_job_value(job_id, SYNC_KEY, json.dumps(info, sort_keys=True))
    if plan is not None:
        backup = info.get("backup_dir")
        save_deletions(store, job_id, plan, backup if isinstance(backup, str) else None)
    store.set_job_state(job_id, "running", runner=runner_id(), heartbeat=time.time())


def save_deletions(store: Store, job_id: int, plan: SyncPlan, backup: str | None) -> None:
    """Keep the plan's deletions with the job, for whichever process finishes it (sync_delete)."""
    if plan.deletions:
        saved = {
            "root": plan.dst_root,
            "backup": backup,
            "entries": [[e.path, e.kind.value, e.size, e.exact_mtime_ns, e.meta.get("etag")] for e in plan.deletions],
        }
        store.set_job_value(job_id, DELETIONS_KEY, json.dumps(saved))


def add_sync_job(
    pool: BackendPool,
    store: Store,
    src: Address,
    dst: Address,
    options: JobOptions,
    *,
    by: By,
    delete: bool,
    max_delete: int | None = None,
    backup: Address | None = None,
) -> int:
    """A sync recorded to run later ('ferry queue add --sync'): checked now (bad input, no job),
    compared when the queue runs it (:func:`plan_queued_sync`), so a sync queued for the night
    copies what differs then, not what differed when it was queued."""
    from ferry.transfers.jobs import create_job

    sides(pool, src, dst)
    if _globus_delegated(pool, src, dst, options):
        raise UsageError(
            "A queued sync between Globus collections is not there yet (it would relay every file through Ferry): "
            "run 'ferry sync', which hands the differences to one Globus task"
        )
    if backup is not None and (backup.scheme, backup.host) != (dst.scheme, dst.host):
        raise UsageError("--backup-dir must be on the destination's site")
    # Its copies are found when it runs, by Ferry's own comparison: no route may take the job
    # whole before that (a service would copy every file, not the differences).
    if options.route is Route.DIRECT:
        raise UsageError("--route direct: a queued sync compares when it runs and relays; 'ferry sync' can go direct")
    options = replace(options, route=Route.RELAY)
    job_id = create_job(store, [src], dst, [sync_root(pool, src, dst)], options, state="queued")
    spec = {
        "src": str(src),
        "dst": str(dst),
        "by": by.value,
        "delete": delete,
        "max_delete": max_delete,
        "backup_dir": backup.path if backup is not None else None,
    }
    store.set_job_value(job_id, SPEC_KEY, json.dumps(spec, sort_keys=True))
    store.set_job_value(job_id, SYNC_KEY, json.dumps({"delete": delete, "backup_dir": spec["backup_dir"]}))
    return job_id


def is_queued_sync(store: Store, job_id: int) -> bool:
    return store.job_value(job_id, SPEC_KEY) is not None


def plan_queued_sync(
    pool: BackendPool, store: Store, job_id: int, sink: TaskSink, cancel: CancelToken | None = None
) -> str | None:
    """Plan a queued sync as the queue runs it (the scheduler's planning thread): compare now, hand
    the copies to ``sink`` as they are found, and keep the deletions with the job. Nobody is there
    to ask, so a deletion that looks like a wrong path (an empty source, more than half of the
    destination, more than --max-delete) is not made and the copies go on; the returned sentence
    says so (for the job's message), else None."""
    spec = json.loads(store.job_value(job_id, SPEC_KEY) or "{}")
    src, dst = parse_address(spec["src"]), parse_address(spec["dst"])
    plan = plan_sync(pool, src, dst, by=By(spec["by"]), delete=bool(spec["delete"]), cancel=cancel, sink=sink)
    backup = spec.get("backup_dir")
    try:
        check_deletions(plan, spec.get("max_delete"))
        if backup is not None:
            check_backup_dir(plan, replace(dst, path=backup))
    except UsageError as exc:
        return f"nothing will be deleted: {exc.message}"
    save_deletions(store, job_id, plan, backup)
    return None


# Ferry's comparison (--by) as a Globus sync level: "mtime" copies where the size differs or the
# source is newer; "checksum" where the checksums differ.
GLOBUS_SYNC_LEVELS = {By.SIZE_MTIME: "mtime", By.CHECKSUM: "checksum"}


def _globus_delegated(pool: BackendPool, src: Address, dst: Address, options: JobOptions) -> bool:
    """Whether this sync's bytes would go as one Globus task (a delegation covers the pair)."""
    if options.route is Route.RELAY or "globus" not in (src.scheme, dst.scheme):
        return False
    return find_delegation(pool.get(src), pool.get(dst)) is not None


def _globus_sites(pool: BackendPool, src: Address, dst: Address, options: JobOptions) -> bool:
    """Whether this sync runs as one Globus task between saved SSH/S3 sites naming the collections
    that serve them (the Globus route, see backends/globus/site_route.py)."""
    if options.route is Route.RELAY or "globus" in (src.scheme, dst.scheme) or src.scheme == dst.scheme == "s3":
        return False  # (between buckets the store's own copy of the differences comes first)
    return globus_site_route(pool.get(src), pool.get(dst)) is not None


def sync_route(src: Address, dst: Address, options: JobOptions, *, globus: bool = False) -> JobOptions:
    """The options a sync job runs with: S3 server-side copy goes direct, as it copies the sync's
    own rows, and so does a sync between Globus collections (``globus``: one task with the sync
    level of --by, so the service copies only the differences). A direct route that walks the
    whole tree without comparing (a host's curl) would copy everything, so ``auto`` relays
    elsewhere and ``direct`` is refused."""
    if src.scheme == dst.scheme == "s3" or options.route is Route.RELAY or globus:
        return options
    if options.route is Route.DIRECT:
        raise UsageError(
            "--route direct: sync goes direct only between S3 buckets of one endpoint or Globus collections"
        )
    return replace(options, route=Route.RELAY)


def queue_sync(
    pool: BackendPool,
    store: Store,
    src: Address,
    dst: Address,
    *,
    by: By,
    options: JobOptions,
    delete: bool = False,
    info: dict[str, object] | None = None,
    check: Callable[[SyncPlan], None] | None = None,
    cancel: CancelToken | None = None,
) -> tuple[SyncPlan, int | None]:
    """The one path from a sync request to its job, for ``ferry sync`` and the window: the request
    is checked (UsageError, no job), the job is made paused, the comparison adds its copies as it
    finds them, ``check`` may refuse the whole plan (the job is removed), and a plan with copies
    is started as this process's job. (plan, job id), or (plan, None) when nothing is to copy."""
    sides(pool, src, dst)  # bad input before the job exists
    globus = _globus_delegated(pool, src, dst, options) or _globus_sites(pool, src, dst, options)
    options = sync_route(src, dst, options, globus=globus)
    new = new_sync_job(store, src, dst, sync_root(pool, src, dst), options)
    if globus:
        # One Globus task over the whole tree, recursive, copying what its sync level finds
        # different (the comparison's rows are what Ferry expects it to copy); deletions stay
        # Ferry's, made after the task verified every file (never delete_destination_extra).
        from ferry.backends.globus.tasks import KEY_OPTIONS

        store.set_job_value(new, KEY_OPTIONS, json.dumps({"sync_level": GLOBUS_SYNC_LEVELS[by]}))
    # A Globus listing carries no checksums (Ferry cannot read a collection's files without
    # HTTPS): under --by checksum Ferry's plan compares the listings by size and time and the
    # task's sync level compares the checksums, so the job runs even where the listings agree.
    service_compares = globus and by is By.CHECKSUM
    plan_by = By.SIZE_MTIME if service_compares else by
    try:
        plan = plan_sync(pool, src, dst, by=plan_by, delete=delete, cancel=cancel, sink=task_sink(store, new))
        if check is not None:
            check(plan)
    except BaseException:
        store.delete_jobs([new])
        raise
    if not plan.tasks_total and not service_compares:
        store.delete_jobs([new])  # nothing to copy: no job
        return plan, None
    start_sync_job(store, new, {**(info or {}), "delete": delete, "deletions": plan.delete_files}, plan)
    return plan, new


def apply_deletions(plan: SyncPlan, backup: str | None) -> Deleted:
    """Remove (or move under ``backup``) what only the destination has, deepest first. An entry
    that changed since the comparison is kept."""
    return delete_entries(plan.dst_backend, plan.dst_root, plan.deletions, backup)


def finish_sync(
    store: Store, job_id: int | None, plan: SyncPlan, options: JobOptions, backup: str | None = None
) -> tuple[str | None, Deleted]:
    """After a sync's job ended: its deletions, made only if the job ended done with every copy
    verified (:func:`deletion_refusal`), else none. (why nothing was deleted or None, what was)."""
    if job_id is not None:
        made = deletions_made(store, job_id)  # made by the scheduler as the job ended
        if made is not None:
            return made
        refusal = deletion_refusal(store, job_id, options)
        if refusal is not None:
            return refusal, Deleted()
        if pending_deletions(store, job_id):  # ended before this change of the engine: make them now
            note = run_pending_deletions(store, job_id, options, plan.dst_backend)
            made = deletions_made(store, job_id)
            return made if made is not None else (note or None, Deleted())
    if not plan.deletions:
        return None, Deleted()
    return None, apply_deletions(plan, backup)


__all__ = ["Deleted", "apply_deletions", "deletion_refusal", "deletions_made", "finish_sync", "plan_sync", "queue_sync"]
