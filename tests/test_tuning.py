"""--parallel auto (the default): the tuner of files at once and the gate it drives."""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ferry.transfers.tuning import AUTO_MAX, BIG_CEILING, FILE_COST, START, Choice, Gate, Tuner, Why


class Clock:
    """Wall time, and the process's CPU time (``cpu``), both moved by the simulation."""

    def __init__(self) -> None:
        self.t = 0.0
        self.cpu_t = 0.0

    def __call__(self) -> float:
        return self.t

    def cpu(self) -> float:
        return self.cpu_t


STEP = 0.25  # seconds between coordinator ticks in these simulations


def drive(
    tuner: Tuner,
    clock: Clock,
    files_per_s: Callable[[int], float],
    seconds: float,
    *,
    file_size: int = 16 * 1024,
    ready: int = 10_000,
    cpu_per_file: float = 1 / 1000,
) -> list[int]:
    """Feed the tuner a run whose throughput depends only on the files at once (``ready`` files
    can run at once at most); return the limit after each tick."""
    files = 0.0
    seen = []
    tuner.observe(0, 0, active=min(ready, tuner.limit))
    while clock.t < seconds:
        clock.t += STEP
        done = files_per_s(min(ready, tuner.limit)) * STEP
        files += done
        clock.cpu_t += done * cpu_per_file
        tuner.observe(int(files * file_size), int(files), active=min(ready, tuner.limit))
        seen.append(tuner.limit)
    return seen


def long_link(n: int) -> float:
    """Small objects 50 ms away: each file in flight does ~16 a second until the CPU caps it."""
    return min(16.0 * n, 900.0)


def test_tuner_grows_fast_on_a_long_link_and_says_why() -> None:
    clock = Clock()
    tuner = Tuner(Gate(1), maximum=AUTO_MAX, clock=clock, cpu=clock.cpu)
    assert tuner.limit == START
    limits = drive(tuner, clock, long_link, 30.0)
    # 4 -> 8 -> 32 -> 64 within the first few seconds (a slow start, not +1 per interval)
    reached = next(i for i, n in enumerate(limits) if n >= 64) * STEP
    assert reached <= 3.0, limits[:40]
    # 900 files/s needs 57 at once: it settles at or a little above that (a probe down a quarter
    # now and then, for one measurement)
    tail = sorted(limits[-40:])
    assert tail[len(tail) // 2] >= 48 and tail[0] >= 36, limits[-40:]
    assert 48 <= tuner.choice.files <= AUTO_MAX
    choice = tuner.choice  # (the limit may be a probe's for one measurement)
    assert "files at once" in choice.describe() and "files/s" in choice.describe()
    assert Choice.from_json(choice.to_json()) == choice


def test_tuner_keeps_the_lan_default_when_more_does_not_help() -> None:
    # On a LAN the CPU is the limit from 4 on: doubling gives nothing, so 4 stays (never less).
    clock = Clock()
    tuner = Tuner(Gate(1), maximum=AUTO_MAX, clock=clock, cpu=clock.cpu)
    limits = drive(tuner, clock, lambda n: min(300.0 * n, 1200.0), 60.0)
    assert max(limits) <= 8  # one try of 8, then probes of 6
    assert all(3 <= n <= 6 for n in limits[-20:]), limits
    assert tuner.choice.files == 4 and tuner.choice.why is Why.PLATEAU
    assert tuner.choice.tried is not None and tuner.choice.tried.files in (3, 6, 8)


def test_tuner_backs_off_when_more_makes_it_slower() -> None:
    # The plateau-then-fall shape of the field reports: best at 8, worse beyond.
    def curve(n: int) -> float:
        return max(50.0, 100.0 * min(n, 8) - 20.0 * max(0, n - 8))

    clock = Clock()
    tuner = Tuner(Gate(1), maximum=AUTO_MAX, clock=clock, cpu=clock.cpu)
    limits = drive(tuner, clock, curve, 60.0)
    assert max(limits) > 8  # it tried beyond the peak
    assert all(6 <= n <= 16 for n in limits[-20:]), limits  # (probes of a quarter down, a half up)
    # it holds a setting within 5 % of the peak's throughput, having measured a worse one
    assert curve(tuner.choice.files) >= 0.95 * curve(8), tuner.choice
    assert tuner.choice.why in (Why.FELL, Why.PLATEAU)


def test_tuner_does_not_grow_when_fewer_files_are_ready() -> None:
    clock = Clock()
    tuner = Tuner(Gate(1), maximum=AUTO_MAX, clock=clock, cpu=clock.cpu)
    limits = drive(tuner, clock, long_link, 20.0, ready=2)
    assert set(limits) == {START}
    assert tuner.choice.why is Why.FEW_FILES
    assert "more would not help" in tuner.choice.describe()


def test_tuner_stays_at_16_or_under_for_big_files() -> None:
    # 256 MiB files: no file finishes in a measurement; each file's buffers are its own.
    clock = Clock()
    tuner = Tuner(Gate(1), maximum=AUTO_MAX, clock=clock, cpu=clock.cpu)
    bytes_done = 0.0
    tuner.observe(0, 0, active=tuner.limit)
    limits = []
    while clock.t < 60:
        clock.t += STEP
        bytes_done += 10e6 * tuner.limit * STEP  # each stream 10 MB/s: more always helps
        tuner.observe(int(bytes_done), 0, active=tuner.limit)
        limits.append(tuner.limit)
    assert max(limits) == BIG_CEILING and limits.index(BIG_CEILING) * STEP <= 10
    # at the ceiling, or back at it after a probe down was slower
    assert tuner.choice.files == BIG_CEILING and tuner.choice.why in (Why.CEILING, Why.FELL)
    assert "MB/s" in tuner.choice.describe()


def test_tuner_ignores_idle_periods_and_counts_files() -> None:
    clock = Clock()
    tuner = Tuner(Gate(1), maximum=8, clock=clock, cpu=clock.cpu)
    tuner.observe(0, 0, active=0)
    clock.t += 10
    assert tuner.observe(0, 0, active=0) is None  # idle: no decision
    assert tuner.limit == START and not tuner.history
    tuner.observe(0, 0, active=4)
    clock.t += 1.0
    tuner.observe(0, 30, active=4)  # 30 small files count as work
    assert tuner.history and tuner.history[0].units == 30 * FILE_COST / 1.0


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_gate_limits_holders_and_follows_a_new_limit() -> None:
    gate = Gate(2)
    inside = 0
    peak = 0
    lock = threading.Lock()
    release = threading.Event()

    def worker() -> None:
        nonlocal inside, peak
        gate.acquire()
        with lock:
            inside += 1
            peak = max(peak, inside)
        release.wait(5)
        with lock:
            inside -= 1
        gate.release()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    assert wait_for(lambda: inside >= 2)
    assert not wait_for(lambda: inside > 2, timeout=0.3)  # the other four wait at the gate
    assert peak == 2
    gate.set_limit(4)
    assert wait_for(lambda: inside >= 4)
    assert peak == 4
    release.set()
    for t in threads:
        t.join(5)
    assert inside == 0


def test_every_choice_names_a_step_other_than_the_one_kept() -> None:
    # A noisy link (+-40 % per measurement): whatever path the tuner takes, a "was no faster" or
    # "was slower" names the other setting it measured, never the one it keeps (a probe up that
    # paid once led to the same setting being judged against itself).
    for seed in range(100):
        rng = random.Random(seed)
        clock = Clock()
        tuner = Tuner(Gate(1), maximum=AUTO_MAX, clock=clock, cpu=clock.cpu)
        made = []
        files = 0.0
        tuner.observe(0, 0, active=tuner.limit)
        while clock.t < 60:
            clock.t += STEP
            files += long_link(tuner.limit) * rng.uniform(0.6, 1.4) * STEP
            choice = tuner.observe(int(files * 16384), int(files), active=tuner.limit)
            if choice is not None:
                made.append(choice)
                assert choice.files == tuner.limit
        for c in made:
            if c.why in (Why.PLATEAU, Why.FELL):
                assert c.tried is not None and c.kept is not None, c
                assert c.tried.files != c.files and c.kept.files == c.files, (seed, c)
        assert 1 <= tuner.limit <= AUTO_MAX


def test_the_first_step_jumps_to_what_the_wait_per_file_asks_for() -> None:
    # 150 ms away each small file takes ~190 ms at 4 at once (21 files/s), of which 1.1 ms is
    # this process's CPU: by Little's law ~170 at once would keep it busy, so the tuner jumps
    # straight to its most (128) instead of doubling five times, and says why.
    clock = Clock()
    tuner = Tuner(Gate(1), maximum=AUTO_MAX, clock=clock, cpu=clock.cpu)
    limits = drive(tuner, clock, lambda n: min(5.3 * n, 900.0), 3.0, cpu_per_file=1 / 900)
    first = next(n for n in limits if n != START)
    assert first == AUTO_MAX, limits
    first_measure = tuner.history[0]
    assert first_measure.files == START
    text = Choice(AUTO_MAX, Why.LATENCY, first_measure, first_measure).describe()
    assert re.fullmatch(
        r"auto: 128 files at once \(at 4 at once each file took [12]\d\d ms, mostly waiting on the link; trying more\)",
        text,
    ), text
    # On a LAN the same rule keeps 4: each file's time there is mostly its CPU.
    lan = Clock()
    tuner = Tuner(Gate(1), maximum=AUTO_MAX, clock=lan, cpu=lan.cpu)
    limits = drive(tuner, lan, lambda n: min(300.0 * n, 1200.0), 2.0, cpu_per_file=1 / 1200)
    assert max(limits) <= 8, limits


def test_between_local_disks_it_stays_at_four_and_says_why() -> None:
    # No round trip to fill: more threads only contend for the GIL (measured on tmpfs).
    clock = Clock()
    tuner = Tuner(Gate(1), maximum=AUTO_MAX, clock=clock, cpu=clock.cpu)
    files = 0.0
    for _ in range(80):
        clock.t += STEP
        files += 16.0 * tuner.limit * STEP  # even a curve that would reward growth
        clock.cpu_t += 16.0 * tuner.limit * STEP / 1000
        tuner.observe(int(files * 4096), int(files), active=tuner.limit, network=False)
        assert tuner.limit == START
    assert tuner.choice.why is Why.NO_NETWORK and "local disks" in tuner.choice.describe()
    # A job to a server joins the run: tuning starts
    for _ in range(40):
        clock.t += STEP
        files += 16.0 * tuner.limit * STEP
        clock.cpu_t += 16.0 * tuner.limit * STEP / 1000
        tuner.observe(int(files * 4096), int(files), active=tuner.limit)
    assert tuner.limit > START


def test_a_tuned_run_between_local_disks_starts_four_worker_threads(tmp_path: Path) -> None:
    # 128 threads waiting at the gate from the start cost such a run a tenth of its time; the
    # threads are added only as the tuner allows more.
    from ferry.backends.registry import BackendPool
    from ferry.transfers import jobs
    from ferry.transfers.options import JobOptions
    from ferry.transfers.scheduler import RunConfig, Runner
    from ferry.transfers.store import Store

    src = tmp_path / "src"
    src.mkdir()
    for i in range(200):
        (src / f"{i}.dat").write_bytes(b"x" * 100)
    store = Store(tmp_path / "q.db")
    pool = BackendPool()
    try:
        options = JobOptions(recursive=True)
        job = jobs.create(store, jobs.prepare([str(src)], str(tmp_path / "out") + "/", options, pool), options)
        runner = Runner(store, RunConfig(job_ids=[job], parallel=AUTO_MAX, auto_parallel=True), pool=pool)
        assert runner.run().jobs[job] == "done"
        assert len(runner._workers) == START
        assert len(list((tmp_path / "out" / "src").iterdir())) == 200
    finally:
        store.close()
        pool.close()
