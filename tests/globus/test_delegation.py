"""The delegated-transfer state machine in this process (scheduler + store + the local fake):
submit -> active -> succeeded / failed / cancelled, pause detaches and the next run reattaches,
and a crash between submitting and recording the task never submits the data twice."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ferry.backends.globus.tasks import KEY_SUBMISSION, KEY_TASK, VERIFIED_BY_GLOBUS
from ferry.backends.registry import BackendPool
from ferry.cli import transfer_common as tc
from ferry.credentials import globus_auth
from ferry.transfers.options import JobOptions
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import NewTask, Store, Task, TaskResult
from globus.fake_globus import FakeGlobus


@pytest.fixture
def fake(client_fake: FakeGlobus) -> FakeGlobus:
    return client_fake


class Events:
    """A listener that lets a test wait for the service's news instead of sleeping."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.submitted = threading.Event()
        self.finished: list[tuple[Task | NewTask, TaskResult]] = []

    def task_finished(self, job_id: int, task: Task | NewTask, result: TaskResult) -> None:
        self.finished.append((task, result))

    def job_changed(self, job_id: int, state: str, message: str | None) -> None:
        if message:
            self.messages.append(message)
            if "submitted" in message or "reattached" in message:
                self.submitted.set()

    def waiting(self, until: datetime | None, why: str) -> None:
        pass


def _job(fake: FakeGlobus, store: Store, **opts: Any) -> tuple[int, str, str]:
    a = fake.add_collection(name="A")
    b = fake.add_collection(name="B")
    fake.put(a, "/x/1.dat", b"one")
    fake.put(a, "/x/sub/2.dat", b"two!")
    fake.put(b, "/y", None)
    with BackendPool() as pool:
        srcs, dst, roots = tc.prepare_job([f"globus://{a}/x"], f"globus://{b}/y/", True, pool)
        job_id = tc.create_job(store, srcs, dst, roots, JobOptions(recursive=True, **opts))
    return job_id, a, b


def _run(store: Store, job_id: int, events: Events | None = None) -> tuple[Runner, Any]:
    runner = Runner(store, RunConfig(job_ids=[job_id], parallel=1), listener=events or Events())
    return runner, runner.run()


def test_submit_active_succeeded_records_each_file_verified(fake: FakeGlobus, tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    job_id, _, b = _job(fake, store, on_conflict="overwrite")
    fake.task_script = ["ACTIVE", "ACTIVE", "ACTIVE", "SUCCEEDED"]
    events = Events()
    runner, summary = _run(store, job_id, events)
    assert summary.jobs[job_id] == "done"
    assert fake.get(b, "/y/x/sub/2.dat") == b"two!"
    (task,) = fake.tasks.values()
    assert task.polls == 4  # followed until the end, one get_task per poll
    assert "sync_level" not in fake.submitted[0]  # overwrite: no sync level
    done = {t.rel: t for t in store.tasks(job_id, kinds=("file",))}
    assert set(done) == {"x/1.dat", "x/sub/2.dat"}
    assert {t.verified for t in done.values()} == {VERIFIED_BY_GLOBUS}
    snap = runner.accounting.snapshot()
    assert snap.files_done == 2 and snap.bytes_done == 7
    assert store.job_value(job_id, KEY_TASK) == task.task_id


def test_failed_task_with_faults_fails_the_job_with_the_service_message(fake: FakeGlobus, tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    job_id, _, _ = _job(fake, store)
    fake.task_script = ["ACTIVE", "FAULT", "FAILED"]
    events = Events()
    _, summary = _run(store, job_id, events)
    assert summary.jobs[job_id] == "failed"
    assert any("Permission denied on /restricted/file.bin" in m for m in events.messages)
    (root,) = list(store.tasks(job_id, states=("failed",)))
    assert root.rel == "x" and "permission denied on the destination" in (root.error or "")


def test_cancel_maps_to_cancel_task(fake: FakeGlobus, tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    job_id, _, b = _job(fake, store)
    fake.task_script = ["ACTIVE"]  # runs until told otherwise
    events = Events()
    runner = Runner(store, RunConfig(job_ids=[job_id], parallel=1), listener=events)
    result: dict[str, Any] = {}
    th = threading.Thread(target=lambda: result.update(s=runner.run()))
    th.start()
    assert events.submitted.wait(30)
    store.set_job_state(job_id, "cancelled", "cancelled by the test")
    th.join(30)
    assert not th.is_alive()
    assert result["s"].jobs[job_id] == "cancelled"
    (task,) = fake.tasks.values()
    assert ("POST", f"/v0.10/task/{task.task_id}/cancel") in fake.requests
    assert task.status == "FAILED" and task.fatal and task.fatal["code"] == "CANCELED"
    assert fake.get(b, "/y/x/1.dat") is None


def test_pause_detaches_and_the_next_run_reattaches(fake: FakeGlobus, tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    job_id, _, b = _job(fake, store)
    fake.task_script = ["ACTIVE"]
    events = Events()
    runner = Runner(store, RunConfig(job_ids=[job_id], parallel=1), listener=events)
    th = threading.Thread(target=runner.run)
    th.start()
    assert events.submitted.wait(30)
    store.set_job_state(job_id, "paused", "paused by the test")
    th.join(30)
    (task,) = fake.tasks.values()
    assert task.status == "ACTIVE"  # Globus keeps working while Ferry is paused
    assert not [p for _, p in fake.requests if p.endswith("/cancel")]
    task.script = ["SUCCEEDED"]
    task.polls = 0
    store.set_job_state(job_id, "queued", None)
    events2 = Events()
    _, summary = _run(store, job_id, events2)
    assert summary.jobs[job_id] == "done"
    assert len(fake.submitted) == 1  # reattached, not resubmitted
    assert any("reattached" in m for m in events2.messages)
    assert fake.get(b, "/y/x/1.dat") == b"one"


def test_crash_between_submit_and_record_does_not_submit_twice(fake: FakeGlobus, tmp_path: Path) -> None:
    """A process stored the submission id, submitted, and died before recording the task id."""
    store = Store(tmp_path / "q.db")
    job_id, a, b = _job(fake, store)
    fake.task_script = ["SUCCEEDED"]
    # What the dead process did: fetch an id, store it, submit with it.
    client = globus_auth.shared_auth().transfer_client()
    sid = client.get_submission_id()["value"]
    store.set_job_value(job_id, KEY_SUBMISSION, sid)
    from globus_sdk import TransferData

    td = TransferData(a, b, submission_id=sid)
    td.add_item("/x", "/y/x", recursive=True)
    first = client.submit_transfer(td)["task_id"]
    assert store.job_value(job_id, KEY_TASK) is None  # ... and died here
    _, summary = _run(store, job_id)
    assert summary.jobs[job_id] == "done"
    assert len(fake.tasks) == 1  # the resubmission was answered "Duplicate"
    assert store.job_value(job_id, KEY_TASK) == first
    assert [d["submission_id"] for d in fake.submitted] == [sid]


def test_crash_after_the_task_ended_only_records_it(fake: FakeGlobus, tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    job_id, _, _ = _job(fake, store)
    fake.task_script = ["SUCCEEDED"]
    _run(store, job_id)
    # As if the process died after the task ended but before the job was closed.
    store.set_job_state(job_id, "queued", None)
    _, summary = _run(store, job_id)
    assert summary.jobs[job_id] == "done"
    assert len(fake.submitted) == 1


def test_ask_policy_keeps_existing_files_and_says_so(fake: FakeGlobus, tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    job_id, _, b = _job(fake, store)
    fake.put(b, "/y/x/1.dat", b"already here")
    fake.task_script = ["SUCCEEDED"]
    events = Events()
    _, summary = _run(store, job_id, events)
    assert summary.jobs[job_id] == "done"
    assert fake.submitted[0]["sync_level"] == 0
    assert fake.get(b, "/y/x/1.dat") == b"already here"
    assert any("cannot stop to ask" in m for m in events.messages)


def test_encrypt_notify_deadline_label_from_job_values(fake: FakeGlobus, tmp_path: Path) -> None:
    import json

    from ferry.backends.globus.tasks import KEY_OPTIONS

    store = Store(tmp_path / "q.db")
    job_id, _, _ = _job(fake, store, on_conflict="newer")
    store.set_job_value(
        job_id,
        KEY_OPTIONS,
        json.dumps({"encrypt": True, "notify": ["succeeded"], "deadline": "2099-01-01T00:00:00+00:00", "label": "L"}),
    )
    fake.task_script = ["SUCCEEDED"]
    _run(store, job_id)
    doc = fake.submitted[0]
    assert doc["encrypt_data"] is True and doc["label"] == "L" and doc["deadline"].startswith("2099-01-01")
    assert (doc["notify_on_succeeded"], doc["notify_on_failed"], doc["notify_on_inactive"]) == (True, False, False)
    assert doc["sync_level"] == 2  # newer -> mtime


def test_collection_policy_forces_encryption(fake: FakeGlobus, tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    job_id, a, _ = _job(fake, store)
    fake.endpoints[a]["force_encryption"] = True
    fake.task_script = ["SUCCEEDED"]
    _run(store, job_id)
    assert fake.submitted[0]["encrypt_data"] is True
