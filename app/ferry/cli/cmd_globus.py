"""``ferry globus``: log in and out, find collections, this computer, Timers, delegated transfers.

    ferry globus login | logout | whoami
    ferry globus search TEXT [--mine | --recent]
    ferry globus this-computer
    ferry globus transfer SRC DST [-r] [--encrypt] [--notify failed,inactive] [--deadline 2d] [--label L]
    ferry globus schedule SRC DST --at 02:00 [--every 1d] [--until 2026-12-31] [-r]
    ferry globus timers [list] | ferry globus timers delete ID

Browsing and copying use the ordinary commands with ``globus://COLLECTION/path`` addresses
(``ferry ls``, ``ferry cp``, ``ferry queue``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from ferry.core.errors import FerryError, UsageError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "globus",
        help="Globus: log in, find collections, this computer, delegated transfers, Timers",
        description=(
            "Globus collections are addressed as globus://COLLECTION_ID/path in every command (ls, cp, queue, "
            "share). A copy between two collections runs as one Globus task that keeps going when this "
            "computer sleeps. Set GLOBUS_CLIENT_ID and GLOBUS_CLIENT_SECRET to act as a service account "
            "(servers, overnight runners) instead of logging in."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  ferry globus login\n"
            "  ferry globus search 'APS beamline'\n"
            "  ferry ls -l globus://COLLECTION/~/run42/\n"
            "  ferry cp -r globus://SRC_ID/data/run42/ globus://DST_ID/project/run42/\n"
            "  ferry globus schedule -r globus://SRC_ID/data/ globus://DST_ID/backup/ --at 02:00 --every 1d"
        ),
    )
    gsub = p.add_subparsers(dest="globus_command", metavar="ACTION")

    q = gsub.add_parser("login", help="log in to Globus in a browser (tokens kept in the keychain)")
    q.add_argument("--force", action="store_true", help="log in again even if already logged in")
    q.set_defaults(handler=cmd_login)

    q = gsub.add_parser("logout", help="revoke and forget this computer's Globus tokens")
    q.set_defaults(handler=cmd_logout)

    q = gsub.add_parser("whoami", help="show who Ferry acts as on Globus")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.set_defaults(handler=cmd_whoami)

    q = gsub.add_parser("search", help="find collections by name")
    q.add_argument("text", nargs="?", default="", metavar="TEXT", help="words in the collection's name or description")
    scope = q.add_mutually_exclusive_group()
    scope.add_argument("--mine", action="store_true", help="only collections you own")
    scope.add_argument("--recent", action="store_true", help="only collections you used recently")
    q.add_argument("--limit", type=int, default=25, metavar="N", help="at most N results (default 25)")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.set_defaults(handler=cmd_search)

    q = gsub.add_parser("this-computer", help="this computer's Globus Connect Personal collection, if installed")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.set_defaults(handler=cmd_this_computer)

    q = gsub.add_parser(
        "transfer",
        help="copy between two collections as one Globus task, with Globus's own options",
        description="Like 'ferry cp' between two globus:// addresses, with the options of a Globus task.",
    )
    _transfer_args(q)
    q.add_argument("--deadline", metavar="WHEN", help="give up after this: a duration (2d, 12h) or an ISO time")
    q.add_argument("--json", action="store_true", help="print machine-readable progress and results (JSON lines)")
    q.add_argument("--no-wait", action="store_true", help="queue it and return; 'ferry queue run' follows it")
    q.set_defaults(handler=cmd_transfer)

    q = gsub.add_parser(
        "cancel", help="cancel the Globus task of a queued job, even when no 'ferry queue run' follows it"
    )
    q.add_argument("job", type=int, metavar="JOB", help="the job number (ferry queue list)")
    q.set_defaults(handler=cmd_cancel)

    q = gsub.add_parser(
        "schedule",
        help="run a transfer later or repeatedly on the Globus service (Timers), even with this computer off",
    )
    _transfer_args(q)
    q.add_argument("--at", required=True, metavar="HH:MM", help="first run: a time today or tomorrow, or an ISO date")
    q.add_argument("--every", metavar="INTERVAL", help="repeat: 1d, 12h, 30m (at least 1 hour is sensible)")
    q.add_argument("--until", metavar="WHEN", help="stop repeating after this date/time (ISO or HH:MM)")
    q.add_argument("--name", metavar="NAME", help="the timer's name (default: the label)")
    q.set_defaults(handler=cmd_schedule)

    q = gsub.add_parser("timers", help="list scheduled Globus transfers, or delete one")
    q.add_argument("action", nargs="?", choices=("list", "delete"), default="list")
    q.add_argument("timer_id", nargs="?", metavar="ID", help="with delete: the timer's id")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.set_defaults(handler=cmd_timers)

    p.set_defaults(handler=lambda args: _help(p))


def _help(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _transfer_args(q: argparse.ArgumentParser) -> None:
    q.add_argument("source", metavar="SRC", help="globus://COLLECTION/path")
    q.add_argument("dest", metavar="DST", help="globus://COLLECTION/path")
    q.add_argument("-r", "--recursive", action="store_true", help="copy folders and their contents")
    q.add_argument(
        "--on-conflict",
        choices=("skip", "overwrite", "newer", "different"),
        default="skip",
        help="existing files: keep them (skip, default), replace them, replace if the source is newer, "
        "or replace if checksums differ",
    )
    q.add_argument("--no-verify", action="store_true", help="do not have Globus compare checksums after each file")
    q.add_argument("--no-preserve-times", action="store_true", help="do not copy modification times")
    enc = q.add_mutually_exclusive_group()
    enc.add_argument("--encrypt", dest="encrypt", action="store_true", default=None, help="encrypt data in transit")
    enc.add_argument("--no-encrypt", dest="encrypt", action="store_false", help="do not ask for encryption")
    q.add_argument(
        "--notify",
        metavar="EVENTS",
        default="failed,inactive",
        help="e-mail on these task events: succeeded, failed, inactive, all or none (default failed,inactive)",
    )
    q.add_argument("--label", metavar="TEXT", help="the task's label, shown in the Globus web app")


def _auth() -> Any:
    from ferry.credentials.globus_auth import shared_auth

    return shared_auth()


# ---------------------------------------------------------------- login


def cmd_login(args: argparse.Namespace) -> int:
    auth = _auth()
    if auth.confidential:
        auth.login()
        print(f"Using the service account {auth.client_id} (GLOBUS_CLIENT_ID); its tokens are fetched when needed.")
        return 0
    if auth.logged_in() and not args.force:
        print("Already logged in to Globus ('ferry globus whoami'; 'ferry globus login --force' to log in again).")
        return 0
    auth.login(force=True)
    who = auth.whoami()
    print(f"Logged in to Globus as {who.get('username') or who.get('identity_id')}.")
    if auth.storage_notice:
        sys.stderr.write(f"ferry: {auth.storage_notice}\n")
    return 0


def cmd_logout(args: argparse.Namespace) -> int:
    auth = _auth()
    if auth.confidential:
        print(
            "Acting as a service account (GLOBUS_CLIENT_ID): unset GLOBUS_CLIENT_ID and GLOBUS_CLIENT_SECRET to stop."
        )
        return 0
    removed = auth.logout()
    print("Logged out of Globus: tokens revoked and forgotten." if removed else "Not logged in to Globus.")
    return 0


def cmd_whoami(args: argparse.Namespace) -> int:
    auth = _auth()
    if not auth.logged_in():
        sys.stderr.write("ferry: Not logged in to Globus: run 'ferry globus login'\n")
        return 1
    who = auth.whoami()
    if args.json:
        print(json.dumps(who))
    elif who["kind"] == "client":
        print(f"service account {who['client_id']} (from GLOBUS_CLIENT_ID)")
    else:
        name = f" ({who['name']})" if who.get("name") else ""
        print(f"{who['username']}{name}  identity {who['identity_id']}")
    return 0


# ---------------------------------------------------------------- finding collections


def _transfer_call(what: str, fn: Any) -> Any:
    from ferry.backends.globus import GlobusBackend
    from ferry.core.address import Address

    return GlobusBackend(Address("globus", "/", host="-")).call(what, fn)


def cmd_search(args: argparse.Namespace) -> int:
    scope = "my-endpoints" if args.mine else "recently-used" if args.recent else "all"
    if scope == "all" and not args.text:
        raise UsageError("Say what to look for: ferry globus search TEXT (or --mine / --recent)")
    kwargs: dict[str, Any] = {"filter_scope": scope, "limit": max(1, min(args.limit, 100))}
    if args.text:
        kwargs["filter_fulltext"] = args.text
    res = _transfer_call("searching collections", lambda tc: tc.endpoint_search(**kwargs))
    hits = [dict(d) for d in res.get("DATA") or []]
    here = _this_computer_quiet()
    rows = []
    if here is not None and _this_computer_matches(here.name, args.text):
        rows.append({"id": here.collection_id, "display_name": here.name, "state": here.state, "this_computer": True})
    rows += [_collection_row(d) for d in hits if here is None or d.get("id") != here.collection_id]
    if args.json:
        print(json.dumps(rows))
        return 0
    if not rows:
        print("No collections found.")
    for r in rows:
        print(_collection_line(r))
    return 0


def _this_computer_matches(name: str, text: str | None) -> bool:
    """This computer's collection is listed first when the search could mean it."""
    return not text or text.lower() in name.lower() or text.lower() in "this computer"


def _collection_row(d: dict[str, Any]) -> dict[str, Any]:
    """One collection the Transfer service found, as ``--json`` prints it."""
    return {
        "id": d.get("id"),
        "display_name": d.get("display_name") or d.get("canonical_name") or "",
        "owner": d.get("owner_string") or "",
        "type": d.get("entity_type") or "",
        "https": bool(d.get("https_server")),
    }


def _collection_line(r: dict[str, Any]) -> str:
    if r.get("this_computer"):
        return f"{r['id']}  {r['display_name']}  [{r['state']}]"
    https = "  https" if r["https"] else ""
    return f"{r['id']}  {r['display_name']}  ({r['owner']}){https}"


def _this_computer_quiet() -> Any:
    from ferry.backends.globus.local import this_computer
    from ferry.backends.globus.settings import GlobusSettings

    try:
        return this_computer(GlobusSettings.from_env(os.environ))
    except FerryError:
        return None


def cmd_this_computer(args: argparse.Namespace) -> int:
    from ferry.backends.globus.local import this_computer
    from ferry.backends.globus.settings import GlobusSettings

    here = this_computer(GlobusSettings.from_env(os.environ))
    if here is None:
        if args.json:
            print(json.dumps(None))
        else:
            print(
                "Globus Connect Personal is not installed here. Without it, files move between this computer "
                "and collections with HTTPS enabled (GCSv5); install it to make this computer a collection: "
                "https://www.globus.org/globus-connect-personal"
            )
        return 1
    if args.json:
        print(json.dumps({"id": here.collection_id, "name": here.name, "state": here.state, "note": here.note}))
    else:
        note = f" ({here.note})" if here.note else ""
        print(f"{here.name}: {here.state}{note}\n  {here.address}")
    return 0 if here.connected else 1


# ---------------------------------------------------------------- transfers


def _globus_pair(args: argparse.Namespace) -> tuple[Any, Any]:
    from ferry.credentials.sites import resolve_address

    src, dst = resolve_address(args.source), resolve_address(args.dest)
    if src.scheme != "globus" or dst.scheme != "globus":
        raise UsageError("Both ends must be Globus collections (globus://COLLECTION/path); use 'ferry cp' otherwise")
    return src, dst


def _notify(text: str) -> list[str]:
    words = {w.strip().lower() for w in text.split(",") if w.strip()}
    if "all" in words:
        return ["succeeded", "failed", "inactive"]
    if "none" in words:
        return []
    bad = words - {"succeeded", "failed", "inactive"}
    if bad:
        raise UsageError(
            f"Unknown --notify event(s): {', '.join(sorted(bad))} (succeeded, failed, inactive, all, none)"
        )
    return sorted(words)


def _extra_options(args: argparse.Namespace) -> dict[str, Any]:
    from ferry.backends.globus.tasks import iso_deadline

    extra: dict[str, Any] = {"notify": _notify(args.notify)}
    if args.encrypt is not None:
        extra["encrypt"] = bool(args.encrypt)
    if args.label:
        extra["label"] = args.label
    if getattr(args, "deadline", None):
        try:
            extra["deadline"] = iso_deadline(args.deadline)
        except ValueError:
            raise UsageError(f"Malformed --deadline {args.deadline!r} (a duration like 2d, or an ISO time)") from None
    return extra


def cmd_transfer(args: argparse.Namespace) -> int:
    """A delegated job with Globus's own options, then followed like 'ferry cp' (or left queued)."""
    from ferry.backends.globus.tasks import KEY_OPTIONS
    from ferry.backends.registry import BackendPool
    from ferry.cli import transfer_common as tc
    from ferry.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
    from ferry.transfers.options import JobOptions
    from ferry.transfers.scheduler import RunConfig, Runner
    from ferry.transfers.store import Store, runner_id

    _globus_pair(args)
    extra = _extra_options(args)
    options = JobOptions(
        recursive=args.recursive,
        verify="none" if args.no_verify else "sha256",
        on_conflict=args.on_conflict,
        preserve_mtime=not args.no_preserve_times,
        label=args.label or "",
    )
    pool = BackendPool()
    srcs, dst, roots = tc.prepare_job([args.source], args.dest, args.recursive, pool)
    store = Store()
    if args.no_wait:
        job_id = tc.create_job(store, srcs, dst, roots, options)
        store.set_job_value(job_id, KEY_OPTIONS, json.dumps(extra))
        print(f"queued job {job_id}; 'ferry queue run' submits and follows it")
        store.close()
        return EXIT_OK
    job_id = tc.create_job(store, srcs, dst, roots, options, state="running", runner=runner_id())
    store.set_job_value(job_id, KEY_OPTIONS, json.dumps(extra))
    runner = Runner(store, RunConfig(job_ids=[job_id], parallel=1), pool=pool)
    output = tc.Output(runner.accounting, as_json=args.json)
    runner.listener = _GlobusListener(output)
    summary = tc.run_in_foreground(runner, output)
    state = summary.jobs.get(job_id, store.job(job_id).state)
    job = store.job(job_id)
    code = EXIT_OK if state == "done" else EXIT_INTERRUPTED if summary.stopped == "interrupted" else EXIT_FAILED
    task_id = store.job_value(job_id, "globus.task_id")
    if args.json:
        output.emit(
            {
                "event": "result",
                "job": job_id,
                "state": state,
                "message": job.message,
                "globus_task": task_id,
                "exit_code": code,
            }
        )
    else:
        sys.stderr.write(
            f"job {job_id} {state} (Globus task {task_id})" + (f": {job.message}" if job.message else "") + "\n"
        )
    store.close()
    return code


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel the service's task and the job: a detached task (paused, or no runner) keeps going otherwise."""
    from ferry.backends.globus import GlobusBackend
    from ferry.backends.globus.tasks import KEY_TASK
    from ferry.core.address import parse_address
    from ferry.transfers.store import Store

    store = Store()
    try:
        job = store.job(args.job)
        task_id = store.job_value(job.id, KEY_TASK)
        if not task_id:
            raise UsageError(f"Job {job.id} has no Globus task (use 'ferry queue cancel {job.id}')")
        backend = GlobusBackend(parse_address(job.sources[0]))
        res = backend.call("cancelling the Globus task", lambda tc: tc.cancel_task(task_id))
        if job.state not in ("done", "failed", "cancelled"):
            store.set_job_state(job.id, "cancelled", f"Globus task {task_id} cancelled")
        print(f"Globus task {task_id}: {res.get('message') or res.get('code')}")
    finally:
        store.close()
    return 0


class _GlobusListener:
    """The CLI listener, plus the service's news (submitted, retrying after a fault) as lines."""

    def __init__(self, output: Any) -> None:
        from ferry.cli.transfer_common import CliListener

        self._inner = CliListener(output)
        self.output = output

    def task_finished(self, job_id: int, task: Any, result: Any) -> None:
        self._inner.task_finished(job_id, task, result)

    def job_changed(self, job_id: int, state: str, message: str | None) -> None:
        self._inner.job_changed(job_id, state, message)
        if state == "running" and message and not self.output.as_json:
            self.output.message(f"job {job_id}: {message}")

    def waiting(self, until: datetime | None, why: str) -> None:
        self._inner.waiting(until, why)


# ---------------------------------------------------------------- Timers


def _timers_call(what: str, fn: Any) -> Any:
    import globus_sdk

    from ferry.backends.globus.errors import map_error as _map_error

    auth = _auth()
    client = auth.timers_client()
    try:
        return fn(client)
    except (globus_sdk.GlobusAPIError, globus_sdk.NetworkError) as exc:
        raise _map_error(exc, what) from None


def cmd_schedule(args: argparse.Namespace) -> int:
    from globus_sdk import OnceTimerSchedule, RecurringTimerSchedule, TransferData, TransferTimer

    from ferry.backends.globus import GlobusBackend
    from ferry.backends.globus.tasks import SYNC_LEVELS
    from ferry.core.schedule import parse_start_at
    from ferry.core.units import parse_duration

    src, dst = _globus_pair(args)
    start = parse_start_at(args.at)
    extra = _extra_options(args)
    sb = GlobusBackend(src)
    entry = sb.stat(src.path)
    if entry.is_dir and not args.recursive:
        raise UsageError(f"{args.source} is a folder (use -r to copy folders)")
    label = args.label or args.name or f"Ferry: {src.path} to {dst.path}"
    kwargs: dict[str, Any] = {
        "label": label[:128],
        "verify_checksum": not args.no_verify,
        "preserve_timestamp": not args.no_preserve_times,
        "notify_on_succeeded": "succeeded" in extra["notify"],
        "notify_on_failed": "failed" in extra["notify"],
        "notify_on_inactive": "inactive" in extra["notify"],
    }
    if "encrypt" in extra:
        kwargs["encrypt_data"] = extra["encrypt"]
    level = SYNC_LEVELS.get(args.on_conflict)
    if level:
        kwargs["sync_level"] = level
    body = TransferData(src.host, dst.host, **kwargs)
    dst_path = dst.path
    if entry.is_dir or args.dest.endswith("/"):
        dst_path = dst.path if not args.dest.endswith("/") or entry.is_dir else dst.path.rstrip("/") + "/" + entry.name
    body.add_item(src.path, dst_path, recursive=entry.is_dir)
    schedule: Any
    if args.every:
        interval = int(parse_duration(args.every))
        if interval < 60:
            raise UsageError("--every must be at least a minute (Globus Timers' smallest interval)")
        end = None
        if args.until:
            end = {"condition": "time", "datetime": parse_start_at(args.until).astimezone(UTC)}
        schedule = RecurringTimerSchedule(interval, start=start.astimezone(UTC), **({"end": end} if end else {}))
    else:
        if args.until:
            raise UsageError("--until needs --every (a one-off run has nothing to stop)")
        schedule = OnceTimerSchedule(datetime=start.astimezone(UTC))
    timer = TransferTimer(name=(args.name or label)[:128], schedule=schedule, body=body)
    res = _timers_call("creating the timer", lambda c: c.create_timer(timer))
    data = res.get("timer") or res.data
    print(
        f"Timer {data.get('job_id')} created: first run {start:%Y-%m-%d %H:%M %Z}"
        + (f", then every {args.every}" if args.every else "")
        + (f" until {args.until}" if args.until else "")
        + "."
    )
    return 0


def cmd_timers(args: argparse.Namespace) -> int:
    if args.action == "delete":
        if not args.timer_id:
            raise UsageError("Say which timer: ferry globus timers delete ID (ids are in 'ferry globus timers')")
        _timers_call("deleting the timer", lambda c: c.delete_job(args.timer_id))
        print(f"Timer {args.timer_id} deleted.")
        return 0
    if args.timer_id:
        raise UsageError(f"Unexpected argument {args.timer_id!r}")
    res = _timers_call("listing timers", lambda c: c.list_jobs())
    jobs = [dict(j) for j in res.get("jobs") or []]
    if args.json:
        print(json.dumps(jobs, default=str))
        return 0
    if not jobs:
        print("No Globus timers.")
    for j in jobs:
        sched = j.get("schedule") or {}
        every = f"every {sched.get('interval_seconds')}s" if sched.get("type") == "recurring" else "once"
        nxt = j.get("next_run") or "-"
        print(f"{j.get('job_id')}  {j.get('status', ''):<8} {every:<14} next {nxt}  {j.get('name') or ''}")
    return 0
