"""File operations on a collection (service account, against the local fake): mkdir -p, rename,
delete through a monitored delete task, hostile names from a listing, saved sites."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.backends.base import Kind
from ferry.backends.globus import GlobusBackend
from ferry.core.address import parse_address
from ferry.core.errors import AlreadyExists, NotFound
from ferry.transfers.planner import Root, expand
from globus.fake_globus import DIR, FakeGlobus
from helpers import Ferry


def _backend(fake: FakeGlobus) -> tuple[GlobusBackend, str]:
    cid = fake.add_collection()
    return GlobusBackend(parse_address(f"globus://{cid}/")), cid


def test_mkdir_parents_and_existing_is_fine(client_fake: FakeGlobus) -> None:
    b, cid = _backend(client_fake)
    b.mkdir("/a/b/c", parents=True, exist_ok=True)
    assert client_fake.get(cid, "/a/b/c") is DIR
    b.mkdir("/a/b/c", parents=True, exist_ok=True)  # mkdir -p: an existing folder is not an error
    with pytest.raises(AlreadyExists):
        b.mkdir("/a/b/c", parents=False, exist_ok=False)
    with pytest.raises(NotFound):
        b.mkdir("/x/y", parents=False)


def test_rename_never_overwrites_unless_asked(client_fake: FakeGlobus) -> None:
    b, cid = _backend(client_fake)
    client_fake.put(cid, "/d/one", b"1")
    client_fake.put(cid, "/d/two", b"2")
    with pytest.raises(AlreadyExists):
        b.rename("/d/one", "/d/two")
    assert client_fake.get(cid, "/d/two") == b"2"
    b.rename("/d/one", "/d/three")
    assert client_fake.get(cid, "/d/three") == b"1" and client_fake.get(cid, "/d/one") is None


def test_delete_runs_a_delete_task(client_fake: FakeGlobus) -> None:
    b, cid = _backend(client_fake)
    client_fake.put(cid, "/d/sub/f", b"x")
    with pytest.raises(AlreadyExists):
        b.remove("/d", recursive=False)  # not empty
    b.remove("/d", recursive=True)
    assert client_fake.get(cid, "/d") is None and client_fake.get(cid, "/d/sub/f") is None
    (task,) = client_fake.tasks.values()
    assert task.kind == "DELETE" and task.status == "SUCCEEDED"


def test_hostile_names_in_a_listing_never_leave_the_destination(client_fake: FakeGlobus, tmp_path: Path) -> None:
    from ferry.backends.local import LocalBackend

    b, cid = _backend(client_fake)
    client_fake.put(cid, "/d/ok.txt", b"x")
    # A listing the service should never send, but might: dot-dot, separators, control characters.
    client_fake.extra_names[(cid, "/d")] = ["..", "../../escape", "/etc/passwd", "a\x01b"]
    dst = LocalBackend(parse_address(str(tmp_path)))
    root = Root(b, b.stat("/d"), dst, str(tmp_path / "d"), "d")
    tasks = {t.rel: t for t in expand([root])}
    assert "d/.." not in tasks  # never listed
    for bad in ("d/../../escape", "d//etc/passwd"):
        assert tasks[bad].state == "skipped" and "unsafe name" in (tasks[bad].error or ""), tasks[bad]
    assert tasks["d/ok.txt"].dst == str(tmp_path / "d" / "ok.txt")
    assert tasks["d/a\x01b"].dst.startswith(str(tmp_path / "d") + "/")


def test_entries_are_typed_and_sizes_honest(client_fake: FakeGlobus) -> None:
    b, cid = _backend(client_fake)
    client_fake.put(cid, "/d/f", b"12345")
    client_fake.put(cid, "/d/sub", None)
    entries = {e.name: e for e in b.list("/d")}
    assert entries["f"].kind is Kind.FILE and entries["f"].size == 5
    assert entries["sub"].kind is Kind.DIR and entries["sub"].size is None  # never a made-up size
    assert entries["f"].mtime is not None and entries["f"].mtime.tzinfo is not None
    caps = b.capabilities
    assert caps.delegated_transfer and not caps.streaming  # no HTTPS server on this collection
    client_fake.enable_https(cid)
    b2 = GlobusBackend(parse_address(f"globus://{cid}/"))
    assert b2.capabilities.streaming and b2.capabilities.range_read


def test_saved_site_for_a_collection(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    cid = globus_fake.add_collection()
    globus_fake.put(cid, "/data/run42/a.h5", b"x")
    gferry.ok("sites", "add", "beamline", f"globus://{cid}/data")
    res = gferry.ok("ls", "beamline:run42")
    assert "a.h5" in res.stdout
