"""An S3 write that reached the store but whose answer was lost (issue 18).

The proxy here forwards a chosen request in full to the store, waits until the store answers it
(so the object is there), then closes the connection without passing that answer on. The client
sees a dropped connection and sends the write again: a no-overwrite PUT (``If-None-Match: *``)
then meets 412 on the object it just made, and a CompleteMultipartUpload meets NoSuchUpload, the
upload being already assembled. Ferry must recognise its own object by the store's evidence (its
ETag and checksum equal what was sent) and count the file copied, never "Already exists".
Deterministic: the answer of the first matching request is always dropped, after the store acted.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import Ferry, describe, file_events, result_event
from s3.servers import S3Server, shared_server

MiB = 1 << 20


class LostAnswerProxy:
    """A TCP proxy to an HTTP server that drops the answer of the first ``count`` requests
    ``match(method, target)`` picks: the request goes through whole, the store acts on it, and
    the client's connection is closed when the store's final answer arrives, unread."""

    def __init__(
        self,
        port: int,
        match: Callable[[str, str], bool],
        count: int = 1,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        self.upstream = port
        self.match = match
        self.on_drop = on_drop  # run once the store has answered, before the client hears anything
        self.left = count
        self.dropped: list[str] = []  # the requests whose answer was dropped
        self.requests: list[str] = []  # every request seen, "METHOD target"
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(("127.0.0.1", self.upstream), timeout=30)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        armed = threading.Event()  # a picked request went through whole: its answer is dropped
        gone = threading.Event()

        def close_both() -> None:
            gone.set()
            for s in (client, server):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

        def answers() -> None:
            try:
                while True:
                    data = server.recv(1 << 16)
                    if not data:
                        break
                    if armed.is_set():
                        # The store answered the picked request: the client never hears it.
                        if self.on_drop is not None:
                            self.on_drop()
                        break
                    client.sendall(data)
            except OSError:
                pass
            close_both()

        threading.Thread(target=answers, daemon=True).start()
        buf = b""
        body_left = 0
        picked = False
        try:
            while not gone.is_set():
                data = client.recv(1 << 16)
                if not data:
                    break
                server.sendall(data)
                buf += data
                while buf:
                    if body_left:
                        n = min(body_left, len(buf))
                        body_left -= n
                        buf = buf[n:]
                        if not body_left and picked:
                            armed.set()
                        continue
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    head, buf = buf[:end].decode("latin-1"), buf[end + 4 :]
                    lines = head.split("\r\n")
                    method, target = lines[0].split(" ")[:2]
                    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
                    assert "chunked" not in headers.get("transfer-encoding", ""), "the proxy counts Content-Length"
                    body_left = int(headers.get("content-length", "0"))
                    with self._lock:
                        self.requests.append(f"{method} {target}")
                        picked = self.left > 0 and self.match(method, target)
                        if picked:
                            self.left -= 1
                            self.dropped.append(f"{method} {target}")
                    if picked and not body_left:
                        armed.set()
        except OSError:
            pass
        if not gone.is_set() and not armed.is_set():
            close_both()


def _server(kind: str) -> S3Server:
    try:
        return shared_server(kind)
    except RuntimeError as exc:
        pytest.skip(f"{kind} S3 server unavailable: {exc}")


@pytest.fixture
def store() -> S3Server:
    """moto: it honours If-None-Match, so the repeated PUT meets 412. (rclone serve s3 ignores the
    condition; Ferry HEADs before the PUT there and the repeat simply stores the same bytes again.)"""
    return _server("moto")


def _single_put(key: str) -> Callable[[str, str], bool]:
    return lambda method, target: method == "PUT" and target.split("?")[0].endswith("/" + key) and "?" not in target


def _complete(key: str) -> Callable[[str, str], bool]:
    return lambda method, target: (
        method == "POST" and target.split("?")[0].endswith("/" + key) and "uploadId=" in target
    )


# How the write is sent again after its answer was lost: the lean client falls back to botocore
# (the default on a loopback endpoint), botocore retries by itself (lean client off), or neither
# (lean client off, botocore's retries off) and the copy's own next attempt sends it again.
RETRIES = {
    "lean-then-botocore": {},
    "botocore-retry": {"FERRY_S3_FAST": "0"},
    "copy-retry": {"FERRY_S3_FAST": "0", "FERRY_S3_MAX_ATTEMPTS": "1"},
}


@contextlib.contextmanager
def _through(
    server: S3Server,
    tmp_path: Path,
    match: Callable[[str, str], bool],
    env: dict[str, str],
    on_drop: Callable[[], None] | None = None,
) -> Iterator[tuple[Ferry, LostAnswerProxy]]:
    proxy = LostAnswerProxy(server.port, match, on_drop=on_drop)
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env={**server.env(proxy.endpoint), **env})
    try:
        yield ferry, proxy
    finally:
        proxy.close()


def _copy_once(store: S3Server, tmp_path: Path, size: int, key: str, how: str) -> dict[str, object]:
    """``ferry cp`` of one file to a fresh bucket whose write of ``key`` loses its first answer:
    it must end copied, checked by the store's digests, the object whole; its file event."""
    bucket = store.new_bucket()
    src = tmp_path / key
    data = hashlib.sha256(key.encode()).digest() * (size // 32) + b"x" * (size % 32)
    src.write_bytes(data)
    multipart = size > 8 * MiB  # sent in 5 MiB parts (FERRY_S3_PART_SIZE)
    match = _complete(key) if multipart else _single_put(key)
    env = {**RETRIES[how], **({"FERRY_S3_PART_SIZE": "5M"} if multipart else {})}
    with _through(store, tmp_path, match, env) as (ferry, proxy):
        res = ferry("cp", "--json", src, f"s3://{bucket}/{key}", timeout=120)
    assert proxy.dropped, f"no answer was dropped: {proxy.requests}"
    assert res.returncode == 0, describe(res)
    outcomes = result_event(res.stdout)["outcomes"]
    assert outcomes["copied"] == 1 and outcomes["failed"] == 0, outcomes
    (event,) = file_events(res.stdout).values()
    assert event["state"] == "done" and event["evidence"], event  # checked, by the store's digests
    assert store.client().get_object(Bucket=bucket, Key=key)["Body"].read() == data
    return event


@pytest.mark.parametrize("how", list(RETRIES))
def test_single_put_whose_answer_is_lost_is_recognised_as_ours(store: S3Server, tmp_path: Path, how: str) -> None:
    _copy_once(store, tmp_path, 100_000, "small.bin", how)


# CompleteMultipartUpload goes through botocore only (no lean path). rclone serve s3 only: it
# answers a repeated complete with NoSuchUpload (as AWS does), and its HEAD then shows the whole
# object's MD5, not the multipart ETag, so the parts are read back and compared with their MD5s.
# moto completes the same upload again without complaint, so there the lost answer never showed.
@pytest.mark.parametrize("how", ["botocore-retry", "copy-retry"])
def test_multipart_complete_whose_answer_is_lost_is_recognised_as_ours(tmp_path: Path, how: str) -> None:
    event = _copy_once(_server("rclone"), tmp_path, 12 * MiB, "big.bin", how)
    assert event["evidence"] == ["read-back"], event


@pytest.mark.parametrize("how", list(RETRIES))
def test_lost_answer_then_someone_elses_object_stays_a_conflict(store: S3Server, tmp_path: Path, how: str) -> None:
    """Between the lost answer and the retry another writer replaced the object: the retry's 412
    is a real conflict then, and Ferry neither counts it copied nor touches the other object."""
    bucket = store.new_bucket()
    src = tmp_path / "small.bin"
    src.write_bytes(b"ours" * 25_000)
    theirs = b"them" * 25_000  # the same size: only the digests tell them apart

    def replace() -> None:
        store.client().put_object(Bucket=bucket, Key="small.bin", Body=theirs)

    with _through(store, tmp_path, _single_put("small.bin"), RETRIES[how], replace) as (ferry, proxy):
        res = ferry("cp", "--json", src, f"s3://{bucket}/small.bin", timeout=120)
    assert proxy.dropped and res.returncode == 1, describe(res)
    assert result_event(res.stdout)["outcomes"]["failed_by_kind"] == {"already-exists": 1}, res.stdout
    assert store.client().get_object(Bucket=bucket, Key="small.bin")["Body"].read() == theirs
