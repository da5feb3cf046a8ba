"""A minimal keep-alive HTTP/1.1 connection for the lean S3 path (:mod:`ferry.backends.s3.lean`).

Why not ``http.client``: on small objects its response parsing was the largest single cost left
per request (``parse_headers`` hands every header block to ``email.parser``: a tenth of the upload's
GIL time on 4 KiB files), and it writes the headers and the body in separate ``send`` calls. This
reads the status line and headers with plain ``bytes`` operations and sends a small request in one
``sendall``. It speaks only what S3 answers need: ``Content-Length`` and chunked bodies, bodies
read to the close otherwise, ``Connection: close``; anything malformed raises, and the caller
hands the request to botocore.

A successful body can also be read straight into the caller's buffer (:meth:`LeanConnection.request_into`):
a large download's ranges then land in buffers that are reused range after range, instead of a
fresh 16 MiB ``bytes`` per range (whose pages the kernel must fault in and zero each time).
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the caller makes the context (and imports ssl) only for https endpoints
    import ssl

MAX_LINE = 65536
MAX_HEADERS = 200
_ONE_WRITE = 64 << 10  # bodies up to this go in the same sendall as the headers


class ProtocolError(Exception):
    """The answer is not HTTP/1.x as expected: the request goes to botocore instead."""


class LeanConnection:
    def __init__(self, scheme: str, netloc: str, timeout: float, context: ssl.SSLContext | None) -> None:
        host, _, port = netloc.rpartition(":") if netloc.rpartition(":")[2].isdigit() else (netloc, "", "")
        self._host = host.strip("[]")  # an IPv6 literal comes bracketed
        self._port = int(port) if port else (443 if scheme == "https" else 80)
        sock = socket.create_connection((self._host, self._port), timeout=timeout)
        # Nagle plus delayed ACKs would stall each small request by tens of milliseconds.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            assert context is not None
            sock = context.wrap_socket(sock, server_hostname=self._host)
        self._sock = sock
        self._rfile = sock.makefile("rb")

    def close(self) -> None:
        try:
            self._rfile.close()
        finally:
            self._sock.close()

    def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, dict[str, str], bytes, bool]:
        """Send one request, read its whole answer: (status, lower-cased headers, body, will_close)."""
        self._send(method, target, headers, body)
        status, got, data, will_close = self._response(method, None)
        assert isinstance(data, bytes)
        return status, got, data, will_close

    def request_into(
        self, method: str, target: str, headers: dict[str, str], into: memoryview
    ) -> tuple[int, dict[str, str], bytes | int, bool]:
        """As :meth:`request` for a body-less request, but a successful (2xx) answer whose
        ``Content-Length`` fits ``into`` is read straight into it: its body is then the byte count.
        Any other answer's body comes back as ``bytes``, read whole as before."""
        self._send(method, target, headers, None)
        return self._response(method, into)

    def _send(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> None:
        lines = [f"{method} {target} HTTP/1.1"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        lines.append("Accept-Encoding: identity")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if body and len(body) <= _ONE_WRITE:
            self._sock.sendall(head + body)
        else:
            self._sock.sendall(head)
            if body:
                self._sock.sendall(body)

    def _line(self) -> bytes:
        line = self._rfile.readline(MAX_LINE + 1)
        if not line:
            raise ProtocolError("connection closed")
        if len(line) > MAX_LINE:
            raise ProtocolError("line too long")
        return line

    def _response(self, method: str, into: memoryview | None) -> tuple[int, dict[str, str], bytes | int, bool]:
        while True:
            status_line = self._line()
            parts = status_line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise ProtocolError(f"bad status line {status_line[:40]!r}")
            status = int(parts[1])
            got: dict[str, str] = {}
            for _ in range(MAX_HEADERS + 1):
                line = self._line()
                if line in (b"\r\n", b"\n"):
                    break
                name, sep, value = line.partition(b":")
                if not sep:
                    raise ProtocolError("bad header line")
                key = name.strip().lower().decode("latin-1")
                text = value.strip().decode("latin-1")
                got[key] = f"{got[key]}, {text}" if key in got else text
            else:
                raise ProtocolError("too many headers")
            if status != 100:
                break  # a stray 100 Continue (never asked for) is skipped as http.client does
        will_close = parts[0] == b"HTTP/1.0" or "close" in got.get("connection", "").lower()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, got, b"", will_close
        if "chunked" in got.get("transfer-encoding", "").lower():
            return status, got, self._chunked(), will_close
        length = got.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise ProtocolError("bad Content-Length")
            if into is not None and 200 <= status < 300 and int(length) <= len(into):
                # BufferedReader.readinto hands what it holds, then lets the socket fill the rest
                # of the caller's buffer directly: one copy from the kernel, no allocation.
                want = int(length)
                got_n = self._rfile.readinto(into[:want])
                if got_n != want:
                    raise ProtocolError("body cut short")
                return status, got, want, will_close
            data = self._rfile.read(int(length))
            if len(data) != int(length):
                raise ProtocolError("body cut short")
            return status, got, data, will_close
        return status, got, self._rfile.read(), True  # delimited by the close

    def _chunked(self) -> bytes:
        out = bytearray()
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError("bad chunk size") from None
            if size == 0:
                while self._line() not in (b"\r\n", b"\n"):
                    pass  # trailers
                return bytes(out)
            chunk = self._rfile.read(size)
            if len(chunk) != size:
                raise ProtocolError("chunk cut short")
            out += chunk
            self._line()  # the CRLF after each chunk
