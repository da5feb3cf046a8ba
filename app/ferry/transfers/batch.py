"""Many small files at once: the engine's side of a backend's batched transfers (SFTP's tar).

A small file over SFTP costs round trips, not bytes; one ``tar -x`` (or ``tar -c``) over an exec
channel moves hundreds of them for about the cost of a few. That pays only with many files per
exec, so the scheduler hands a worker a run of small file tasks (:func:`batchable`) and
:func:`run_batch` moves them together.

Per task this does what ``copy._copy_file`` does for the *simple* case: the source is regular,
the destination absent (or the policy is overwrite), nothing to resume. Everything else — a
destination in the way under any other policy, a name a batch cannot carry, a remote hash that
does not match, a member missing from the stream — goes through the normal per-file
:func:`ferry.transfers.copy.run_task` for that one task, so policies, retries and their records
keep one implementation. Each task gets its own result, exactly one.

Crash safety is the per-file path's: an upload batch writes every file under the partial name
the per-file writer would use (``temp_name(name, task id)``), and renames it into place only
after the server's hash of it matched the source's; a download writes through the normal local
writer (partial name, read-back, rename without overwrite). A task interrupted mid-batch comes
back ``interrupted`` and is never batched again: the per-file path finds its partial.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ferry.backends.base import Backend, Entry
from ferry.core.cancel import CancelToken
from ferry.core.errors import Cancelled, NotFound
from ferry.core.hashing import new_hasher
from ferry.core.outcomes import Evidence, Level, Verification
from ferry.transfers.copy import (
    CopyContext,
    Outcome,
    _open_writer,
    _stat_or_none,
    keep_attributes,
    run_task,
    unchecked,
)
from ferry.transfers.store import Task

# Files up to this size are batched. 1 MiB files gain too: 100 x 1 MiB down 0.90 s batched vs
# 1.15 s per file (interleaved, quiet machine), up the same either way.
SMALL_FILE = (2 << 20) + (64 << 10)
# The permission bits a file extracted from an upload batch gets (sftp/batches.py's MEMBER_MODE):
# a file whose bits are to be kept and differ goes per file, where they are set.
_MEMBER_MODE = 0o644
MAX_FILES = 200  # per batch: one exec of tar with 200 files took 67 ms (one took 6.7 ms)
MAX_BYTES = 16 << 20  # per download batch: all of it is held in memory once (per worker)
# Per upload batch (sources are read as they are sent, so this is not held in memory). Each batch
# is a new exec channel, and a new channel costs sshd far more than its bytes: 1 GiB through
# `cat` on 64 channels took 2.7 s of server CPU, on 16 channels 1.5 s, on one 1.3 s. 1,000 x 1 MiB
# up, interleaved: 16 MiB batches 6.5 s (10.7 s CPU), 32 MiB 4.7 s, 64 MiB 4.4 s (7.3 s CPU).
# Downloads gained nothing from bigger batches (4.5 vs 4.6 s), so they keep theirs.
UP_MAX_BYTES = 64 << 20
GATHER_WAIT = 0.02  # seconds a worker waits for more small files when the queue runs dry

Result = tuple[Outcome | None, BaseException | None]


def _direction(ctx: CopyContext) -> str | None:
    """ "up" when the destination takes batches, "down" when the source gives them, else None."""
    algo = ctx.options.hash_algo
    # A source whose store keeps evidence of its own (S3) is checked per file against it.
    if ctx.src.features.source_evidence is not None:
        return None
    up = ctx.dst.features.batches
    if up is not None and up.batch_usable("up", algo):
        return "up"
    # Down: what lands is checked by the destination's read-back, as per file; a destination
    # whose check is of another kind (S3's Content-MD5) keeps the per-file path.
    down = ctx.src.features.batches
    checks = algo is None or ctx.dst.capabilities.readback
    if down is not None and checks and down.batch_usable("down", algo):
        return "down"
    return None


def max_bytes(ctx: CopyContext) -> int:
    """How many bytes of small files one batch of this copy takes."""
    return UP_MAX_BYTES if _direction(ctx) == "up" else MAX_BYTES


def batchable(ctx: CopyContext, task: Task) -> bool:
    """Whether ``task`` may join a batch: a small file on its first, uninterrupted attempt
    (a retry or a resumed file takes the per-file path, which handles its partial file)."""
    if task.kind != "file" or task.interrupted or task.attempts or task.size is None or task.size > SMALL_FILE:
        return False
    return _direction(ctx) is not None


def run_batch(tasks: Sequence[Task], ctx: CopyContext, cancel: CancelToken) -> list[Result]:
    """Move ``tasks`` together; per task (in order) its outcome or the exception it ended with."""
    results: list[Result | None] = [None] * len(tasks)
    direction = _direction(ctx)
    if direction == "up":
        _upload(tasks, ctx, cancel, results)
    elif direction == "down":
        _download(tasks, ctx, cancel, results)
    # Whatever the batch did not settle goes the per-file way (a Cancelled stays cancelled).
    out: list[Result] = []
    for task, res in zip(tasks, results, strict=True):
        out.append(res if res is not None else _per_file(task, ctx, cancel))
    return out


def _per_file(task: Task, ctx: CopyContext, cancel: CancelToken) -> Result:
    try:
        cancel.check()
        return run_task(task, ctx, cancel), None
    except BaseException as exc:
        return None, exc


def _cancel_rest(results: list[Result | None], exc: Cancelled) -> None:
    for i, res in enumerate(results):
        if res is None:
            results[i] = (None, exc)


def _each(call: Callable[[], Sequence[Any]], count: int) -> Sequence[Any]:
    """A batch call's per-item results; if the call itself fails (no channel to be had, say),
    that failure for every item, so each goes the per-file way (a Cancelled stays one)."""
    try:
        return call()
    except Cancelled:
        raise
    except Exception as exc:
        return [exc] * count


def _partial(backend: Backend, path: str, token: str) -> str:
    from ferry.backends.base import temp_name

    folder, name = backend.split(path)
    return backend.join(folder, temp_name(name, token))


def _note(verified: Verification, source: Entry) -> Verification:
    return verified.with_note(source.meta.get("name_note", ""))


# ---- up: each source read as the batch sends it, one tar -x, one remote hash, one flight of RENAMEs ----


class _Outgoing:
    """One source file for an upload batch, read (and hashed) only when the backend sends it:
    a 64 MiB batch is never held whole. The tar header already gave the size the stat said, so
    a file that grew or shrank meanwhile is sent as exactly that many bytes (cut, or padded with
    zeros) and marked ``changed``: it is never committed, and goes per file, which says why."""

    def __init__(self, ctx: CopyContext, source: Entry, algo: str | None, cancel: CancelToken) -> None:
        self.ctx, self.source, self.algo, self.cancel = ctx, source, algo, cancel
        self.size = source.size or 0
        self.digest: str | None = None  # of the bytes sent, once read (None: not sent as they are)

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        self.cancel.check()
        if self.ctx.limiters:
            self.ctx.limiters.consume(self.size, self.cancel)
        try:
            with self.ctx.src.open_read(self.source.path) as f:
                data = f.read(self.size + 1)  # one byte more tells a file that grew
        except OSError:
            return bytes(self.size)  # the per-file copy reports the problem in its own words
        if len(data) != self.size:
            return data[: self.size].ljust(self.size, b"\0")
        if self.algo is None:
            self.digest = f"size:{len(data)}"
            return data
        hasher = new_hasher(self.algo)
        hasher.update(data)
        digest = hasher.hexdigest()
        recorded = self.source.hashes.get(self.algo)
        if not recorded or recorded == digest:  # else the source changed since it was recorded
            self.digest = digest
        return data


def _upload(tasks: Sequence[Task], ctx: CopyContext, cancel: CancelToken, results: list[Result | None]) -> None:
    algo = ctx.options.hash_algo  # None: the server's size of each extracted file is checked
    dst = ctx.dst.features.batches
    assert dst is not None  # chosen by _direction
    try:
        sent = _outgoing(tasks, ctx, cancel, results)
        if not sent:
            return
        preserve = ctx.options.preserve_mtime
        items = [(tasks[i].dst, out, str(tasks[i].id), out.source.mtime if preserve else None) for i, out in sent]
        landed = _each(lambda: dst.write_batch(items, algo), len(items))
        cancel.check()
        ok: list[tuple[int, _Outgoing]] = []
        for (i, out), got in zip(sent, landed, strict=True):
            if isinstance(got, Cancelled):
                raise got
            if isinstance(got, str) and out.digest is not None and got == out.digest:
                ok.append((i, out))
            elif isinstance(got, str):
                # What landed differs (or the source changed as it was read): the per-file copy
                # starts it afresh, and says so if it must.
                _drop_partial(ctx, tasks[i])
        overwrite = ctx.options.on_conflict == "overwrite"
        renames = [
            (_partial(ctx.dst, tasks[i].dst, str(tasks[i].id)), tasks[i].dst, overwrite, out.size) for i, out in ok
        ]
        committed = _each(lambda: dst.commit_batch(renames), len(renames))
    except Cancelled as exc:
        _cancel_rest(results, exc)
        return
    for (i, out), problem in zip(ok, committed, strict=True):
        if problem is not None:
            # Most often a file in the way (RENAME never replaces): the per-file copy applies the
            # policy to it. Our partial must not stay behind whatever the policy decides.
            _drop_partial(ctx, tasks[i])
            continue
        ctx.accounting.add_bytes(out.size)
        ctx.accounting.file_finished("done")
        results[i] = (_uploaded(ctx, out), None)


def _outgoing(
    tasks: Sequence[Task], ctx: CopyContext, cancel: CancelToken, results: list[Result | None]
) -> list[tuple[int, _Outgoing]]:
    """The small regular files among ``tasks``, each to be read when the batch sends it."""
    algo = ctx.options.hash_algo
    sent: list[tuple[int, _Outgoing]] = []
    for i, task in enumerate(tasks):
        cancel.check()
        try:
            source = ctx.src.stat(task.src)
        except NotFound:
            results[i] = (None, NotFound(f"Source vanished: {ctx.src.display(task.src)}"))
            continue
        except OSError:
            continue  # per file: it reports the problem in its own words
        if not source.is_file or source.size is None or source.size > SMALL_FILE:
            continue
        if source.nlink > 1 or (ctx.options.preserve_permissions and source.mode not in (None, _MEMBER_MODE)):
            continue  # per file: its permissions set as they are, its other names reported
        sent.append((i, _Outgoing(ctx, source, algo, cancel)))
    return sent


def _uploaded(ctx: CopyContext, out: _Outgoing) -> Outcome:
    """The record of a file the batch sent, extracted and renamed into place."""
    algo = ctx.options.hash_algo
    source = out.source
    if algo is None:  # as the per-file copy records it (its size check is this one)
        return Outcome("done", _note(unchecked(ctx.options.verify), source))
    recorded = bool(source.hashes.get(algo))  # equal to the stream hash, or the file was not sent
    evidence = (Evidence.HOST_TOOL, Evidence.SOURCE_RECORD) if recorded else (Evidence.HOST_TOOL,)
    note = f"{algo} match (remote {algo} of the tar-extracted file)"
    if recorded:
        note += ", matches the source's recorded checksum"
    return Outcome("done", _note(Verification(Level.CHECKSUM, algo, evidence, note), source), out.digest)


def _drop_partial(ctx: CopyContext, task: Task) -> None:
    try:
        ctx.dst.remove(_partial(ctx.dst, task.dst, str(task.id)))
    except (OSError, Exception):  # absent already, or the connection went: the per-file path copes
        pass


# ---- down: one tar -c, each member written through the normal local writer ----


def _download(tasks: Sequence[Task], ctx: CopyContext, cancel: CancelToken, results: list[Result | None]) -> None:
    algo = ctx.options.hash_algo
    src = ctx.src.features.batches
    assert src is not None  # chosen by _direction
    want: list[int] = []
    try:
        for i, task in enumerate(tasks):
            cancel.check()
            if _stat_or_none(ctx.dst, task.dst) is None:
                want.append(i)  # anything in the way: the per-file copy applies the policy
        if not want:
            return
        got = _each(lambda: src.read_batch([tasks[i].src for i in want]), len(want))
        for i, item in zip(want, got, strict=True):
            cancel.check()
            if isinstance(item, Cancelled):
                raise item
            if isinstance(item, BaseException):
                continue  # per file: a vanished source is its NotFound there, said in its words
            entry, data = item
            results[i] = _write_local(tasks[i], ctx, entry, data, algo, cancel)
    except Cancelled as exc:
        _cancel_rest(results, exc)


def _member_verification(
    verify: str, algo: str | None, dst_hash: str | None, evidence: tuple[Evidence, ...], note: str = ""
) -> Verification:
    if algo is None:
        return unchecked(verify)
    if dst_hash is None or not evidence:
        why = note or "the destination offers no independent check"
        return Verification(Level.SIZE, algo, (), f"size only ({why})")
    how = note or "read back from disk"
    return Verification(Level.CHECKSUM, algo, evidence, f"{algo} match (sent in a tar stream, {how})")


def _write_local(
    task: Task, ctx: CopyContext, entry: Entry, data: bytes, algo: str | None, cancel: CancelToken
) -> Result | None:
    """One member through the destination's normal writer; None sends it per file."""
    from ferry.core.errors import FerryError

    opts = ctx.options
    readback = algo if algo and ctx.dst.capabilities.readback else None
    src_hash = None
    hasher = None
    if algo is not None:
        hasher = new_hasher(algo)
        hasher.update(data)
        src_hash = hasher.hexdigest()
    if ctx.limiters:
        ctx.limiters.consume(len(data), cancel)
    try:
        writer = _open_writer(ctx, task.dst, entry, str(task.id), False, readback)
    except (OSError, FerryError):
        return None
    try:
        with writer:
            lost, notes = keep_attributes(ctx, entry, writer)
            if hasher is not None:
                writer.compare_writes(hasher)  # the read-back compares with ``data``, not hashes again
            writer.write(data)
            dst_hash = writer.finish()
            if algo is not None and dst_hash is not None and dst_hash != src_hash:
                writer.abort(keep_partial=False)
                return None  # the per-file copy retries it from zero (and fails it if it must)
            writer.commit(overwrite=opts.on_conflict == "overwrite", mtime=entry.mtime if opts.preserve_mtime else None)
            # After the commit: a store's writer (S3) learns its evidence when the object lands.
            verified = _member_verification(opts.verify, algo, dst_hash, writer.evidence, writer.verified_note)
    except Cancelled:
        raise
    except (OSError, FerryError):
        # Most often a file that appeared meanwhile (AlreadyExists): the per-file copy applies
        # the policy, and whatever it decides, this partial file must not stay behind.
        writer.abort(keep_partial=False)
        return None
    if opts.verify != "none" and dst_hash is None:
        landed = _stat_or_none(ctx.dst, task.dst)
        if landed is None or landed.size != len(data):
            if landed is not None:
                try:
                    ctx.dst.remove(task.dst)  # ours, just written, and wrong: never left under the final name
                except (OSError, FerryError):
                    pass
            return None
    ctx.accounting.add_bytes(len(data))
    ctx.accounting.file_finished("done")
    return Outcome("done", verified.with_note("; ".join(notes)), src_hash, not_kept=lost), None
