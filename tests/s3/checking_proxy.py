"""An HTTP proxy in front of a test S3 server that checks ``x-amz-checksum-sha256`` as AWS does.

Why: neither test server checks S3 additional checksums (moto 5.2.5 stores any checksum it is sent,
``rclone serve s3`` too; see ``test_checksums.py``, which proves it), so Ferry's behaviour on a store
that does (AWS, MinIO, Ceph) needs a store that does. This one forwards every request to the real
server unchanged, except that a PUT whose body does not match its ``x-amz-checksum-sha256`` is
refused with AWS's answer (400 ``BadDigest``) before anything reaches the server, and an accepted
one is answered with the checksum echoed, as AWS does. ``corrupt(n)`` damages the next ``n`` PUT
bodies in transit (one byte flipped) before the check, as a bad network card would;
``corrupt_gets(n)`` does the same to the next ``n`` GET answers' bodies on their way back. Both take
a ``match``: only requests whose path holds it are damaged. ``CheckingProxy(port, checks=False)``
checks nothing, as moto does: a damaged PUT then reaches the store.

It speaks just enough HTTP/1.1 for botocore and Ferry's lean path: Content-Length bodies,
``Expect: 100-continue``, keep-alive. Each request goes to the server on a fresh connection.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import socket

from s3.servers import LoopbackProxy


class CheckingProxy(LoopbackProxy):
    def __init__(self, upstream_port: int, *, checks: bool = True) -> None:
        super().__init__(upstream_port)
        self._checks = checks
        self._corrupt = 0
        self._corrupt_gets = 0
        self._match = ""
        self._get_match = ""
        self.damaged_gets = 0
        self.refused = 0  # PUTs refused as BadDigest
        self.checked = 0  # PUTs whose checksum matched
        self.puts: list[dict[str, str]] = []  # the headers of every PUT seen (lower-case names)
        self._start()

    def corrupt(self, count: int, match: str = "") -> None:
        with self._lock:
            self._corrupt, self._match = count, match

    def corrupt_gets(self, count: int, match: str = "") -> None:
        with self._lock:
            self._corrupt_gets, self._get_match = count, match

    def _serve(self, client: socket.socket) -> None:
        rfile = client.makefile("rb")
        try:
            while self._one(client, rfile):
                pass
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                rfile.close()
                client.close()

    def _one(self, client: socket.socket, rfile: object) -> bool:
        readline = rfile.readline  # type: ignore[attr-defined]
        line = readline(65537)
        if not line:
            return False
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers: list[tuple[str, str]] = []
        while True:
            h = readline(65537)
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        low = {k.lower(): v for k, v in headers}
        if low.get("expect", "").lower() == "100-continue":
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        length = int(low.get("content-length", "0") or 0)
        body = rfile.read(length) if length else b""  # type: ignore[attr-defined]
        extra: dict[str, str] = {}
        if method == "PUT":
            with self._lock:
                self.puts.append({**low, ":target": target})  # ":target": the request's path and query
                damage = self._corrupt > 0 and len(body) > 0 and self._match in target
                if damage:
                    self._corrupt -= 1
            if damage:
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            sent = low.get("x-amz-checksum-sha256") if self._checks else None
            if sent is not None:
                actual = base64.b64encode(hashlib.sha256(body).digest()).decode()
                if actual != sent:
                    with self._lock:
                        self.refused += 1
                    err = (
                        b"<Error><Code>BadDigest</Code><Message>The SHA256 you specified did not match the "
                        b"calculated checksum.</Message></Error>"
                    )
                    client.sendall(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/xml\r\n"
                        + f"Content-Length: {len(err)}\r\n\r\n".encode()
                        + err
                    )
                    return True
                with self._lock:
                    self.checked += 1
                extra["x-amz-checksum-sha256"] = sent
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        try:
            fwd = {k: v for k, v in headers if k.lower() not in ("expect", "content-length", "connection")}
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for k, v in fwd.items():
                conn.putheader(k, v)
            if method in ("PUT", "POST") or body:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            resp = conn.getresponse()
            data = resp.read()
            if method == "GET" and 200 <= resp.status < 300 and data:
                with self._lock:
                    damage = self._corrupt_gets > 0 and self._get_match in target
                    if damage:
                        self._corrupt_gets -= 1
                        self.damaged_gets += 1
                if damage:
                    data = data[:-1] + bytes([data[-1] ^ 0x01])
            out = [f"HTTP/1.1 {resp.status} {resp.reason}"]
            for k, v in resp.getheaders():
                if k.lower() in ("transfer-encoding", "content-length", "connection"):
                    continue
                out.append(f"{k}: {v}")
            for k, v in extra.items():
                if resp.getheader(k) is None:  # moto echoes it itself when told the algorithm
                    out.append(f"{k}: {v}")
            size = len(data) if method != "HEAD" else int(resp.getheader("content-length") or 0)
            out.append(f"Content-Length: {size}")
            client.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + (data if method != "HEAD" else b""))
        finally:
            conn.close()
        return True
