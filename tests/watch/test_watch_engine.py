"""The engine side of watching and shipping, in-process: delete-after-verify under an injected
checksum mismatch, the Watcher API the GUI uses, the Shipper API, and ``ferry queue wait``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Ferry, MemSite, describe, wait_until


@pytest.fixture
def store(tmp_path: Path) -> Iterator[object]:
    from ferry.transfers.store import Store

    st = Store(tmp_path / "queue.db")
    yield st
    st.close()


@pytest.fixture
def mem(request: pytest.FixtureRequest) -> Iterator[MemSite]:
    from ferry.backends.memory import reset_memory_stores

    name = "w" + str(abs(hash(request.node.nodeid)))[:10]
    reset_memory_stores(name)
    yield MemSite(name)
    reset_memory_stores(name)


def _spec(src: Path, dest: str, **kw: object) -> object:
    from ferry.transfers.options import JobOptions
    from ferry.transfers.watch import WatchSpec

    options = kw.pop("options", None) or JobOptions(on_conflict="skip")
    return WatchSpec(str(src), dest, options=options, **kw)  # type: ignore[arg-type]


def test_delete_after_verify_never_deletes_an_unverified_file(tmp_path: Path, store: object, mem: MemSite) -> None:
    from ferry.transfers.watch import Watcher, read_counters

    src = tmp_path / "src"
    src.mkdir()
    good, bad = os.urandom(100_000), os.urandom(100_000)
    (src / "good.dat").write_bytes(good)
    (src / "bad.dat").write_bytes(bad)
    # Every copy of bad.dat lands damaged: read-back catches it, the retry too, the file fails.
    mem.store.corrupt_on_commit("bad.dat", times=None)
    marker = tmp_path / "DONE"
    marker.touch()
    messages: list[str] = []
    w = Watcher(
        _spec(src, mem.url("/arch"), settle=0.2, delete_after_verify=True, until_file=str(marker)),  # type: ignore[arg-type]
        store,  # type: ignore[arg-type]
        on_message=messages.append,
    )
    job = w.start()
    result = w.wait(60)
    assert result is not None
    assert result.state == "failed"
    # The verified file is gone from the source and whole at the destination...
    assert not (src / "good.dat").exists()
    assert mem.get("/arch/good.dat") == good
    # ...the damaged one is still in the source, untouched, and not under its final name.
    assert (src / "bad.dat").read_bytes() == bad
    assert not mem.exists("/arch/bad.dat")
    assert mem.partials("/arch") == []
    c = result.counters
    assert (c.shipped, c.verified, c.deleted, c.failed) == (1, 1, 1, 1)
    saved = read_counters(store, job)  # type: ignore[arg-type]
    assert saved is not None and (saved.deleted, saved.failed) == (1, 1)


def test_size_only_verification_deletes_nothing_unless_allowed(tmp_path: Path, store: object, mem: MemSite) -> None:
    from ferry.core.errors import UsageError
    from ferry.transfers.options import JobOptions
    from ferry.transfers.watch import Watcher

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.dat").write_bytes(b"a" * 5000)
    marker = tmp_path / "DONE"
    marker.touch()
    size_only = JobOptions(verify="size", on_conflict="skip")
    with pytest.raises(UsageError, match="allow-size-only-delete"):
        Watcher(_spec(src, mem.url("/x"), delete_after_verify=True, options=size_only), store)  # type: ignore[arg-type]
    w = Watcher(
        _spec(
            src,
            mem.url("/x"),
            settle=0.2,
            delete_after_verify=True,
            allow_size_only_delete=True,
            until_file=str(marker),
            options=size_only,
        ),  # type: ignore[arg-type]
        store,  # type: ignore[arg-type]
    )
    w.start()
    result = w.wait(60)
    assert result is not None and result.state == "done"
    assert mem.get("/x/a.dat") == b"a" * 5000
    assert not (src / "a.dat").exists()  # explicitly allowed: sizes matched


def test_a_file_rewritten_after_shipping_is_kept_and_shipped_again(tmp_path: Path, store: object) -> None:
    from ferry.transfers.options import JobOptions
    from ferry.transfers.watch import Watcher

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "log.dat").write_bytes(b"first")
    w = Watcher(
        _spec(src, str(dst), settle=0.2, options=JobOptions(on_conflict="overwrite")),  # type: ignore[arg-type]
        store,  # type: ignore[arg-type]
    )
    w.start()
    try:
        wait_until(lambda: (dst / "log.dat").exists() and w.counters().shipped == 1, 30, what="first version")
        (src / "log.dat").write_bytes(b"second version")
        os.utime(src / "log.dat")
        wait_until(
            lambda: (dst / "log.dat").read_bytes() == b"second version" and w.counters().queued == 0,
            30,
            what="second version",
        )
    finally:
        w.stop(drain=True)
        res = w.wait(60)
    assert res is not None and res.state == "done"


def test_watcher_api_stop_and_start_again_continues_one_job(tmp_path: Path, store: object) -> None:
    from ferry.transfers.watch import Watcher

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "a.dat").write_bytes(b"a" * 1000)
    w = Watcher(_spec(src, str(dst), settle=0.2), store)  # type: ignore[arg-type]
    job = w.start()
    wait_until(lambda: w.counters().shipped == 1, 30, what="a.dat shipped")
    snap = w.counters()
    assert (snap.seen, snap.verified, snap.state) == (1, 1, "watching")
    w.stop()  # like Ctrl+C: the job stays in the queue
    res = w.wait(30)
    assert res is not None and res.counters.state == "stopped"
    assert store.job(job).state == "queued"  # type: ignore[attr-defined]
    # Nobody feeds it now: a 'ferry queue run' would ship what is queued and finish it...
    from ferry.transfers import watch_live

    assert watch_live.feed_closed(store, store.job(job))  # type: ignore[arg-type, attr-defined]
    assert store.job(job).planned  # type: ignore[attr-defined]
    # ...and the same watch started again reopens the same job.
    (src / "b.dat").write_bytes(b"b" * 2000)
    w2 = Watcher(_spec(src, str(dst), settle=0.2), store)  # type: ignore[arg-type]
    assert w2.start() == job
    wait_until(lambda: w2.counters().shipped == 2, 30, what="b.dat shipped")
    w2.stop(drain=True)
    res2 = w2.wait(30)
    assert res2 is not None and res2.state == "done"
    assert (dst / "b.dat").read_bytes() == b"b" * 2000
    assert res2.counters.seen == 2


# ---------------------------------------------------------------- Shipper


def test_shipper_sends_each_file_while_the_code_keeps_computing(tmp_path: Path, store: object) -> None:
    from ferry.api import Shipper

    out, dest = tmp_path / "out", tmp_path / "archive" / "run42"
    out.mkdir()
    with Shipper(str(dest), store=store) as s:  # type: ignore[arg-type]
        for step in range(3):
            path = out / f"step_{step}.h5"
            path.write_bytes(bytes([step]) * 200_000)
            s.ship(path)

            def arrived(p: Path = path) -> bool:
                return (dest / p.name).exists()

            # The "next step" only starts once this output has arrived: it left without finish().
            wait_until(arrived, 30, what=f"{path.name} arrived before finish()")
        (out / "extra").mkdir()
        (out / "extra" / "x.txt").write_text("x")
        s.ship(out / "extra")
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "extra/x.txt",
        "step_0.h5",
        "step_1.h5",
        "step_2.h5",
    ]
    assert s.status()["state"] == "done"


def test_shipper_finish_raises_with_the_list_of_failures(tmp_path: Path, store: object, mem: MemSite) -> None:
    from ferry.api import ShipFailed, Shipper

    (tmp_path / "ok.dat").write_bytes(b"o" * 10_000)
    (tmp_path / "broken.dat").write_bytes(b"b" * 10_000)
    mem.store.corrupt_on_commit("broken.dat", times=None)
    s = Shipper(mem.url("/run"), store=store)  # type: ignore[arg-type]
    s.ship(tmp_path / "ok.dat")
    s.ship(tmp_path / "broken.dat")
    with pytest.raises(ShipFailed) as info:
        s.finish(timeout=60)
    failures = info.value.failures
    assert [Path(f.path).name for f in failures] == ["broken.dat"]
    assert "mismatch" in failures[0].error.lower()
    assert mem.get("/run/ok.dat") == b"o" * 10_000
    assert not mem.exists("/run/broken.dat")
    # The context manager raises too, after the block.
    with pytest.raises(ShipFailed), Shipper(mem.url("/run2"), store=store) as s2:  # type: ignore[arg-type]
        s2.ship(tmp_path / "broken.dat")


def test_shipper_finish_times_out_then_completes(tmp_path: Path, store: object) -> None:
    from ferry.api import Shipper, ShipTimeout

    big = tmp_path / "big.dat"
    big.write_bytes(os.urandom(3 << 20))
    s = Shipper(str(tmp_path / "dst"), store=store, bwlimit=2 << 20)  # type: ignore[arg-type]
    s.ship(big)
    with pytest.raises(ShipTimeout) as info:
        s.finish(timeout=0.2)
    assert info.value.pending == [str(big)]
    result = s.finish(timeout=60)
    assert result.ok and result.files_done == 1
    assert (tmp_path / "dst" / "big.dat").read_bytes() == big.read_bytes()


def test_shipper_refuses_bad_input(tmp_path: Path, store: object) -> None:
    from ferry.api import Shipper
    from ferry.core.errors import NotFound, UsageError

    (tmp_path / "afile").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        Shipper(str(tmp_path / "afile"), store=store)  # type: ignore[arg-type]
    s = Shipper(str(tmp_path / "d"), store=store)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        s.ship(tmp_path / "missing.h5")
    with pytest.raises(UsageError, match="unsafe"):
        s.ship(tmp_path / "afile", name="../escape")
    assert s.finish(timeout=30).ok
    assert not (tmp_path / "escape").exists()


# ---------------------------------------------------------------- ferry queue wait


def test_queue_wait_exit_status_follows_the_job(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "a.dat").write_bytes(b"a" * 1000)
    ferry.ok("queue", "add", tmp_path / "a.dat", f"{tmp_path}/dst/")
    res = ferry("queue", "wait", "1", "--timeout", "0.5s")
    assert res.returncode == 1 and "still queued" in res.stderr, describe(res)
    waiter = ferry.popen("queue", "wait", "1")
    ferry.ok("queue", "run")
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, f"{out}\n{err}"
    assert "Job 1 done" in out
    # A job with a failure: exit 1, like cp.
    (tmp_path / "dst" / "b.dat").write_bytes(b"in the way")
    (tmp_path / "b.dat").write_bytes(b"b")
    ferry.ok("queue", "add", tmp_path / "b.dat", f"{tmp_path}/dst/")
    ferry("queue", "run")
    res = ferry("queue", "wait", "2")
    assert res.returncode == 1 and "failed" in res.stdout, describe(res)
    res = ferry("queue", "wait", "99")
    assert res.returncode == 2


def test_shell_form_queue_add_then_wait_from_a_script(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "r.dat").write_bytes(b"r" * 5000)
    script = (
        "set -e\n"
        f"job=$({' '.join(map(str, [*ferry_cmd()]))} queue add --json {tmp_path / 'r.dat'} {tmp_path}/arch/"
        " | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"id\"])')\n"
        f"{' '.join(ferry_cmd())} queue run >/dev/null 2>&1 &\n"
        f'{" ".join(ferry_cmd())} queue wait "$job" --timeout 60s\n'
    )
    res = subprocess.run(["sh", "-c", script], env=ferry.env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "arch" / "r.dat").read_bytes() == b"r" * 5000


def ferry_cmd() -> list[str]:
    from helpers import FERRY

    return list(FERRY)


def test_shipper_queue_mode_and_a_killed_shipper_are_finished_by_queue_run(ferry: Ferry, tmp_path: Path) -> None:
    """background=False leaves the shipping to 'ferry queue run'; a Shipper killed before finish()
    leaves its files in the queue, and 'ferry queue run' ships them and finishes the job."""
    import sys

    for name in ("q.dat", "k1.dat", "k2.dat"):
        (tmp_path / name).write_bytes(name.encode() * 10_000)
    code = (
        "import os, signal, sys\n"
        "from ferry.api import Shipper\n"
        "mode, dest = sys.argv[1], sys.argv[2]\n"
        "if mode == 'queue':\n"
        "    s = Shipper(dest, background=False)\n"
        "    s.ship('q.dat')\n"
        "    print(s.job_id, flush=True)\n"
        "    s.finish(timeout=60)\n"
        "    print('finished', flush=True)\n"
        "else:\n"
        "    s = Shipper(dest, bwlimit=4096)\n"  # slow: still on their way when killed
        "    s.ship('k1.dat'); s.ship('k2.dat')\n"
        "    print(s.job_id, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = ferry.env
    queued = subprocess.Popen(
        [sys.executable, "-c", code, "queue", str(tmp_path / "qdest")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert queued.stdout is not None
    job = int(queued.stdout.readline())
    ferry.ok("queue", "run", str(job))
    out, err = queued.communicate(timeout=60)
    assert queued.returncode == 0 and "finished" in out, err
    assert (tmp_path / "qdest" / "q.dat").read_bytes() == b"q.dat" * 10_000
    killed = subprocess.run(
        [sys.executable, "-c", code, "kill", str(tmp_path / "kdest")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr
    kjob = int(killed.stdout.split()[0])
    res = ferry.ok("queue", "run", str(kjob))
    assert ferry.job(kjob)["state"] == "done", describe(res)
    for name in ("k1.dat", "k2.dat"):
        assert (tmp_path / "kdest" / name).read_bytes() == name.encode() * 10_000


def test_cancelling_the_watch_job_from_the_queue_ends_the_watch(tmp_path: Path, store: object) -> None:
    from ferry.transfers.watch import Watcher

    src = tmp_path / "src"
    src.mkdir()
    w = Watcher(_spec(src, str(tmp_path / "dst"), settle=0.2), store)  # type: ignore[arg-type]
    job = w.start()
    store.set_job_state(job, "cancelled", "cancelled by you")  # type: ignore[attr-defined]  # 'ferry queue cancel'
    res = w.wait(60)
    assert res is not None
    assert (res.state, res.reason, res.counters.state) == ("cancelled", "cancelled", "cancelled")


def test_progress_line_shows_the_counters() -> None:
    from ferry.cli.cmd_watch import progress_text
    from ferry.transfers.watch import WatchCounters

    c = WatchCounters(seen=12, pending=2, queued=1, shipped=9, verified=9, deleted=8, failed=1, bytes_shipped=3 << 20)
    line = progress_text("out/", c, speed=1 << 20)
    assert line.startswith("watch out/: seen 12, shipped 9, verified 9, deleted 8, failed 1")
    assert "2 settling" in line and "1 queued" in line and "3.0 MiB" in line and "1.0 MiB/s" in line
    assert WatchCounters.from_json(c.to_json()) == c


def test_the_older_api_calls_still_work(tmp_path: Path, store: object) -> None:
    import ferry.api as api
    from ferry.core.errors import UsageError

    (tmp_path / "a.dat").write_bytes(b"a" * 3000)
    res = api.copy([str(tmp_path / "a.dat")], f"{tmp_path}/out/", store=store)  # type: ignore[arg-type]
    assert res.ok and res.files_done == 1 and (tmp_path / "out" / "a.dat").read_bytes() == b"a" * 3000
    job = api.enqueue([str(tmp_path / "a.dat")], f"{tmp_path}/later/", store=store)  # type: ignore[arg-type]
    assert api.status(job, store=store)["state"] == "queued"  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="still queued"):
        api.wait(job, timeout=0.1, store=store, poll=0.05)  # type: ignore[arg-type]
