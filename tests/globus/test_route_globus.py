"""Globus collection to collection is a direct route (issue 22): the job records and shows it, and
``--route relay`` never hands a job to the service."""

from __future__ import annotations

from pathlib import Path

from ferry.backends.registry import BackendPool
from ferry.cli import transfer_common as tc
from ferry.transfers.delegated import choose_route
from ferry.transfers.options import JobOptions, Route
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from ferry.transfers.tuning import TUNING_KEY
from globus.fake_globus import FakeGlobus


def test_collection_to_collection_records_route_direct(client_fake: FakeGlobus, tmp_path: Path) -> None:
    fake = client_fake
    a, b = fake.add_collection(name="A"), fake.add_collection(name="B")
    fake.put(a, "/x/1.dat", b"one")
    fake.put(b, "/y", None)
    fake.task_script = ["SUCCEEDED"]
    store = Store(tmp_path / "q.db")
    with BackendPool() as pool:
        srcs, dst, roots = tc.prepare_job([f"globus://{a}/x"], f"globus://{b}/y/", True, pool)
        job_id = tc.create_job(store, srcs, dst, roots, JobOptions(recursive=True, on_conflict="overwrite"))
        src_b, dst_b = roots[0].src_backend, roots[0].dst_backend
        assert choose_route(src_b, dst_b, "relay").delegation is None
        assert choose_route(src_b, dst_b, "direct").route is Route.DIRECT
    # --parallel auto, the default: the tuner of files at once has nothing to say about a job the
    # service moves (queue show used to print "parallel: auto: 4 files at once (measuring)")
    summary = Runner(store, RunConfig(job_ids=[job_id], parallel=8, auto_parallel=True)).run()
    assert summary.jobs[job_id] == "done"
    job = store.job(job_id)
    assert (job.route, job.route_reason) == ("direct", None)
    assert tc.route_text(job) == "direct"
    assert store.job_value(job_id, TUNING_KEY) is None
    store.close()
