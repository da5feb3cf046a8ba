"""``ferry compare`` reads two Globus collections, and ``ferry sync`` between them runs as one
Globus task (issue 23; more in tests/globus/test_sync_delegated.py)."""

from __future__ import annotations

from globus.conftest import gferry, globus_fake, globus_server
from globus.fake_globus import FakeGlobus
from helpers import Ferry, describe

__all__ = ["gferry", "globus_fake", "globus_server"]


def test_compare_works_and_sync_between_collections_is_one_task(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a = globus_fake.add_collection(name="beamline")
    b = globus_fake.add_collection(name="scratch")
    globus_fake.put(a, "/run/scan.h5", b"scan bytes")
    globus_fake.put(b, "/run/old.h5", b"old")
    res = gferry("compare", "-r", f"globus://{a}/run", f"globus://{b}/run")
    assert res.returncode == 1 and "only in A scan.h5" in res.stdout and "only in B old.h5" in res.stdout, describe(res)
    res = gferry("sync", "--delete", "--max-delete", "1", f"globus://{a}/run", f"globus://{b}/run")
    assert res.returncode == 0, describe(res)
    assert [d["DATA_TYPE"] for d in globus_fake.submitted] == ["transfer", "delete"]  # deleted after the task
    assert globus_fake.get(b, "/run/scan.h5") == b"scan bytes" and globus_fake.get(b, "/run/old.h5") is None
