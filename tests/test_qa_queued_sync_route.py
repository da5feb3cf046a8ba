"""QA of issue 23 from the command line: ``ferry queue show`` of a sync queued with ``queue add
--sync`` (which always relays) said ``route: relay (as asked; decided when the job starts)``,
though nobody asked for relay and nothing is left to decide."""

from __future__ import annotations

from pathlib import Path

from helpers import Ferry, describe


def test_queue_show_of_a_queued_sync_says_it_relays_without_claiming_it_was_asked(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"a")
    res = ferry("queue", "add", "--sync", src, tmp_path / "dst", "--start-at", "23:59")
    assert res.returncode == 0, describe(res)
    shown = ferry("queue", "show", "1")
    assert shown.returncode == 0, describe(shown)
    route = next(line for line in shown.stdout.splitlines() if line.strip().startswith("route:"))
    assert route.split(":", 1)[1].strip() == "relay (a sync in the queue always relays)", route
    assert not (tmp_path / "dst").exists()
