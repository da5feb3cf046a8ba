"""A small TCP proxy the test controls: forwards to a server and can cut every live connection,
the way a flaky network or a rebooted NAT does, while still accepting new ones."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._live: list[socket.socket] = []
        self.connections = 0
        self.upstream_bytes = 0  # client -> server, all connections
        self.downstream_bytes = 0
        self.on_bytes: Callable[[TcpProxy], None] | None = None  # called after each forwarded chunk
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._live += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
                with self._lock:
                    if up:
                        self.upstream_bytes += len(data)
                    else:
                        self.downstream_bytes += len(data)
                if self.on_bytes is not None:
                    self.on_bytes(self)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Drop every live connection at once (RST-like: both sides see the stream end)."""
        with self._lock:
            live, self._live = self._live, []
        for s in live:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()
