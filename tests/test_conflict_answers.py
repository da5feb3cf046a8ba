"""Conflicts: identical files are skipped quietly, differing ones are asked about (or fail with one
summary line), and an "apply to all" answer belongs to its job alone, surviving its restart."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from ferry.core.outcomes import SkipReason
from ferry.transfers.copy import Answer, Conflict
from ferry.transfers.options import CONFLICT_ANSWER_KEY
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from helpers import Ferry, MemSite, describe, events, mem_job, result_event

T_OLD = 978_340_800_000_000_000  # 2001-01-01, in ns


def tree(root: Path, n: int) -> None:
    for i in range(n):
        p = root / ("sub" if i % 2 else "") / f"f{i}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f"file {i}\n".encode() * (i + 1))


# ---- re-runs from the command line (no terminal: stdin is not one) ----


def test_rerun_of_a_finished_copy_skips_identical_files_and_exits_0(ferry: Ferry, tmp_path: Path) -> None:
    tree(tmp_path / "src", 5)
    ferry.ok("cp", "-r", tmp_path / "src", f"{tmp_path / 'dst'}/")
    res = ferry("cp", "-r", tmp_path / "src", f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)
    assert re.search(r"\b5 skipped \((5 )?identical\)", res.stderr), res.stderr
    assert "exists" not in res.stderr and "failed" not in res.stderr
    res = ferry("cp", "--json", "-r", tmp_path / "src", f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)
    outcomes = result_event(res.stdout)["outcomes"]
    assert outcomes["skipped_by_reason"] == {SkipReason.IDENTICAL.value: 5} and outcomes["failed"] == 0
    files = [e for e in events(res.stdout) if e["event"] == "file" and e["kind"] == "file"]
    assert {e["skip_reason"] for e in files} == {"identical"}


def test_rerun_where_files_differ_fails_them_with_one_summary_line(ferry: Ferry, tmp_path: Path) -> None:
    tree(tmp_path / "src", 6)
    ferry.ok("cp", "-r", tmp_path / "src", f"{tmp_path / 'dst'}/")
    for name in ("f0.txt", "f2.txt", "sub/f3.txt"):
        (tmp_path / "dst" / "src" / name).write_bytes(b"edited at the destination")
    res = ferry("cp", "-r", tmp_path / "src", f"{tmp_path / 'dst'}/")
    assert res.returncode == 1, describe(res)
    lines = res.stderr.splitlines()
    said = [line for line in lines if "differ from what is already at the destination" in line]
    assert said == [
        "3 file(s) differ from what is already at the destination; "
        "choose with --on-conflict skip|overwrite|newer|different|rename"
    ], res.stderr
    assert not [line for line in lines if "f0.txt" in line or "f2.txt" in line], res.stderr  # not one line each
    assert "3 skipped" in res.stderr and "3 failed" in res.stderr
    assert (tmp_path / "dst" / "src" / "f0.txt").read_bytes() == b"edited at the destination"
    # The failures are typed: the job's files say so, and the fix is the one the line gives.
    res = ferry.ok("cp", "-r", "--on-conflict", "overwrite", tmp_path / "src", f"{tmp_path / 'dst'}/")
    assert (tmp_path / "dst" / "src" / "f0.txt").read_bytes() == (tmp_path / "src" / "f0.txt").read_bytes()


def test_queue_run_says_it_once_per_job_with_the_retry_to_use(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"new")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.txt").write_bytes(b"old!")
    job = ferry.ok("queue", "add", tmp_path / "a.txt", f"{tmp_path / 'out'}/").stdout.split()[2].rstrip(":")
    res = ferry("queue", "run")
    assert res.returncode == 1, describe(res)
    assert (
        f"job {job}: 1 file(s) differ from what is already at the destination; choose with "
        f"ferry queue retry {job} --on-conflict" in res.stderr
    ), res.stderr
    ferry.ok("queue", "retry", job, "--on-conflict", "overwrite")
    ferry.ok("queue", "run")
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"new"


# ---- "apply to all" belongs to one job (the engine, in this process) ----


def _conflicting(site: MemSite, folder: str, n: int) -> None:
    for i in range(n):
        site.put(f"/src{folder}/f{i}.txt", f"new {i}".encode())
        site.put(f"/dst{folder}/f{i}.txt", f"old contents {i}".encode())


class Asker:
    """Answers every question with ``policy``, "for all" when asked to; records each question."""

    def __init__(self, policy: str, for_all: bool) -> None:
        self.policy, self.for_all = policy, for_all
        self.asked: list[tuple[int, str]] = []
        self.lock = threading.Lock()

    def __call__(self, conflict: Conflict) -> Answer:
        with self.lock:
            self.asked.append((conflict.task.job_id, conflict.task.rel))
        return Answer(self.policy, self.for_all)


def _job(store: Store, site: MemSite, folder: str) -> int:
    # /src/NAME into /dst/: onto /dst/NAME, where the conflicting files are
    return mem_job(store, [site.url(f"/src{folder}")], site.url("/dst/"), recursive=True, on_conflict="ask")


def test_apply_to_all_answers_that_job_only(site: MemSite, store: Store) -> None:
    _conflicting(site, "/one", 4)
    _conflicting(site, "/two", 3)
    first, second = _job(store, site, "/one"), _job(store, site, "/two")
    ask = Asker("overwrite", for_all=True)
    Runner(store, RunConfig(parallel=3, job_ids=[first]), ask=ask).run()
    assert [j for j, _ in ask.asked] == [first]  # asked once; the answer stood for the rest of the job
    assert all(site.get(f"/dst/one/f{i}.txt") == f"new {i}".encode() for i in range(4))
    assert store.job_value(first, CONFLICT_ANSWER_KEY) == "overwrite"
    # A later job asks again.
    later = Asker("skip", for_all=False)
    Runner(store, RunConfig(parallel=1, job_ids=[second]), ask=later).run()
    assert len(later.asked) == 3 and {j for j, _ in later.asked} == {second}
    assert all(site.get(f"/dst/two/f{i}.txt") == f"old contents {i}".encode() for i in range(3))
    assert store.job_value(second, CONFLICT_ANSWER_KEY) is None


def test_apply_to_all_survives_a_restart_of_its_job(site: MemSite, store: Store) -> None:
    _conflicting(site, "/job", 5)
    job = _job(store, site, "/job")
    runner = Runner(store, RunConfig(parallel=1, job_ids=[job], backoff_base=0.01))

    def answer_then_stop(conflict: Conflict) -> Answer:
        runner.stop("interrupted")  # the run ends right after this first answer
        return Answer("overwrite", for_all=True)

    runner.ask = answer_then_stop
    summary = runner.run()
    assert summary.stopped == "interrupted" and store.job(job).state == "queued"
    assert store.open_task_count(job) > 0  # files left for the next run
    # The next run has no one to ask: the job's own answer decides, nothing fails.
    summary = Runner(store, RunConfig(parallel=2, job_ids=[job])).run()
    assert summary.jobs == {job: "done"}
    assert all(site.get(f"/dst/job/f{i}.txt") == f"new {i}".encode() for i in range(5))
    # ... and it stayed with that job: a new job with no one to ask fails its differing files.
    _conflicting(site, "/other", 2)
    other = _job(store, site, "/other")
    assert Runner(store, RunConfig(parallel=2, job_ids=[other])).run().jobs == {other: "failed"}
    assert store.outcome_counts(other).failed == {"conflict": 2}


def test_retry_with_another_policy_forgets_the_answer(site: MemSite, store: Store) -> None:
    from ferry.transfers import control

    _conflicting(site, "/r", 1)
    job = _job(store, site, "/r")
    store.set_job_value(job, CONFLICT_ANSWER_KEY, "skip")
    Runner(store, RunConfig(parallel=1, job_ids=[job])).run()
    assert site.get("/dst/r/f0.txt") == b"old contents 0"
    (change,) = control.retry(store, [job], on_conflict="overwrite")
    assert change.applied and store.job_value(job, CONFLICT_ANSWER_KEY) is None
    assert store.job(job).options.on_conflict == "overwrite"


def test_identical_files_are_never_asked_about(site: MemSite, store: Store) -> None:
    site.put("/src/same.txt", b"same")
    job = mem_job(store, [site.url("/src/same.txt")], site.url("/dst/same.txt"), on_conflict="ask")
    Runner(store, RunConfig(parallel=1, job_ids=[job])).run()
    stat = site.backend.stat("/src/same.txt")
    assert site.backend.stat("/dst/same.txt").mtime == stat.mtime
    again = mem_job(store, [site.url("/src/same.txt")], site.url("/dst/same.txt"), on_conflict="ask")
    ask = Asker("overwrite", for_all=False)
    assert Runner(store, RunConfig(parallel=1, job_ids=[again]), ask=ask).run().jobs == {again: "done"}
    assert ask.asked == []
    (t,) = store.tasks(again, kinds=("file",))
    assert t.state == "skipped" and t.skip_reason is SkipReason.IDENTICAL and t.verified == "already there, identical"
