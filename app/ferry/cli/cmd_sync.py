"""``ferry sync SRC DST``: make DST like SRC, one way, as one verified job in the queue.

The whole comparison is made first (nothing changes if a listing fails); what is missing or
different is copied as one job (finished by ``ferry queue run`` if interrupted); with ``--delete``
what SRC no longer has is removed from DST only after every copy verified, or moved under
``--backup-dir``. Exit 0 when DST matches SRC, 1 when a copy failed or something was kept, 2 on
bad input or a refused deletion (nothing changed).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from ferry.cli import transfer_common as tc
from ferry.cli.cmd_compare import BY_HELP
from ferry.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from ferry.core.errors import UsageError
from ferry.core.hashing import VERIFY_MODES
from ferry.core.units import format_size, parse_size

if TYPE_CHECKING:
    from ferry.backends.registry import BackendPool
    from ferry.core.address import Address
    from ferry.transfers.options import JobOptions
    from ferry.transfers.store import Store
    from ferry.transfers.sync import SyncPlan


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return n


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sync",
        help="make DEST like SOURCE (one way): copy what is missing or different, verified; --delete the rest",
        description="Compare SOURCE with DEST (two folders, any sites), then copy what is missing or different "
        "from DEST as one verified job in the queue (an interrupted sync is finished by 'ferry queue run'). "
        "With --delete, what SOURCE does not have is removed from DEST, only after every copy verified (one "
        "failed copy and nothing is deleted), and never when SOURCE is empty or more than half of DEST would "
        "go (unless --max-delete allows it). Folders are always compared recursively.",
        epilog="Examples:\n  ferry sync ~/data/run42 /mnt/archive/run42\n"
        "  ferry sync --delete --backup-dir /mnt/archive/.trash ~/data/run42 /mnt/archive/run42\n"
        "  ferry sync --dry-run --delete --by checksum results cluster:/scratch/me/results",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", metavar="SOURCE", help="the folder to copy from")
    p.add_argument("dest", metavar="DEST", help="the folder to make like SOURCE (created if missing)")
    p.add_argument("-r", "-R", "--recursive", action="store_true", help="accepted; sync is always recursive")
    p.add_argument("--by", choices=("size-mtime", "checksum"), default="size-mtime", help=BY_HELP)
    p.add_argument(
        "--delete", action="store_true", help="remove from DEST what SOURCE does not have, after every copy verified"
    )
    p.add_argument(
        "--backup-dir",
        metavar="DIR",
        help="with --delete: move what would be deleted into DIR (on DEST's site, outside DEST), keeping its path",
    )
    p.add_argument(
        "--max-delete",
        type=_count,
        metavar="N",
        help="with --delete: refuse (exit 2, nothing changed) to delete more than N files; without it, a sync "
        "that would delete more than half of DEST's files is refused",
    )
    p.add_argument(
        "--dry-run", "-n", action="store_true", help="print what would be copied, replaced and deleted; change nothing"
    )
    p.add_argument(
        "--verify",
        choices=VERIFY_MODES,
        default="sha256",
        help="how each copy is checked (default: sha256); --delete needs at least size",
    )
    tc.add_route_option(p)
    tc.add_run_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ferry.backends.registry import BackendPool
    from ferry.transfers import sync
    from ferry.transfers.compare import By
    from ferry.transfers.jobs import resolve
    from ferry.transfers.options import JobOptions
    from ferry.transfers.store import Store

    if args.backup_dir and not args.delete:
        raise UsageError("--backup-dir keeps what --delete removes: give --delete too")
    if args.max_delete is not None and not args.delete:
        raise UsageError("--max-delete limits --delete: give --delete too")
    if args.delete and args.verify == "none":
        raise UsageError("--delete removes files only after their copies verified: use --verify sha256, blake3 or size")
    src, dst = resolve(args.source), resolve(args.dest)
    backup = resolve(args.backup_dir) if args.backup_dir else None
    options = JobOptions(
        recursive=True,
        verify=args.verify,
        on_conflict="overwrite",
        label="sync",
        route=args.route,
        bwlimit=parse_size(args.bwlimit) if args.bwlimit else None,
    )
    with BackendPool() as pool:
        if args.route == "direct":
            from ferry.transfers.delegated import choose_route

            choose_route(pool.get(src), pool.get(dst), args.route)  # UsageError with the reason: exit 2
        if args.dry_run:
            plan = sync.plan_sync(pool, src, dst, by=By(args.by), delete=args.delete, record_actions=True)
            _check(args, plan, backup)
            return _dry_run(plan, args.json)
        store = Store()
        try:
            # The copies go into the job as the comparison finds them (held paused meanwhile), so
            # a first sync of a million files never holds a million tasks; a refusal removes it.
            plan, job_id = sync.queue_sync(
                pool,
                store,
                src,
                dst,
                by=By(args.by),
                options=options,
                delete=args.delete,
                info={"backup_dir": backup.path if backup else None},
                check=lambda p: _check(args, p, backup),
            )
            return _run(args, pool, store, plan, job_id, options, backup.path if backup else None)
        finally:
            store.close()


def _check(args: argparse.Namespace, plan: SyncPlan, backup: Address | None) -> None:
    from ferry.transfers import sync

    if args.delete:
        sync.check_deletions(plan, args.max_delete)
        sync.check_backup_dir(plan, backup)


def _dry_run(plan: SyncPlan, as_json: bool) -> int:
    size = plan.bytes
    for action, rel, n in plan.actions:
        if as_json:
            print(json.dumps({"event": "plan", "action": action.value, "path": rel, "size": n}, ensure_ascii=False))
        else:
            extra = f" ({format_size(n)})" if n is not None and action.value != "delete" else ""
            print(f"{action.value:7} {tc.escape_name(rel)}{extra}")
    line = _plan_line(plan) + f", {format_size(size)} to send; dry run: nothing was changed"
    if as_json:
        print(json.dumps({"event": "plan-summary", **_plan_counts(plan), "bytes": size}))
    else:
        print(line)
    return EXIT_OK


def _plan_counts(plan: SyncPlan) -> dict[str, int]:
    return {
        "copy": plan.copies,
        "replace": plan.replaces,
        "delete": plan.delete_files,
        "identical": plan.totals.same,
    }


def _plan_line(plan: SyncPlan) -> str:
    c = _plan_counts(plan)
    return (
        f"sync: {c['copy']:,} to copy, {c['replace']:,} to replace, {c['delete']:,} to delete, "
        f"{c['identical']:,} identical"
    )


def _run(
    args: argparse.Namespace,
    pool: BackendPool,
    store: Store,
    plan: SyncPlan,
    job_id: int | None,
    options: JobOptions,
    backup: str | None,
) -> int:
    from ferry.transfers import sync
    from ferry.transfers.scheduler import RunConfig, Runner

    out: dict[str, Any] = {"event": "result", **_plan_counts(plan), "job": job_id, "deleted": 0, "kept": 0}
    lines = [_plan_line(plan)]
    code = EXIT_OK
    try:
        if job_id is not None:
            runner = Runner(store, RunConfig(job_ids=[job_id], **tc.parallel_config(args.parallel)), pool=pool)
            output = tc.Output(runner.accounting, as_json=args.json)
            runner.listener = tc.RunListener(output)
            summary = tc.run_in_foreground(runner, output)
            counts = store.outcome_counts(job_id)
            job = store.job(job_id)
            lines.append(f"route {tc.route_text(job)}")
            lines.append(tc.summary_text(runner.accounting.snapshot(), counts, options.verify, job_id))
            out["outcomes"] = counts.to_json()
            out.update(route=job.route, route_reason=job.route_reason)
            if summary.stopped == "interrupted":
                code = EXIT_INTERRUPTED
            elif tc.names_refused(counts):
                code = EXIT_FAILED  # as 'ferry cp': a file left out for its name is not success
            # The job made its deletions as it ended, if every copy verified (the engine's rule,
            # the same when 'ferry queue run' finishes a sync that was stopped).
            made = sync.deletions_made(store, job_id)
            if made is None and plan.deletions:
                code = code or EXIT_FAILED
                wait = (
                    f"not deleting {plan.delete_files:,} file(s) yet: job {job_id} has not ended; they are made "
                    "when its copies have all verified ('ferry queue run' finishes it)"
                )
                lines.append(wait)
                out["refused"] = wait
                return code
            refusal, done = made if made is not None else (sync.deletion_refusal(store, job_id, options), None)
            if refusal is not None:
                code = code or EXIT_FAILED
                if plan.deletions:
                    lines.append(f"not deleting {plan.delete_files:,} file(s): {refusal}")
                out["refused"] = refusal
                return code
        else:
            done = sync.apply_deletions(plan, backup) if plan.deletions else None
        if plan.deletions and done is not None:
            out.update(deleted=done.deleted, kept=done.kept)
            where = f"moved to {plan.dst_backend.display(backup)}" if backup else "deleted"
            lines.append(f"{done.deleted:,} file(s) {where}" + (f", {done.kept:,} kept" if done.kept else ""))
            lines += done.errors[:20]
            if done.kept:
                code = EXIT_FAILED
        return code
    finally:
        out["exit_code"] = code
        if args.json:
            print(json.dumps(out))
        else:
            sys.stderr.write("\n".join(lines) + "\n")
