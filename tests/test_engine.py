"""The transfer engine on the memory backend: retries, failures, corruption, control, re-planning."""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import pytest

from ferry.core.errors import PermissionDenied, Transient
from ferry.transfers.planner import Root, expand
from ferry.transfers.scheduler import RunConfig, Runner, RunSummary
from ferry.transfers.store import NewTask, Store, Task
from helpers import Ferry, MemSite, Recorder, mem_job, wait_until

MiB = 1 << 20


def put_tree(site: MemSite, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        site.put(f"/src/{rel}", data)


def run(store: Store, job_id: int, listener: Recorder | None = None, **config: object) -> RunSummary:
    cfg = RunConfig(**{"parallel": 2, "backoff_base": 0.01, "job_ids": [job_id], **config})  # type: ignore[arg-type]
    return Runner(store, cfg, listener=listener).run()


def file_tasks(store: Store, job_id: int) -> dict[str, Task]:
    return {t.rel: t for t in store.tasks(job_id, kinds=("file",))}


# ---- retries ----


def test_transient_errors_retry_with_backoff_then_succeed(site: MemSite, store: Store) -> None:
    data = os.urandom(300_000)
    put_tree(site, {"f.bin": data, "g.bin": b"other"})
    site.store.fail_write_after("/dst/f.bin", 100_000, Transient("Connection dropped"), times=2)
    job = mem_job(store, [site.url("/src/f.bin"), site.url("/src/g.bin")], site.url("/dst/"))
    summary = run(store, job)
    assert summary.jobs == {job: "done"}
    assert site.get("/dst/f.bin") == data and site.get("/dst/g.bin") == b"other"
    t = file_tasks(store, job)["f.bin"]
    assert t.state == "done" and t.attempts == 3 and t.verified == "sha256 match"
    assert t.error is None
    assert site.partials() == []


def test_backoff_spaces_the_attempts_and_gives_up(site: MemSite, store: Store) -> None:
    put_tree(site, {"f.bin": b"x" * 1000})
    attempts: list[float] = []
    site.store.fail_on("open_write", "/dst/f.bin", Transient("Server busy"), times=None)
    original = site.store._claim

    def counting_claim(kind: str, path: str, op: str = "") -> object:
        if op == "open_write" and "/dst/f.bin" in path:
            attempts.append(time.monotonic())
        return original(kind, path, op)

    site.store._claim = counting_claim
    job = mem_job(store, [site.url("/src/f.bin")], site.url("/dst/"))
    summary = run(store, job, backoff_base=0.2, max_attempts=3)
    assert summary.jobs == {job: "failed"}
    t = file_tasks(store, job)["f.bin"]
    assert t.state == "failed" and t.attempts == 3
    assert "Server busy" in (t.error or "")
    assert len(attempts) == 3
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    # Exponential backoff with jitter in [0.5, 1]: at least 0.1 s, then at least 0.2 s.
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2, gaps
    assert "ferry queue retry" in (store.job(job).message or "")  # what the person is told to do


def test_permanent_error_fails_the_task_and_queue_retry_fixes_it(site: MemSite, store: Store, ferry: Ferry) -> None:
    put_tree(site, {"f.bin": b"precious", "g.bin": b"fine"})
    site.store.fail_on("open_write", "/dst/f.bin", PermissionDenied("Permission denied: /dst/f.bin"), times=1)
    job = mem_job(store, [site.url("/src/f.bin"), site.url("/src/g.bin")], site.url("/dst/"))
    assert run(store, job).jobs == {job: "failed"}
    tasks = file_tasks(store, job)
    f = tasks["f.bin"]
    assert f.state == "failed" and f.attempts == 1  # no retries for it
    assert f.error == "Permission denied: /dst/f.bin"
    assert tasks["g.bin"].state == "done"
    assert not site.exists("/dst/f.bin")

    res = ferry.ok("queue", "retry", str(job))
    assert "1 file(s) queued again" in res.stdout
    assert store.job(job).state == "queued"
    assert run(store, job).jobs == {job: "done"}
    assert site.get("/dst/f.bin") == b"precious"
    assert file_tasks(store, job)["f.bin"].state == "done"


# ---- corruption ----


def test_corrupted_write_is_retried_once(site: MemSite, store: Store) -> None:
    data = os.urandom(200_000)
    put_tree(site, {"f.bin": data})
    site.store.corrupt_on_commit("/dst/f.bin", times=1)
    job = mem_job(store, [site.url("/src/f.bin")], site.url("/dst/"))
    assert run(store, job).jobs == {job: "done"}
    assert site.get("/dst/f.bin") == data  # the damaged first copy did not survive
    assert file_tasks(store, job)["f.bin"].verified == "sha256 match"
    assert site.partials() == []


@pytest.mark.parametrize("verify", ["sha256", "blake3"])
def test_corruption_twice_fails_loudly(site: MemSite, store: Store, verify: str) -> None:
    put_tree(site, {"f.bin": os.urandom(200_000), "ok.bin": b"fine"})
    site.store.corrupt_on_commit("/dst/f.bin", times=2)
    job = mem_job(store, [site.url("/src/f.bin"), site.url("/src/ok.bin")], site.url("/dst/"), verify=verify)
    assert run(store, job).jobs == {job: "failed"}
    t = file_tasks(store, job)["f.bin"]
    assert t.state == "failed" and "checksum mismatch" in (t.error or "").lower(), t
    assert t.error_kind == "checksum-mismatch"
    assert not site.exists("/dst/f.bin")  # never under its final name
    assert site.partials() == []
    assert site.get("/dst/ok.bin") == b"fine"


# ---- pause, resume, cancel from another process ----


def test_pause_resume_cancel_act_within_a_second(site: MemSite, store: Store, ferry: Ferry) -> None:
    a_data, b_data = os.urandom(16 * MiB), os.urandom(8 * MiB)
    site.put("/src/a.bin", a_data)
    site.put("/src/b.bin", b_data)
    # Each job limited to 2 MiB/s, so both are still running when we act on them (B needs 4 s:
    # at 2 s it could finish before a 'ferry queue pause' started on a loaded machine landed).
    job_a = mem_job(store, [site.url("/src/a.bin")], site.url("/dst/"), bwlimit=2 * MiB)
    job_b = mem_job(store, [site.url("/src/b.bin")], site.url("/dst/"), bwlimit=2 * MiB)
    rec = Recorder()
    runner = Runner(store, RunConfig(parallel=4), listener=rec)
    result: list[RunSummary] = []
    thread = threading.Thread(target=lambda: result.append(runner.run()), daemon=True)
    thread.start()
    try:

        def partial(name: str) -> int:
            return sum(size for path, size in site.partials("/dst") if name in path)

        wait_until(lambda: partial("b.bin") > 0 and partial("a.bin") > 0, 10, what="both files under way")

        def control(action: str, job: int, state: str) -> None:
            """Run ``ferry queue ACTION JOB``; the runner must report ``state`` within a second
            of the command's return (the event may even come before it: the process still exits)."""
            before = time.monotonic()
            ferry.ok("queue", action, str(job))
            after = time.monotonic()
            seen = wait_until(lambda: rec.when(job, state, before), 5, what=f"job {job} {state}")
            assert seen - after <= 1.0, (action, seen - after)

        # pause B (the real command, in another process)
        control("pause", job_b, "paused")
        stopped_at = partial("b.bin")
        assert 0 < stopped_at < len(b_data)  # partial data kept
        time.sleep(0.3)
        assert partial("b.bin") == stopped_at  # nothing more written
        assert store.job(job_b).state == "paused"
        assert thread.is_alive()  # A keeps the run going

        # resume B: the running runner takes it up again, from where it stopped
        sizes: list[int] = []
        watching = threading.Event()

        def watch() -> None:
            while not watching.is_set():
                sizes.extend(size for path, size in site.partials("/dst") if "b.bin" in path)
                time.sleep(0.002)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        control("resume", job_b, "running")
        wait_until(lambda: partial("b.bin") > stopped_at, 5, what="job B writing again")
        watching.set()
        watcher.join()
        assert min(sizes) >= stopped_at, (min(sizes), stopped_at)  # continued, not restarted

        # cancel A: it stops, and its partial file goes
        control("cancel", job_a, "cancelled")
        assert partial("a.bin") == 0 and not site.exists("/dst/a.bin")
        assert store.job(job_a).state == "cancelled"

        thread.join(timeout=30)
        assert not thread.is_alive()
    finally:
        runner.stop()
        thread.join(timeout=10)
    assert result and result[0].jobs[job_b] == "done" and result[0].jobs[job_a] == "cancelled"
    assert site.get("/dst/b.bin") == b_data
    assert site.partials() == []
    b_task = file_tasks(store, job_b)["b.bin"]
    assert b_task.state == "done" and b_task.verified == "sha256 match"


def test_a_pause_taken_back_before_the_runner_lets_go_keeps_the_job_going(
    site: MemSite, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pause, then resume at once: the runner has seen the pause and is stopping the job's file
    when the resume lands. The job must not end up paused (it did: the runner's release wrote
    'paused' over the resume, and the transfers panel's job then never finished); it runs on,
    from the partial data it kept."""
    from ferry.ui import queue_actions  # Qt-free: the panel's actions, as ``ferry queue`` does them

    data = os.urandom(6 * MiB)
    site.put("/src/big.bin", data)
    job = mem_job(store, [site.url("/src/big.bin")], site.url("/dst/"), bwlimit=2 * MiB)
    real_release = Store.release_job
    taken_back: list[str] = []

    def resume_first(self: Store, job_id: int, state: str, *args: object, **kwargs: object) -> None:
        if job_id == job and state == "paused" and not taken_back:
            other = Store(store.path)  # the user's resume, from another connection, just before
            try:
                taken_back.append(f"resumed {queue_actions.resume(other, [job])}")
            finally:
                other.close()
        real_release(self, job_id, state, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "release_job", resume_first)
    runner = Runner(store, RunConfig(parallel=2, backoff_base=0.01))
    result: list[RunSummary] = []
    thread = threading.Thread(target=lambda: result.append(runner.run()), daemon=True)
    thread.start()
    try:
        wait_until(lambda: any(size for _p, size in site.partials("/dst")), 10, what="the file under way")
        assert queue_actions.pause(store, [job]) == 1
        thread.join(timeout=30)
        assert not thread.is_alive()
    finally:
        runner.stop()
        thread.join(timeout=10)
    assert taken_back == ["resumed 1"]  # the interleaving really happened
    assert result and result[0].jobs[job] == "done"  # the same run took it up again and finished it
    assert store.job(job).state == "done"
    assert site.get("/dst/big.bin") == data and site.partials() == []
    assert file_tasks(store, job)["big.bin"].verified == "sha256 match"


# ---- re-planning after a crash ----


def test_add_tasks_twice_inserts_once(site: MemSite, store: Store) -> None:
    put_tree(site, {"a": b"1", "d/b": b"2", "d/e/c": b"3"})
    job = mem_job(store, [site.url("/src")], site.url("/dst/"), recursive=True)
    from ferry.backends.memory import MemoryBackend
    from ferry.core.address import parse_address

    b = MemoryBackend(parse_address(site.url("/")))
    ((src_path, dst_path, rel),) = store.job(job).roots
    rows = list(expand([Root(b, b.stat(src_path), b, dst_path, rel)]))
    assert len(rows) == 6  # 3 folders, 3 files
    assert store.add_tasks(job, rows) == rows
    ids = [t.id for t in store.tasks(job)]
    assert store.add_tasks(job, rows) == []
    assert store.add_tasks(job, [*rows[:2], NewTask("file", "/src/new", "/dst/src/new", "src/new", 1, None)]) == [
        NewTask("file", "/src/new", "/dst/src/new", "src/new", 1, None)
    ]
    assert [t.id for t in store.tasks(job)][:6] == ids
    assert len(list(store.tasks(job))) == 7


def test_replanning_an_interrupted_plan_never_doubles_a_task(site: MemSite, store: Store) -> None:
    files = {f"d{i % 3}/f{i}.bin": os.urandom(1000 + i) for i in range(30)}
    put_tree(site, files)
    job = mem_job(store, [site.url("/src")], site.url("/dst/"), recursive=True)
    from ferry.backends.memory import MemoryBackend
    from ferry.core.address import parse_address

    b = MemoryBackend(parse_address(site.url("/")))
    ((src_path, dst_path, rel),) = store.job(job).roots
    rows = list(expand([Root(b, b.stat(src_path), b, dst_path, rel)]))
    # A planner that crashed half way: some rows recorded, the job not marked planned.
    store.add_tasks(job, rows[: len(rows) // 2])
    assert not store.job(job).planned
    assert run(store, job).jobs == {job: "done"}
    tasks = list(store.tasks(job))
    assert len(tasks) == len(rows) == len({t.src for t in tasks})
    assert sorted(t.rel for t in tasks if t.kind == "file") == sorted(f"src/{r}" for r in files)
    assert all(t.state == "done" for t in tasks)
    for r, data in files.items():
        assert site.get(f"/dst/src/{r}") == data
    # Planning again after the fact adds nothing.
    assert store.add_tasks(job, rows) == []


def test_engine_local_to_memory_and_back(site: MemSite, store: Store, tmp_path: Path) -> None:
    """Across endpoints the bytes stream through the hasher and are read back at the far end."""
    data = os.urandom(3 * MiB + 5)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.bin").write_bytes(data)
    job = mem_job(store, [str(tmp_path / "src")], site.url("/dst/"), recursive=True)
    assert run(store, job).jobs == {job: "done"}
    assert site.get("/dst/src/x.bin") == data
    back = mem_job(store, [site.url("/dst/src")], str(tmp_path / "back"), recursive=True)
    assert run(store, back).jobs == {back: "done"}
    assert (tmp_path / "back" / "x.bin").read_bytes() == data


def test_a_file_finished_before_a_crash_is_checked_not_copied_again(site: MemSite, store: Store) -> None:
    """The runner died after renaming a file into place but before recording it: the next run
    verifies what is there instead of writing it again."""
    data = os.urandom(100_000)
    site.put("/src/f.bin", data)
    site.put("/dst/keep.txt", b"")
    job = mem_job(store, [site.url("/src/f.bin")], site.url("/dst/"))
    from ferry.backends.memory import MemoryBackend
    from ferry.core.address import parse_address

    b = MemoryBackend(parse_address(site.url("/")))
    ((src_path, dst_path, rel),) = store.job(job).roots
    store.add_tasks(job, list(expand([Root(b, b.stat(src_path), b, dst_path, rel)])))
    store.mark_planned(job)
    # A runner on another machine claimed it, copied the file, and vanished.
    assert store.claim_job(job, "elsewhere.example:4242")
    (task,) = store.claim_tasks([job], 10)
    site.put("/dst/f.bin", data)
    mtime = b.stat("/src/f.bin").mtime
    assert mtime is not None
    b.set_mtime("/dst/f.bin", mtime)
    store.set_job_state(job, "running", None, heartbeat=time.time() - 3600)
    # Writing it again would fail: the file must be checked in place.
    site.store.fail_on("open_write", "/dst/f.bin", Transient("written twice"), times=None)
    assert run(store, job, max_attempts=1).jobs == {job: "done"}
    (t,) = store.tasks(job)
    assert t.id == task.id and t.state == "done"
    assert t.verified is not None and "after restart" in t.verified and t.hash is not None
    assert site.get("/dst/f.bin") == data


def test_a_link_whose_folder_is_not_made_yet_is_still_created(site: MemSite, store: Store) -> None:
    """Workers run in parallel and a folder's creation can be retried later, so a link may come
    before its folder exists; files then make their folder, and links must too."""
    site.put("/src/sub/z.txt", b"z")
    site.backend.symlink("z.txt", "/src/sub/a-link")  # sorts before the file: planned first
    site.store.fail_on("mkdir", "/dst/src/sub", Transient("Server busy"), times=1)
    job = mem_job(store, [site.url("/src")], site.url("/dst/"), recursive=True)
    summary = run(store, job, parallel=1)
    states = {t.rel: (t.state, t.error) for t in store.tasks(job)}
    assert states["src/sub/a-link"] == ("done", None), states
    assert summary.jobs == {job: "done"}
    assert site.backend.stat("/dst/src/sub/a-link").link_target == "z.txt"
    assert site.get("/dst/src/sub/z.txt") == b"z"
