"""``ferry queue``: record jobs now, run them later (overnight, from cron, on a login node)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ferry.backends.registry import BackendPool
from ferry.cli import transfer_common as tc
from ferry.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from ferry.core.errors import UsageError
from ferry.core.hashing import VERIFY_MODES, VerifyMode
from ferry.core.outcomes import OutcomeCounts, describe_counts
from ferry.core.schedule import parse_start_at, parse_window
from ferry.core.units import format_duration, format_size, parse_size
from ferry.transfers import tuning
from ferry.transfers.options import CONFLICT_POLICIES, JobOptions

if TYPE_CHECKING:  # the store and scheduler load when a queue command runs, not for every 'ferry'
    from ferry.transfers.store import Job, Store, Task

_FORMATTER = argparse.RawDescriptionHelpFormatter


def register(sub: Any) -> None:
    q = sub.add_parser(
        "queue",
        help="record transfers and run them later (overnight, headless)",
        description="A persistent queue of transfer jobs. 'add' records a job without running it; 'run' "
        "processes the queue with no display needed and exits when it is empty or its time window ends. "
        "Jobs survive crashes: an interrupted job continues where it stopped.",
        epilog="Examples:\n  ferry queue add -r ~/data/run42 /mnt/archive/ --window 20:00-07:00\n"
        "  ferry queue run --parallel 8 --bwlimit 50M\n  ferry queue show 3 --manifest run42.sha256",
        formatter_class=_FORMATTER,
    )
    qs = q.add_subparsers(dest="queue_command", metavar="ACTION", required=True)

    p = qs.add_parser(
        "add",
        help="record a job without running it",
        description="Record a copy of SOURCE... to DEST (same rules as 'ferry cp') to run later.",
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="files or folders to copy")
    p.add_argument("dest", metavar="DEST", help="where they go")
    tc.add_job_options(p, timing=True, move="option")
    p.add_argument("--bwlimit", metavar="RATE", help="bandwidth limit for this job, e.g. 50M")
    p.add_argument(
        "--sync",
        action="store_true",
        help="a one-way sync of the SOURCE folder into DEST, compared when the queue runs it (as 'ferry sync')",
    )
    p.add_argument("--delete", action="store_true", help="with --sync: remove from DEST what SOURCE does not have")
    p.add_argument("--by", choices=("size-mtime", "checksum"), default="size-mtime", help="with --sync: how to compare")
    p.add_argument("--max-delete", type=int, metavar="N", help="with --sync --delete: delete at most N files")
    p.add_argument("--backup-dir", metavar="DIR", help="with --sync --delete: move what would be deleted into DIR")
    p.add_argument("--json", action="store_true", help="print the new job as JSON")
    p.set_defaults(handler=cmd_add)

    p = qs.add_parser("list", help="list jobs with their state and progress")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_list)

    p = qs.add_parser("show", help="one job in detail (its files, failures, manifest)")
    p.add_argument("job", type=int, metavar="JOB")
    p.add_argument("--files", action="store_true", help="list every file with its state and verification")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--manifest",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write a sha256sum-compatible manifest of what arrived (to FILE, or standard output)",
    )
    p.set_defaults(handler=cmd_show)

    for name, helptext, fn in (
        ("pause", "pause jobs (running files stop within a second; partial data is kept)", cmd_pause),
        ("resume", "resume paused jobs", cmd_resume),
        ("cancel", "cancel jobs (partial files are removed; finished files stay)", cmd_cancel),
        ("retry", "queue the failed files of jobs again", cmd_retry),
    ):
        p = qs.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        p.add_argument("jobs", nargs="*", type=int, metavar="JOB")
        p.add_argument("--all", action="store_true", help="every job this applies to")
        if name == "retry":
            p.add_argument(
                "--on-conflict",
                choices=CONFLICT_POLICIES,
                metavar="POLICY",
                help="change the job's conflict policy before retrying",
            )
        p.set_defaults(handler=fn)

    for name, helptext in (
        ("top", "move jobs to the front of the queue (their files are copied before other jobs')"),
        ("bottom", "move jobs to the end of the queue"),
    ):
        p = qs.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        p.add_argument("jobs", nargs="+", type=int, metavar="JOB")
        p.set_defaults(handler=cmd_reorder, where=name)
    p = qs.add_parser(
        "move",
        help="move jobs just before or after another job in the queue",
        description="Change the queue's order: JOB... (in the order given) go just before or after OTHER. "
        "Runners take files job by job in this order, so a job moved up gets the free workers first.",
    )
    p.add_argument("jobs", nargs="+", type=int, metavar="JOB")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--before", type=int, metavar="OTHER", help="put them just before job OTHER")
    where.add_argument("--after", type=int, metavar="OTHER", help="put them just after job OTHER")
    p.set_defaults(handler=cmd_reorder, where="move")

    p = qs.add_parser(
        "clear",
        help="remove finished jobs from the list",
        description="Remove finished jobs (done and cancelled) from the queue; files are not touched.",
    )
    p.add_argument("--failed", action="store_true", help="also remove failed jobs")
    p.add_argument("jobs", nargs="*", type=int, metavar="JOB", help="only these jobs")
    p.set_defaults(handler=cmd_clear)

    p = qs.add_parser(
        "wait",
        help="wait until a job has finished; exit 0 if every file was verified, 1 if not",
        description="Block until JOB finishes (run by 'ferry queue run', a watch or a script's Shipper). Exit "
        "status 0 when every file arrived verified, 1 when files failed or the job was cancelled or paused "
        "(e.g. the destination is full), or when --timeout passed first; as 'cp' would for a copy.",
    )
    p.add_argument("job", type=int, metavar="JOB")
    p.add_argument("--timeout", metavar="DURATION", help="give up after this long, e.g. 90s, 2h (exit 1)")
    p.add_argument("--json", action="store_true", help="print the job's final state as JSON")
    p.set_defaults(handler=cmd_wait)

    p = qs.add_parser(
        "run",
        help="process the queue headless; exit when it is empty or the window ends",
        description="Run queued jobs (all of them, or the JOBs given) until none is left, then exit. With "
        "--window, work only inside the window and exit when it closes; with --start-at, wait until then. "
        "Exit status 0 when every job finished verified, 1 otherwise.",
        formatter_class=_FORMATTER,
    )
    p.add_argument("jobs", nargs="*", type=int, metavar="JOB", help="only these jobs")
    tc.add_run_options(p)
    tc.add_timing_options(p)
    p.add_argument(
        "--patience",
        metavar="DURATION",
        help="for jobs without their own --patience: how long network outages, refused connections and busy "
        "servers are retried, reconnecting as needed, before a file fails (default: 1h)",
    )
    p.set_defaults(handler=cmd_run)


def _store() -> Store:
    from ferry.transfers.store import Store

    return Store()


def cmd_add(args: argparse.Namespace) -> int:
    from ferry.transfers import jobs

    sources, dest = args.sources, args.dest
    options = tc.job_options(args, bwlimit=args.bwlimit)
    if args.sync:
        job_id, store = _add_sync(args, options)
    else:
        if args.delete or args.max_delete is not None or args.backup_dir:
            raise UsageError("--delete, --max-delete and --backup-dir go with --sync")
        with BackendPool() as pool:
            prepared = jobs.prepare(sources, dest, options, pool, on_retry=tc.retry_notice(args.json))
        store = _store()
        job_id = jobs.create(store, prepared, options)
    if args.json:
        print(json.dumps(_job_dict(store, store.job(job_id))))
    else:
        when = ""
        if options.start_at:
            when += f", not before {datetime.fromtimestamp(options.start_at):%Y-%m-%d %H:%M}"
        if options.window:
            when += f", only between {options.window.replace('-', ' and ')}"
        verb = "move" if options.move else "sync" if args.sync else ""
        print(f"Queued {verb + ' ' if verb else ''}job {job_id}: {', '.join(sources)} -> {dest}{when}")
        if args.sync:
            print(
                "It compares the two folders when it runs"
                + (", then deletes after every copy verified" if args.delete else "")
            )
        print("Run it with: ferry queue run")
    return EXIT_OK


def _add_sync(args: argparse.Namespace, options: JobOptions) -> tuple[int, Store]:
    """'queue add --sync': checked now (bad input: exit 2, no job), compared when it runs."""
    from dataclasses import replace

    from ferry.transfers import sync
    from ferry.transfers.compare import By
    from ferry.transfers.jobs import resolve

    if len(args.sources) != 1:
        raise UsageError("--sync takes one SOURCE folder")
    if args.move:
        raise UsageError("--sync and --move do not go together")
    if (args.max_delete is not None or args.backup_dir) and not args.delete:
        raise UsageError("--max-delete and --backup-dir limit --delete: give --delete too")
    if args.max_delete is not None and args.max_delete < 0:
        raise UsageError("--max-delete takes a number of files, 0 or more")
    if args.delete and args.verify == "none":
        raise UsageError("--delete removes files only after their copies verified: use --verify sha256, blake3 or size")
    options = replace(options, recursive=True, on_conflict="overwrite", label="sync")
    src, dst = resolve(args.sources[0]), resolve(args.dest)
    backup = resolve(args.backup_dir) if args.backup_dir else None
    store = _store()
    with BackendPool() as pool:
        job_id = sync.add_sync_job(
            pool,
            store,
            src,
            dst,
            options,
            by=By(args.by),
            delete=args.delete,
            max_delete=args.max_delete,
            backup=backup,
        )
    return job_id, store


def _job_dict(store: Store, job: Job) -> dict[str, Any]:
    from ferry.transfers.store import JOB_FINISHED

    c = store.counts(job.id)
    return {
        "id": job.id,
        "state": job.state,
        "message": job.message,
        "sources": job.sources,
        "destination": job.dest,
        "created": datetime.fromtimestamp(job.created).astimezone().isoformat(timespec="seconds"),
        "planned": job.planned,
        "files_total": c.files,
        "bytes_total": c.bytes,
        "files_done": c.count("done"),
        "files_skipped": c.count("skipped"),
        "files_failed": c.count("failed"),
        "files_queued": c.count("queued") + c.count("running"),
        "bytes_done": c.size("done") + c.size("skipped"),
        "options": json.loads(job.options.to_json()),
        "error_kind": job.error_kind,
        "error_action": job.error_action,
        "route": job.route,
        "route_reason": job.route_reason,
        **_tuning(store, job.id),
        **({"outcomes": store.outcome_counts(job.id).to_json()} if job.state in JOB_FINISHED else {}),
        **_watch_counters(store, job.id),
    }


def _tuning(store: Store, job_id: int) -> dict[str, Any]:
    """``--parallel auto``'s latest choice for the job (files at once, why, the throughput), and
    how its last big file moved (TCP connections and streams, why)."""
    raw = store.job_value(job_id, tuning.TUNING_KEY)
    choice = tuning.Choice.from_json(raw) if raw else None
    streams = store.job_value(job_id, tuning.STREAMS_KEY)
    out: dict[str, Any] = {"streams": streams} if streams else {}
    if choice is not None:
        out["parallel"] = {"files": choice.files, "why": choice.why.value, "text": choice.describe()}
    return out


def _watch_counters(store: Store, job_id: int) -> dict[str, Any]:
    """A watch job's counters (seen, shipped, verified, deleted, failed, ...), as the watch saved them."""
    from ferry.transfers.watch import read_counters

    c = read_counters(store, job_id)
    return {"watch": json.loads(c.to_json())} if c is not None else {}


def _progress(d: dict[str, Any]) -> str:
    total = f"{d['files_total']:,}" + ("" if d["planned"] else "+")
    return f"{d['files_done'] + d['files_skipped']:,}/{total}"


def cmd_list(args: argparse.Namespace) -> int:
    store = _store()
    rows = [_job_dict(store, j) for j in store.jobs()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("The queue is empty.")
        return EXIT_OK
    print(f"{'JOB':>4}  {'STATE':9}  {'FILES':>13}  {'SIZE':>10}  {'FAILED':>6}  TRANSFER")
    for d in rows:
        src = d["sources"][0] + (f" (+{len(d['sources']) - 1})" if len(d["sources"]) > 1 else "")
        print(
            f"{d['id']:>4}  {d['state']:9}  {_progress(d):>13}  {format_size(d['bytes_total']):>10}  "
            f"{d['files_failed']:>6}  {tc.escape_name(src)} -> {tc.escape_name(d['destination'])}"
        )
        if "outcomes" in d and d["files_total"]:
            print(f"{'':>6}{describe_counts(store.outcome_counts(d['id']), _algo(d))}")
        if d["message"]:
            print(f"{'':>6}{d['message']}")
    return EXIT_OK


def _algo(d: dict[str, Any]) -> str | None:
    """The hash a listed job's files were checked with (which modes hash is the engine's to say)."""
    verify = d["options"].get("verify")
    return VerifyMode(verify).hash_algo if verify in VERIFY_MODES else None


def cmd_show(args: argparse.Namespace) -> int:
    store = _store()
    job = store.job(args.job)
    if args.manifest is not None:
        n = tc.write_manifest(store, job.id, args.manifest)
        tc.say_manifest(store, job.id, args.manifest, n)
        return EXIT_OK
    d = _job_dict(store, job)
    if args.json:
        if args.files:
            d["tasks"] = [_task_json(t) for t in store.tasks(job.id)]
        else:
            d["tasks"] = [
                {"path": t.rel, "state": t.state, "error": t.error} for t in store.tasks(job.id, states=("failed",))
            ]
        print(json.dumps(d, indent=2))
        return EXIT_OK
    _print_job(store, job, d)
    if args.files:
        _print_files(store, job)
    else:
        _print_failures(store, job)
    return EXIT_OK


def _task_json(t: Task) -> dict[str, Any]:
    return {
        "kind": t.kind,
        "path": t.rel,
        "source": t.src,
        "destination": t.dst,
        "state": t.state,
        "verified": t.verified,
        "level": t.level,
        "evidence": [e.value for e in t.evidence],
        "skip_reason": t.skip_reason,
        "error_kind": t.error_kind,
        "hash_algo": t.hash_algo,
        "hash": t.hash,
        "attempts": t.attempts,
        "error": t.error,
    }


def _options_text(opts: JobOptions) -> str:
    return (
        f"verify {opts.verify}, on conflict {opts.on_conflict}"
        + (", recursive" if opts.recursive else "")
        + (f", bwlimit {format_size(opts.bwlimit)}/s" if opts.bwlimit else "")
        + (f", window {opts.window}" if opts.window else "")
        + (f", start at {datetime.fromtimestamp(opts.start_at):%Y-%m-%d %H:%M}" if opts.start_at else "")
        + (f", patience {format_duration(opts.patience)}" if opts.patience else "")
    )


def _print_job(store: Store, job: Job, d: dict[str, Any]) -> None:
    """``ferry queue show``'s summary of one job, before its files."""
    print(f"Job {job.id}: {job.state}" + (f" — {job.message}" if job.message else ""))
    print(f"  from:     {', '.join(tc.escape_name(s) for s in job.sources)}")
    print(f"  to:       {tc.escape_name(job.dest)}")
    print(f"  created:  {d['created']}")
    print(f"  options:  {_options_text(job.options)}")
    print(f"  route:    {tc.route_text(job)}")
    if "parallel" in d:
        print(f"  parallel: {d['parallel']['text']}")
    if "streams" in d:
        print(f"  streams:  big files: {d['streams']}")
    print(
        f"  files:    {d['files_done']:,} done, {d['files_skipped']:,} skipped, {d['files_failed']:,} failed, "
        f"{d['files_queued']:,} to go, of {d['files_total']:,}{'' if job.planned else ' so far'}"
    )
    print(f"  size:     {format_size(d['bytes_done'])} of {format_size(d['bytes_total'])}")
    if "watch" in d:
        w = d["watch"]
        print(
            f"  watch:    {w['state']}; seen {w['seen']:,}, shipped {w['shipped']:,}, verified {w['verified']:,}, "
            f"deleted {w['deleted']:,}, failed {w['failed']:,}"
        )
    counts = store.outcome_counts(job.id)
    if counts.total:
        print("  outcome:  " + describe_counts(counts, job.options.hash_algo))


def _print_files(store: Store, job: Job) -> None:
    """``--files``: every file, with how far it was checked (or why it was skipped or failed)."""
    for t in store.tasks(job.id, states=None):
        note = f"  ({t.error})" if t.error else ""
        how = t.level or t.skip_reason or t.error_kind or ""
        print(f"  {t.state:9} {how:16} {tc.escape_name(t.rel)}  {t.verified or ''}{note}".rstrip())


def _print_failures(store: Store, job: Job) -> None:
    """The failed files and why, the first 50 of them."""
    for shown, t in enumerate(store.tasks(job.id, states=("failed",))):
        if shown == 0:
            print("  failures:")
        if shown >= 50:
            print("    … ('ferry queue show --files' lists everything)")
            break
        print(f"    {tc.escape_name(t.rel)}: {t.error}")


def _targets(store: Store, args: argparse.Namespace, states: tuple[str, ...]) -> list[int]:
    from ferry.transfers import control

    if args.all:
        return control.jobs_in(store, states)
    if not args.jobs:
        raise UsageError("Name the jobs (see 'ferry queue list'), or give --all")
    return list(args.jobs)


def _refused(change: Any, why: str) -> int:
    sys.stderr.write(f"ferry: job {change.job_id} is {change.state}; {why}\n")
    return EXIT_FAILED


def cmd_pause(args: argparse.Namespace) -> int:
    from ferry.transfers import control

    store = _store()
    code = EXIT_OK
    for c in control.pause(store, _targets(store, args, control.PAUSABLE)):
        if not c.applied:
            code = _refused(c, "only queued or running jobs can be paused")
            continue
        print(f"Paused job {c.job_id}" + (" (its runner stops within a second)" if c.runner_alive else ""))
    return code


def cmd_resume(args: argparse.Namespace) -> int:
    from ferry.transfers import control

    store = _store()
    code = EXIT_OK
    for c in control.resume(store, _targets(store, args, control.RESUMABLE)):
        if not c.applied:
            code = _refused(c, "not paused")
            continue
        print(f"Resumed job {c.job_id}; 'ferry queue run' picks it up")
    return code


def cmd_cancel(args: argparse.Namespace) -> int:
    from ferry.transfers import control

    store = _store()
    code = EXIT_OK
    with BackendPool() as pool:
        changes = control.cancel(store, _targets(store, args, control.CANCELLABLE), pool)
    for c in changes:
        if not c.applied:
            code = _refused(c, f"already {c.state}" if c.state in ("done", "failed", "cancelled") else "not cancelled")
            continue
        if c.problem:
            sys.stderr.write(f"ferry: {c.problem}\n")
        print(f"Cancelled job {c.job_id}")
    return code


def cmd_retry(args: argparse.Namespace) -> int:
    from ferry.transfers import control

    store = _store()
    total = 0
    code = EXIT_OK
    for c in control.retry(store, _targets(store, args, ("failed", "cancelled", "paused")), args.on_conflict):
        if not c.applied:
            code = _refused(c, "nothing to retry")
            continue
        total += c.files
        print(f"Job {c.job_id}: {c.files:,} file(s) queued again")
    if total == 0 and not args.on_conflict and code == EXIT_OK:
        print("Nothing to retry.")
    return code


def cmd_reorder(args: argparse.Namespace) -> int:
    from ferry.transfers import control

    store = _store()
    if args.where == "move":
        control.reorder(store, args.jobs, before=args.before, after=args.after)
    else:
        control.reorder(store, args.jobs, first=args.where == "top", last=args.where == "bottom")
    print("Queue order: " + " ".join(str(j.id) for j in store.jobs()))
    return EXIT_OK


def cmd_clear(args: argparse.Namespace) -> int:
    from ferry.transfers import control

    store = _store()
    n = control.clear(store, args.jobs or None, include_failed=args.failed)
    print(f"Removed {n} finished job(s) from the queue")
    return EXIT_OK


def cmd_wait(args: argparse.Namespace) -> int:
    import time

    from ferry.core.units import parse_duration

    timeout = parse_duration(args.timeout) if args.timeout else None
    store = _store()
    job = store.job(args.job)  # unknown job: a clear error (exit 2) at once
    deadline = None if timeout is None else time.monotonic() + timeout
    hinted = False
    started = time.monotonic()
    while job.state not in ("done", "failed", "cancelled", "paused"):
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            if args.json:
                print(json.dumps({**_job_dict(store, job), "timed_out": True}))
            sys.stderr.write(f"ferry: job {job.id} is still {job.state} after {args.timeout}\n")
            return EXIT_FAILED
        if not hinted and now - started > 2 and not job.runner_alive and not args.json:
            sys.stderr.write(f"Job {job.id} is {job.state}; waiting for 'ferry queue run' to run it\n")
            hinted = True
        time.sleep(min(0.25, max(0.0, deadline - now)) if deadline is not None else 0.25)
        job = store.job(args.job)
    d = _job_dict(store, job)
    if args.json:
        print(json.dumps({**d, "timed_out": False}))
    else:
        print(
            f"Job {job.id} {job.state}: {d['files_done']:,} file(s) done, {d['files_skipped']:,} skipped, "
            f"{d['files_failed']:,} failed" + (f" — {job.message}" if job.message else "")
        )
    return EXIT_OK if job.state == "done" else EXIT_FAILED


def cmd_run(args: argparse.Namespace) -> int:
    from ferry.core.units import parse_duration
    from ferry.transfers.scheduler import DEFAULT_PATIENCE, RunConfig, Runner

    config = RunConfig(
        **tc.parallel_config(args.parallel),
        patience=parse_duration(args.patience) if args.patience else DEFAULT_PATIENCE,
        bwlimit=parse_size(args.bwlimit) if args.bwlimit else None,
        window=parse_window(args.window) if args.window else None,
        start_at=parse_start_at(args.start_at) if args.start_at else None,
        job_ids=args.jobs or None,
    )
    store = _store()
    for j in args.jobs:
        store.job(j)  # unknown job -> clear error before anything starts
    runner = Runner(store, config)
    output = tc.Output(runner.accounting, as_json=args.json)
    listener = tc.RunListener(output)
    runner.listener = listener
    summary = tc.run_in_foreground(runner, output)
    snap = runner.accounting.snapshot()
    states = summary.jobs
    # A job that failed in an earlier run never hides: the run says so and does not exit 0
    # while it is in the queue (retry it, or cancel or clear it).
    earlier = _failed_before(store, args.jobs, states)
    ok = all(s == "done" for s in states.values()) and not earlier
    code = (
        EXIT_OK
        if ok and summary.stopped != "interrupted"
        else (EXIT_INTERRUPTED if summary.stopped == "interrupted" else EXIT_FAILED)
    )
    if args.json:
        output.emit(
            {
                "event": "result",
                "jobs": {str(k): v for k, v in states.items()},
                "failed_before": [j.id for j in earlier],
                "stopped": summary.stopped,
                "exit_code": code,
                "names_mapped": listener.names_mapped,
                **tc.snapshot_dict(snap),
            }
        )
        return code
    _say_run(store, states, summary.stopped, earlier, listener.names_mapped)
    return code


def _say_run(store: Store, states: dict[int, str], stopped: str, earlier: list[Job], names_mapped: int = 0) -> None:
    """What a run did, in words on standard error, and the failed jobs it left alone."""
    for job in earlier:
        sys.stderr.write(
            f"Job {job.id} failed"
            + (f": {job.message}" if job.message else "")
            + f" ('ferry queue show {job.id}' lists why; 'ferry queue retry {job.id}' tries again, "
            f"'ferry queue cancel {job.id}' gives it up and removes its partial files)\n"
        )
    if not states:
        sys.stderr.write("Nothing to run: the queue has no waiting jobs.\n")
    else:
        line = ", ".join(f"job {k} {v}" for k, v in sorted(states.items()))
        why = {"window": " (time window ended)", "interrupted": " (interrupted)"}.get(stopped, "")
        total = OutcomeCounts()
        notes: list[str] = []
        for job_id in states:
            counts = store.outcome_counts(job_id)
            total.add(counts)
            said = (tc.conflict_line(counts, job_id), tc.move_line(store, job_id))
            notes += [f"job {job_id}: {x}" for x in said if x]
        mapped = tc.names_mapped_line(names_mapped)
        sys.stderr.write(
            "\n".join([f"{describe_counts(total)}; {line}{why}", *notes, *([mapped] if mapped else [])]) + "\n"
        )


def _failed_before(store: Store, only: list[int], ran: dict[int, str]) -> list[Job]:
    """Failed jobs in the queue (of ``only``, if given) that this run did not touch."""
    return [j for j in store.jobs(("failed",)) if j.id not in ran and (not only or j.id in only)]
