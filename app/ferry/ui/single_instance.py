"""One window per user: a second ``ferry URL`` hands its URL to the running window (QLocalServer)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from ferry.core.dirs import data_dir


def server_name() -> str:
    """Per user and per data folder, so isolated test homes never find each other's windows."""
    digest = hashlib.sha256(str(data_dir()).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return f"ferry-{uid}-{digest}"


def send_to_running(args: list[str], timeout_ms: int = 1000) -> bool:
    """True if a running window took ``args`` (it opens them); False if there is none."""
    sock = QLocalSocket()
    sock.connectToServer(server_name())
    if not sock.waitForConnected(timeout_ms):
        return False
    sock.write(json.dumps({"open": args}).encode("utf-8") + b"\n")
    sock.flush()
    # The window acknowledges once it has read the request; without that, open our own.
    deadline = timeout_ms * 3
    while not sock.canReadLine() and deadline > 0 and sock.state() == QLocalSocket.LocalSocketState.ConnectedState:
        sock.waitForReadyRead(100)
        deadline -= 100
    ok = sock.canReadLine() and bytes(sock.readLine().data()).strip() == b"ok"
    sock.disconnectFromServer()
    return ok


class InstanceServer(QObject):
    """Listens for later launches and passes what they want opened to ``on_open``."""

    def __init__(self, on_open: Callable[[list[str]], object], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.on_open = on_open
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        name = server_name()
        if not self.server.listen(name):
            QLocalServer.removeServer(name)  # a stale socket left by a crash
            self.server.listen(name)
        self.server.newConnection.connect(self._accept)

    @property
    def listening(self) -> bool:
        return self.server.isListening()

    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()
            sock.readyRead.connect(lambda s=sock: self._read(s))

    def _read(self, sock: QLocalSocket) -> None:
        if not sock.canReadLine():
            return
        line = bytes(sock.readLine().data())
        try:
            args = json.loads(line.decode("utf-8")).get("open", [])
        except (ValueError, AttributeError):
            args = []
        sock.write(b"ok\n")
        sock.flush()
        sock.disconnectFromServer()
        self.on_open([str(a) for a in args if isinstance(a, str)])

    def close(self) -> None:
        self.server.close()
