"""``ferry watch`` onto a real S3-compatible server on 127.0.0.1 (moto's server)."""

from __future__ import annotations

import hashlib
import importlib.util
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import Ferry, stop
from watch.conftest import start_writer, wait_for_event, writer_result

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ferry.backends.s3") is None or importlib.util.find_spec("moto") is None,
    reason="the S3 backend (issue 4) or moto's server is not installed here",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3_server() -> Iterator[tuple[str, Any]]:
    import boto3
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    client.create_bucket(Bucket="archive")
    try:
        yield url, client
    finally:
        server.stop()


def test_watch_ships_to_s3(ferry: Ferry, tmp_path: Path, s3_server: tuple[str, Any]) -> None:
    url, client = s3_server
    ferry.extra_env.update(
        {
            "AWS_ENDPOINT_URL": url,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    src = tmp_path / "out"
    src.mkdir()
    marker = src / "DONE"
    watch = ferry.popen(
        "watch", src, "s3://archive/run42/", "-r", "--pattern", "*.h5", "--settle", "2s", "--until", marker, "--json"
    )
    try:
        wait_for_event(watch, "watching")
        expect = writer_result(start_writer("mixed", src, done=marker))
        out, err = watch.communicate(timeout=120)
    finally:
        if watch.poll() is None:
            stop(watch, signal.SIGKILL)
    assert watch.returncode == 0, f"{out}\n{err}"
    got = {}
    for obj in client.list_objects_v2(Bucket="archive", Prefix="run42/").get("Contents", []):
        if obj["Key"].endswith("/"):
            continue  # the folder marker made for the destination folder
        body = client.get_object(Bucket="archive", Key=obj["Key"])["Body"].read()
        got[obj["Key"].removeprefix("run42/")] = hashlib.sha256(body).hexdigest()
    assert got == expect
