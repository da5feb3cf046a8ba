"""``ferry watch`` driven as a user would, against a real writer process and local folders."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from helpers import Ferry, describe, events, file_digests, partials, stop, wait_until
from watch.conftest import start_writer, wait_for_event, writer_result

Arg = str | os.PathLike[str]  # one argument of the ferry command line


@pytest.mark.parametrize("mode", ["inotify", "poll"])
def test_ships_complete_files_as_they_appear(ferry: Ferry, tmp_path: Path, mode: str) -> None:
    src, dst = tmp_path / "out", tmp_path / "archive" / "run42"
    src.mkdir()
    marker = src / "DONE"
    extra = ["--poll"] if mode == "poll" else []
    watch = ferry.popen(
        "watch", src, dst, "--recursive", "--pattern", "*.h5", "--settle", "2s", "--until", marker, "--json", *extra
    )
    try:
        started = wait_for_event(watch, "watching")
        expect = writer_result(start_writer("mixed", src, done=marker))
        out, err = watch.communicate(timeout=90)
    finally:
        if watch.poll() is None:
            stop(watch, signal.SIGKILL)
    assert watch.returncode == 0, f"{out}\n{err}"
    # Exactly the complete files, byte for byte: the growing one only once it stopped growing, the
    # renamed one under its final name, nothing deleted early, nothing outside the pattern.
    assert file_digests(dst) == expect
    assert partials(dst) == []
    result = next(e for e in events(out) if e["event"] == "result")
    assert result["state"] == "done" and result["reason"] == "until-file"
    assert (result["shipped"], result["verified"], result["failed"], result["deleted"]) == (4, 4, 0, 0)
    assert result["seen"] >= 4
    # Sources stay without --delete-after-verify.
    assert {p.name for p in src.rglob("*.h5")} == {"a.h5", "b.h5", "d.h5", "e.h5"}
    # The counters are readable from the store by another process (the GUI, 'ferry queue show').
    from ferry.transfers.store import Store
    from ferry.transfers.watch import read_counters

    store = Store(tmp_path / "data" / "queue.db")
    counters = read_counters(store, started["job"])
    assert counters is not None
    assert (counters.shipped, counters.verified, counters.state) == (4, 4, "finished")
    job = ferry.job(started["job"])
    assert job["state"] == "done" and job["files_done"] == 4
    assert (job["watch"]["shipped"], job["watch"]["verified"]) == (4, 4)  # 'ferry queue list --json'
    shown = ferry.ok("queue", "show", str(started["job"]))
    assert "watch:    finished; seen" in shown.stdout and "shipped 4, verified 4" in shown.stdout


def test_kill_9_mid_stream_then_restart_neither_resends_nor_forgets(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "scratch", tmp_path / "archive"
    src.mkdir()
    marker = tmp_path / "DONE"
    args: list[Arg] = ["watch", src, dst, "--pattern", "*.dat", "--settle", "1s", "--delete-after-verify"]
    # Slow enough that the kill lands while files are on their way.
    first = ferry.popen(*args, "--bwlimit", "1M", "--json")
    writer = None
    try:
        wait_for_event(first, "watching")
        writer = start_writer("series", src, "12", str(256 * 1024), "0.05", done=marker)
        wait_until(lambda: len(list(dst.glob("step_*.dat"))) >= 2, timeout=60, what="two files shipped")
        before = {p.name: p.stat().st_ino for p in dst.glob("step_*.dat")}
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            stop(first, signal.SIGKILL)
    assert writer is not None
    expect = writer_result(writer)
    assert len(before) < 12, "the watch finished before it was killed: nothing tested"
    # The same command again (without the slow limit) takes the job over and finishes it.
    res = ferry(*args, "--until", marker, timeout=120)
    assert res.returncode == 0, describe(res)
    assert file_digests(dst) == expect
    assert partials(dst) == []
    # Verified before the kill: not sent again (same file, same inode, never rewritten).
    for name, ino in before.items():
        assert (dst / name).stat().st_ino == ino, name
    # Every source deleted, each only after its copy was verified; the watch is one job.
    assert sorted(os.listdir(src)) == []
    jobs = ferry.jobs()
    assert len(jobs) == 1 and jobs[0]["state"] == "done" and jobs[0]["files_done"] == 12
    # (The counter is saved right after each deletion; a kill in between may miss one count.)
    deleted = re.search(r"deleted (\d+)", res.stderr)
    assert deleted is not None and int(deleted.group(1)) in (11, 12), res.stderr


def test_restart_ships_files_that_arrived_while_it_was_down(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    (src / "one.dat").write_bytes(b"1" * 1000)
    marker = tmp_path / "DONE"
    marker.touch()
    ferry.ok("watch", src, dst, "--settle", "30s", "--until", marker)
    assert (dst / "one.dat").read_bytes() == b"1" * 1000
    mtime = (dst / "one.dat").stat().st_mtime_ns
    (src / "two.dat").write_bytes(b"2" * 2000)
    res = ferry.ok("watch", src, dst, "--settle", "30s", "--until", marker)
    assert (dst / "two.dat").read_bytes() == b"2" * 2000
    assert (dst / "one.dat").stat().st_mtime_ns == mtime
    assert "shipped 2" in res.stderr, res.stderr
    assert len(ferry.jobs()) == 1


def test_bad_input_is_refused_before_anything_changes(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.dat").write_bytes(b"x")
    cases: list[tuple[list[Arg], str]] = [
        (["watch", tmp_path / "missing", tmp_path / "d"], "not found"),
        (["watch", src / "f.dat", tmp_path / "d"], "not a folder"),
        (["watch", src, src / "inside"], "inside the watched folder"),
        (["watch", src, tmp_path / "d", "--delete-after-verify", "--verify", "size"], "--allow-size-only-delete"),
        (["watch", src, tmp_path / "d", "--delete-after-verify", "--verify", "none"], "verification"),
        (["watch", src, tmp_path / "d", "--settle", "soon"], "Malformed duration"),
        (["watch", src, tmp_path / "d", "--until-idle", "1h", "--until", "x"], "not allowed with"),
    ]
    for args, message in cases:
        res = ferry(*args)
        assert res.returncode == 2, describe(res)
        assert message in res.stderr, describe(res)
    assert not (tmp_path / "d").exists()
    assert (src / "f.dat").read_bytes() == b"x"


def test_until_idle_stops_once_nothing_new_arrives(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    (src / "a.dat").write_bytes(b"a" * 100)
    res = ferry("watch", src, dst, "--settle", "0.2s", "--until-idle", "1s", "--json")
    assert res.returncode == 0, describe(res)
    result = next(e for e in events(res.stdout) if e["event"] == "result")
    assert result["reason"] == "until-idle" and result["shipped"] == 1
    assert (dst / "a.dat").read_bytes() == b"a" * 100
    files = [e for e in events(res.stdout) if e["event"] == "file"]
    assert [f["path"] for f in files] == ["a.dat"] and files[0]["verified"] == "sha256 match"
    assert json.loads(json.dumps(result))["exit_code"] == 0


def test_a_relative_until_file_may_be_inside_the_watched_folder(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "run", tmp_path / "arch"
    src.mkdir()
    (src / "a.dat").write_bytes(b"a" * 10)
    (src / "DONE").write_text("done\n")  # the marker is a signal, never shipped
    res = ferry("watch", "run", "arch", "--settle", "0.5s", "--until", "DONE")
    assert res.returncode == 0, describe(res)
    assert sorted(p.name for p in dst.iterdir()) == ["a.dat"]
