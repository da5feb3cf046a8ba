"""The queue's order (issue 20): a person moves a job to the top, before or after another, from the
command line or the window; the engine stores it and claims files in that order."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ferry.core.errors import UsageError
from ferry.transfers import control
from ferry.transfers.options import JobOptions
from ferry.transfers.store import SCHEMA_VERSION, NewTask, Store
from helpers import Ferry, describe

# Version 6 added the job's route: an older queue has no such columns.
_NO_ROUTE = "ALTER TABLE jobs DROP COLUMN route; ALTER TABLE jobs DROP COLUMN route_reason; "


def _job(store: Store, name: str, files: int = 3) -> int:
    job = store.create_job([f"/{name}"], f"/dst-{name}", JobOptions(), [(f"/{name}", f"/dst-{name}", "")])
    store.add_tasks(
        job,
        [NewTask("file", f"/{name}/{i}", f"/dst-{name}/{i}", str(i), 1, None) for i in range(files)],
    )
    return job


def _order(store: Store) -> list[int]:
    return [j.id for j in store.jobs()]


def test_a_job_moved_to_the_top_is_claimed_first_and_the_order_survives_a_restart(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    a, b, c = _job(store, "a"), _job(store, "b"), _job(store, "c")
    assert _order(store) == [a, b, c]
    assert {t.job_id for t in store.claim_tasks([a, b, c], 2)} == {a}  # first come, first served
    (change,) = control.reorder(store, [c], first=True)
    assert change.applied and change.job_id == c
    got = store.claim_tasks([a, b, c], 4)
    assert [t.job_id for t in got] == [c, c, c, a]  # c's files first, then a's last one
    store.close()
    again = Store(tmp_path / "q.db")
    assert _order(again) == [c, a, b]
    new = _job(again, "d")
    assert _order(again) == [c, a, b, new]  # a new job goes last
    again.close()


def test_before_after_last_and_what_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    a, b, c, d = (_job(store, n, 1) for n in "abcd")
    control.reorder(store, [d, c], before=b)
    assert _order(store) == [a, d, c, b]
    control.reorder(store, [a], after=b)
    assert _order(store) == [d, c, b, a]
    control.apply(store, control.QueueAction.BOTTOM, [d])
    assert _order(store) == [c, b, a, d]
    control.apply(store, control.QueueAction.TOP, [a])
    assert _order(store) == [a, c, b, d]
    for kwargs, words in (
        ({"before": a}, "relative to itself"),
        ({"after": 99}, "No job 99"),
        ({}, "Say where"),
        ({"first": True, "last": True}, "Say where"),
    ):
        with pytest.raises(UsageError, match=words):
            control.reorder(store, [a], **kwargs)
    with pytest.raises(UsageError, match="No job 42"):
        control.reorder(store, [42], first=True)
    assert _order(store) == [a, c, b, d]  # nothing changed by a refused request
    store.close()


def test_a_version_3_queue_keeps_its_order(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    store = Store(path)
    a, b = _job(store, "a", 1), _job(store, "b", 1)
    store.close()
    db = sqlite3.connect(path)
    db.executescript("ALTER TABLE jobs DROP COLUMN position; " + _NO_ROUTE + "PRAGMA user_version = 3;")
    db.close()
    store = Store(path)
    assert _order(store) == [a, b]
    c = _job(store, "c", 1)
    control.reorder(store, [c], first=True)
    assert _order(store) == [c, a, b]
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6


def test_queue_top_move_and_bottom_from_the_command_line(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"x")
    ids = []
    for n in range(3):
        res = ferry.ok("queue", "add", "--json", tmp_path / "f.txt", tmp_path / f"d{n}" / "")
        ids.append(int(json.loads(res.stdout)["id"]))
    a, b, c = ids
    res = ferry.ok("queue", "top", str(c))
    assert f"Queue order: {c} {a} {b}" in res.stdout, describe(res)
    ferry.ok("queue", "move", str(a), "--after", str(b))
    listed = [d["id"] for d in json.loads(ferry.ok("queue", "list", "--json").stdout)]
    assert listed == [c, b, a]
    ferry.ok("queue", "bottom", str(c))
    assert f"Queue order: {a} {b} {c}" in ferry.ok("queue", "move", str(a), "--before", str(b)).stdout
    res = ferry("queue", "move", str(a), "--before", str(a))
    assert res.returncode == 2 and "relative to itself" in res.stderr, describe(res)
    res = ferry("queue", "move", str(a))
    assert res.returncode == 2, describe(res)  # --before or --after is required
