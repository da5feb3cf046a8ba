#!/usr/bin/env python3
"""A wide-area link emulator: a TCP proxy that delays, paces and windows every connection.

``tc netem`` is not available on the machines Ferry's benchmarks run on, so the WAN bench
(``bench_wan.py``) puts this proxy in front of the loopback sshd and S3 server. What it models:

* **Propagation delay.** Every byte read from one side is delivered to the other side half the
  round-trip time (``--rtt``) later. Each direction of each connection keeps a queue of
  ``(delivery time, bytes)``; one timer per direction fires at the head's delivery time and
  delivers everything that is due (no sleep per read), so the delay holds at any rate and any
  amount in flight (1 Gbit/s x 150 ms is ~19 MB in flight).
* **Link rate** (``--rate``), per direction, shared by all connections: a full-duplex link such
  as Ethernet, so 1 Gbit/s up and 1 Gbit/s down at once. Bytes are serialised onto the link in
  the order they were read (a virtual clock: a token bucket with no burst allowance beyond the
  read in hand); a busy link queues them, so the queueing delay adds to the propagation delay
  as in a router's buffer. The buffer never drops (see below).
* **A TCP window per connection and direction** (``--window``, default 6 MiB): a byte counts as
  in flight from the moment the proxy reads it until its acknowledgement would be back at the
  sender, i.e. until it was delivered *and* another half RTT passed. While ``window`` bytes are
  in flight the proxy stops reading from the sender (its reads are sized so the cap is exact),
  so a single connection moves at most ``window / RTT`` (6 MiB / 50 ms = 126 MB/s; at 150 ms,
  42 MB/s). The sender's own socket buffers fill and it blocks, as a real sender does.
* **The handshake.** A new connection is held for one RTT before the proxy connects upstream and
  starts reading from the client (the client's SYN, the server's SYN-ACK), so a tool that opens
  many connections pays for each, as it would on a real link.
* **A slow receiver** holds the window: bytes the receiver does not take stay undelivered.

What it does not model: packet loss and retransmission, congestion control (slow start,
cwnd growth and back-off; the window is full from the first byte), window autotuning (the
window is fixed), jitter, MTU/packetisation, and the cost of the kernel's TCP on a real NIC.

    .venv/bin/python benchmarks/linkemu.py --rtt 50 --rate 1g --window 6M 127.0.0.1:22
    # prints "listen 127.0.0.1:PORT -> 127.0.0.1:22"; runs until SIGTERM/SIGINT
    .venv/bin/python benchmarks/linkemu.py --measure       # its own overhead and delay accuracy
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

MiB = 1 << 20
READ_MAX = 256 * 1024  # the largest single read from a sender


def parse_size(text: str) -> int:
    """``6M``, ``512K``, ``1048576`` -> bytes (binary units)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def parse_rate(text: str) -> float:
    """``1g``, ``100m``, ``0`` (no cap) -> bits per second (decimal units, as links are sold)."""
    units = {"k": 1e3, "m": 1e6, "g": 1e9}
    t = text.strip().lower().removesuffix("bit").removesuffix("bps").removesuffix("b")
    if t and t[-1] in units:
        return float(t[:-1]) * units[t[-1]]
    return float(t)


class Link:
    """The shared link: one virtual clock per direction (full duplex). ``rate`` in bytes/s, 0 = none."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.free_at = [0.0, 0.0]  # when each direction's serialiser is next free

    def depart(self, direction: int, now: float, n: int) -> float:
        """When the last of ``n`` bytes offered at ``now`` has left the sender's end of the link."""
        if self.rate <= 0:
            return now
        start = max(now, self.free_at[direction])
        self.free_at[direction] = start + n / self.rate
        return self.free_at[direction]


class Stats:
    def __init__(self) -> None:
        self.connections = 0
        self.bytes = [0, 0]  # delivered, per direction (0: client -> server)
        self.peak_in_flight = 0  # the largest in-flight count any one pipe reached


class Pipe:
    """One direction of one connection: reads from ``src``, delivers into ``dst`` after the delay."""

    def __init__(self, emu: LinkEmulator, direction: int) -> None:
        self.emu = emu
        self.loop = emu.loop
        self.direction = direction
        self.src: asyncio.Transport | None = None
        self.dst: asyncio.Transport | None = None
        self.queue: deque[tuple[float, bytes | None]] = deque()  # None: the sender closed
        self.acks: deque[tuple[float, int]] = deque()
        self.in_flight = 0
        self.reading = True
        self.dst_blocked = False
        self.done = False
        self.eof_pushed = False
        self.timer: asyncio.TimerHandle | None = None
        self.buf = bytearray(READ_MAX)

    def room(self) -> int:
        return self.emu.window - self.in_flight

    def push(self, data: bytes | None) -> None:
        if data is None:
            if self.eof_pushed:
                return
            self.eof_pushed = True
        now = self.loop.time()
        n = len(data) if data else 0
        t = self.emu.link.depart(self.direction, now, n) + self.emu.owd
        self.queue.append((t, data))
        self.in_flight += n
        if self.in_flight > self.emu.stats.peak_in_flight:
            self.emu.stats.peak_in_flight = self.in_flight
        if self.room() <= 0 and self.reading and self.src is not None:
            self.reading = False
            self.src.pause_reading()
        self._arm()

    def _arm(self) -> None:
        due = []
        if self.queue and not self.dst_blocked and self.dst is not None:
            due.append(self.queue[0][0])
        if self.acks:
            due.append(self.acks[0][0])
        if not due:
            return
        when = min(due)
        if self.timer is not None:
            if self.timer.when() <= when:
                return
            self.timer.cancel()
        self.timer = self.loop.call_at(when, self._tick)

    def _tick(self) -> None:
        self.timer = None
        now = self.loop.time()
        dst = self.dst
        while self.queue and self.queue[0][0] <= now and not self.dst_blocked and dst is not None:
            _, data = self.queue.popleft()
            if data is None:
                self.done = True
                if dst.can_write_eof():
                    with contextlib.suppress(OSError, RuntimeError):
                        dst.write_eof()
                self.emu.maybe_close(self)
                continue
            if not dst.is_closing():
                dst.write(data)
            self.emu.stats.bytes[self.direction] += len(data)
            self.acks.append((now + self.emu.owd, len(data)))
        while self.acks and self.acks[0][0] <= now:
            self.in_flight -= self.acks.popleft()[1]
        if not self.reading and self.room() > 0 and self.src is not None and not self.src.is_closing():
            self.reading = True
            self.src.resume_reading()
        self._arm()

    def blocked(self, yes: bool) -> None:
        self.dst_blocked = yes
        if not yes:
            self._arm()


class Side(asyncio.BufferedProtocol):
    """One socket of a proxied connection; ``out`` is the pipe it feeds, ``into`` the one feeding it."""

    def __init__(self, out: Pipe, into: Pipe, on_made: Callable[[Side], None] | None = None) -> None:
        self.out = out
        self.into = into
        self.on_made = on_made
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=4 * MiB)
        if self.on_made is not None:
            transport.pause_reading()  # until the upstream connection is up
            self.on_made(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        # Never read more than the window has room for: the cap is exact, not one read over.
        return memoryview(self.out.buf)[: max(1, min(READ_MAX, self.out.room()))]

    def buffer_updated(self, nbytes: int) -> None:
        self.out.push(bytes(self.out.buf[:nbytes]))

    def eof_received(self) -> bool:
        self.out.push(None)
        return True  # keep the other direction open (half close)

    def connection_lost(self, exc: Exception | None) -> None:
        self.out.push(None)
        self.into.dst = None  # nothing more can be delivered to this side
        self.into.queue.clear()
        self.into.done = True
        self.out.emu.maybe_close(self.out)

    def pause_writing(self) -> None:
        self.into.blocked(True)

    def resume_writing(self) -> None:
        self.into.blocked(False)


class LinkEmulator:
    """The proxy. ``rtt`` in seconds, ``rate`` in bits/s (0: no cap), ``window`` in bytes.

    Use it from another thread with :meth:`start` / :meth:`add_route` / :meth:`close`, or from a
    command line (``main``), which runs it in its own process (so its CPU is its own)."""

    def __init__(self, rtt: float, rate: float = 0.0, window: int = 6 * MiB, handshake: bool = True) -> None:
        self.rtt = rtt
        self.owd = rtt / 2
        self.window = window
        self.handshake = handshake
        self.link = Link(rate / 8)
        self.stats = Stats()
        self.loop = asyncio.new_event_loop()
        self.servers: list[asyncio.Server] = []
        self.conns: dict[Pipe, tuple[Pipe, list[asyncio.Transport]]] = {}
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the connection's life ----------------------------------------------------------------------

    async def _route(self, target: tuple[str, int], host: str, port: int) -> int:
        def factory() -> Side:
            return Side(Pipe(self, 0), Pipe(self, 1), lambda side: self._start_connect(side, target))

        server = await self.loop.create_server(factory, host, port, reuse_address=True)
        self.servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def _start_connect(self, client: Side, target: tuple[str, int]) -> None:
        task = self.loop.create_task(self._connect(client, target))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, client: Side, target: tuple[str, int]) -> None:
        self.stats.connections += 1
        up, down = client.out, client.into
        assert client.transport is not None
        if self.handshake and self.rtt > 0:
            await asyncio.sleep(self.rtt)  # SYN, SYN-ACK: one round trip before the first byte
        try:
            _, upstream = await self.loop.create_connection(lambda: Side(down, up), *target)
        except OSError:
            client.transport.close()
            return
        assert upstream.transport is not None
        up.src, up.dst = client.transport, upstream.transport
        down.src, down.dst = upstream.transport, client.transport
        self.conns[up] = (down, [client.transport, upstream.transport])
        self.conns[down] = (up, [client.transport, upstream.transport])
        if not client.transport.is_closing():
            client.transport.resume_reading()
        up._arm()  # bytes the client sent before the connection was up (or its EOF)

    def maybe_close(self, pipe: Pipe) -> None:
        """Close both sockets once both directions have delivered their end."""
        entry = self.conns.get(pipe)
        if entry is None:
            return
        other, transports = entry
        if pipe.done and other.done:
            for t in transports:
                t.close()
            self.conns.pop(pipe, None)
            self.conns.pop(other, None)

    # -- running ------------------------------------------------------------------------------------

    def start(self) -> LinkEmulator:
        """Run the event loop in a daemon thread (for tests and in-process use)."""
        self._thread = threading.Thread(target=self.loop.run_forever, name="linkemu", daemon=True)
        self._thread.start()
        return self

    def add_route(self, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on ``host:port`` (0: any free port) and forward to ``target``; the port."""
        return asyncio.run_coroutine_threadsafe(self._route(target, host, port), self.loop).result(10)

    def close(self) -> None:
        def stop() -> None:
            for s in self.servers:
                s.close()
            for _, transports in list(self.conns.values()):
                for t in transports:
                    t.abort()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        if self._thread is not None:
            self._thread.join(5)
        self.loop.close()


def spawn(
    targets: list[tuple[str, int]], rtt_ms: float, rate: str = "1g", window: str = "6M", python: str = sys.executable
) -> tuple[object, list[int]]:
    """Start the emulator as its own process in front of ``targets``: (Popen, listening ports)."""
    import subprocess

    argv = [python, os.path.abspath(__file__), "--rtt", str(rtt_ms), "--rate", rate, "--window", window]
    argv += [f"{h}:{p}" for h, p in targets]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    ports = []
    assert proc.stdout is not None
    for _ in targets:
        line = proc.stdout.readline()
        if not line.startswith("listen "):
            proc.kill()
            raise RuntimeError(f"linkemu did not start: {line!r}")
        ports.append(int(line.split()[1].rsplit(":", 1)[1]))
    return proc, ports


# -- measuring the emulator itself ----------------------------------------------------------------


def _sink_server() -> tuple[socket.socket, Callable[[], None]]:
    """A loopback server that reads everything and answers each 1-byte message with 1 byte
    (ping), or swallows bulk data and answers b"!" at EOF."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                data = conn.recv(READ_MAX)
                if not data:
                    conn.sendall(b"!")
                    return
                if data == b"p":
                    conn.sendall(b"p")

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, listener.close


def send_bulk(port: int, total: int) -> float:
    """Seconds to push ``total`` bytes to the sink at ``port`` and get its acknowledgement."""
    block = os.urandom(MiB)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t = time.perf_counter()
        left = total
        while left > 0:
            n = min(left, len(block))
            s.sendall(block[:n])
            left -= n
        s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b"!"
        return time.perf_counter() - t


def ping(port: int, count: int) -> list[float]:
    """Round-trip times (s) of ``count`` one-byte pings through ``port``; an untimed first ping
    waits out the emulated handshake (the first byte through a new connection takes 2 RTT)."""
    out = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"p")
        assert s.recv(1) == b"p"
        for _ in range(count):
            t = time.perf_counter()
            s.sendall(b"p")
            assert s.recv(1) == b"p"
            out.append(time.perf_counter() - t)
    return out


def measure() -> int:
    """Print the emulator's throughput at RTT 0 against a direct connection, and its delay accuracy."""
    sink, close = _sink_server()
    target = ("127.0.0.1", int(sink.getsockname()[1]))
    total = 512 * MiB
    print(f"load average {os.getloadavg()}; cores {os.cpu_count()}", flush=True)
    direct = [send_bulk(target[1], total) for _ in range(3)]
    print(f"direct loopback, {total // MiB} MiB: {total / statistics.median(direct) / 1e6:.0f} MB/s", flush=True)
    for rtt_ms, rate, window in ((0, 0.0, 1 << 40), (0, 1e9, 6 * MiB), (50, 1e9, 1 << 30), (150, 1e9, 1 << 30)):
        emu = LinkEmulator(rtt_ms / 1000, rate, window).start()
        port = emu.add_route(target)
        cpu0 = time.process_time()
        n = total if rtt_ms == 0 else 256 * MiB
        took = statistics.median(send_bulk(port, n) for _ in range(3))
        cpu = (time.process_time() - cpu0) / 3
        rtts = ping(port, 20) if rtt_ms else []
        emu.close()
        limit = f", limit {rate / 8e6:.0f} MB/s" if rate else ""
        rtt_txt = (
            f"; ping median {statistics.median(rtts) * 1000:.2f} ms (min {min(rtts) * 1000:.2f}, "
            f"max {max(rtts) * 1000:.2f}) for {rtt_ms} ms"
            if rtts
            else ""
        )
        print(
            f"through linkemu rtt {rtt_ms} ms rate {rate / 1e9:g} Gbit/s window {window // MiB} MiB: "
            f"{n / took / 1e6:.0f} MB/s{limit} (CPU {cpu:.2f} s per {n // MiB} MiB: emulator, sender and sink)"
            f"{rtt_txt}",
            flush=True,
        )
    close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", help="HOST:PORT to forward to (one listener each)")
    ap.add_argument("--rtt", type=float, default=50.0, help="round-trip time in ms (default 50)")
    ap.add_argument("--rate", default="1g", help="link rate per direction, bits/s: 1g, 100m, 0 = none (default 1g)")
    ap.add_argument("--window", default="6M", help="bytes in flight per connection and direction (default 6M)")
    ap.add_argument("--listen", default="127.0.0.1", help="address to listen on (ports are chosen freely)")
    ap.add_argument("--no-handshake", action="store_true", help="do not hold new connections for one RTT")
    ap.add_argument("--measure", action="store_true", help="measure the emulator's own overhead and accuracy")
    args = ap.parse_args(argv)
    if args.measure:
        return measure()
    if not args.targets:
        ap.error("give at least one HOST:PORT to forward to (or --measure)")
    try:
        rate = parse_rate(args.rate)
        window = parse_size(args.window)
        targets = [(h, int(p)) for h, p in (t.rsplit(":", 1) for t in args.targets)]
    except ValueError as exc:
        ap.error(f"bad value: {exc}")
    emu = LinkEmulator(args.rtt / 1000, rate, window, handshake=not args.no_handshake)
    for target in targets:
        port = emu.loop.run_until_complete(emu._route(target, args.listen, 0))
        print(f"listen {args.listen}:{port} -> {target[0]}:{target[1]}", flush=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        emu.loop.add_signal_handler(sig, emu.loop.stop)
    emu.loop.run_forever()
    s = emu.stats
    print(
        f"connections {s.connections}, bytes up {s.bytes[0]}, down {s.bytes[1]}, peak in flight {s.peak_in_flight}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
