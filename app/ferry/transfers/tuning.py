"""Files in flight, tuned while a run goes (``--parallel auto``, the default).

The field reports behind Ferry saw throughput rise with parallel workers for many small objects,
plateau, then fall; for one large object a single stream can already fill the link. On a long
link each small file waits a round trip or more per request, so the number that fills the link
grows with the round-trip time: 4 at once is right on a LAN and a sixteenth of what a 50 ms link
needs. So the number is measured, not guessed.

:class:`Tuner` starts at 4. Where a measurement shows files waiting on the link (time per file far
above this process's CPU time per file), it jumps to as many as keep the CPU busy (Little's law,
asked after each step up); otherwise it doubles while each doubling raises throughput by 15 % or
more, quadrupling once early on after a doubling that nearly doubled it (a slow start, as TCP's).
Then it holds the best setting, probing one step up and one step down now and then so a change
of link or of file sizes is followed. A step that made throughput fall is undone. A measurement ends once enough
files finished to judge (twice the files in flight, at least 8; the first: once the files in
flight) or after three seconds.

Throughput counts bytes plus a per-file cost (``FILE_COST`` bytes), so a run of small files is
judged by files per second and a run of large ones by bytes per second. The number never grows
while fewer files are ready than allowed (it would not be what limits), and while files are big
(8 MiB and more on average) it stays at 16 or under: each big file has buffers of its own.

What was chosen and why is a typed :class:`Choice`, recorded with each running job and shown by
``ferry queue show`` and the window's Transfers panel.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

FILE_COST = 256 * 1024
START = 4  # what a fixed --parallel defaulted to: never less on a LAN
# The most files at once --parallel auto tries (and the workers a run starts). 2,000 x 16 KiB to
# S3 150 ms away took 18.0 s with at most 64 (s5cmd, 256 workers: 8.2 s): each file in flight
# does ~5 a second there, so 64 cap it near 320 files/s.
AUTO_MAX = 128
BIG_FILE = 8 << 20  # average file size from which the number stays at BIG_CEILING or under
BIG_CEILING = 16
GROW = 1.15  # a doubling must raise throughput this much to go on doubling
# A doubling that raised it this much (close to twice: each file waits on the link, not on a
# processor) quadruples next, early on: a long link reaches 64 in three steps instead of four.
GROW_FAST = 1.6
FAST_UNTIL = 8  # ... only while this few: 4 -> 8 -> 32, then doubling (a jump to 128 from 32
# hid whether 64 was as fast)
KEEP_LARGER = 1.05
FALL = 0.95  # below this share of the best, a step made things worse
PROBE_GAIN = 1.10  # a probe up is kept if it raises throughput this much
PROBE_EVERY = 6  # measurements held between probes
MIN_INTERVAL = 0.5
MAX_INTERVAL = 3.0
TUNING_KEY = "tuning"  # job value: the latest Choice as JSON
STREAMS_KEY = "streams"  # job value: how its last big file moved (Backend.stream_plan), for people


class Why(StrEnum):
    """Why the tuner holds the number it holds (typed: the window and ``queue show`` read it)."""

    MEASURING = "measuring"  # the first setting, not judged yet
    ROSE = "rose"  # the last step up raised throughput: going on up
    PLATEAU = "plateau"  # the last step changed nothing worth it: holding the best
    FELL = "fell"  # the last step made it fall: back to the best
    CEILING = "ceiling"  # still rising at the most allowed
    LATENCY = "latency"  # the first measurement: files wait on the link, so as many as fill it
    FEW_FILES = "few-files"  # fewer files ready than allowed: the number is not what limits
    NO_NETWORK = "no-network"  # every running job is between local disks: no round trip to fill


@dataclass(frozen=True)
class Measure:
    """Throughput with ``files`` at once, over one measurement."""

    files: int
    units: float  # bytes/s + FILE_COST x files/s: what decisions compare
    files_s: float
    bytes_s: float

    def text(self) -> str:
        if self.files_s * FILE_COST >= self.bytes_s:
            return f"{self.files_s:,.0f} files/s"
        return f"{self.bytes_s / 1e6:,.1f} MB/s"


@dataclass(frozen=True)
class Choice:
    """The number of files at once, why, and the measurements behind it."""

    files: int
    why: Why
    kept: Measure | None = None  # the measurement of the setting held
    tried: Measure | None = None  # the step that was judged (PLATEAU/FELL), or the last one (ROSE)

    def describe(self) -> str:
        """``auto: 32 files at once (64 at once was no faster: 830 files/s against 812)``."""
        head = f"auto: {self.files} file{'s' if self.files != 1 else ''} at once"
        kept = self.kept.text() if self.kept else ""
        tried = self.tried
        if self.why is Why.ROSE and tried is not None:
            why = f"{tried.files} at once gave {tried.text()}; trying more"
        elif self.why is Why.PLATEAU and tried is not None:
            why = f"{tried.files} at once was no faster: {tried.text()} against {kept}"
        elif self.why is Why.FELL and tried is not None:
            why = f"{tried.files} at once was slower: {tried.text()} against {kept}"
        elif self.why is Why.LATENCY and tried is not None and tried.files_s > 0:
            wait = tried.files / tried.files_s * 1000  # Little's law: in flight / finished per second
            why = f"at {tried.files} at once each file took {wait:,.0f} ms, mostly waiting on the link; trying more"
        elif self.why is Why.CEILING:
            why = f"the most allowed, still rising: {kept}"
        elif self.why is Why.NO_NETWORK:
            why = "between local disks nothing waits on a network; more at once only adds contention"
        elif self.why is Why.FEW_FILES:
            why = "fewer files are ready than that, so more would not help"
        else:
            why = "measuring"
        return f"{head} ({why})"

    def to_json(self) -> str:
        def m(x: Measure | None) -> list[float] | None:
            return None if x is None else [x.files, round(x.units), round(x.files_s, 1), round(x.bytes_s)]

        return json.dumps({"files": self.files, "why": self.why.value, "kept": m(self.kept), "tried": m(self.tried)})

    @classmethod
    def from_json(cls, text: str) -> Choice | None:
        def m(x: object) -> Measure | None:
            if not isinstance(x, list) or len(x) != 4:
                return None
            return Measure(int(x[0]), float(x[1]), float(x[2]), float(x[3]))

        try:
            d = json.loads(text)
            return cls(int(d["files"]), Why(d["why"]), m(d.get("kept")), m(d.get("tried")))
        except (ValueError, KeyError, TypeError):
            return None


class Gate:
    """At most ``limit`` holders at once; the limit may change while workers wait."""

    def __init__(self, limit: int) -> None:
        self._cond = threading.Condition()
        self._limit = max(1, limit)
        self._held = 0

    @property
    def limit(self) -> int:
        return self._limit

    def set_limit(self, limit: int) -> None:
        with self._cond:
            self._limit = max(1, limit)
            self._cond.notify_all()

    def acquire(self) -> None:
        with self._cond:
            while self._held >= self._limit:
                self._cond.wait()
            self._held += 1

    def release(self) -> None:
        with self._cond:
            self._held -= 1
            self._cond.notify()


class Tuner:
    """Drives ``gate``'s limit from the throughput measured by :meth:`observe`."""

    def __init__(
        self,
        gate: Gate,
        maximum: int,
        *,
        start: int = START,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.gate = gate
        self.clock = clock
        self.cpu = cpu
        self.maximum = max(1, maximum)
        self.history: list[Measure] = []  # every measurement, for the log and the tests
        self.choice = Choice(min(start, self.maximum), Why.MEASURING)
        self._growing = True
        self._best: Measure | None = None  # while growing: the best so far; holding: the held one
        self._probe_from: Measure | None = None  # probing: the held measurement to go back to
        self._held = 0
        self._probe_up = True
        self._t0 = clock()
        self._cpu0 = cpu()
        self._cpu_per_file = 0.0  # this process's CPU seconds per file, over the last measurement
        self._units0: tuple[int, int] | None = None
        self._samples = self._saturated = 0
        gate.set_limit(self.choice.files)

    @property
    def limit(self) -> int:
        return self.gate.limit

    def observe(self, bytes_done: int, files_done: int, active: int, *, network: bool = True) -> Choice | None:
        """Call often (each coordinator tick) with the run's counters and the files running now;
        ``network``: whether any running job reaches a server. Returns the new :class:`Choice`
        when one was made, else None."""
        now = self.clock()
        if not network:  # local disk to local disk: 4, as a fixed --parallel had it (measured:
            # 10,000 x 4 KiB on tmpfs took 7.70 s tuned against 7.24 s at 4, the GIL the limit)
            self._restart(now, bytes_done, files_done)
            if self.choice.why is Why.NO_NETWORK:
                return None
            self._growing, self._best, self._probe_from = True, None, None
            return self._choose(Choice(START, Why.NO_NETWORK))
        if self._units0 is None or active == 0:
            self._restart(now, bytes_done, files_done)
            return None
        self._samples += 1
        self._saturated += active >= self.gate.limit
        elapsed = now - self._t0
        files = files_done - self._units0[1]
        # The first measurement ends after one round of files (each may wait long on a long link,
        # and it only decides how far to jump); later ones after two rounds, at least 8 files.
        enough = files >= (self.gate.limit if not self.history else max(8, 2 * self.gate.limit))
        if elapsed < MIN_INTERVAL or (elapsed < MAX_INTERVAL and not enough):
            return None
        nbytes = bytes_done - self._units0[0]
        saturated = self._saturated * 2 >= self._samples
        self._cpu_per_file = (self.cpu() - self._cpu0) / files if files else 0.0
        self._restart(now, bytes_done, files_done)
        limit = self.gate.limit
        m = Measure(limit, (nbytes + files * FILE_COST) / elapsed, files / elapsed, nbytes / elapsed)
        self.history.append(m)
        big = files == 0 or nbytes / files >= BIG_FILE
        ceiling = min(self.maximum, BIG_CEILING) if big else self.maximum
        if not saturated:
            return self._choose(Choice(limit, Why.FEW_FILES, m)) if self.choice.why is not Why.FEW_FILES else None
        if self._growing:
            return self._grow(m, ceiling)
        return self._hold(m, ceiling)

    def _restart(self, now: float, bytes_done: int, files_done: int) -> None:
        self._t0, self._units0 = now, (bytes_done, files_done)
        self._cpu0 = self.cpu()
        self._samples = self._saturated = 0

    def _choose(self, choice: Choice) -> Choice:
        self.choice = choice
        self.gate.set_limit(choice.files)
        return choice

    def _step_up(self, m: Measure, ceiling: int, why: Why, factor: int = 2) -> Choice:
        """``m`` is the best so far: multiply from it (slow start), or stop at the ceiling."""
        self._best = m
        self._growing = m.files < ceiling
        if not self._growing:
            return self._choose(Choice(ceiling, Why.CEILING, m))
        return self._choose(Choice(min(ceiling, m.files * factor), why, m, m))

    def _needed(self, m: Measure) -> int:
        """Files at once that would keep this process's processor busy, by Little's law: the
        time a file takes (in flight / finished per second) over the CPU time it costs. Where
        files wait on a long link that is many; on a LAN a file's time is mostly its CPU, so few.
        0 where it cannot be said (no file finished)."""
        if m.files_s <= 0 or self._cpu_per_file <= 0:
            return 0
        return int(m.files / m.files_s / self._cpu_per_file)

    def _grow(self, m: Measure, ceiling: int) -> Choice:
        """While growing: at least double after each step that raised throughput, or go straight
        to what Little's law says is needed where that is more (the link, not the CPU, waits)."""
        best = self._best
        if best is None or m.units >= best.units * GROW:
            fast = best is not None and m.units >= best.units * GROW_FAST and m.files <= FAST_UNTIL
            step = m.files * (4 if fast else 2)
            needed = self._needed(m)
            if needed > step and m.files < ceiling:
                self._best = m
                return self._choose(Choice(min(ceiling, needed), Why.LATENCY, m, m))
            return self._step_up(m, ceiling, Why.MEASURING if best is None else Why.ROSE, 4 if fast else 2)
        self._growing = False
        if m.units < best.units * FALL:
            return self._choose(Choice(best.files, Why.FELL, best, m))
        # Rising a little (5 % or more): keep the larger setting; else the smaller, which costs
        # less CPU (at 50 ms, 128 small objects at once took 20 % more CPU than 64 for the same)
        keep = m if m.units >= best.units * KEEP_LARGER else best
        self._best = keep
        return self._choose(Choice(keep.files, Why.PLATEAU, keep, m if keep is best else best))

    def _hold(self, m: Measure, ceiling: int) -> Choice | None:
        held = self._probe_from
        if held is not None:  # this measurement judged a probe
            self._probe_from = None
            up = m.files > held.files
            if up and m.units >= held.units * PROBE_GAIN:
                return self._step_up(m, ceiling, Why.ROSE)  # a probe up that paid: grow on from there
            if not up and m.units >= held.units * FALL:  # as fast with fewer: keep fewer
                self._best = m
                return self._choose(Choice(m.files, Why.PLATEAU, m, held))
            self._best = held
            why = Why.FELL if m.units < held.units * FALL else Why.PLATEAU
            return self._choose(Choice(held.files, why, held, m))
        self._best = m
        self._held += 1
        if self._held < PROBE_EVERY:
            if m.files > ceiling:  # files grew big: come down to the ceiling for them
                return self._choose(Choice(ceiling, Why.CEILING, m))
            return None
        self._held = 0
        self._probe_up = not self._probe_up
        step = min(ceiling, (m.files * 3 + 1) // 2) if self._probe_up else max(1, m.files * 3 // 4)
        if step == m.files:
            return None
        self._probe_from = m
        self.gate.set_limit(step)  # the choice shown stays the held one until the probe is judged
        return None
