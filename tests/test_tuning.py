"""--parallel auto: the hill-climbing tuner and the gate it drives."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ferry.transfers.tuning import FILE_COST, Gate, Tuner


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def drive(tuner: Tuner, clock: Clock, rate_at: dict[int, float], steps: int) -> list[int]:
    """Feed the tuner a throughput that depends only on the current limit; return the limits."""
    done = 0.0
    seen = []
    tuner.observe(0, 0, busy=True)
    for _ in range(steps):
        clock.t += tuner.interval
        done += rate_at[tuner.gate.limit] * tuner.interval
        tuner.observe(int(done), 0, busy=True)
        seen.append(tuner.gate.limit)
    return seen


def test_tuner_climbs_to_the_peak_and_stays_near_it() -> None:
    # Small objects: throughput rises with workers up to 6, then falls (as in the field reports).
    curve = {n: 100.0 * min(n, 6) - 30.0 * max(0, n - 6) for n in range(1, 17)}
    clock = Clock()
    tuner = Tuner(Gate(2), maximum=16, clock=clock)
    limits = drive(tuner, clock, curve, 30)
    assert max(limits) >= 6
    assert all(5 <= n <= 8 for n in limits[-10:]), limits


def test_tuner_stays_low_when_one_stream_is_enough() -> None:
    # Large objects over a saturated link: more workers only add contention.
    curve = {n: 1000.0 / (1 + 0.15 * (n - 1)) for n in range(1, 17)}
    clock = Clock()
    tuner = Tuner(Gate(2), maximum=16, clock=clock)
    limits = drive(tuner, clock, curve, 20)
    assert all(n <= 3 for n in limits[-10:]), limits


def test_tuner_ignores_idle_periods_and_counts_files() -> None:
    clock = Clock()
    tuner = Tuner(Gate(2), maximum=8, clock=clock)
    tuner.observe(0, 0, busy=False)
    clock.t += 10
    tuner.observe(0, 0, busy=False)  # idle: no decision
    assert tuner.gate.limit == 2 and not tuner.history
    tuner.observe(0, 0, busy=True)
    clock.t += tuner.interval
    tuner.observe(0, 30, busy=True)  # 30 small files count as work
    assert tuner.history and tuner.history[0][1] == 30 * FILE_COST / tuner.interval


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
