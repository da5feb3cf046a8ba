"""Extra TCP connections to one host for one big file on a long link ("lanes").

One TCP connection moves at most its window per round trip: 6 MiB / 150 ms = 42 MB/s however
many SFTP channels it carries (measured through ``benchmarks/linkemu.py``: Ferry's peak in flight
was the whole 6 MiB window). A big file on a long link therefore goes over several connections,
each its own paramiko Transport and login, with its byte-range streams spread over them.

How many follows the bandwidth-delay product (:func:`plan_for`): the round-trip time is measured
on the host's connection (the quickest of two SSH requests answered at once by the server), the
window is the one TCP is likely to allow (:func:`tcp_window`), and there are as many connections
as carry ``limits.LANE_RATE`` together, at most ``limits.MAX_CONNECTIONS``, and only where they
save more time on this file than their login costs. On a LAN one connection already does: none
is opened. ``FERRY_SFTP_CONNECTIONS`` fixes the count (1: never).

Only a host that let Ferry in with a key alone gets lanes: they log in with that key, asking
nobody, and must show the same host key; a login that asked a person (a one-time code, a
password) or went through a jump host or proxy command stays one connection. What was chosen and
why is a typed :class:`StreamPlan`, logged and kept on the host (``Host.last_plan``).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from ferry.backends.sftp import limits
from ferry.backends.sftp.connection import ChannelPool, Connection
from ferry.core.errors import AuthError, FerryError, UsageError

log = logging.getLogger("ferry.sftp")
RTT_WAIT = 3.0  # seconds to wait for the server's answer to the RTT probe (none: no lanes)
T = TypeVar("T")


class Why(StrEnum):
    """Why a big file goes over the connections it goes over."""

    BDP = "bdp"  # the bandwidth-delay product asks for this many
    LAN = "lan"  # one connection carries LANE_RATE at this round-trip time
    SHORT = "short"  # the file is too small for another login to pay off
    FIXED = "fixed"  # FERRY_SFTP_CONNECTIONS
    NO_LANES = "no-lanes"  # the login needed a person, or goes through a jump host or proxy
    UNMEASURED = "unmeasured"  # the server did not answer the round-trip probe


_WHY_TEXT = {
    Why.BDP: "window / RTT per connection",
    Why.LAN: "one connection fills it",
    Why.SHORT: "too small to pay for another login",
    Why.FIXED: limits.CONNECTIONS_ENV,
    Why.NO_LANES: "the login needs a person or a proxy",
    Why.UNMEASURED: "the round trip could not be measured",
}


@dataclass(frozen=True)
class StreamPlan:
    """TCP connections and byte-range streams for one big file, and why."""

    connections: int
    streams: int  # per connection
    rtt: float | None  # seconds, measured on the host's connection
    window: int  # bytes in flight one connection is assumed to allow
    why: Why

    def text(self) -> str:
        conns = "1 TCP connection" if self.connections == 1 else f"{self.connections} TCP connections"
        rtt = f"RTT {self.rtt * 1000:.0f} ms" if self.rtt is not None else "RTT not measured"
        window = f"{self.window / (1 << 20):g} MiB window"
        return f"{conns} x {self.streams} streams ({rtt}, {window}: {_WHY_TEXT[self.why]})"


def tcp_window(up: bool) -> int:
    """Bytes one TCP connection may have in flight: the local buffer's maximum for the direction
    (``net.ipv4.tcp_wmem`` sending, ``tcp_rmem`` receiving), at most ``limits.REMOTE_WINDOW``
    (the far end's buffers cap it too, and cannot be seen from here)."""
    name = "tcp_wmem" if up else "tcp_rmem"
    try:
        with open(f"/proc/sys/net/ipv4/{name}", encoding="ascii") as f:
            local = int(f.read().split()[2])
    except (OSError, ValueError, IndexError):
        local = limits.REMOTE_WINDOW
    return max(64 << 10, min(local, limits.REMOTE_WINDOW))


def plan_for(size: int, rtt: float | None, window: int, streams: int, fixed: int | None, possible: bool) -> StreamPlan:
    """Connections for a file of ``size`` bytes: as many as carry LANE_RATE at ``rtt`` with
    ``window`` each (at most MAX_CONNECTIONS), fewer while the time they save is not more than a
    login's round trips."""
    if not possible:
        return StreamPlan(1, streams, rtt, window, Why.NO_LANES)
    if fixed is not None:
        return StreamPlan(fixed, streams, rtt, window, Why.FIXED)
    if rtt is None:
        return StreamPlan(1, streams, rtt, window, Why.UNMEASURED)
    if rtt <= 0:
        return StreamPlan(1, streams, rtt, window, Why.LAN)
    per = window / rtt  # bytes/s one connection can carry
    want = min(limits.MAX_CONNECTIONS, math.ceil(limits.LANE_RATE / per))
    if want <= 1:
        return StreamPlan(1, streams, rtt, window, Why.LAN)
    one = size / min(per, limits.LANE_RATE)
    while want > 1 and one - size / min(want * per, limits.LANE_RATE) <= limits.LOGIN_RTTS * rtt:
        want -= 1  # the extra logins (made at once: one login's time) would not pay off
    return StreamPlan(want, streams, rtt, window, Why.BDP if want > 1 else Why.SHORT)


def fixed_connections() -> int | None:
    """FERRY_SFTP_CONNECTIONS as a count from 1 to MAX_CONNECTIONS, or None when not set."""
    raw = os.environ.get(limits.CONNECTIONS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= limits.MAX_CONNECTIONS:
        most = limits.MAX_CONNECTIONS
        raise UsageError(f"{limits.CONNECTIONS_ENV} must be a whole number from 1 to {most}, not {raw!r}")
    return int(raw)


class LaneConnection(Connection):
    """One more connection to the host of ``primary``, logged in with the key that let the
    primary in, and only if the host shows the same host key."""

    def __init__(self, primary: Connection) -> None:
        super().__init__(primary.target)
        self._primary = primary

    def _login(self, transport: Any) -> None:
        key = self._primary.auth.key_only
        title = self.auth.title
        if key is None:
            raise AuthError(f"Login to {title} needs a person: no extra connection")
        known = self._primary.transport().get_remote_server_key()
        if transport.get_remote_server_key().asbytes() != known.asbytes():
            raise AuthError(f"{title} showed another host key on a second connection")
        transport.auth_publickey(self.target.user, key)
        if not transport.is_authenticated():
            raise AuthError(f"Login to {title} on a second connection wants more than the key")


class Lanes:
    """The extra connections to one host (opened when a big file first asks, kept for the
    next) and the round-trip time measured to it."""

    def __init__(self, primary: Connection) -> None:
        self.primary = primary
        self._lock = threading.Lock()
        self._pools: list[ChannelPool] = []
        self._rtt: float | None = None
        self._closed = False  # the host logged out: no new connection
        self._unanswered = False  # the server left the RTT probe unanswered: no lanes

    def possible(self) -> bool:
        t = self.primary.target
        return self.primary.auth.key_only is not None and not t.proxy_jump and not t.proxy_command

    def rtt(self) -> float | None:
        """The round-trip time to the host (measured once per process): a global request the
        server answers at once (OpenSSH says "failure" to ``keepalive@openssh.com``)."""
        if self._rtt is None and not self._unanswered:
            try:
                transport = self.primary.transport()
                answered = threading.Event()

                def ask() -> None:
                    # paramiko waits for the answer without a timeout: a server that never
                    # answers leaves this thread waiting until the connection closes, not the file.
                    transport.global_request("keepalive@openssh.com", wait=True)
                    answered.set()

                t0 = time.perf_counter()
                threading.Thread(target=ask, name="sftp-rtt", daemon=True).start()
                if not answered.wait(RTT_WAIT):
                    self._unanswered = True  # asked once per host: never again
                    log.info("%s did not answer in %g s: one connection", self.primary.target.hostname, RTT_WAIT)
                    return None
                self._rtt = time.perf_counter() - t0
            except (FerryError, OSError, EOFError) as exc:
                log.info("round-trip time to %s not measured: %s", self.primary.target.hostname, exc)
                return None
        return self._rtt

    def channels(self, n: int, streams: int) -> list[Any]:
        """``streams`` SFTP channels on each of ``n`` extra connections, opening the connections
        missing and every channel at once (each takes round trips: opened one after another, 6
        channels cost 2.7 s at 150 ms); a connection or channel that cannot be made is left out
        (logged). Each channel is tagged with its pool, which ``ChannelPool.give_back`` honours."""
        with self._lock:
            if self._closed:
                return []
            while len(self._pools) < n:
                pool = ChannelPool(LaneConnection(self.primary))
                pool.connection._on_login = pool.renew  # a dropped lane logs in again as new
                self._pools.append(pool)
            pools = self._pools[:n]

        def lane(pool: ChannelPool) -> list[Any]:
            try:
                pool.connection.transport()
            except Exception as exc:  # paramiko's too: a lane only ever saves time
                log.info("no extra connection to %s: %s", self.primary.target.hostname, exc)
                return []
            got = [c for c in concurrently([pool.borrow_nowait] * streams) if c is not None]
            for c in got:
                setattr(c, "_ferry_pool", pool)  # noqa: B010 - goes back to its own pool
            return got

        return [c for got in concurrently([functools.partial(lane, p) for p in pools]) for c in got]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools, self._pools = self._pools, []
        for pool in pools:
            pool.close()
            pool.connection.close()


def concurrently(calls: list[Callable[[], T]]) -> list[T]:
    """Each call's result, the calls run at once on threads of their own (round trips overlap);
    a call's exception is raised once all have ended."""
    results: list[T | None] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:
            errors.append(exc)

    if len(calls) == 1:
        run(0)
    else:
        threads = [threading.Thread(target=run, args=(i,), name="sftp-open", daemon=True) for i in range(len(calls))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]
