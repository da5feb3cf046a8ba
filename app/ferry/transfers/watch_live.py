"""Live jobs: jobs whose tasks arrive over time from a feeder (``ferry watch``, ``ferry.api.Shipper``).

An ordinary job is walked by the scheduler's planner and is finished when the walk is done and no
task is open. A live job has no walk: its feeder inserts tasks with :meth:`Store.add_tasks` as
files become ready, and "planned" (the walk is over) means "the feeder closed the job". Until
then the scheduler keeps the job running even when it has nothing to do, so a file added an hour
later still leaves at once.

A feeder that dies (``kill -9``) cannot close its job; so the feeder is recorded with a heartbeat
(``job_values['live']``), and a runner that finds the feeder gone treats the job as closed: it
ships what was queued and finishes, instead of waiting forever. Restarting ``ferry watch`` with
the same arguments reopens the job and carries on.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from ferry.backends.registry import BackendPool
from ferry.transfers.store import Job, Store, runner_id

LIVE_KEY = "live"
BEAT_EVERY = 10.0
BEAT_STALE = 120.0  # as the store's runner heartbeat: beyond this a feeder counts as gone


def open_feed(store: Store, job_id: int, feeder: str | None = None) -> None:
    """Mark ``job_id`` live, fed by this process (or ``feeder``); the scheduler then waits for it."""
    store.set_job_value(job_id, LIVE_KEY, json.dumps({"feeder": feeder or runner_id(), "beat": time.time()}))


def beat(store: Store, job_id: int, feeder: str | None = None) -> None:
    open_feed(store, job_id, feeder)


def release_feed(store: Store, job_id: int) -> None:
    """The feeder stops without closing the job (``ferry watch`` interrupted): nobody feeds it now,
    so a runner may finish what is queued; the same watch started again reopens it."""
    store.set_job_value(job_id, LIVE_KEY, json.dumps({"feeder": "", "beat": 0}))


def close_feed(store: Store, job_id: int) -> None:
    """No more tasks will come: the job finishes when its open tasks are done."""
    store.mark_planned(job_id)


def is_live(store: Store, job_id: int) -> bool:
    return store.job_value(job_id, LIVE_KEY) is not None


def _feeder_alive(value: str) -> bool:
    try:
        data = json.loads(value)
        feeder, last = str(data["feeder"]), float(data["beat"])
    except (ValueError, KeyError, TypeError):
        return False
    fresh = time.time() - last < BEAT_STALE
    host, _, pid = feeder.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        if int(pid) == os.getpid():
            return True
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return fresh
        return fresh  # a live pid may have been reused: trust it only with a recent beat
    return fresh


def feed_closed(store: Store, job: Job) -> bool:
    """True when a live job will get no more tasks: closed by its feeder, or its feeder is gone.

    A gone feeder's job is closed in the store too, so ``ferry queue list`` says so and the next
    runner finishes it.
    """
    if job.planned:
        return True
    value = store.job_value(job.id, LIVE_KEY)
    if value is None or _feeder_alive(value):
        return False
    store.mark_planned(job.id)
    return True


class LentPool(BackendPool):
    """A feeder's connections, lent to the runners it starts: a runner closes its pool when it
    ends, but the feeder (and the next runner) still need them. One pool means one login per
    host however many runners come and go (one 2FA prompt, not one per runner)."""

    def close(self) -> None:
        pass  # the owner calls release()

    def release(self) -> None:
        super().close()


class Heartbeat:
    """Keeps a feeder's beat fresh from a daemon thread while it lives."""

    def __init__(self, store: Store, job_id: int, every: float = BEAT_EVERY) -> None:
        self.store = store
        self.job_id = job_id
        self.every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.feeder = runner_id()

    def start(self) -> None:
        open_feed(self.store, self.job_id, self.feeder)
        self._thread = threading.Thread(target=self._loop, name=f"ferry-feed-{self.job_id}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                beat(self.store, self.job_id, self.feeder)
            except Exception:  # a busy database for a moment: the next beat tries again
                pass

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
