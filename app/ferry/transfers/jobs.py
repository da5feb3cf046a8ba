"""Creating a job, for every front end: addresses resolved, the request checked, options fixed.

``ferry cp``/``mv``/``queue add``, the window's drops and F5/F6, ``ferry.api`` and the folder
watch all create their jobs here, so a job means the same whichever front end made it. Nothing is
changed before the whole request has been checked (:func:`prepare_job` raises ``UsageError``).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ferry.core.address import Address, parse_address
from ferry.core.errors import Transient, UsageError
from ferry.transfers.options import JobOptions

if TYPE_CHECKING:
    # The planner and the store (sqlite3) load when a job is really made: the command line
    # resolves addresses and builds its parser without them.
    from ferry.backends.registry import BackendPool
    from ferry.transfers.planner import Root
    from ferry.transfers.store import Store


def canonical(address: Address) -> str:
    """How a job records an address: sites resolved, so renaming a site never redirects a queued job."""
    if address.is_local:
        return address.path
    return str(replace(address, site=None, trailing_slash=False))


class _SiteNeeded(Exception):
    pass


def _no_sites(name: str) -> Address | None:
    raise _SiteNeeded


def resolve(text: str) -> Address:
    """A user-typed location as an address (``NAME:path`` through the saved sites)."""
    # URLs and plain paths never consult a site: parse those without loading the saved-sites
    # module (TOML, the keychain) into a short 'ferry cp'. NAME:path goes the full way.
    try:
        return parse_address(text, sites=_no_sites)
    except _SiteNeeded:
        pass
    from ferry.credentials.sites import resolve_address

    return resolve_address(text)


@dataclass(frozen=True)
class Prepared:
    """A checked request: where each source lands is decided now and stored with the job."""

    sources: list[Address]
    dest: Address
    roots: list[Root]


def prepare_job(
    sources: list[str], dest: str, recursive: bool, pool: BackendPool
) -> tuple[list[Address], Address, list[Root]]:
    """Parse and validate a copy request; raises UsageError (and changes nothing) if it is bad."""
    from ferry.transfers.planner import resolve_roots

    if not sources:
        raise UsageError("Give at least one source and a destination")
    src_addrs = [resolve(s) for s in sources]
    dst_addr = resolve(dest)
    if len({a.endpoint for a in src_addrs}) > 1:
        raise UsageError("All sources of one job must be on the same site; queue one job per site")
    roots = resolve_roots(src_addrs, dst_addr, pool, recursive=recursive)
    return src_addrs, dst_addr, roots


# Waiting out a server that is down or restarting before the job is queued: the scheduler's own
# backoff (RunConfig's defaults), so ``ferry cp --patience`` waits at the start as it does later.
BACKOFF_BASE, BACKOFF_CAP = 1.0, 60.0

RetryNotice = Callable[[Transient, float, int], None]  # (the failure, seconds until the next try, attempt)


def retry_delay(patience: float, first: float, attempts: int) -> float | None:
    """Seconds to wait after ``attempts`` transient failures in a row (the first at monotonic time
    ``first``), or None once the patience is spent: exponential with jitter, capped at a sixth of
    the patience (as :meth:`Runner._backoff <ferry.transfers.scheduler.Runner._backoff>`)."""
    left = first + patience - time.monotonic()
    if left <= 0:
        return None
    cap = min(BACKOFF_CAP, max(BACKOFF_BASE, patience / 6))
    delay = min(cap, BACKOFF_BASE * 2.0 ** min(attempts - 1, 30)) * random.uniform(0.5, 1.0)
    return min(delay, left)


def prepare(
    sources: list[str],
    dest: str,
    options: JobOptions,
    pool: BackendPool,
    *,
    on_retry: RetryNotice | None = None,
) -> Prepared:
    """:func:`prepare_job` and :func:`check_request`. A transient failure of these checks (the
    server down or restarting) is no bad input: it is raised as the :class:`Transient` it is (a
    failed transfer's exit code, not a usage error's), or, given ``on_retry`` and a job with a
    patience, tried again with backoff while the patience lasts, each wait said through
    ``on_retry`` (``ferry cp --patience``, ``ferry queue add --patience``)."""
    first = time.monotonic()
    attempts = 0
    while True:
        try:
            return check_request(sources, dest, options, pool)
        except Transient as exc:
            attempts += 1
            delay = retry_delay(options.patience, first, attempts) if on_retry and options.patience else None
            if delay is None or on_retry is None:
                raise
            on_retry(exc, delay, attempts + 1)
            pool.close()  # the next try connects afresh
            time.sleep(delay)


def check_request(sources: list[str], dest: str, options: JobOptions, pool: BackendPool) -> Prepared:
    """:func:`prepare_job`, plus what the options need of the request (a move's sources must be
    deletable, and a service that moves the bytes itself must be accepted for a move)."""
    srcs, dst, roots = prepare_job(sources, dest, options.recursive, pool)
    if options.xattrs:
        from ferry.transfers.planner import check_xattrs

        check_xattrs(roots)
    if options.move:
        check_move(options, roots)
    elif options.route == "direct" and roots:
        from ferry.transfers.delegated import choose_route

        choose_route(roots[0].src_backend, roots[0].dst_backend, options.route)  # UsageError with the reason
    return Prepared(srcs, dst, roots)


def check_move(options: JobOptions, roots: list[Root]) -> None:
    """Refuse, before anything changes, a move that could not delete its sources as promised."""
    from ferry.transfers.delegated import find_delegation, job_route

    if not roots:
        return
    first = roots[0]
    route = job_route(options, first.src_backend, first.dst_backend)
    delegation = find_delegation(first.src_backend, first.dst_backend, route)
    if delegation is not None and not options.allow_unverified_move:
        raise UsageError(
            "This transfer is moved and checked site to site (by Globus, or by the S3 store's server-side copy), "
            "not by Ferry's own checksum, "
            "and a move deletes a source only after Ferry's checksum check: copy it with 'ferry cp', or add "
            "--allow-unverified-move to delete each source once the service has checked its copy, or --route relay"
        )
    for root in roots:
        if root.src_backend.scheme != "local":
            continue
        folder = os.path.dirname(root.src.path.rstrip(os.sep)) or os.sep
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(
                f"Cannot move {root.src.path}: its folder {folder} is not writable, so the source could not be "
                "deleted (use 'ferry cp' to copy it)"
            )


def create_job(
    store: Store, srcs: list[Address], dest: Address, roots: list[Root], options: JobOptions, **kw: Any
) -> int:
    """Record a checked request as a job (``kw``: ``state``/``runner`` for a job run at once)."""
    return store.create_job(
        [canonical(a) for a in srcs],
        canonical(dest),
        options,
        [(r.src.path, r.dst_path, r.rel) for r in roots],
        **kw,
    )


def create(store: Store, prepared: Prepared, options: JobOptions, **kw: Any) -> int:
    return create_job(store, prepared.sources, prepared.dest, prepared.roots, options, **kw)


def new_job(
    store: Store, pool: BackendPool, sources: list[str], dest: str, options: JobOptions, **kw: Any
) -> int:
    """Check the request and record it: the whole of job creation in one call."""
    return create(store, prepare(sources, dest, options, pool), options, **kw)
