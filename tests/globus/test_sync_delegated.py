"""'ferry sync' between Globus collections (issue 23): one delegated Globus task with the sync
level of --by and checksums on, so the service copies only the differences; --delete is Ferry's
own (from the listings, with its guards), made only after the task verified every file."""

from __future__ import annotations

import json
from typing import Any

from globus.fake_globus import FakeGlobus
from helpers import Ferry, describe


def _trees(fake: FakeGlobus) -> tuple[str, str]:
    """A source with one file the destination has identical, one changed, one new; the
    destination also holds a file the source no longer has."""
    a = fake.add_collection(name="A")
    b = fake.add_collection(name="B")
    fake.put(a, "/src/same.dat", b"same bytes")
    fake.put(a, "/src/changed.dat", b"new version")
    fake.put(a, "/src/sub/new.dat", b"brand new")
    fake.put(b, "/dst/same.dat", b"same bytes")
    fake.put(b, "/dst/changed.dat", b"old")
    fake.put(b, "/dst/gone.dat", b"removed at the source")
    fake.put(b, "/dst/keep1.dat", b"k1")
    fake.put(a, "/src/keep1.dat", b"k1")
    for path in ("/src/same.dat", "/src/keep1.dat"):
        fake.mtimes[(b, "/dst" + path[4:])] = fake.mtimes[(a, path)]
    return a, b


def _show(gferry: Ferry) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(gferry.ok("queue", "show", "1", "--json", "--files").stdout)
    return out


def test_sync_is_one_task_with_mtime_level_copying_only_differences(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _trees(globus_fake)
    res = gferry("sync", f"globus://{a}/src/", f"globus://{b}/dst/")
    assert res.returncode == 0, describe(res)
    (doc,) = globus_fake.submitted
    assert doc["sync_level"] == 2  # "mtime": size differs or the source is newer
    assert doc["verify_checksum"] is True
    assert [(i["source_path"], i["destination_path"].rstrip("/"), i["recursive"]) for i in doc["DATA"]] == [
        ("/src", "/dst", True)
    ]
    assert globus_fake.get(b, "/dst/changed.dat") == b"new version"
    assert globus_fake.get(b, "/dst/sub/new.dat") == b"brand new"
    assert globus_fake.get(b, "/dst/gone.dat") == b"removed at the source"  # no --delete
    (task,) = globus_fake.tasks.values()
    moved = {t["destination_path"] for t in task.successful}
    assert moved == {"/dst/changed.dat", "/dst/sub/new.dat"}  # only the differences
    show = _show(gferry)
    assert show["route"] == "direct"
    files = {t["path"]: t for t in show["tasks"] if t["kind"] == "file"}
    assert set(files) == {"dst/changed.dat", "dst/sub/new.dat"}
    assert {t["state"] for t in files.values()} == {"done"}
    assert {t["verified"] for t in files.values()} == {"checksum verified by Globus"}


def test_a_file_globus_keeps_under_mtime_ends_skipped_not_verified(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    """Same size, the destination newer: Ferry's listings see a difference, the "mtime" level
    keeps the destination's file; its row says so instead of claiming a verified copy."""
    a, b = _trees(globus_fake)
    globus_fake.put(b, "/dst/same.dat", b"SAME BYTES")
    globus_fake.mtimes[(b, "/dst/same.dat")] = globus_fake.mtimes[(a, "/src/same.dat")] + 60
    res = gferry("sync", f"globus://{a}/src/", f"globus://{b}/dst/")
    assert res.returncode == 0, describe(res)
    assert globus_fake.get(b, "/dst/same.dat") == b"SAME BYTES"
    files = {t["path"]: t for t in _show(gferry)["tasks"] if t["kind"] == "file"}
    assert files["dst/same.dat"]["state"] == "skipped"
    assert "sync level mtime" in (files["dst/same.dat"]["error"] or "")
    assert files["dst/changed.dat"]["state"] == "done"


def test_by_checksum_is_sync_level_checksum(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _trees(globus_fake)
    res = gferry("sync", "--by", "checksum", f"globus://{a}/src/", f"globus://{b}/dst/")
    assert res.returncode == 0, describe(res)
    (doc,) = globus_fake.submitted
    assert doc["sync_level"] == 3 and doc["verify_checksum"] is True
    assert globus_fake.get(b, "/dst/changed.dat") == b"new version"


def test_by_checksum_runs_the_task_even_where_the_listings_agree(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    """Same size and time, different bytes: only the service's checksum comparison sees it."""
    a, b = _trees(globus_fake)
    globus_fake.put(b, "/dst/same.dat", b"SAME BYTES")
    globus_fake.mtimes[(b, "/dst/same.dat")] = globus_fake.mtimes[(a, "/src/same.dat")]
    res = gferry("sync", "--by", "checksum", f"globus://{a}/src/", f"globus://{b}/dst/")
    assert res.returncode == 0, describe(res)
    assert globus_fake.get(b, "/dst/same.dat") == b"same bytes"
    files = {t["path"]: t for t in _show(gferry)["tasks"] if t["kind"] == "file"}
    assert files["dst/same.dat"]["state"] == "done"


def test_delete_happens_only_after_the_task_succeeded(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _trees(globus_fake)
    globus_fake.task_script = ["ACTIVE", "ACTIVE", "SUCCEEDED"]
    res = gferry("sync", "--delete", f"globus://{a}/src/", f"globus://{b}/dst/")
    assert res.returncode == 0, describe(res)
    assert (
        "delete_destination_extra" not in globus_fake.submitted[0]
        or not globus_fake.submitted[0]["delete_destination_extra"]
    )
    assert globus_fake.get(b, "/dst/gone.dat") is None
    assert globus_fake.get(b, "/dst/same.dat") == b"same bytes"
    assert globus_fake.get(b, "/dst/changed.dat") == b"new version"


def test_failed_task_keeps_every_deletion(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _trees(globus_fake)
    globus_fake.task_script = ["ACTIVE", "FAILED"]
    res = gferry("sync", "--delete", f"globus://{a}/src/", f"globus://{b}/dst/")
    assert res.returncode == 1, describe(res)
    assert globus_fake.get(b, "/dst/gone.dat") == b"removed at the source"
    assert "nothing was deleted" in res.stdout + res.stderr


def test_guards_refuse_with_exit_2_and_submit_nothing(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _trees(globus_fake)
    globus_fake.put(a, "/empty", None)
    res = gferry("sync", "--delete", f"globus://{a}/empty/", f"globus://{b}/dst/")
    assert res.returncode == 2 and "is empty" in res.stderr, describe(res)
    res = gferry("sync", "--delete", "--max-delete", "0", f"globus://{a}/src/", f"globus://{b}/dst/")
    assert res.returncode == 2 and "--max-delete" in res.stderr, describe(res)
    globus_fake.put(b, "/dst/extra1.dat", b"1")
    globus_fake.put(b, "/dst/extra2.dat", b"2")
    globus_fake.put(b, "/dst/extra3.dat", b"3")
    res = gferry("sync", "--delete", f"globus://{a}/src/", f"globus://{b}/dst/")
    assert res.returncode == 2 and "more than half" in res.stderr, describe(res)
    assert globus_fake.submitted == []
    assert globus_fake.get(b, "/dst/gone.dat") == b"removed at the source"


def test_queued_sync_between_collections_is_refused(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    """'queue add --sync' would relay every file through Ferry: refused, nothing queued."""
    a, b = _trees(globus_fake)
    res = gferry("queue", "add", "--sync", f"globus://{a}/src/", f"globus://{b}/dst/")
    assert res.returncode == 2 and "run 'ferry sync'" in res.stderr, describe(res)
    assert gferry.jobs() == [] and globus_fake.submitted == []
