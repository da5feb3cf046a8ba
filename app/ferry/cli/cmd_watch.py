"""``ferry watch``: ship each file of a folder as soon as it is complete."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

from ferry.cli import transfer_common as tc
from ferry.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from ferry.core.errors import UsageError
from ferry.core.progress import Accounting
from ferry.core.units import format_rate, format_size, parse_duration, parse_size

if TYPE_CHECKING:  # the watcher itself is imported only by 'ferry watch': other commands start faster
    from ferry.transfers.watch import WatchCounters, Watcher

# ferry.transfers.watch.DEFAULT_SETTLE, repeated so building the parser does not import the
# watcher (a test keeps the two equal).
DEFAULT_SETTLE = 30.0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "watch",
        help="ship files from a folder as soon as each one is complete",
        description="Watch SRC_DIR and ship every file to the folder DST as soon as it is complete: no longer "
        "changing for the settle time, or (on Linux) closed by its writer or renamed into place. Files go "
        "through the persistent queue with the same verification and conflict policies as 'ferry cp'; "
        "the watch is one long-lived job in 'ferry queue list'. Stopped or killed, the same command started "
        "again continues: verified files are not sent again and unsent ones are not forgotten.",
        epilog="Examples:\n"
        "  ferry watch /scratch/run42 archive:run42/ --pattern '*.h5' --settle 30s\n"
        "  ferry watch out/ sftp://dtn.example.org/archive/run42 -r --delete-after-verify --until out/DONE\n"
        "  ferry watch /data/instrument s3://bucket/raw/ --until-idle 2h\n"
        "Exit status: 0 when the watch ended (--until/--until-idle) with every file verified, 1 when files "
        "failed or the job was paused or cancelled, 2 bad input, 130 interrupted (Ctrl+C; run it again to "
        "continue).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", metavar="SRC_DIR", help="the folder to watch")
    p.add_argument("dest", metavar="DST", help="the folder files are shipped into (created if missing)")
    tc.add_job_options(p, timing=False)
    for action in p._actions:  # the shared option, in the words of a watch
        if action.dest == "recursive":
            action.help = "watch subfolders too (new ones included), keeping their layout under DST"
    p.add_argument(
        "--pattern",
        action="append",
        default=[],
        metavar="GLOB",
        help="ship only files whose name matches (repeatable), e.g. '*.h5'; by default every file whose name "
        "does not start with a dot (writers' temporary files)",
    )
    p.add_argument(
        "--settle",
        default=f"{int(DEFAULT_SETTLE)}s",
        metavar="DURATION",
        help="a file unchanged this long is complete, e.g. 30s, 2m (default: %(default)s)",
    )
    p.add_argument(
        "--delete-after-verify",
        action="store_true",
        help="delete each source file once its copy is verified by checksum (and it still matches)",
    )
    p.add_argument(
        "--allow-size-only-delete",
        action="store_true",
        help="with --delete-after-verify: also delete files whose copy could be checked by size only",
    )
    until = p.add_mutually_exclusive_group()
    until.add_argument(
        "--until-idle",
        metavar="DURATION",
        help="stop after no new or changed file for this long, once everything has shipped",
    )
    until.add_argument(
        "--until",
        metavar="FILE",
        help="stop when FILE exists (e.g. a DONE marker your code writes last), once everything has shipped",
    )
    p.add_argument("--poll", action="store_true", help="poll only (no inotify), e.g. for network file systems")
    tc.add_run_options(p)
    p.set_defaults(handler=cmd_watch, on_conflict="ask")


def _duration(text: str, what: str) -> float:
    try:
        return parse_duration(text)
    except UsageError as exc:
        raise UsageError(f"{what}: {exc.message}") from None


def progress_text(source: str, c: WatchCounters, speed: float) -> str:
    parts = [
        f"seen {c.seen:,}",
        f"shipped {c.shipped:,}",
        f"verified {c.verified:,}",
        f"deleted {c.deleted:,}",
        f"failed {c.failed:,}",
    ]
    extra = []
    if c.pending:
        extra.append(f"{c.pending:,} settling")
    if c.queued:
        extra.append(f"{c.queued:,} queued")
    if c.state not in ("watching", "starting"):
        extra.append(c.state)
    text = f"watch {tc.escape_name(source)}: " + ", ".join(parts)
    if extra:
        text += " (" + ", ".join(extra) + ")"
    return text + f"  {format_size(c.bytes_shipped)}  {format_rate(speed)}"


class _WatchOutput(tc.Output):
    """The live line shows the watch's counters instead of a percentage (a watch has no total)."""

    def __init__(self, watcher: Watcher, source: str, *, as_json: bool) -> None:
        super().__init__(Accounting(), as_json=as_json)
        self.watcher = watcher
        self.source = source

    def render(self, final: bool = False) -> None:
        if not self.watcher.job_id:
            return
        c = self.watcher.counters()
        with self.lock:
            if self.as_json:
                self.emit({"event": "watch", "job": self.watcher.job_id, **json.loads(c.to_json())})
            elif self.live and not self.quiet_until_done:
                line = progress_text(self.source, c, self.watcher.speed())
                pad = " " * max(0, self._line_len - len(line))
                self.err.write("\r" + line + pad + ("\n" if final else ""))
                self.err.flush()
                self._line_len = 0 if final else len(line)


def cmd_watch(args: argparse.Namespace) -> int:
    if args.allow_size_only_delete and not args.delete_after_verify:
        raise UsageError("--allow-size-only-delete only makes sense with --delete-after-verify")
    from ferry.transfers.watch import Watcher, WatchSpec

    settle = _duration(args.settle, "--settle")
    until_idle = _duration(args.until_idle, "--until-idle") if args.until_idle else None
    options = tc.job_options(args)
    options.recursive = args.recursive
    spec = WatchSpec(
        source=args.source,
        dest=args.dest,
        recursive=args.recursive,
        patterns=tuple(args.pattern),
        settle=settle,
        delete_after_verify=args.delete_after_verify,
        allow_size_only_delete=args.allow_size_only_delete,
        until_idle=until_idle,
        until_file=args.until,
        options=options,
        use_inotify=not args.poll,
    )
    run = tc.parallel_config(args.parallel)
    watcher = Watcher(
        spec,
        parallel=run["parallel"],
        auto_parallel=bool(run.get("auto_parallel")),
        bwlimit=parse_size(args.bwlimit) if args.bwlimit else None,
    )
    output = _WatchOutput(watcher, args.source, as_json=args.json)
    watcher.extra_listener = tc.CliListener(output)
    watcher.on_message = output.message
    if options.on_conflict == "ask" and not args.json and tc.can_ask():
        watcher.ask = tc.TerminalAsk(output)
    interrupted = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True
        watcher.stop(drain=False)

    job_id = watcher.start()
    signal.signal(signal.SIGINT, handler)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, handler)
    if args.json:
        output.emit({"event": "watching", "job": job_id, "source": args.source, "destination": args.dest})
    else:
        how = (
            f"until {args.until} exists"
            if args.until
            else f"until idle for {args.until_idle}"
            if until_idle
            else "until Ctrl+C"
        )
        output.message(
            f"Watching {tc.escape_name(args.source)} -> {tc.escape_name(args.dest)} as job {job_id} "
            f"(settle {args.settle}, {how})"
        )
    output.start()
    try:
        result = None
        while result is None:
            result = watcher.wait(0.25)
    finally:
        output.stop()
    c = result.counters
    if interrupted:
        code = EXIT_INTERRUPTED
    elif result.state == "done":
        code = EXIT_OK
    elif result.state in ("failed", "paused", "cancelled", "queued"):
        code = EXIT_FAILED
    else:
        code = EXIT_USAGE if result.reason == "usage" else EXIT_FAILED
    if args.json:
        output.emit(
            {
                **json.loads(c.to_json()),
                "event": "result",
                "job": job_id,
                "state": result.state,
                "watch_state": c.state,
                "reason": result.reason,
                "exit_code": code,
            }
        )
    else:
        left = c.queued + c.pending
        tail = {
            "until-file": f"{args.until} appeared",
            "until-idle": "idle",
            "cancelled": "the job was cancelled",
            "stopped": "stopped"
            + (f"; {left:,} file(s) not shipped yet: run the same command to continue" if left else ""),
        }.get(result.reason, result.reason)
        sys.stderr.write(
            f"job {job_id} {result.state} ({tail}): seen {c.seen:,}, shipped {c.shipped:,}, verified {c.verified:,}, "
            f"deleted {c.deleted:,}, failed {c.failed:,}, skipped {c.skipped:,}; {format_size(c.bytes_shipped)}\n"
        )
    return code
