"""The queue is a database: SQLite in WAL mode, one row per job and one per file task.

Why SQLite: an overnight queue of a million files must survive ``kill -9``, be readable by a second
process (``ferry queue list`` while ``ferry queue run`` works) and page into a GUI list without a
million Python objects. WAL lets readers run beside the one writer; every change is a short
transaction; the schema version lives in ``PRAGMA user_version`` with forward migrations.

Paths are stored as BLOBs of their UTF-8 bytes with ``surrogateescape`` so undecodable local
names (legal on Linux) survive the round trip exactly.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ferry.core.dirs import data_dir, ensure_private_dir
from ferry.core.errors import Action, CommitInDoubt, FerryError, UsageError
from ferry.core.outcomes import (
    Evidence,
    JobState,
    Level,
    OutcomeCounts,
    SkipReason,
    TaskState,
    Verification,
    decode_evidence,
    encode_evidence,
    level_of,
)
from ferry.transfers.options import JobOptions

SCHEMA_VERSION = 6

_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE jobs (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reuse a number a person has seen
        created     REAL    NOT NULL,
        state       TEXT    NOT NULL,
        sources     TEXT    NOT NULL,   -- JSON list of addresses as given
        dest        TEXT    NOT NULL,
        options     TEXT    NOT NULL,   -- JobOptions as JSON
        roots       TEXT    NOT NULL,   -- JSON [[source path, target path, rel], ...], fixed at creation
        planned     INTEGER NOT NULL DEFAULT 0,  -- 1 once every source has been walked
        message     TEXT,
        runner      TEXT,               -- "host:pid" of the process running it
        heartbeat   REAL,
        started     REAL,
        finished    REAL
    );
    CREATE TABLE tasks (
        id          INTEGER PRIMARY KEY,
        job_id      INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        kind        TEXT    NOT NULL,   -- file, dir, link, special
        src         BLOB    NOT NULL,
        dst         BLOB    NOT NULL,
        rel         BLOB    NOT NULL,   -- relative to the job's destination (manifest paths)
        size        INTEGER,
        mtime_us    INTEGER,
        extra       TEXT,               -- link target, or why a special file is skipped
        state       TEXT    NOT NULL,   -- queued, running, done, skipped, failed, cancelled
        attempts    INTEGER NOT NULL DEFAULT 0,
        not_before  REAL    NOT NULL DEFAULT 0,
        interrupted INTEGER NOT NULL DEFAULT 0,
        hash_algo   TEXT,
        hash        TEXT,
        verified    TEXT,
        error_kind  TEXT,
        error       TEXT,
        finished    REAL,
        UNIQUE (job_id, src)
    );
    CREATE INDEX tasks_job_state ON tasks (job_id, state, id);
    """,
    # Protocol state a backend must find again after a crash: an S3 UploadId and its finished
    # parts per task, a Globus submission_id/task_id per job. Opaque JSON/text to the store.
    2: """
    CREATE TABLE task_resume (
        task_id     INTEGER PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
        data        TEXT    NOT NULL    -- JSON object owned by the destination backend
    );
    CREATE TABLE job_values (
        job_id      INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        key         TEXT    NOT NULL,
        value       TEXT    NOT NULL,
        PRIMARY KEY (job_id, key)
    );
    """,
    # Outcomes as typed columns (core/outcomes.py): the verification level and the evidence it
    # rests on, the reason a file was skipped, and a job's error kind and suggested action.
    # ``verified`` and ``message`` stay, as notes for people that no code reads. Rows written
    # before this version get their level from the words older Ferry wrote (the one place those
    # words are read, once, here); a checksum note then rests on no recorded evidence.
    3: """
    ALTER TABLE tasks ADD COLUMN verify_level TEXT;
    ALTER TABLE tasks ADD COLUMN verify_evidence TEXT;
    ALTER TABLE tasks ADD COLUMN skip_reason TEXT;
    ALTER TABLE jobs ADD COLUMN error_kind TEXT;
    ALTER TABLE jobs ADD COLUMN error_action TEXT;
    UPDATE tasks SET verify_level = CASE
        WHEN verified LIKE 'checksum verified by Globus%' THEN 'service'
        WHEN verified LIKE '% match%' AND hash IS NOT NULL THEN 'checksum'
        WHEN verified LIKE 'size only%' THEN 'size'
        ELSE 'none' END
        WHERE state = 'done';
    UPDATE tasks SET skip_reason = CASE
        WHEN kind = 'special' THEN 'unsupported-type'
        ELSE 'policy' END
        WHERE state = 'skipped';
    """,
    # The queue's order, which a person may change (``ferry queue top``/``move``, the window's
    # "Move to top"): files are claimed job by job in this order. New jobs go last; jobs queued
    # before this version keep the order of their numbers.
    4: """
    ALTER TABLE jobs ADD COLUMN position INTEGER;
    UPDATE jobs SET position = id;
    """,
    # The technical detail of a file's last failure (an errno, an HTTP status and code), beside
    # the sentence in tasks.error: the window's log view shows both. Failures are few, so a
    # table of their own keeps the per-file results' hot path as it was.
    5: """
    CREATE TABLE IF NOT EXISTS task_errors (
        task_id     INTEGER PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
        detail      TEXT    NOT NULL
    );
    """,
    # The route a job's bytes took (``direct``: site to site, a service or the store moved them;
    # ``relay``: through Ferry), decided when the job starts, and the one sentence saying why a
    # direct route was not taken where one was possible. NULL until the job first starts.
    6: """
    ALTER TABLE jobs ADD COLUMN route TEXT;
    ALTER TABLE jobs ADD COLUMN route_reason TEXT;
    """,
}

JOB_ACTIVE = (JobState.QUEUED, JobState.RUNNING)
JOB_FINISHED = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)
TASK_OPEN = (TaskState.QUEUED, TaskState.RUNNING)


def enc(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def dec(blob: bytes | str | None) -> str:
    if blob is None:
        return ""
    if isinstance(blob, str):
        return blob
    return blob.decode("utf-8", "surrogateescape")  # sqlite3 gives bytes for a BLOB: no copy needed


def text(value: str | None) -> str | None:
    """A sentence for a TEXT column. SQLite's text is UTF-8, and a name that is not valid UTF-8
    (its bytes kept as surrogates, as Python reads such names) made the write raise, which stopped
    the whole run and every run after it: such bytes are written as ``ls -b`` shows them (``\\xff``)."""
    if value is None or value.isascii():
        return value
    try:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _runner_alive(runner: str | None, heartbeat: float | None) -> bool:
    if not runner:
        return False
    host, _, pid = runner.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # A live pid may have been reused: trust it only with a recent heartbeat.
        return heartbeat is not None and time.time() - heartbeat < 120
    # Another machine sharing the file (a home directory on NFS): only the heartbeat tells.
    return heartbeat is not None and time.time() - heartbeat < 120


@dataclass(frozen=True)
class Job:
    id: int
    created: float
    state: JobState
    sources: list[str]
    dest: str
    options: JobOptions
    roots: list[tuple[str, str, str]]
    planned: bool
    message: str | None
    runner: str | None
    heartbeat: float | None
    started: float | None
    finished: float | None
    error_kind: str | None = None  # why it stopped, as a value (message is for people)
    error_action: Action | None = None  # what the person can do about it
    route: str | None = None  # "direct" or "relay" once started (options.Route), None before
    route_reason: str | None = None  # why it relayed where a direct route was possible (for people)

    @property
    def runner_alive(self) -> bool:
        return _runner_alive(self.runner, self.heartbeat)


@dataclass(frozen=True)
class Task:
    id: int
    job_id: int
    kind: str
    src: str
    dst: str
    rel: str
    size: int | None
    mtime_us: int | None
    extra: str | None
    state: TaskState
    attempts: int
    interrupted: bool
    hash_algo: str | None
    hash: str | None
    verified: str | None  # the note for people
    error_kind: str | None
    error: str | None
    level: Level | None = None
    evidence: tuple[Evidence, ...] = ()
    skip_reason: SkipReason | None = None

    @property
    def verification(self) -> Verification | None:
        if self.level is None:
            return None
        return Verification(self.level, self.hash_algo, self.evidence, self.verified or "")

    @property
    def checksum_verified(self) -> bool:
        """Copied and checked at checksum level, with the hash recorded (manifests, Move, delete)."""
        return self.state == "done" and self.level is Level.CHECKSUM and bool(self.hash and self.hash_algo)


@dataclass(frozen=True)
class NewTask:
    kind: str
    src: str
    dst: str
    rel: str
    size: int | None
    mtime_us: int | None
    extra: str | None = None
    state: str = "queued"
    error: str | None = None
    skip_reason: SkipReason | None = None  # with state "skipped"
    error_kind: str | None = None  # with state "failed"


@dataclass(frozen=True)
class TaskResult:
    task_id: int
    state: str  # done, skipped, failed, cancelled, queued (put back)
    attempts: int
    hash_algo: str | None = None
    hash: str | None = None
    verified: str | None = None  # the note for people
    error_kind: str | None = None
    error: str | None = None
    not_before: float = 0.0
    dst: str | None = None  # when a conflict policy renamed the destination
    level: Level | None = None  # with state "done"
    evidence: tuple[Evidence, ...] = ()
    skip_reason: SkipReason | None = None  # with state "skipped"
    # With state "done": what of the file's metadata its destination did not keep (the values of
    # ferry.transfers.copy.NotKept; the note says what and why).
    not_kept: tuple[str, ...] = ()
    error_detail: str | None = None  # with state "failed": the error's technical detail (the log view)

    @classmethod
    def done(
        cls,
        task_id: int,
        attempts: int,
        v: Verification,
        hash: str | None = None,
        dst: str | None = None,
        not_kept: tuple[str, ...] = (),
    ) -> TaskResult:
        return cls(
            task_id,
            "done",
            attempts,
            v.algo if hash else None,
            hash,
            v.note,
            dst=dst,
            level=v.level,
            evidence=v.evidence,
            not_kept=not_kept,
        )

    @classmethod
    def skipped(cls, task_id: int, attempts: int, reason: SkipReason, note: str) -> TaskResult:
        return cls(task_id, "skipped", attempts, verified=note, skip_reason=reason)


@dataclass(frozen=True)
class JobCounts:
    files: int = 0
    bytes: int = 0
    by_state: dict[str, tuple[int, int]] | None = None

    def count(self, state: str) -> int:
        return (self.by_state or {}).get(state, (0, 0))[0]

    def size(self, state: str) -> int:
        return (self.by_state or {}).get(state, (0, 0))[1]


_JOB_COLS = (
    "id, created, state, sources, dest, options, roots, planned, message, runner, heartbeat, started, finished, "
    "error_kind, error_action, route, route_reason"
)
_TASK_COLS = (
    "id, job_id, kind, src, dst, rel, size, mtime_us, extra, state, attempts, interrupted, "
    "hash_algo, hash, verified, error_kind, error, verify_level, verify_evidence, skip_reason"
)


def _job(row: Sequence[object]) -> Job:
    return Job(
        id=int(row[0]),  # type: ignore[call-overload]
        created=float(row[1]),  # type: ignore[arg-type]
        state=JobState(str(row[2])),
        sources=json.loads(str(row[3])),
        dest=str(row[4]),
        options=JobOptions.from_json(str(row[5])),
        roots=_roots(str(row[6])),
        planned=bool(row[7]),
        message=row[8],  # type: ignore[arg-type]
        runner=row[9],  # type: ignore[arg-type]
        heartbeat=row[10],  # type: ignore[arg-type]
        started=row[11],  # type: ignore[arg-type]
        finished=row[12],  # type: ignore[arg-type]
        error_kind=row[13],  # type: ignore[arg-type]
        error_action=_action(row[14]),
        route=row[15],  # type: ignore[arg-type]
        route_reason=row[16],  # type: ignore[arg-type]
    )


_TASK_STATES = {s.value: s for s in TaskState}


def _action(value: object) -> Action | None:
    if value is None:
        return None
    try:
        return Action(str(value))
    except ValueError:
        return None


def _skip_reason(value: object) -> SkipReason | None:
    if value is None:
        return None
    try:
        return SkipReason(str(value))
    except ValueError:
        return None


def _roots(text: str) -> list[tuple[str, str, str]]:
    # JSON cannot hold lone surrogates portably: paths are stored as latin-1 views of their bytes.
    return [(_unb(a), _unb(b), _unb(c)) for a, b, c in json.loads(text)]


def _b(path: str) -> str:
    return enc(path).decode("latin-1")


def _unb(text: str) -> str:
    return dec(text.encode("latin-1"))


def roots_json(roots: Iterable[tuple[str, str, str]]) -> str:
    return json.dumps([[_b(a), _b(b), _b(c)] for a, b, c in roots])


_new_object = object.__new__


def _task(row: Sequence[object]) -> Task:
    # Built straight into the instance's __dict__ rather than through the frozen dataclass's
    # __init__ (one object.__setattr__ per field): a claim builds a thousand of these at a time,
    # and this is 3x faster. Same fields, same values; the Task stays frozen to its users.
    t = _new_object(Task)
    t.__dict__.update(
        id=row[0],
        job_id=row[1],
        kind=row[2],
        src=dec(row[3]),  # type: ignore[arg-type]
        dst=dec(row[4]),  # type: ignore[arg-type]
        rel=dec(row[5]),  # type: ignore[arg-type]
        size=row[6],
        mtime_us=row[7],
        extra=row[8],
        state=_TASK_STATES[row[9]],  # type: ignore[index]
        attempts=row[10],
        interrupted=bool(row[11]),
        hash_algo=row[12],
        hash=row[13],
        verified=row[14],
        error_kind=row[15],
        error=row[16],
        level=level_of(row[17]),  # type: ignore[arg-type]
        evidence=decode_evidence(row[18]),  # type: ignore[arg-type]
        skip_reason=_skip_reason(row[19]),
    )
    return t


_INSERT_SQL = (
    "INSERT OR IGNORE INTO tasks (job_id, kind, src, dst, rel, size, mtime_us, extra, state, error, skip_reason, "
    "error_kind) VALUES "
)
_INSERT_ROW = "(?,?,?,?,?,?,?,?,?,?,?,?)"
_INSERT_CHUNK = 500  # 12 parameters each: well under SQLite's 32,766 parameters per statement

# finish_tasks: VALUES columns are column1 (task id), column2 (state), ... column11 (dst),
# column12 (verify_level), column13 (verify_evidence), column14 (skip_reason).
_FINISH_ROW = "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_FINISH_CHUNK = 500  # 14 parameters each: well under SQLite's 32,766 parameters per statement
_FINISH_SQL = (
    "UPDATE tasks SET state = v.column2, attempts = v.column3, hash_algo = v.column4, hash = v.column5, "
    "verified = v.column6, error_kind = v.column7, error = v.column8, not_before = v.column9, "
    "finished = v.column10, dst = COALESCE(v.column11, tasks.dst), "
    "verify_level = v.column12, verify_evidence = v.column13, skip_reason = v.column14, "
    "interrupted = CASE WHEN v.column2 = 'queued' THEN tasks.interrupted ELSE 0 END "
    "FROM (VALUES {values}) AS v WHERE tasks.id = v.column1"
)
# UPDATE ... FROM needs SQLite 3.33 (2020); older libraries take the same rows one statement each.
_UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)
_FINISH_ONE = (
    "UPDATE tasks SET state = ?2, attempts = ?3, hash_algo = ?4, hash = ?5, verified = ?6, error_kind = ?7, "
    "error = ?8, not_before = ?9, finished = ?10, dst = COALESCE(?11, dst), verify_level = ?12, "
    "verify_evidence = ?13, skip_reason = ?14, "
    "interrupted = CASE WHEN ?2 = 'queued' THEN interrupted ELSE 0 END WHERE id = ?1"
)


class StoreError(FerryError):
    kind = "store"


def default_store_path() -> Path:
    env = os.environ.get("FERRY_QUEUE_DB")
    return Path(env) if env else data_dir() / "queue.db"


class Store:
    """One connection, serialised by a lock: SQLite has one writer anyway, and short
    transactions keep ``ferry queue list`` in another process responsive."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_store_path()
        ensure_private_dir(self.path.parent)
        self._lock = threading.RLock()
        # task_resume() reads through connections of its own, one per concurrent caller, taken from
        # and put back on a free list (list.pop/append need no lock): in WAL mode a reader never
        # waits for the writer. Sixteen S3 workers each asking once per file had queued behind every
        # results transaction on the writer's lock (over half of their time on small files); one
        # shared reader under a lock of its own only moved the queue (its holder waits for the GIL).
        self._idle_readers: list[sqlite3.Connection] = []
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()  # guards _reader_conns only
        try:
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"The queue database {self.path} cannot be opened", detail=str(exc)) from exc
        try:
            os.chmod(self.path, 0o600)
        except OSError:
            pass

    def _migrate(self) -> None:
        # The version is read inside the write transaction: two processes (or a GUI and its
        # runner thread) opening a fresh queue at once must not both create the tables.
        with self._lock:
            if self._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                return  # the usual start: nothing to do, so no write lock to wait for
            self._db.execute("BEGIN IMMEDIATE")
            try:
                version = self._db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"The queue database {self.path} was written by a newer Ferry (schema {version}); "
                        "upgrade Ferry to use it"
                    )
                for v in range(version + 1, SCHEMA_VERSION + 1):
                    for stmt in _MIGRATIONS[v].split(";"):
                        if stmt.strip():
                            self._db.execute(stmt)
                    self._db.execute(f"PRAGMA user_version = {v}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._reader_lock:
            conns, self._reader_conns = self._reader_conns, []
            self._idle_readers = []
        for conn in conns:
            conn.close()

    def _write(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, params)

    def _tx(self) -> _Tx:
        return _Tx(self)

    # ---- jobs ----
    def create_job(
        self,
        sources: list[str],
        dest: str,
        options: JobOptions,
        roots: Iterable[tuple[str, str, str]],
        *,
        state: str = "queued",
        runner: str | None = None,
    ) -> int:
        now = time.time()
        cur = self._write(
            "INSERT INTO jobs (created, state, sources, dest, options, roots, runner, heartbeat, started, position) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(position), 0) + 1 FROM jobs))",
            (
                now,
                state,
                json.dumps(sources),
                dest,
                options.to_json(),
                roots_json(roots),
                runner,
                now if runner else None,
                now if runner else None,
            ),
        )
        return int(cur.lastrowid or 0)

    def job(self, job_id: int) -> Job:
        with self._lock:
            row = self._db.execute(f"SELECT {_JOB_COLS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UsageError(f"No job {job_id} in the queue (see 'ferry queue list')")
        return _job(row)

    def jobs(self, states: Iterable[str] | None = None, ids: Sequence[int] | None = None) -> list[Job]:
        sql = f"SELECT {_JOB_COLS} FROM jobs"
        where: list[str] = []
        params: list[object] = []
        if states is not None:
            st = list(states)
            where.append(f"state IN ({','.join('?' * len(st))})")
            params += st
        if ids is not None:
            where.append(f"id IN ({','.join('?' * len(ids))})")
            params += list(ids)
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            return [_job(r) for r in self._db.execute(sql + " ORDER BY position, id", params)]

    def set_order(self, job_ids: Sequence[int]) -> None:
        """Put the queue in this order (every job, first to last): one transaction, persisted."""
        with self._tx() as db:
            db.executemany("UPDATE jobs SET position = ? WHERE id = ?", [(i + 1, j) for i, j in enumerate(job_ids)])

    def _queue_order(self, db: sqlite3.Connection, job_ids: Sequence[int]) -> list[int]:
        marks = ",".join("?" * len(job_ids))
        return [r[0] for r in db.execute(f"SELECT id FROM jobs WHERE id IN ({marks}) ORDER BY position, id", job_ids)]

    def set_job_state(
        self,
        job_id: int,
        state: str,
        message: str | None = None,
        *,
        error_kind: str | None = None,
        error_action: Action | None = None,
        **extra: object,
    ) -> None:
        """A new state; ``message`` is for people, ``error_kind``/``error_action`` say why as values
        (cleared when not given)."""
        cols = ["state = ?", "message = ?", "error_kind = ?", "error_action = ?"]
        params: list[object] = [state, text(message), error_kind, error_action]
        if state in JOB_FINISHED:
            cols.append("finished = ?")
            params.append(time.time())
        for k, v in extra.items():
            cols.append(f"{k} = ?")
            params.append(v)
        self._write(f"UPDATE jobs SET {', '.join(cols)} WHERE id = ?", (*params, job_id))

    def update_job_options(self, job_id: int, options: JobOptions) -> None:
        self._write("UPDATE jobs SET options = ? WHERE id = ?", (options.to_json(), job_id))

    def claim_job(self, job_id: int, runner: str) -> bool:
        """Take a queued job (or one whose runner died) for this process; False if someone has it."""
        with self._tx() as db:
            row = db.execute("SELECT state, runner, heartbeat FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row[0] not in JOB_ACTIVE:
                return False
            if row[0] == "running" and row[1] != runner and _runner_alive(row[1], row[2]):
                return False
            now = time.time()
            db.execute(
                "UPDATE jobs SET state = 'running', runner = ?, heartbeat = ?, started = COALESCE(started, ?), "
                "message = NULL WHERE id = ?",
                (runner, now, now, job_id),
            )
            # Tasks left 'running' by a dead process go back to the queue, marked so the copier
            # checks whether they had in fact finished (no file is done twice).
            db.execute(
                "UPDATE tasks SET state = 'queued', interrupted = 1 WHERE job_id = ? AND state = 'running'",
                (job_id,),
            )
        return True

    def heartbeat(self, job_ids: Iterable[int], runner: str) -> None:
        ids = list(job_ids)
        if ids:
            self._write(
                f"UPDATE jobs SET heartbeat = ? WHERE runner = ? AND id IN ({','.join('?' * len(ids))})",
                (time.time(), runner, *ids),
            )

    def release_job(
        self,
        job_id: int,
        state: str,
        message: str | None = None,
        *,
        unless: str | None = None,
        error_kind: str | None = None,
        error_action: Action | None = None,
    ) -> None:
        """Hand a job back (to 'queued', 'paused', or a finished state) and free its tasks. With
        ``unless``, a job that has meanwhile been put in that state keeps it (and its message):
        a pause the user took back (resume) before the runner let go of the job must not win."""
        with self._tx() as db:
            db.execute(
                "UPDATE tasks SET state = 'queued', interrupted = 1 WHERE job_id = ? AND state = 'running'",
                (job_id,),
            )
            if unless is not None:
                row = db.execute(
                    "SELECT state, message, error_kind, error_action FROM jobs WHERE id = ?", (job_id,)
                ).fetchone()
                if row is not None and row[0] == unless:
                    state, message, error_kind, error_action = row[0], row[1], row[2], _action(row[3])
            finished = time.time() if state in JOB_FINISHED else None
            db.execute(
                "UPDATE jobs SET state = ?, message = ?, error_kind = ?, error_action = ?, runner = NULL, "
                "heartbeat = NULL, finished = ? WHERE id = ?",
                (state, text(message), error_kind, error_action, finished, job_id),
            )

    def mark_planned(self, job_id: int) -> None:
        self._write("UPDATE jobs SET planned = 1 WHERE id = ?", (job_id,))

    def delete_jobs(self, job_ids: Iterable[int]) -> int:
        ids = list(job_ids)
        if not ids:
            return 0
        with self._tx() as db:
            marks = ",".join("?" * len(ids))
            db.execute(f"DELETE FROM tasks WHERE job_id IN ({marks})", ids)
            return db.execute(f"DELETE FROM jobs WHERE id IN ({marks})", ids).rowcount

    # ---- tasks ----
    def add_tasks(self, job_id: int, tasks: Sequence[NewTask]) -> list[NewTask]:
        """Insert a batch in one transaction; return the tasks that were new.

        Re-planning after a crash walks the tree again: rows already present are ignored, so no
        task is recorded (or done) twice, and the caller counts only what is new.
        """
        if not tasks:
            return []
        rows = [
            (
                job_id,
                t.kind,
                enc(t.src),
                enc(t.dst),
                enc(t.rel),
                t.size,
                t.mtime_us,
                t.extra,
                t.state,
                text(t.error),
                t.skip_reason,
                t.error_kind,
            )
            for t in tasks
        ]
        # Multi-row INSERTs of a few hundred rows each, not an execute (or executemany) per row:
        # sqlite3 hands the GIL away around every statement step, and a step per row traded it
        # with the workers thousands of times while a big tree was being planned.
        with self._tx() as db:
            last = db.execute("SELECT COALESCE(MAX(id), 0) FROM tasks").fetchone()[0]
            before = db.total_changes
            for i in range(0, len(rows), _INSERT_CHUNK):
                part = rows[i : i + _INSERT_CHUNK]
                db.execute(_INSERT_SQL + ",".join([_INSERT_ROW] * len(part)), [x for row in part for x in row])
            if db.total_changes - before == len(rows):
                return list(tasks)  # the usual case: every task is new
            # A re-plan after a crash: rows already present were ignored. The new ones are those
            # above the highest id before this insert (ids are allocated upwards, and this
            # transaction is the only writer).
            new_srcs = {
                bytes(r[0]) for r in db.execute("SELECT src FROM tasks WHERE job_id = ? AND id > ?", (job_id, last))
            }
        inserted: list[NewTask] = []
        for t, row in zip(tasks, rows, strict=True):
            key = row[2]
            if key in new_srcs:
                new_srcs.discard(key)  # a src twice in one batch was inserted once
                inserted.append(t)
        return inserted

    def claim_tasks(self, job_ids: Sequence[int], limit: int, now: float | None = None) -> list[Task]:
        if not job_ids or limit <= 0:
            return []
        now = time.time() if now is None else now
        rows: list[Sequence[object]] = []
        with self._tx() as db:
            # Job by job in the queue's order (one indexed claim each, never a sort over every
            # queued file): a job moved to the top gets the free workers first.
            order = self._queue_order(db, job_ids)
            for job_id in order:
                got = db.execute(
                    "UPDATE tasks SET state = 'running' WHERE id IN ("
                    " SELECT id FROM tasks WHERE job_id = ? AND state = 'queued' AND not_before <= ?"
                    f" ORDER BY id LIMIT ?) RETURNING {_TASK_COLS}",
                    (job_id, now, limit - len(rows)),
                ).fetchall()
                got.sort(key=lambda r: r[0])
                rows += got
                if len(rows) >= limit:
                    break
        return [_task(r) for r in rows]

    def next_retry_time(self, job_ids: Sequence[int]) -> float | None:
        if not job_ids:
            return None
        marks = ",".join("?" * len(job_ids))
        with self._lock:
            row = self._db.execute(
                f"SELECT MIN(not_before) FROM tasks WHERE job_id IN ({marks}) AND state = 'queued'", job_ids
            ).fetchone()
        return row[0] if row else None

    def unclaim(self, task_ids: Iterable[int]) -> None:
        ids = list(task_ids)
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            self._write(
                f"UPDATE tasks SET state = 'queued' WHERE state = 'running' AND id IN ({','.join('?' * len(part))})",
                part,
            )

    def finish_tasks(self, results: Sequence[TaskResult]) -> None:
        if not results:
            return
        now = time.time()
        # The last result per task wins, as one UPDATE per result would have it.
        latest = {r.task_id: r for r in results}
        rows = [
            (
                r.task_id,
                r.state,
                r.attempts,
                r.hash_algo,
                r.hash,
                text(r.verified),
                r.error_kind,
                text(r.error),
                r.not_before,
                now if r.state not in TASK_OPEN else None,
                enc(r.dst) if r.dst else None,
                r.level,
                encode_evidence(r.evidence) if r.evidence else None,
                r.skip_reason,
            )
            for r in latest.values()
        ]
        # A failure's technical detail replaces the task's last one (none: forgotten).
        failed = [r for r in latest.values() if r.state == "failed"]
        with self._tx() as db:
            if failed:
                db.executemany("DELETE FROM task_errors WHERE task_id = ?", [(r.task_id,) for r in failed])
                db.executemany(
                    "INSERT INTO task_errors (task_id, detail) VALUES (?, ?)",
                    [(r.task_id, text(r.error_detail)) for r in failed if r.error_detail],
                )
            if not _UPDATE_FROM:
                db.executemany(_FINISH_ONE, rows)
                return
            # One UPDATE ... FROM (VALUES ...) per few hundred results rather than executemany:
            # sqlite3 hands the GIL away around every statement step, and with a step per row the
            # coordinator and the workers traded it thousands of times a second on small files.
            for i in range(0, len(rows), _FINISH_CHUNK):
                part = rows[i : i + _FINISH_CHUNK]
                db.execute(
                    _FINISH_SQL.format(values=",".join([_FINISH_ROW] * len(part))),
                    [x for row in part for x in row],
                )

    def error_details(self, task_ids: Sequence[int]) -> dict[int, str]:
        """The technical detail recorded with each of these tasks' last failure, where there was one."""
        if not task_ids:
            return {}
        marks = ",".join("?" * len(task_ids))
        with self._lock:
            rows = self._db.execute(f"SELECT task_id, detail FROM task_errors WHERE task_id IN ({marks})", task_ids)
            return {int(r[0]): str(r[1]) for r in rows}

    def retry_failed(self, job_id: int, include_cancelled: bool = False) -> int:
        states = ("failed", "cancelled") if include_cancelled else ("failed",)
        with self._tx() as db:
            # A commit in doubt stays known as one: the retry looks for its own file first.
            n = db.execute(
                "UPDATE tasks SET state = 'queued', attempts = 0, not_before = 0, error = NULL, "
                "error_kind = CASE WHEN error_kind = ? THEN error_kind ELSE NULL END "
                f"WHERE job_id = ? AND state IN ({','.join('?' * len(states))})",
                (CommitInDoubt.kind, job_id, *states),
            ).rowcount
            db.execute(
                "UPDATE jobs SET state = 'queued', message = NULL, error_kind = NULL, error_action = NULL, "
                "finished = NULL WHERE id = ? AND state != 'running'",
                (job_id,),
            )
        return n

    def cancel_open_tasks(self, job_id: int) -> None:
        self._write(
            "UPDATE tasks SET state = 'cancelled', finished = ? WHERE job_id = ? AND state = 'queued'",
            (time.time(), job_id),
        )

    # ---- protocol state kept for resuming (see migration 2) ----
    def task_resume(self, task_id: int) -> dict[str, object] | None:
        idle = self._idle_readers
        try:
            reader = idle.pop()
        except IndexError:
            reader = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            reader.execute("PRAGMA busy_timeout=30000")
            with self._reader_lock:
                self._reader_conns.append(reader)
        try:
            # fetchall, not fetchone: a statement left open would pin an old snapshot of the table.
            rows = reader.execute("SELECT data FROM task_resume WHERE task_id = ?", (task_id,)).fetchall()
        finally:
            idle.append(reader)
        if not rows:
            return None
        data: dict[str, object] = json.loads(rows[0][0])
        return data

    def set_task_resume(self, task_id: int, data: dict[str, object] | None) -> None:
        """Record (or, with None, forget) what a backend needs to resume this task after a crash."""
        if data is None:
            self._write("DELETE FROM task_resume WHERE task_id = ?", (task_id,))
        else:
            self._write(
                "INSERT INTO task_resume (task_id, data) VALUES (?, ?) "
                "ON CONFLICT (task_id) DO UPDATE SET data = excluded.data",
                (task_id, json.dumps(data, sort_keys=True)),
            )

    def set_route(self, job_id: int, route: str, reason: str | None) -> None:
        """Record the route the job's bytes take (``direct``/``relay``) and why not direct."""
        self._write("UPDATE jobs SET route = ?, route_reason = ? WHERE id = ?", (route, text(reason), job_id))

    def job_value(self, job_id: int, key: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM job_values WHERE job_id = ? AND key = ?", (job_id, key)
            ).fetchone()
        return None if row is None else str(row[0])

    def set_job_value(self, job_id: int, key: str, value: str | None) -> None:
        if value is None:
            self._write("DELETE FROM job_values WHERE job_id = ? AND key = ?", (job_id, key))
        else:
            self._write(
                "INSERT INTO job_values (job_id, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (job_id, key) DO UPDATE SET value = excluded.value",
                (job_id, key, value),
            )

    def counts(self, job_id: int) -> JobCounts:
        with self._lock:
            rows = self._db.execute(
                "SELECT state, COUNT(*), COALESCE(SUM(size), 0) FROM tasks WHERE job_id = ? AND kind = 'file' "
                "GROUP BY state",
                (job_id,),
            ).fetchall()
        by_state = {r[0]: (int(r[1]), int(r[2])) for r in rows}
        return JobCounts(
            files=sum(c for c, _ in by_state.values()),
            bytes=sum(b for _, b in by_state.values()),
            by_state=by_state,
        )

    def outcome_counts(self, job_id: int) -> OutcomeCounts:
        """The job's files by how they ended: copied by verification level, skipped by reason,
        failed by error kind. Read from the typed columns only."""
        with self._lock:
            rows = self._db.execute(
                "SELECT state, verify_level, skip_reason, error_kind, COUNT(*) FROM tasks "
                "WHERE job_id = ? AND kind = 'file' GROUP BY state, verify_level, skip_reason, error_kind",
                (job_id,),
            ).fetchall()
        c = OutcomeCounts()
        for state, level, reason, kind, n in rows:
            n = int(n)
            if state == "done":
                lv = level_of(level) or Level.NONE
                c.copied[lv] = c.copied.get(lv, 0) + n
            elif state == "skipped":
                r = _skip_reason(reason) or SkipReason.POLICY
                c.skipped[r] = c.skipped.get(r, 0) + n
            elif state == "failed":
                k = str(kind or "error")
                c.failed[k] = c.failed.get(k, 0) + n
            elif state == "cancelled":
                c.cancelled += n
            else:
                c.open += n
        return c

    def task(self, task_id: int) -> Task | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_TASK_COLS} FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return None if row is None else _task(row)

    def requeue_task(self, task_id: int, size: int | None, mtime_us: int | None) -> None:
        """Queue a finished task again for a new version of its source (a watched file rewritten)."""
        self._write(
            "UPDATE tasks SET state = 'queued', size = ?, mtime_us = ?, attempts = 0, not_before = 0, "
            "interrupted = 0, hash_algo = NULL, hash = NULL, verified = NULL, error_kind = NULL, error = NULL, "
            "verify_level = NULL, verify_evidence = NULL, skip_reason = NULL, finished = NULL "
            "WHERE id = ? AND state NOT IN ('queued', 'running')",
            (size, mtime_us, task_id),
        )

    def open_task_count(self, job_id: int) -> int:
        with self._lock:
            return int(
                self._db.execute(
                    "SELECT COUNT(*) FROM tasks WHERE job_id = ? AND state IN ('queued', 'running')",
                    (job_id,),
                ).fetchone()[0]
            )

    def tasks(
        self,
        job_id: int,
        states: Iterable[str] | None = None,
        kinds: Iterable[str] | None = None,
        page: int = 2000,
        order_desc: bool = False,
    ) -> Iterator[Task]:
        """All tasks of a job in pages (keyset pagination: memory stays flat for a million rows)."""
        where = ["job_id = ?"]
        params: list[object] = [job_id]
        if states is not None:
            st = list(states)
            where.append(f"state IN ({','.join('?' * len(st))})")
            params += st
        if kinds is not None:
            ks = list(kinds)
            where.append(f"kind IN ({','.join('?' * len(ks))})")
            params += ks
        last = -1 if not order_desc else 1 << 62
        op, order = ("<", "DESC") if order_desc else (">", "ASC")
        while True:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT {_TASK_COLS} FROM tasks WHERE {' AND '.join(where)} AND id {op} ? "
                    f"ORDER BY id {order} LIMIT ?",
                    (*params, last, page),
                ).fetchall()
            if not rows:
                return
            for r in rows:
                yield _task(r)
            last = rows[-1][0]


class _Tx:
    """``with store._tx() as db``: BEGIN IMMEDIATE ... COMMIT under the store's lock."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __enter__(self) -> sqlite3.Connection:
        self._store._lock.acquire()
        try:
            self._store._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._store._lock.release()
            raise
        return self._store._db

    def __exit__(self, et: type[BaseException] | None, *rest: object) -> None:
        try:
            self._store._db.execute("ROLLBACK" if et else "COMMIT")
        finally:
            self._store._lock.release()
