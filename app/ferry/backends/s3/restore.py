"""Archived objects (GLACIER, DEEP_ARCHIVE): where a restore stands, asking for one, and waiting
for it while a download is queued (an overnight queue rides through the staging)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from ferry.backends.s3.connection import S3Connection
from ferry.backends.s3.errors import Archived
from ferry.core.errors import UsageError

ARCHIVE_CLASSES = ("GLACIER", "DEEP_ARCHIVE")
_RESTORE_RE = re.compile(r'ongoing-request="(true|false)"')


def restore_state(head: Mapping[str, Any]) -> str:
    """Where an object stands for reading: ``available`` (not archived), ``archived`` (no restore
    asked), ``restoring`` (asked, not done) or ``restored`` (a temporary copy is readable)."""
    cls = head.get("StorageClass") or "STANDARD"
    if cls not in ARCHIVE_CLASSES:
        return "available"
    m = _RESTORE_RE.search(str(head.get("Restore") or ""))
    if m is None:
        return "archived"
    return "restoring" if m.group(1) == "true" else "restored"


def wait_for_restore(
    head: Callable[[], Mapping[str, Any]],
    what: str,
    *,
    poll: float,
    max_wait: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Block until an archived object is readable, re-checking every ``poll`` seconds: the staging
    an overnight queue must survive. Returns the final state; raises :class:`Archived` when no
    restore was requested, or when ``max_wait`` passes first."""
    deadline = clock() + max_wait
    while True:
        state = restore_state(head())
        if state in ("available", "restored"):
            return state
        if state == "archived":
            raise Archived(
                f"{what} is archived and no restore was requested: run 'ferry s3 restore {what}', then retry "
                "(the queue waits while the restore runs)"
            )
        if clock() >= deadline:
            raise Archived(f"{what} is still being restored after {max_wait / 3600:.1f} h; retry later")
        sleep(poll)


def wait_until_readable(conn: S3Connection, key: str) -> str:
    """:func:`wait_for_restore` for ``key``, as long and as often as the settings say."""
    return wait_for_restore(
        lambda: conn.head(key),
        conn.display(key),
        poll=conn.settings.restore_poll,
        max_wait=conn.settings.restore_max_wait,
    )


def request_restore(conn: S3Connection, key: str, *, days: int = 7, tier: str = "Standard") -> str:
    """Ask for a temporary restored copy of an archived object; returns the state afterwards."""
    head = conn.head(key)
    state = restore_state(head)
    if state == "available":
        raise UsageError(f"{conn.display(key)} is not archived ({head.get('StorageClass') or 'STANDARD'})")
    if state == "restoring":
        return state
    conn.call(
        f"requesting a restore of {conn.display(key)}",
        conn.client.restore_object,
        Key=key,
        RestoreRequest={"Days": days, "GlacierJobParameters": {"Tier": tier}},
    )
    return restore_state(conn.head(key))
