"""A TCP proxy the test controls, in front of any server on loopback (sshd, an S3 server): the
network faults a night brings, on demand.

- :meth:`FaultProxy.cut` drops every live connection at once (a NAT reboot, a cable pulled);
- :meth:`FaultProxy.refuse` closes the listening port for N seconds, so new connections are
  refused as by a server that is restarting (``ECONNREFUSED``), then opens the same port again;
- :meth:`FaultProxy.down` is both: the network goes away for N seconds;
- :meth:`FaultProxy.stall` forwards nothing, either way, for N seconds while connections stay
  open (a black hole: the peer sees silence, not an error);
- :meth:`FaultProxy.storm` answers every HTTP request with ``503 SlowDown`` (or another status)
  for N seconds without reaching the server (an S3 store failing for a while);
- :meth:`FaultProxy.after` runs one of these once a number of bytes has gone through, so a fault
  lands in the middle of a transfer rather than before it.

Each fault is counted, so a test can tell that it really happened.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable


class FaultProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._live: list[socket.socket] = []
        self._closed = False
        self._stalled_until = 0.0
        self._trigger: tuple[int, Callable[[], None]] | None = None
        self.connections = 0  # accepted and forwarded
        self.bytes = 0  # forwarded, both ways
        self.cuts = 0
        self.refusals = 0  # periods of refusing (each closes the port once)
        self.stalls = 0
        self._storm_until = 0.0
        self._storm_status = 503
        self.storm_answers = 0  # requests answered by the storm instead of the server
        listener = self._listen(0)
        self._listener: socket.socket | None = listener  # None while refusing
        self.port: int = listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    @property
    def endpoint(self) -> str:
        """As an HTTP endpoint (S3 servers)."""
        return f"http://127.0.0.1:{self.port}"

    # ---- faults ----
    def cut(self) -> None:
        """Drop every live connection (both sides see the stream end); new ones are accepted."""
        with self._lock:
            live, self._live = self._live, []
            self.cuts += 1
        for s in live:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def refuse(self, seconds: float) -> None:
        """Refuse new connections for ``seconds`` (the port is closed), then accept again on it."""
        with self._lock:
            listener, self._listener = self._listener, None
            self.refusals += 1
        if listener is not None:
            self._unlisten(listener)
        threading.Thread(target=self._reopen_after, args=(seconds,), daemon=True).start()

    def down(self, seconds: float) -> None:
        """The network is gone for ``seconds``: live connections drop and new ones are refused."""
        self.refuse(seconds)
        self.cut()

    def stall(self, seconds: float) -> None:
        """Forward nothing for ``seconds``; connections stay open (and new ones are accepted)."""
        with self._lock:
            self._stalled_until = time.monotonic() + seconds
            self.stalls += 1

    def storm(self, seconds: float, status: int = 503) -> None:
        """For ``seconds``, answer each new HTTP request with ``status`` (S3's SlowDown for 503,
        InternalError otherwise) and close; live connections drop first, so none slips past."""
        with self._lock:
            self._storm_until = time.monotonic() + seconds
            self._storm_status = status
        self.cut()

    def after(self, nbytes: int, fault: Callable[[], None]) -> None:
        """Run ``fault`` (e.g. ``lambda: proxy.down(3)``) once, when ``nbytes`` more have gone through."""
        with self._lock:
            self._trigger = (self.bytes + nbytes, fault)

    @property
    def refusing(self) -> bool:
        return self._listener is None

    def close(self) -> None:
        self._closed = True
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            self._unlisten(listener)
        self.cut()

    # ---- plumbing ----
    @staticmethod
    def _listen(port: int) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        return s

    @staticmethod
    def _unlisten(listener: socket.socket) -> None:
        # close() alone leaves the port listening while another thread waits in accept() (the
        # kernel keeps the socket until that call returns); shutdown() stops it and wakes accept().
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()

    def _reopen_after(self, seconds: float) -> None:
        time.sleep(seconds)
        if self._closed:
            return
        listener = self._listen(self.port)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: refusing, or the proxy is done
            if time.monotonic() < self._storm_until:
                threading.Thread(target=self._answer_storm, args=(client,), daemon=True).start()
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._live += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _answer_storm(self, client: socket.socket) -> None:
        code = "SlowDown" if self._storm_status == 503 else "InternalError"
        body = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>storm</Message></Error>".encode()
        head = (
            f"HTTP/1.1 {self._storm_status} {code}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        try:
            client.settimeout(5)
            seen = b""
            while b"\r\n\r\n" not in seen:  # the request's head; its body is never read
                data = client.recv(1 << 16)
                if not data:
                    return
                seen += data
            client.sendall(head + body)
            with self._lock:
                self.storm_answers += 1
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            client.close()

    def _hold(self) -> None:
        while True:
            left = self._stalled_until - time.monotonic()
            if left <= 0 or self._closed:
                return
            time.sleep(min(left, 0.05))

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                self._hold()
                dst.sendall(data)
                fire: Callable[[], None] | None = None
                with self._lock:
                    self.bytes += len(data)
                    if self._trigger is not None and self.bytes >= self._trigger[0]:
                        fire, self._trigger = self._trigger[1], None
                if fire is not None:
                    fire()
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
