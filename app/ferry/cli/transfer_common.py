"""What ``ferry cp``, ``ferry queue add`` and ``ferry queue run`` share: options, job creation,
the live progress line, JSON events, conflict questions on the terminal, manifests."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, ClassVar, TextIO

from ferry.core.errors import AlreadyExists, Transient, UsageError
from ferry.core.hashing import VERIFY_MODES
from ferry.core.outcomes import Level, OutcomeCounts, SkipReason, describe_counts
from ferry.core.progress import Accounting, Snapshot
from ferry.core.schedule import parse_start_at, parse_window
from ferry.core.units import format_duration, format_rate, format_size, parse_duration, parse_size
from ferry.transfers import tuning
from ferry.transfers.jobs import RetryNotice, canonical, create_job, prepare_job, resolve
from ferry.transfers.options import (
    CHOOSE_POLICY_HINT,
    CONFLICT_HELP,
    CONFLICT_POLICIES,
    ROUTE_HELP,
    ROUTES,
    ConflictUnanswered,
    JobOptions,
)

if TYPE_CHECKING:
    # The engine (scheduler, store, copy, planner and sqlite3) is imported by the commands that
    # run jobs, when they run: 'ferry ls' or 'ferry --help' starts without it.
    from ferry.transfers.copy import Answer, Conflict
    from ferry.transfers.scheduler import Runner, RunSummary
    from ferry.transfers.store import Job, NewTask, Store, Task, TaskResult

# Job creation lives in the engine (ferry.transfers.jobs); these names stay importable from here.
__all__ = ["canonical", "create_job", "prepare_job", "resolve"]


def add_job_options(p: argparse.ArgumentParser, *, timing: bool, move: str | None = None) -> None:
    """The options of a job. ``move``: "option" adds ``--move`` (``queue add``), "always" only
    the acceptance of an unverified move (``ferry mv``)."""
    p.add_argument("-r", "-R", "--recursive", action="store_true", help="copy folders and their contents")
    p.add_argument(
        "--verify",
        choices=VERIFY_MODES,
        default="sha256",
        help="how each file is checked: a checksum of the bytes sent compared with one of what "
        "landed (sha256, blake3), sizes only, or nothing (default: sha256)",
    )
    p.add_argument(
        "--on-conflict",
        choices=CONFLICT_POLICIES,
        default="ask",
        metavar="POLICY",
        help="when a file already exists: "
        + "; ".join(f"{k}: {v}" for k, v in CONFLICT_HELP.items())
        + " (default: ask)",
    )
    p.add_argument("--no-preserve-times", action="store_true", help="do not copy modification times")
    p.add_argument(
        "--no-preserve-permissions",
        action="store_true",
        help="give files the permissions a new file gets at the destination: the source's read, write and "
        "execute bits less the destination's umask (as cp without -p); by default they are kept as they are, "
        "setuid, setgid and sticky bits included (as cp -p, rsync -a)",
    )
    p.add_argument(
        "--xattrs",
        action="store_true",
        help="also copy extended attributes and POSIX ACLs (between local disks); what the destination "
        "refuses is reported per file",
    )
    p.add_argument(
        "--patience",
        metavar="DURATION",
        help="keep retrying network outages, refused connections and busy servers for this long, "
        "reconnecting as needed, before a file fails, e.g. 2h (default: 1h in 'ferry queue run', "
        "a few tries in 'ferry cp')",
    )
    add_route_option(p)
    if move == "option":
        p.add_argument(
            "--move",
            action="store_true",
            help="delete each source once its copy is checksum-verified and the source still hashes the same "
            "(as 'ferry mv')",
        )
    if move is not None:
        p.add_argument(
            "--allow-unverified-move",
            action="store_true",
            help="with --verify size or none, or a transfer service's own check (Globus): delete sources after "
            "that lesser check and a size comparison (a move is refused otherwise)",
        )
    if timing:
        add_timing_options(p)


def add_route_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--route", choices=ROUTES, default="auto", help=ROUTE_HELP)


def route_text(job: Job) -> str:
    """``direct``, ``relay`` or ``relay: the host has no curl`` (what the job recorded); what was
    asked before the job first started."""
    if job.route is None:
        if job.options.label == "sync" and job.options.route == "relay":
            return "relay (a sync in the queue always relays)"  # asked or not: see 'queue add --sync'
        return f"{job.options.route} (as asked; decided when the job starts)"
    return f"{job.route}: {job.route_reason}" if job.route_reason else job.route


def add_timing_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window", metavar="HH:MM-HH:MM", help="run only inside this daily time window, e.g. 20:00-07:00")
    p.add_argument(
        "--start-at",
        metavar="HH:MM",
        help="do not start before this time (today or tomorrow), or an ISO date",
    )


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--parallel",
        "-j",
        type=_parallel,
        default="auto",
        metavar="N",
        help="files transferred at once: a number from 1 to 256, or auto (the default: starts at 4 and "
        "follows the link while running, more while throughput rises, up to 128; queue show says what it chose)",
    )
    p.add_argument(
        "--bwlimit",
        metavar="RATE",
        help="bandwidth limit for the whole run, e.g. 50M (bytes/s, binary units)",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable progress and results (JSON lines)")


def _parallel(text: str) -> int:
    """A count, or 0 for 'auto' (see :func:`parallel_config`)."""
    if text.strip().lower() == "auto":
        return 0
    return _positive_int(text)


def parallel_config(value: int) -> dict[str, Any]:
    """RunConfig fields for a parsed --parallel value."""
    return {"parallel": tuning.AUTO_MAX, "auto_parallel": True} if value == 0 else {"parallel": value}


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError("must be between 1 and 256")
    return n


def job_options(args: argparse.Namespace, *, bwlimit: str | None = None) -> JobOptions:
    window = getattr(args, "window", None)
    start_at = getattr(args, "start_at", None)
    return JobOptions(
        recursive=args.recursive,
        verify=args.verify,
        on_conflict=args.on_conflict,
        bwlimit=parse_size(bwlimit) if bwlimit else None,
        window=str(parse_window(window)) if window else None,
        start_at=parse_start_at(start_at).timestamp() if start_at else None,
        preserve_mtime=not args.no_preserve_times,
        preserve_permissions=not getattr(args, "no_preserve_permissions", False),
        xattrs=bool(getattr(args, "xattrs", False)),
        move=bool(getattr(args, "move", False)),
        allow_unverified_move=bool(getattr(args, "allow_unverified_move", False)),
        patience=parse_duration(args.patience) if getattr(args, "patience", None) else None,
        route=getattr(args, "route", None) or "auto",
    )


# ---------------------------------------------------------------- output


def escape_name(name: str) -> str:
    """One line per name: control characters shown as escapes, as ``ls -b`` does, and the bytes of
    a name that is not UTF-8 (kept as surrogates, as Python reads such names) as ``\\xff``, as the
    queue's record writes them (store.text), never as Python's ``\\udcff``."""
    if name.isprintable():
        return name
    return "".join(c if c.isprintable() else _escaped(c) for c in name)


def _escaped(c: str) -> str:
    if 0xDC80 <= ord(c) <= 0xDCFF:  # a byte that is not UTF-8 (surrogateescape)
        return f"\\x{ord(c) - 0xDC00:02x}"
    return repr(c)[1:-1]


def _bar(fraction: float, width: int = 24) -> str:
    filled = int(fraction * width)
    return "[" + "=" * filled + (">" if filled < width else "") + " " * max(0, width - filled - 1) + "]"


def progress_line(s: Snapshot) -> str:
    total = format_size(s.bytes_total) + ("+" if s.planning else "")
    files = f"{s.files_done:,}/{s.files_total:,}{'+' if s.planning else ''} files"
    parts = [
        _bar(s.fraction),
        f"{s.fraction * 100:5.1f}%",
        f"{format_size(s.bytes_done)}/{total}",
        files,
        format_rate(s.speed),
        f"ETA {format_duration(s.eta)}" if not s.planning else "planning…",
    ]
    if s.files_failed:
        parts.append(f"{s.files_failed} failed")
    return "  ".join(parts)


class Output:
    """Progress on the terminal (a redrawn line on stderr) or JSON lines on stdout."""

    def __init__(
        self, accounting: Accounting, *, as_json: bool, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.accounting = accounting
        self.as_json = as_json
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.live = not as_json and self.err.isatty()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._line_len = 0
        self.problems: list[str] = []
        self.quiet_until_done = False

    def start(self) -> None:
        if self.live or self.as_json:
            self._thread = threading.Thread(target=self._loop, name="ferry-progress", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.render(final=True)

    def _loop(self) -> None:
        interval = 0.25 if self.live else 1.0
        while not self._stop.wait(interval):
            self.render()

    def render(self, final: bool = False) -> None:
        snap = self.accounting.snapshot()
        with self.lock:
            if self.as_json:
                self.emit({"event": "progress", **snapshot_dict(snap)})
            elif self.live and not self.quiet_until_done:
                line = progress_line(snap)
                pad = " " * max(0, self._line_len - len(line))
                self.err.write("\r" + line + pad + ("\n" if final else ""))
                self.err.flush()
                self._line_len = 0 if final else len(line)

    def clear_line(self) -> None:
        if self.live and self._line_len:
            self.err.write("\r" + " " * self._line_len + "\r")
            self._line_len = 0

    def emit(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()

    def message(self, text: str) -> None:
        with self.lock:
            if self.as_json:
                self.emit({"event": "message", "message": text})
            else:
                self.clear_line()
                self.err.write(text + "\n")
                self.err.flush()


def retry_notice(as_json: bool) -> RetryNotice:
    """How ``cp``/``queue add --patience`` say that they wait for a server before queueing: a
    line on stderr (a ``waiting`` event on stdout with --json), with the reason and the next try."""

    def notice(exc: Transient, delay: float, attempt: int) -> None:
        at = datetime.now().astimezone() + timedelta(seconds=delay)
        if as_json:
            event = {"event": "waiting", "reason": "server", "error_kind": exc.kind, "message": exc.message}
            print(json.dumps({**event, "next_try": at.isoformat(timespec="seconds"), "attempt": attempt}), flush=True)
        else:
            sys.stderr.write(
                f"waiting for the server: {escape_name(exc.message)}; next try (attempt {attempt}) at {at:%H:%M:%S}\n"
            )
            sys.stderr.flush()

    return notice


def snapshot_dict(s: Snapshot) -> dict[str, Any]:
    return {
        "bytes_done": s.bytes_done,
        "bytes_total": s.bytes_total,
        "files_done": s.files_done,
        "files_total": s.files_total,
        "files_failed": s.files_failed,
        "files_skipped": s.files_skipped,
        "planning": s.planning,
        "speed": round(s.speed, 1),
        "eta": None if s.eta is None else round(s.eta, 1),
        "elapsed": round(s.elapsed, 3),
    }


class CliListener:
    """Reports per-file problems as they happen, and every file as a JSON event with --json."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.states: dict[int, tuple[str, str | None]] = {}
        self.names_mapped = 0  # files copied under a name mapped for the destination (typed: NotKept.NAME)

    def task_finished(self, job_id: int, task: Task | NewTask, result: TaskResult) -> None:
        if self.output.as_json:
            with self.output.lock:
                self.output.emit(
                    {
                        "event": "file",
                        "job": job_id,
                        "kind": task.kind,
                        "path": task.rel,
                        "source": task.src,
                        "destination": result.dst or task.dst,
                        "state": result.state,
                        "level": result.level,
                        "evidence": [e.value for e in result.evidence],
                        "skip_reason": result.skip_reason,
                        "verified": result.verified,
                        "hash_algo": result.hash_algo,
                        "hash": result.hash,
                        "error_kind": result.error_kind,
                        "error": result.error,
                        "not_kept": list(result.not_kept),
                    }
                )
        elif result.state == "failed":
            self.output.message(f"failed: {escape_name(task.rel)}: {escape_name(result.error or '')}")
        elif result.state == "skipped" and result.error:
            self.output.message(f"skipped: {escape_name(task.rel)}: {escape_name(result.error)}")
        elif result.state == "done" and result.not_kept:
            # Copied and checked, but something of it was not kept (permissions, holes, a hard
            # link, extended attributes) or its name was mapped: said as it happens, never only in
            # the record.
            self.output.message(
                f"{_lossy_heading(result.not_kept)}: {escape_name(task.rel)}: {escape_name(result.verified or '')}"
            )
        if result.state == "done" and _name_mapped(result.not_kept):
            self.names_mapped += 1

    def job_changed(self, job_id: int, state: str, message: str | None) -> None:
        self.states[job_id] = (state, message)
        if self.output.as_json:
            with self.output.lock:
                self.output.emit({"event": "job", "job": job_id, "state": state, "message": message})
        elif state == "paused" and message:
            self.output.message(f"job {job_id} paused: {message}")

    def waiting(self, until: datetime | None, why: str) -> None:
        if until is not None:
            self.output.message(f"{why} (until {until:%Y-%m-%d %H:%M:%S})")


def _name_mapped(not_kept: tuple[str, ...]) -> bool:
    from ferry.transfers.copy import NotKept

    return NotKept.NAME in not_kept


def _lossy_heading(not_kept: tuple[str, ...]) -> str:
    """``copied, name mapped`` when the name was all that changed, else ``copied, not all kept``."""
    if _name_mapped(not_kept):
        return "copied, name mapped" if len(not_kept) == 1 else "copied, name mapped and not all kept"
    return "copied, not all kept"


def names_mapped_line(n: int) -> str | None:
    """The summary's word on files copied under a mapped name (``queue show --files`` says from what)."""
    if not n:
        return None
    return f"{n:,} file(s) copied under a name mapped for the destination (control characters shown as symbols)"


class RunListener(CliListener):
    """The CLI's listener for a run: as :class:`CliListener`, except that files which failed only
    because they differ from a file already at the destination (``ask`` with no one to ask) are
    not listed one by one: :func:`conflict_line` says how many, once, and how to decide."""

    def task_finished(self, job_id: int, task: Task | NewTask, result: TaskResult) -> None:
        if not self.output.as_json and result.state == "failed" and result.error_kind == ConflictUnanswered.kind:
            return
        super().task_finished(job_id, task, result)


def conflict_line(counts: OutcomeCounts, retry_job: int | None = None) -> str | None:
    """One line for every file that differs from what is already at the destination, or None."""
    n = counts.failed.get(ConflictUnanswered.kind, 0)
    if not n:
        return None
    how = f"ferry queue retry {retry_job} {CHOOSE_POLICY_HINT}" if retry_job is not None else CHOOSE_POLICY_HINT
    return f"{n:,} file(s) differ from what is already at the destination; choose with {how}"


def move_line(store: Store, job_id: int) -> str | None:
    """What a Move job moved and what it kept, and why; None for a copy."""
    from ferry.transfers import move

    if not store.job(job_id).options.move:
        return None
    p = move.progress(store, job_id)
    if p is None or not p.finished:
        return "nothing moved yet: sources are deleted once every file has finished"
    return p.describe()


class TerminalAsk:
    """``--on-conflict ask`` on a terminal: one question per file that differs from the one
    already there. A capital letter answers for every remaining conflict of that job only; the
    engine keeps that answer with the job (it survives a restart; later jobs ask again)."""

    CHOICES: ClassVar[dict[str, str]] = {
        "o": "overwrite",
        "s": "skip",
        "r": "rename",
        "n": "newer",
        "d": "different",
        "c": "resume",
    }

    def __init__(self, output: Output) -> None:
        self.output = output
        self.lock = threading.Lock()

    def __call__(self, conflict: Conflict) -> Answer:
        from ferry.transfers.copy import Answer

        with self.lock, self.output.lock:
            self.output.quiet_until_done = True
            self.output.clear_line()
            src, ex = conflict.source, conflict.existing
            tty = open("/dev/tty", "r+")  # noqa: SIM115 - closed below
            try:
                tty.write(
                    f"\n{escape_name(conflict.display)} already exists and differs (job {conflict.task.job_id})\n"
                    f"  existing: {format_size(ex.size)}, modified {_when(ex.mtime)}\n"
                    f"  source:   {format_size(src.size)}, modified {_when(src.mtime)}\n"
                    "[o]verwrite, [s]kip, [r]ename copy, [n]ewer only, [d]ifferent only, resume [c]; "
                    "capital letter = same for the rest of this job: "
                )
                tty.flush()
                while True:
                    line = tty.readline()
                    if not line:  # the terminal went away: fail this file rather than guess
                        raise AlreadyExists(f"{conflict.display} exists and the question went unanswered")
                    answer = line.strip()
                    if answer and answer.lower() in self.CHOICES:
                        break
                    tty.write("Please answer o, s, r, n, d or c (capital for the rest of this job): ")
                    tty.flush()
            finally:
                tty.close()
                self.output.quiet_until_done = False
        return Answer(self.CHOICES[answer.lower()], for_all=answer.isupper())


def _when(dt: datetime | None) -> str:
    return "unknown" if dt is None else dt.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def can_ask() -> bool:
    try:
        with open("/dev/tty"):
            return sys.stdin.isatty()
    except OSError:
        return False


def install_stop_handlers(runner: Runner) -> None:
    """Ctrl+C and SIGTERM stop the run cleanly: partial files kept, tasks back in the queue."""

    def handler(signum: int, frame: FrameType | None) -> None:
        runner.stop("interrupted")

    signal.signal(signal.SIGINT, handler)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, handler)


def run_in_foreground(runner: Runner, output: Output) -> RunSummary:
    """Run in this process with the live progress line; Ctrl+C/SIGTERM stop it cleanly."""
    install_stop_handlers(runner)
    output.start()
    try:
        return runner.run()
    finally:
        output.stop()


# ---------------------------------------------------------------- manifests


def manifest_lines(store: Store, job_id: int) -> Iterator[str]:
    """``sha256sum -c``-compatible lines for what arrived, relative to the destination folder.
    Only files checked at checksum level: a manifest line vouches for the file it names."""
    for t in store.tasks(job_id, states=("done",), kinds=("file",)):
        if not t.checksum_verified:
            continue
        rel = t.rel
        dst_name = t.dst.replace(os.sep, "/").rsplit("/", 1)[-1]
        rel_dir, _, rel_name = rel.rpartition("/")
        if dst_name != rel_name:  # renamed by the conflict policy: name what is really there
            rel = f"{rel_dir}/{dst_name}" if rel_dir else dst_name
        if "\\" in rel or "\n" in rel or "\r" in rel:
            esc = rel.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
            yield f"\\{t.hash}  {esc}\n"
        else:
            yield f"{t.hash}  {rel}\n"


def write_manifest(store: Store, job_id: int, target: str) -> int:
    job = store.job(job_id)
    if job.options.hash_algo is None:
        raise UsageError(f"Job {job_id} was verified by {job.options.verify}, so it has no checksums for a manifest")
    out: IO[str]
    count = 0
    if target == "-":
        for line in manifest_lines(store, job_id):
            sys.stdout.write(line.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
            count += 1
        sys.stdout.flush()
        return count
    tmp = f"{target}.ferry-tmp"
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as out:
        for line in manifest_lines(store, job_id):
            out.write(line)
            count += 1
    os.replace(tmp, target)
    return count


def manifest_left_out(store: Store, job_id: int) -> int:
    """Copied files the manifest does not vouch for: checked below checksum level, or by a
    checksum that is not the manifest's (an S3 MD5 ETag on the direct route records no SHA-256)."""
    return sum(1 for t in store.tasks(job_id, states=("done",), kinds=("file",)) if not t.checksum_verified)


def say_manifest(store: Store, job_id: int, target: str, count: int) -> None:
    left = manifest_left_out(store, job_id)
    where = "" if target == "-" else f" to {target}"
    sys.stderr.write(f"Wrote {count:,} entries{where}\n")
    if left:
        sys.stderr.write(
            f"{left:,} copied file(s) are not in the manifest: they were checked by size only, not at all, or "
            "by a checksum other than the manifest's (an S3 MD5 ETag when the store copied them) "
            f"(ferry queue show {job_id} --files says why)\n"
        )


def summary_text(s: Snapshot, counts: OutcomeCounts, verify: str, job_id: int | None = None) -> str:
    """What happened, from the typed outcomes: ``1,998 copied: 1,990 sha256-checked, 8 size only;
    2 skipped (identical); 1.2 GiB in 40 s (31 MB/s)``. Nothing below checksum level is called checked."""
    algo = verify if verify in ("sha256", "blake3") else None
    text = describe_counts(counts, algo)
    text += f"; {format_size(s.bytes_done)} in {format_duration(s.elapsed)}"
    if s.elapsed > 0:
        text += f" ({format_rate(s.bytes_done / s.elapsed)})"
    below = counts.below(Level.CHECKSUM) if algo else 0
    if job_id is not None and (below or counts.skipped_total or counts.failed_total):
        text += f" (ferry queue show {job_id} --files says why)"
    return text


def names_refused(counts: OutcomeCounts) -> int:
    """Files left out because their name cannot exist at the destination: the exit code says so."""
    return counts.skipped.get(SkipReason.UNREPRESENTABLE, 0) + counts.skipped.get(SkipReason.UNSAFE_NAME, 0)
