"""``ferry queue``: jobs recorded now, run later, headless, as a user (or cron) would drive it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from helpers import (
    Ferry,
    describe,
    events,
    file_digests,
    partials,
    result_event,
    sha256_bytes,
    stop,
    wait_until,
)


def hm(delta: timedelta) -> str:
    return f"{datetime.now() + delta:%H:%M}"


def closed_window() -> str:
    """A one-hour window that starts two hours from now: closed now, whatever the time."""
    return f"{hm(timedelta(hours=2))}-{hm(timedelta(hours=3))}"


def open_window() -> str:
    return f"{hm(timedelta(hours=-1))}-{hm(timedelta(hours=2))}"


def make_src(root: Path, n: int = 5, size: int = 10_000) -> dict[str, bytes]:
    files = {f"sub{i % 2}/file {i}.bin": os.urandom(size + i) for i in range(n)}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def add(ferry: Ferry, *args: str | os.PathLike[str]) -> int:
    res = ferry.ok("queue", "add", "--json", *args)
    job = json.loads(res.stdout)
    assert job["state"] == "queued"
    return int(job["id"])


def test_add_records_a_job_and_run_processes_it(ferry: Ferry, tmp_path: Path) -> None:
    files = make_src(tmp_path / "src")
    res = ferry.ok("queue", "add", "-r", tmp_path / "src", f"{tmp_path / 'dst'}/")
    assert "Queued job 1" in res.stdout and "ferry queue run" in res.stdout
    assert not (tmp_path / "dst").exists()  # recorded, not run
    (job,) = ferry.jobs()
    assert job["state"] == "queued" and job["files_done"] == 0 and job["options"]["recursive"] is True

    res = ferry("queue", "run", "--json")
    assert res.returncode == 0, describe(res)
    result = result_event(res.stdout)
    assert result["jobs"] == {"1": "done"} and result["exit_code"] == 0 and result["stopped"] == ""
    assert file_digests(tmp_path / "dst" / "src") == file_digests(tmp_path / "src")
    (job,) = ferry.jobs()
    assert job["state"] == "done" and job["files_done"] == len(files) and job["planned"] is True
    # Nothing left: a second run says so and exits 0.
    res = ferry("queue", "run")
    assert res.returncode == 0 and "Nothing to run" in res.stderr


def test_add_several_sources(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"a")
    (tmp_path / "b.txt").write_bytes(b"b")
    add(ferry, tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    ferry.ok("queue", "run")
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"a"
    assert (tmp_path / "out" / "b.txt").read_bytes() == b"b"


def test_show_list_and_json(ferry: Ferry, tmp_path: Path) -> None:
    files = make_src(tmp_path / "src", n=3)
    job_id = add(ferry, "-r", "--verify", "blake3", "--bwlimit", "50M", tmp_path / "src", tmp_path / "dst")
    res = ferry.ok("queue", "list")
    assert "queued" in res.stdout and str(tmp_path / "src") in res.stdout
    ferry.ok("queue", "run")
    res = ferry.ok("queue", "show", str(job_id))
    assert f"Job {job_id}: done" in res.stdout
    assert "verify blake3" in res.stdout and re.search(r"bwlimit 50(\.0)? MiB/s", res.stdout)
    assert "3 copied: 3 blake3-checked" in res.stdout
    res = ferry.ok("queue", "show", str(job_id), "--json", "--files")
    d = json.loads(res.stdout)
    assert d["state"] == "done" and d["options"]["bwlimit"] == 50 << 20
    tasks = {t["path"]: t for t in d["tasks"] if t["kind"] == "file"}
    assert {p.removeprefix("dst/") for p in tasks} == set(files)
    assert all(t["state"] == "done" and t["verified"] == "blake3 match" for t in tasks.values())
    # Unknown jobs: a clear error, exit 2.
    for argv in (["queue", "show", "99"], ["queue", "run", "99"], ["queue", "pause", "99"]):
        res = ferry(*argv)
        assert res.returncode == 2 and "No job 99" in res.stderr, describe(res)


def test_pause_resume_cancel_retry_clear(ferry: Ferry, tmp_path: Path) -> None:
    make_src(tmp_path / "src", n=2)
    paused = add(ferry, "-r", tmp_path / "src", tmp_path / "p")
    cancelled = add(ferry, "-r", tmp_path / "src", tmp_path / "c")
    res = ferry.ok("queue", "pause", str(paused))
    assert f"Paused job {paused}" in res.stdout
    ferry.ok("queue", "cancel", str(cancelled))
    assert [j["state"] for j in ferry.jobs()] == ["paused", "cancelled"]

    res = ferry("queue", "run")  # neither a paused nor a cancelled job runs
    assert res.returncode == 0 and "Nothing to run" in res.stderr, describe(res)
    assert not (tmp_path / "p").exists() and not (tmp_path / "c").exists()

    # Wrong-state requests fail with a reason and change nothing.
    res = ferry("queue", "cancel", str(cancelled))
    assert res.returncode == 1 and "already cancelled" in res.stderr
    res = ferry("queue", "resume", str(cancelled))
    assert res.returncode == 1 and "not paused" in res.stderr
    res = ferry("queue", "pause")
    assert res.returncode == 2 and "--all" in res.stderr

    ferry.ok("queue", "resume", str(paused))
    assert ferry.job(paused)["state"] == "queued"
    res = ferry.ok("queue", "retry", str(cancelled))  # a cancelled job can be queued again
    assert ferry.job(cancelled)["state"] == "queued"
    ferry.ok("queue", "run")
    assert file_digests(tmp_path / "p") == file_digests(tmp_path / "src")
    assert file_digests(tmp_path / "c") == file_digests(tmp_path / "src")
    assert [j["state"] for j in ferry.jobs()] == ["done", "done"]

    # A failed job (an existing file and no one to ask) ...
    (tmp_path / "new.txt").write_bytes(b"new")
    (tmp_path / "old.txt").write_bytes(b"old")
    failed = add(ferry, tmp_path / "new.txt", tmp_path / "old.txt")
    res = ferry("queue", "run")
    assert res.returncode == 1, describe(res)
    assert ferry.job(failed)["state"] == "failed" and ferry.job(failed)["files_failed"] == 1
    res = ferry.ok("queue", "show", str(failed))
    assert "no one is there to ask" in res.stdout
    # ... clear leaves it (and removes the finished ones) ...
    res = ferry.ok("queue", "clear")
    assert "Removed 2" in res.stdout
    assert [j["id"] for j in ferry.jobs()] == [failed]
    # ... retry with another policy makes it succeed.
    res = ferry.ok("queue", "retry", str(failed), "--on-conflict", "overwrite")
    assert "1 file(s) queued again" in res.stdout
    ferry.ok("queue", "run")
    assert (tmp_path / "old.txt").read_bytes() == b"new"
    assert ferry.job(failed)["state"] == "done"
    ferry.ok("queue", "clear", "--failed")
    assert ferry.jobs() == []


def test_run_parallel_with_a_global_bwlimit(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    for name in ("a.bin", "b.bin"):
        (tmp_path / "src" / name).write_bytes(os.urandom(1 << 20))
    add(ferry, "-r", tmp_path / "src", tmp_path / "dst")
    res = ferry("queue", "run", "--json", "--parallel", "2", "--bwlimit", "1M")
    assert res.returncode == 0, describe(res)
    # The limit is for the whole run: two parallel files share 1 MiB/s, so 2 MiB take ~1.75 s.
    elapsed = result_event(res.stdout)["elapsed"]
    assert 1.4 <= elapsed < 15, elapsed
    assert file_digests(tmp_path / "dst") == file_digests(tmp_path / "src")


def _wait_for_text(path: Path, text: str, proc: subprocess.Popen[str], timeout: float = 20) -> None:
    def seen() -> bool:
        assert proc.poll() is None, f"ferry exited early ({proc.returncode}): {path.read_text()}"
        return text in path.read_text(encoding="utf-8", errors="replace")

    wait_until(seen, timeout, 0.05, f"{text!r} in ferry's output")


def test_run_outside_its_window_or_before_its_start_copies_nothing(ferry: Ferry, tmp_path: Path) -> None:
    make_src(tmp_path / "src", n=2)
    job_id = add(ferry, "-r", tmp_path / "src", tmp_path / "dst")
    for i, args in enumerate((["--window", closed_window()], ["--start-at", hm(timedelta(hours=2))])):
        log = tmp_path / f"run{i}.log"
        with open(log, "w") as err:
            proc = ferry.popen("queue", "run", *args, stderr=err)
            try:
                _wait_for_text(log, "waiting for the", proc)
                # A further moment to show it really waits rather than copies.
                with pytest.raises(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)
                assert not (tmp_path / "dst").exists()
            finally:
                stop(proc)
        assert proc.returncode == 130, log.read_text()  # stopped by the signal, not finished
        assert ferry.job(job_id)["state"] == "queued"
    assert not (tmp_path / "dst").exists()


def test_job_window_and_start_time(ferry: Ferry, tmp_path: Path) -> None:
    make_src(tmp_path / "src", n=2)
    window = closed_window()
    closed = add(ferry, "-r", "--window", window, tmp_path / "src", tmp_path / "closed")
    later = add(ferry, "-r", "--start-at", hm(timedelta(hours=2)), tmp_path / "src", tmp_path / "later")
    plain = add(ferry, "-r", tmp_path / "src", tmp_path / "plain")
    opened = add(ferry, "-r", "--window", open_window(), tmp_path / "src", tmp_path / "opened")
    past = add(ferry, "-r", "--start-at", "2000-01-01T00:00", tmp_path / "src", tmp_path / "past")
    show = json.loads(ferry.ok("queue", "show", str(closed), "--json").stdout)
    assert show["options"]["window"] == window

    log = tmp_path / "run.log"
    with open(log, "w") as err:
        proc = ferry.popen("queue", "run", stderr=err)
        try:
            wait_until(
                lambda: all(ferry.job(j)["state"] == "done" for j in (plain, opened, past)),
                30,
                0.1,
                "the jobs that may run now",
            )
            # Said for the job that runs first: the closed window's or the later start time's.
            waits = (f"waiting for job {closed}'s time window", f"waiting for job {later}'s start time")
            wait_until(lambda: any(w in log.read_text() for w in waits), 30, 0.1, "what the run waits for")
            assert proc.poll() is None  # it waits for the other jobs rather than exiting
            assert ferry.job(closed)["state"] == "queued" and ferry.job(later)["state"] == "queued"
        finally:
            stop(proc)
    for name in ("plain", "opened", "past"):
        assert file_digests(tmp_path / name) == file_digests(tmp_path / "src"), name
    assert not (tmp_path / "closed").exists() and not (tmp_path / "later").exists()


def test_run_inside_an_open_window(ferry: Ferry, tmp_path: Path) -> None:
    make_src(tmp_path / "src", n=3)
    add(ferry, "-r", tmp_path / "src", tmp_path / "dst")
    res = ferry("queue", "run", "--json", "--window", open_window())
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {"1": "done"}
    assert file_digests(tmp_path / "dst") == file_digests(tmp_path / "src")


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs GNU sha256sum")
def test_manifest_is_sha256sum_compatible(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "run42"
    files = {
        "a.txt": b"alpha",
        "with space/b c.txt": b"bravo charlie",
        "ünï/☃.bin": os.urandom(5000),
        "odd/new\nline.txt": b"newline",
        "odd/back\\slash.txt": b"backslash",
    }
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    dest = tmp_path / "archive"
    job_id = add(ferry, "-r", src, f"{dest}/")
    ferry.ok("queue", "run")

    res = ferry.ok("queue", "show", str(job_id), "--manifest")
    manifest = res.stdout
    assert manifest.count("\n") == len(files)
    assert f"{sha256_bytes(b'alpha')}  run42/a.txt\n" in manifest
    # Checked by the real tool, in the folder the copy landed in.
    check = subprocess.run(
        ["sha256sum", "-c", "-"], cwd=dest, input=manifest, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": OK") == len(files)

    target = tmp_path / "run42.sha256"
    res = ferry.ok("queue", "show", str(job_id), "--manifest", target)
    assert f"Wrote {len(files)} entries" in res.stderr
    assert target.read_text(encoding="utf-8") == manifest
    check = subprocess.run(["sha256sum", "-c", str(target)], cwd=dest, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr

    # The manifest really checks: a damaged copy is caught.
    (dest / "run42" / "with space" / "b c.txt").write_bytes(b"bravo charliE")
    check = subprocess.run(["sha256sum", "-c", str(target)], cwd=dest, capture_output=True, text=True, check=False)
    assert check.returncode == 1 and "b c.txt: FAILED" in check.stdout


def test_cp_writes_a_manifest_and_size_jobs_have_none(ferry: Ferry, tmp_path: Path) -> None:
    files = make_src(tmp_path / "src", n=3)
    ferry.ok("cp", "-r", "--manifest", tmp_path / "m.sha256", tmp_path / "src", f"{tmp_path / 'dst'}/")
    lines = (tmp_path / "m.sha256").read_text().splitlines()
    assert sorted(lines) == sorted(f"{sha256_bytes(d)}  src/{rel}" for rel, d in files.items())
    ferry.ok("cp", "-r", "--verify", "size", tmp_path / "src", f"{tmp_path / 'dst2'}/")
    res = ferry("queue", "show", "2", "--manifest")
    assert res.returncode == 2 and "no checksums" in res.stderr, describe(res)


def test_queue_run_json_events(ferry: Ferry, tmp_path: Path) -> None:
    files = make_src(tmp_path / "src", n=3)
    add(ferry, "-r", tmp_path / "src", tmp_path / "dst")
    res = ferry("queue", "run", "--json")
    assert res.returncode == 0, describe(res)
    evs = events(res.stdout)
    assert {"progress", "file", "job", "result"} <= {e["event"] for e in evs}
    done = [e for e in evs if e["event"] == "file" and e["kind"] == "file"]
    assert len(done) == len(files) and all(e["verified"] == "sha256 match" for e in done)
    assert [e["state"] for e in evs if e["event"] == "job"] == ["running", "done"]
    assert partials(tmp_path / "dst") == []


def test_run_only_the_named_jobs_and_pause_all(ferry: Ferry, tmp_path: Path) -> None:
    make_src(tmp_path / "src", n=2)
    first = add(ferry, "-r", tmp_path / "src", tmp_path / "one")
    second = add(ferry, "-r", tmp_path / "src", tmp_path / "two")
    res = ferry("queue", "run", "--json", str(second))
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {str(second): "done"}
    assert not (tmp_path / "one").exists()
    assert ferry.job(first)["state"] == "queued"
    res = ferry.ok("queue", "pause", "--all")
    assert f"Paused job {first}" in res.stdout and f"job {second}" not in res.stdout
    assert ferry.job(first)["state"] == "paused" and ferry.job(second)["state"] == "done"
    ferry.ok("queue", "resume", "--all")
    ferry.ok("queue", "run")
    assert file_digests(tmp_path / "one") == file_digests(tmp_path / "src")


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs GNU sha256sum")
def test_manifest_names_the_renamed_copy(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    new = b"new,data\n"
    (tmp_path / "src" / "data.csv").write_bytes(new)
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "data.csv").write_bytes(b"old,data\n")
    ferry.ok("cp", "--on-conflict", "rename", tmp_path / "src" / "data.csv", tmp_path / "dst")
    manifest = ferry.ok("queue", "show", "1", "--manifest").stdout
    assert manifest == f"{sha256_bytes(new)}  data (1).csv\n"
    check = subprocess.run(
        ["sha256sum", "-c", "-"], cwd=tmp_path / "dst", input=manifest, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
