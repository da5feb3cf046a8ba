"""``ferry cp`` and ``ferry mv``: copy (or move) now, with live progress, and exit 0 only when
every file is verified (and, for ``mv``, every source was deleted).

The copy is recorded in the queue like any other job, so a ``cp`` killed half way (or stopped by
a full disk) is finished later by ``ferry queue run`` without redoing what is done. ``mv`` is the
same job with the engine's move option: a source goes only once its copy is checksum-verified.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from ferry.backends.registry import BackendPool
from ferry.cli import transfer_common as tc
from ferry.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from ferry.core.outcomes import Level
from ferry.core.units import format_size

if TYPE_CHECKING:  # the engine is imported when a copy runs, not to build the parser
    from ferry.core.outcomes import OutcomeCounts
    from ferry.transfers.planner import Root
    from ferry.transfers.store import Job, Store


def register(sub: Any) -> None:
    p = sub.add_parser(
        "cp",
        help="copy files and folders now, verified",
        description="Copy SOURCE... to DEST with a live progress bar, verifying every file. "
        "Like cp: with one source, DEST is the new name unless it is an existing folder (or ends with /); "
        "with several, DEST is a folder. Exits 0 only when every file arrived and was verified.",
        epilog="Examples:\n  ferry cp -r ~/data/run42 /mnt/archive/\n"
        "  ferry cp --verify blake3 --parallel 8 -r results cluster:/scratch/me/\n"
        "  ferry cp --dry-run -r ~/data /mnt/archive/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="files or folders to copy")
    p.add_argument("dest", metavar="DEST", help="where they go")
    tc.add_job_options(p, timing=False)
    tc.add_run_options(p)
    p.add_argument("--dry-run", "-n", action="store_true", help="print what would be copied; change nothing")
    p.add_argument("--manifest", metavar="FILE", help="afterwards, write a sha256sum-style manifest of what arrived")
    p.set_defaults(handler=run)

    p = sub.add_parser(
        "mv",
        help="move files and folders now: each source is deleted once its copy is verified",
        description="Move SOURCE... to DEST: copy as 'ferry cp' does (same rules for DEST, same options), then "
        "delete each source once its copy was checked by checksum and the source still hashes the same; a "
        "folder goes once everything in it was moved. Anything not proven stays where it was, and the summary "
        "says why. Exits 0 only when every file arrived verified and every source was deleted. A move checked "
        "by size only (--verify size|none) is refused unless --allow-unverified-move accepts it.",
        epilog="Examples:\n  ferry mv -r ~/data/run42 /mnt/archive/\n  ferry mv -r results cluster:/scratch/me/\n"
        "  ferry mv --verify size --allow-unverified-move big.tar s3://bucket/old/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="files or folders to move")
    p.add_argument("dest", metavar="DEST", help="where they go")
    tc.add_job_options(p, timing=False, move="always")
    tc.add_run_options(p)
    p.add_argument("--dry-run", "-n", action="store_true", help="print what would be moved; change nothing")
    p.add_argument("--manifest", metavar="FILE", help="afterwards, write a sha256sum-style manifest of what arrived")
    p.set_defaults(handler=run, move=True)


def run(args: argparse.Namespace) -> int:
    from ferry.transfers import jobs, move
    from ferry.transfers.scheduler import RunConfig, Runner
    from ferry.transfers.store import Store, runner_id

    options = tc.job_options(args, bwlimit=args.bwlimit)
    pool = BackendPool()
    prepared = jobs.prepare(args.sources, args.dest, options, pool, on_retry=tc.retry_notice(args.json))
    if args.dry_run:
        return _dry_run(prepared.roots, args.json, move=options.move)

    store = Store()
    job_id = jobs.create(store, prepared, options, state="running", runner=runner_id())
    runner = Runner(store, RunConfig(job_ids=[job_id], **tc.parallel_config(args.parallel)), pool=pool)
    output = tc.Output(runner.accounting, as_json=args.json)
    listener = runner.listener = tc.RunListener(output)
    if options.on_conflict == "ask" and tc.can_ask():
        runner.ask = tc.TerminalAsk(output)
    summary = tc.run_in_foreground(runner, output)
    state = summary.jobs.get(job_id, store.job(job_id).state)
    snap = runner.accounting.snapshot()
    job = store.job(job_id)
    if args.manifest and options.hash_algo:
        tc.say_manifest(store, job_id, args.manifest, tc.write_manifest(store, job_id, args.manifest))
    counts = store.outcome_counts(job_id)
    code = EXIT_OK if state == "done" else EXIT_INTERRUPTED if summary.stopped == "interrupted" else EXIT_FAILED
    if code == EXIT_OK and tc.names_refused(counts):
        code = EXIT_FAILED  # as aws, s5cmd and rclone: a file left out for its name is not success
    moved = move.progress(store, job_id) if options.move else None
    if code == EXIT_OK and moved is not None and (moved.kept_total or not moved.finished):
        code = EXIT_FAILED  # a move that left sources behind did not do what was asked
    if args.json:
        size_only = counts.below(Level.CHECKSUM) if options.hash_algo else 0
        output.emit(
            {
                "event": "result",
                "job": job_id,
                "state": state,
                "message": job.message,
                "exit_code": code,
                "size_only": size_only,
                "outcomes": counts.to_json(),
                "names_mapped": listener.names_mapped,
                "route": job.route,
                "route_reason": job.route_reason,
                **({"move": json.loads(moved.to_json())} if moved is not None else {}),
                **tc.snapshot_dict(snap),
            }
        )
    else:
        _say(store, job, state, tc.summary_text(snap, counts, options.verify, job_id), counts, listener.names_mapped)
    store.close()
    return code


def _say(store: Store, job: Job, state: str, summary: str, counts: OutcomeCounts, names_mapped: int = 0) -> None:
    """The summary, one line each for names mapped, files that differ from what is there and what
    a move did, then the state."""
    lines = [f"{summary}; route {tc.route_text(job)}"]
    extra = (tc.names_mapped_line(names_mapped), tc.conflict_line(counts), tc.move_line(store, job.id))
    lines += [x for x in extra if x]
    if state != "done":
        lines.append(f"job {job.id} {state}" + (f": {job.message}" if job.message else ""))
    sys.stderr.write("\n".join(lines) + "\n")


def _dry_run(roots: list[Root], as_json: bool, *, move: bool = False) -> int:
    from ferry.transfers.planner import expand

    files = size = 0
    for task in expand(roots):
        if as_json:
            print(
                json.dumps(
                    {
                        "event": "plan",
                        "kind": task.kind,
                        "source": task.src,
                        "destination": task.dst,
                        "size": task.size,
                        "state": task.state,
                        "reason": task.error,
                    }
                )
            )
        else:
            what = {"file": "copy", "dir": "mkdir", "link": "link"}.get(task.kind, task.kind)
            if task.state != "queued":
                what = "skip"
            extra = f" ({format_size(task.size)})" if task.kind == "file" and task.state == "queued" else ""
            why = f"  [{task.error}]" if task.error else ""
            print(f"{what:5} {tc.escape_name(task.src)} -> {tc.escape_name(task.dst)}{extra}{why}")
        if task.kind == "file" and task.state == "queued":
            files += 1
            size += task.size or 0
    if as_json:
        print(json.dumps({"event": "plan-summary", "files": files, "bytes": size}))
    else:
        verb = "moved (each source deleted once its copy is verified)" if move else "copied"
        print(f"dry run: {files:,} file(s), {format_size(size)} would be {verb}; nothing was changed")
    return EXIT_OK
