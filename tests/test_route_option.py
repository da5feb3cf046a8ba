"""``--route auto|direct|relay`` (issue 22): the choice, its errors, and the route each job records
and shows (summary line, ``--json``, ``queue show``, the window's job row)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferry.backends.base import Backend, JobDelegate, NoDirectRoute
from ferry.backends.memory import MemoryBackend
from ferry.core.address import Address
from ferry.core.errors import UsageError
from ferry.transfers.delegated import choose_route
from ferry.transfers.options import JobOptions, Route
from ferry.transfers.store import Store
from helpers import Ferry


class _Refusing(MemoryBackend):
    """A site that could go direct with its peer but cannot now (as the SSH host without curl)."""

    def delegation(self, src: Backend, dst: Backend) -> JobDelegate | None:
        raise NoDirectRoute("the host has no curl")


def _mem(cls: type[MemoryBackend] = MemoryBackend) -> MemoryBackend:
    return cls(Address("mem", "/", host="route-test"))


def test_relay_never_delegates_and_auto_says_why_not_direct() -> None:
    refusing, plain = _mem(_Refusing), _mem()
    assert choose_route(refusing, plain, "relay").route is Route.RELAY
    auto = choose_route(refusing, plain, "auto")
    assert (auto.route, auto.delegation, auto.reason) == (Route.RELAY, None, "the host has no curl")
    assert auto.describe() == "relay: the host has no curl"
    with pytest.raises(UsageError, match="--route direct: the host has no curl"):
        choose_route(refusing, plain, "direct")
    with pytest.raises(UsageError, match="no direct route from memory to memory"):
        choose_route(plain, _mem(), "direct")
    assert choose_route(plain, _mem(), "auto").reason is None


def test_an_unknown_route_is_refused() -> None:
    with pytest.raises(UsageError, match="Unknown route 'fast'"):
        JobOptions(route="fast")
    assert JobOptions.from_json(JobOptions(route="relay").to_json()).route is Route.RELAY


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"alpha")
    return src


def test_direct_without_a_direct_route_exits_2_with_the_reason_and_queues_nothing(ferry: Ferry, tmp_path: Path) -> None:
    src = _tree(tmp_path)
    for cmd in (["cp"], ["mv"], ["queue", "add"]):
        res = ferry(*cmd, "--route", "direct", "-r", src, tmp_path / "dst")
        assert res.returncode == 2, res
        assert res.stderr.strip().splitlines()[-1].endswith("--route direct: no direct route from local to local")
    res = ferry("sync", "--route", "direct", src, tmp_path / "dst")
    assert res.returncode == 2 and "no direct route from local to local" in res.stderr, res
    assert not (tmp_path / "dst").exists()
    assert (src / "a.txt").exists()  # the mv changed nothing
    assert ferry.jobs() == []


def test_the_job_records_and_shows_its_route(ferry: Ferry, tmp_path: Path) -> None:
    src = _tree(tmp_path)
    res = ferry.ok("cp", "-r", src, tmp_path / "dst")
    assert res.stderr.strip().splitlines()[-1].endswith("; route relay")
    out = ferry.ok("cp", "--json", "--route", "relay", "-r", src, tmp_path / "dst2").stdout
    result = [json.loads(line) for line in out.splitlines()][-1]
    assert (result["event"], result["route"], result["route_reason"]) == ("result", "relay", None)
    job = ferry.jobs()[-1]
    assert job["route"] == "relay" and job["options"]["route"] == "relay"
    assert "  route:    relay" in ferry.ok("queue", "show", str(job["id"])).stdout
    queued = json.loads(ferry.ok("queue", "add", "--json", "--route", "relay", "-r", src, tmp_path / "d3").stdout)
    assert queued["route"] is None and queued["options"]["route"] == "relay"  # decided when it starts
    shown = ferry.ok("queue", "show", str(queued["id"])).stdout
    assert "  route:    relay (as asked; decided when the job starts)" in shown
    res = ferry.ok("sync", "--route", "relay", src, tmp_path / "synced")
    assert "route relay" in res.stderr


def test_a_route_reason_is_kept_with_the_job(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    job = store.create_job(["/a"], "/b", JobOptions(), [("/a", "/b", "a")])
    store.set_route(job, "relay", "the host has no curl")
    got = store.job(job)
    assert (got.route, got.route_reason) == ("relay", "the host has no curl")
    store.close()


def test_the_window_job_row_says_direct() -> None:
    pytest.importorskip("PySide6", reason="the window's model needs Qt")
    from ferry.ui.queue_model import _job_title
    from ferry.ui.queue_service import JobRow

    row = JobRow(1, "done", None, ("s3://a/x",), "s3://b/", "sha256", 1, 1, 0, 0, 5, 5, True, 0.0, None)
    assert _job_title(row) == "#1  s3://a/x → s3://b/"
    assert _job_title(JobRow(**{**row.__dict__, "route": "direct"})) == "#1  direct: s3://a/x → s3://b/"
