"""``ferry sync`` between two Globus collections is refused with a clear line (exit 2, nothing
queued) rather than handing the service the whole tree; ``ferry compare`` reads both."""

from __future__ import annotations

from globus.conftest import gferry, globus_fake, globus_server
from globus.fake_globus import FakeGlobus
from helpers import Ferry, describe

__all__ = ["gferry", "globus_fake", "globus_server"]


def test_sync_between_collections_is_refused_and_compare_works(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a = globus_fake.add_collection(name="beamline")
    b = globus_fake.add_collection(name="scratch")
    globus_fake.put(a, "/run/scan.h5", b"scan bytes")
    globus_fake.put(b, "/run/old.h5", b"old")
    res = gferry("sync", "--delete", f"globus://{a}/run", f"globus://{b}/run")
    assert res.returncode == 2 and "does not do yet" in res.stderr, describe(res)
    assert gferry.jobs() == []
    res = gferry("compare", "-r", f"globus://{a}/run", f"globus://{b}/run")
    assert res.returncode == 1 and "only in A scan.h5" in res.stdout and "only in B old.h5" in res.stdout, describe(res)
