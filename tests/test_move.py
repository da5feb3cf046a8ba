"""Move is a job option the engine carries out: ``ferry mv``, ``ferry queue add --move``, a
restart after ``kill -9`` of ``ferry queue run``, and every way a source must be kept."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ferry.backends import local
from ferry.backends.memory import MemoryBackend
from ferry.core.address import parse_address
from ferry.core.errors import UsageError
from ferry.core.outcomes import Level
from ferry.transfers import jobs, move
from ferry.transfers.options import JobOptions
from ferry.transfers.planner import resolve_roots
from ferry.transfers.scheduler import RunConfig, Runner, RunSummary
from ferry.transfers.store import Store, Task
from helpers import (
    Ferry,
    MemSite,
    OsWritingWrong,
    Recorder,
    describe,
    file_digests,
    mem_job,
    result_event,
    sha256_bytes,
    wait_until,
)


def make_src(root: Path, n: int = 6, size: int = 50_000) -> dict[str, str]:
    """``n`` files in two nested folders; returns their digests by path relative to ``root``."""
    for i in range(n):
        p = root / ("a" if i % 2 else "a/b") / f"f{i:03d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(size))
    return file_digests(root)


def files_left(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def run(store: Store, job_id: int, **config: object) -> RunSummary:
    cfg = RunConfig(**{"parallel": 2, "backoff_base": 0.01, "job_ids": [job_id], **config})  # type: ignore[arg-type]
    return Runner(store, cfg).run()


# ---- ferry mv ----


@pytest.mark.parametrize("verify", ["sha256", "blake3"])
def test_mv_moves_every_file_after_its_checksum_and_removes_the_emptied_folders(
    ferry: Ferry, tmp_path: Path, verify: str
) -> None:
    src = tmp_path / "run42"
    digests = make_src(src)
    res = ferry("mv", "-r", "--verify", verify, "--json", src, f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)
    assert file_digests(tmp_path / "dst" / "run42") == digests
    assert not src.exists()  # every file moved, so every folder went too
    result = result_event(res.stdout)
    assert result["move"]["moved"] == len(digests) and result["move"]["finished"]
    assert result["move"]["folders_removed"] == 3 and result["move"]["kept"] == {}
    # The job is a move in the queue, and says what it did.
    (job,) = ferry.jobs()
    assert job["options"]["move"] is True and job["state"] == "done"
    assert job["message"] == f"moved {len(digests)} file(s) and 3 folder(s)"


def test_mv_summary_on_the_terminal(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_bytes(b"one")
    res = ferry("mv", tmp_path / "one.txt", tmp_path / "two.txt")
    assert res.returncode == 0, describe(res)
    assert (tmp_path / "two.txt").read_bytes() == b"one" and not (tmp_path / "one.txt").exists()
    assert "1 copied: 1 sha256-checked" in res.stderr and "moved 1 file(s)" in res.stderr


@pytest.mark.parametrize("verify", ["size", "none"])
def test_mv_checked_by_size_or_not_at_all_is_refused_unless_accepted(ferry: Ferry, tmp_path: Path, verify: str) -> None:
    src = tmp_path / "src"
    digests = make_src(src, n=3)
    res = ferry("mv", "-r", "--verify", verify, src, f"{tmp_path / 'dst'}/")
    assert res.returncode == 2, describe(res)
    (line,) = res.stderr.strip().splitlines()  # one line, saying what to do
    assert "--allow-unverified-move" in line and f"--verify {verify}" in line
    assert file_digests(src) == digests and not (tmp_path / "dst").exists()
    assert ferry.jobs() == []
    # Accepted: moved, each source deleted after its size was compared once more.
    res = ferry("mv", "-r", "--verify", verify, "--allow-unverified-move", src, f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)
    assert file_digests(tmp_path / "dst" / "src") == digests and not src.exists()
    # queue add refuses the same way.
    (tmp_path / "x").write_bytes(b"x")
    res = ferry("queue", "add", "--move", "--verify", verify, tmp_path / "x", tmp_path / "y")
    assert res.returncode == 2 and "--allow-unverified-move" in res.stderr, describe(res)


def test_mv_keeps_what_it_cannot_prove_and_says_why(ferry: Ferry, tmp_path: Path) -> None:
    """A file the conflict policy kept (its copy is not this source) stays, and so does its folder."""
    src = tmp_path / "src"
    digests = make_src(src, n=4)
    (tmp_path / "dst" / "src" / "a").mkdir(parents=True)
    (tmp_path / "dst" / "src" / "a" / "f001.bin").write_bytes(b"someone else's file")
    res = ferry("mv", "-r", "--on-conflict", "skip", src, f"{tmp_path / 'dst'}/")
    assert res.returncode == 1, describe(res)  # not everything was moved
    assert "kept 1 source file(s): 1 not copied" in res.stderr, res.stderr
    assert files_left(src) == ["a/f001.bin"]
    assert sha256_bytes((src / "a" / "f001.bin").read_bytes()) == digests["a/f001.bin"]
    assert (tmp_path / "dst" / "src" / "a" / "f001.bin").read_bytes() == b"someone else's file"
    assert sorted(file_digests(tmp_path / "dst" / "src")) == sorted(digests)


def test_queue_add_move_is_kept_with_the_job(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"data")
    res = ferry.ok("queue", "add", "--move", "--json", tmp_path / "f.txt", f"{tmp_path / 'out'}/")
    job = json.loads(res.stdout)
    assert job["options"]["move"] is True and job["options"]["allow_unverified_move"] is False
    assert (tmp_path / "f.txt").exists()  # nothing happens before a runner runs it
    ferry.ok("queue", "run")
    assert (tmp_path / "out" / "f.txt").read_bytes() == b"data" and not (tmp_path / "f.txt").exists()


# ---- what a move never deletes (the engine, in this process) ----


class OsAlwaysWritingWrong(OsWritingWrong):
    """Every write of more than a few bytes lands with one byte changed: each attempt's check
    fails (small files still land right)."""

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        if len(data) < 1000:
            return os.write(fd, data)
        self.damaged.append(fd)
        wrong = bytearray(data)
        wrong[len(wrong) // 2] ^= 1
        return os.write(fd, wrong)


def test_a_corrupted_copy_never_deletes_its_source(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(300_000)
    (tmp_path / "f.bin").write_bytes(data)
    (tmp_path / "ok.bin").write_bytes(b"fine")
    wrong = OsWritingWrong()  # the first write lands wrong: caught, and the fresh try is right
    monkeypatch.setattr(local, "os", wrong)
    job = mem_job(store, [str(tmp_path / "f.bin")], str(tmp_path / "out.bin"), move=True)
    assert run(store, job).jobs == {job: "done"}
    assert wrong.damaged and not (tmp_path / "f.bin").exists() and (tmp_path / "out.bin").read_bytes() == data

    (tmp_path / "f.bin").write_bytes(data)
    monkeypatch.setattr(local, "os", OsAlwaysWritingWrong())  # wrong every time: the file fails
    job = mem_job(store, [str(tmp_path / "f.bin"), str(tmp_path / "ok.bin")], f"{tmp_path / 'out2'}/", move=True)
    assert run(store, job).jobs == {job: "failed"}
    monkeypatch.undo()
    failed = {t.rel: t for t in store.tasks(job, kinds=("file",))}
    assert failed["f.bin"].state == "failed" and failed["f.bin"].error_kind == "checksum-mismatch"
    assert (tmp_path / "f.bin").read_bytes() == data  # kept
    assert not (tmp_path / "out2" / "f.bin").exists()
    p = move.progress(store, job)
    assert p is not None and p.finished and p.kept == {"not-copied": 1}
    assert "kept 1 source file(s): 1 not copied" in (store.job(job).message or "")


def test_a_source_that_changed_after_its_copy_is_kept(site: MemSite, store: Store) -> None:
    site.put("/src/a.bin", b"A" * 1000)
    site.put("/src/b.bin", b"B" * 1000)
    job = mem_job(store, [site.url("/src/")], site.url("/dst"), recursive=True, move=True)

    class Rewrite(Recorder):
        def task_finished(self, job_id: int, task: object, result: object) -> None:
            super().task_finished(job_id, task, result)
            if isinstance(task, Task) and task.rel.endswith("a.bin"):
                site.put("/src/a.bin", b"a" * 1000)  # same size, new bytes: after its copy was checked

    Runner(store, RunConfig(parallel=1, job_ids=[job]), listener=Rewrite()).run()
    assert site.get("/src/a.bin") == b"a" * 1000 and site.get("/dst/a.bin") == b"A" * 1000
    assert not site.exists("/src/b.bin") and site.get("/dst/b.bin") == b"B" * 1000
    p = move.progress(store, job)
    assert p is not None and p.moved == 1 and p.kept == {"changed": 1} and p.folders_kept == 1


def test_only_checksum_level_copies_lose_their_source(site: MemSite, store: Store) -> None:
    """remove_source, the one rule: level, then the source as copied, then the copy still there."""
    site.put("/src/f.bin", b"x" * 100)
    job = mem_job(store, [site.url("/src/f.bin")], site.url("/dst/f.bin"))
    run(store, job)
    (task,) = store.tasks(job, kinds=("file",))
    assert task.checksum_verified
    b = site.backend
    size_only = Task(**{**task.__dict__, "level": Level.SIZE})
    r = move.remove_source(b, b, size_only, Level.CHECKSUM)
    assert r.result is move.Removed.KEPT and r.reason is move.KeepReason.BELOW_LEVEL and site.exists("/src/f.bin")
    b.remove("/dst/f.bin")
    r = move.remove_source(b, b, task, Level.CHECKSUM)
    assert r.result is move.Removed.KEPT and r.reason is move.KeepReason.CHANGED and site.exists("/src/f.bin")
    site.put("/dst/f.bin", b"x" * 100)
    assert move.remove_source(b, b, task, Level.CHECKSUM).result is move.Removed.DELETED
    assert not site.exists("/src/f.bin")
    assert move.remove_source(b, b, task, Level.CHECKSUM).result is move.Removed.GONE


def test_a_move_the_transfer_service_would_check_is_refused_unless_accepted(site: MemSite) -> None:
    """Globus moves and checks the bytes itself (service level): a move is refused before anything
    changes, unless the person accepts that check."""

    class Delegating(MemoryBackend):
        def delegation(self, src: object, dst: object) -> object:
            return object()

    site.put("/src/f.bin", b"x")
    b = Delegating(parse_address(site.url("/")))
    from ferry.transfers.planner import Root

    roots = [Root(b, b.stat("/src/f.bin"), b, "/dst/f.bin", "f.bin")]
    with pytest.raises(UsageError, match="--allow-unverified-move"):
        jobs.check_move(JobOptions(move=True), roots)
    jobs.check_move(JobOptions(move=True, allow_unverified_move=True), roots)


def test_move_option_survives_the_queue(site: MemSite, store: Store) -> None:
    site.put("/src/f.bin", b"x")
    srcs, dst = [parse_address(site.url("/src/f.bin"))], parse_address(site.url("/dst/"))
    from ferry.backends.registry import BackendPool

    with BackendPool() as pool:
        roots = resolve_roots(srcs, dst, pool, recursive=False)
    job = jobs.create_job(store, srcs, dst, roots, JobOptions(move=True, on_conflict="overwrite"))
    again = Store(store.path)
    try:
        assert again.job(job).options.move is True
    finally:
        again.close()


# ---- kill -9 and restart ----

# ``ferry`` itself, with each deletion slowed down so the test can kill it in the middle of them.
_SLOW_DELETIONS = """
import sys, time
from ferry.transfers import move
real = move.remove_source
def slow(*args, **kwargs):
    result = real(*args, **kwargs)
    time.sleep(0.15)
    return result
move.remove_source = slow
move.SAVE_EVERY = 0.0
from ferry.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def _popen_slow(ferry: Ferry, *args: str | os.PathLike[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _SLOW_DELETIONS, *(os.fspath(a) for a in args)],
        cwd=ferry.cwd,
        env=ferry.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _move_progress(ferry: Ferry, job_id: int) -> dict[str, object] | None:
    s = Store(ferry.home / "data" / "queue.db")
    try:
        p = move.progress(s, job_id)
    finally:
        s.close()
    return None if p is None else json.loads(p.to_json())


def test_a_move_killed_while_deleting_continues_after_a_restart(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    digests = make_src(src, n=16, size=20_000)
    # One file the destination already holds, different: kept by the policy, never deleted.
    (dst / "src" / "a").mkdir(parents=True)
    (dst / "src" / "a" / "f001.bin").write_bytes(b"not the source")
    job = json.loads(
        ferry.ok("queue", "add", "--move", "--json", "-r", "--on-conflict", "skip", src, f"{dst}/").stdout
    )["id"]
    proc = _popen_slow(ferry, "queue", "run")
    try:
        wait_until(
            lambda: (p := _move_progress(ferry, job)) is not None and int(p["moved"]) >= 3 and not p["finished"],  # type: ignore[call-overload]
            60,
            what="the deletions under way",
        )
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    left = files_left(src)
    assert 0 < len(left) < len(digests), left  # killed in the middle of the deletions
    assert "a/f001.bin" in left
    assert ferry.job(job)["state"] == "running"  # its runner died; the next run takes it over
    res = ferry("queue", "run")
    assert res.returncode == 0, describe(res)
    assert files_left(src) == ["a/f001.bin"]  # the one whose copy is not this source
    copied = file_digests(dst / "src")
    assert {k: v for k, v in copied.items() if k != "a/f001.bin"} == {
        k: v for k, v in digests.items() if k != "a/f001.bin"
    }
    assert f"moved {len(digests) - 1} file(s)" in res.stderr and "kept 1 source file(s): 1 not copied" in res.stderr
    assert ferry.job(job)["state"] == "done"


def test_a_move_killed_while_copying_deletes_nothing_until_its_files_are_verified(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    digests = make_src(src, n=8, size=256 << 10)
    ferry.ok("queue", "add", "--move", "-r", src, f"{dst}/")
    proc = ferry.popen("queue", "run", "--bwlimit", "512K", "--parallel", "1")
    try:
        wait_until(lambda: len([p for p in dst.rglob("f*.bin")]) >= 2, 60, what="some files copied")
        assert file_digests(src) == digests  # copies finished, sources all still there
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert file_digests(src) == digests
    res = ferry("queue", "run")
    assert res.returncode == 0, describe(res)
    assert file_digests(dst / "src") == digests and not src.exists()
    assert re.search(rf"moved {len(digests)} file\(s\) and 3 folder\(s\)", res.stderr), res.stderr
