"""An HTTP proxy in front of the IAM-enforcing moto that records every request and, as AWS does
for a ``ListBucket`` grant with an ``s3:prefix`` condition, refuses a listing outside the prefix
(moto checks the action and the resource but has no value for ``s3:prefix``, so it would allow
any listing). Everything else goes to moto unchanged, which refuses what IAM does not allow.

``requests`` holds (method, bucket, key, query) of every request seen, refused or not, so a test
can show that none left the prefix. It speaks the HTTP/1.1 that botocore and Ferry's lean path
send: Content-Length bodies, ``Expect: 100-continue``, keep-alive; each request goes to the server
on a fresh connection.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import parse_qs, unquote, urlsplit

from s3.servers import LoopbackProxy


@dataclass(frozen=True)
class Seen:
    method: str
    bucket: str
    key: str
    query: dict[str, list[str]]

    def outside(self, bucket: str, prefix: str) -> bool:
        """Whether this request reached anything but ``bucket``'s objects and listings under ``prefix``."""
        if self.bucket != bucket:
            return True
        if self.key:
            return not self.key.startswith(prefix)
        return not self.listing or not self.query.get("prefix", [""])[0].startswith(prefix)

    @property
    def listing(self) -> bool:
        """A ListObjects(V2) of the bucket (the only bucket-level request the grant allows)."""
        other = {"uploads", "versions", "location", "versioning", "policy", "acl", "tagging", "lifecycle"}
        return self.method == "GET" and not self.key and not other & set(self.query)


class PrefixGate(LoopbackProxy):
    def __init__(self, upstream_port: int, bucket: str, prefix: str, *, ignore_conditions: bool = False) -> None:
        super().__init__(upstream_port)
        self.bucket = bucket
        self.prefix = prefix
        # A store that ignores conditions (If-Match / If-None-Match dropped on the way, so only in
        # front of a moto that checks no signatures) where deleting a version is refused, as with
        # keys granted s3:*Object only.
        self.ignore_conditions = ignore_conditions
        self.requests: list[Seen] = []
        self.refused: list[Seen] = []
        self._start()

    def outside(self) -> list[Seen]:
        with self._lock:
            return [r for r in self.requests if r.outside(self.bucket, self.prefix)]

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

    def _one(self, client: socket.socket, rfile: BinaryIO) -> bool:
        line = rfile.readline(65537)
        if not line:
            return False
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers: list[tuple[str, str]] = []
        while True:
            h = rfile.readline(65537)
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        low = {k.lower(): v for k, v in headers}
        url = urlsplit(target)
        bucket, _, key = unquote(url.path).lstrip("/").partition("/")
        seen = Seen(method, bucket, key, parse_qs(url.query, keep_blank_values=True))
        with self._lock:
            self.requests.append(seen)
        refuse = seen.listing and seen.bucket == self.bucket and seen.outside(self.bucket, self.prefix)
        # HeadBucket needs s3:ListBucket, whose s3:prefix condition a HEAD cannot meet: AWS says 403.
        refuse = refuse or (method == "HEAD" and not seen.key and seen.bucket == self.bucket)
        refuse = refuse or (self.ignore_conditions and method == "DELETE" and "versionId" in seen.query)
        if refuse:
            with self._lock:
                self.refused.append(seen)
            err = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
            client.sendall(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\n"
                + f"Content-Length: {len(err)}\r\n\r\n".encode()
                + err
            )
            return True
        if low.get("expect", "").lower() == "100-continue":
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        length = int(low.get("content-length", "0") or 0)
        body = rfile.read(length) if length else b""
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            dropped: tuple[str, ...] = ("expect", "content-length", "connection")
            if self.ignore_conditions:
                dropped += ("if-match", "if-none-match")
            for k, v in headers:
                if k.lower() not in dropped:
                    conn.putheader(k, v)
            if method in ("PUT", "POST") or body:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            resp = conn.getresponse()
            data = resp.read()
            out = [f"HTTP/1.1 {resp.status} {resp.reason}"]
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                    out.append(f"{k}: {v}")
            size = len(data) if method != "HEAD" else int(resp.getheader("content-length") or 0)
            out.append(f"Content-Length: {size}")
            client.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + (data if method != "HEAD" else b""))
        finally:
            conn.close()
        return True
