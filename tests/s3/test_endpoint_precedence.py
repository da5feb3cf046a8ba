"""Which server an ``s3://bucket`` address reaches when saved sites name that bucket (issue 18):
an endpoint given for the command (``AWS_ENDPOINT_URL``) is never overridden by a saved site for
the same bucket name, and two saved sites on one bucket name at different servers are an error
naming both (exit 2), never a silent pick. Both real servers take part: the same bucket name on
moto and on ``rclone serve s3`` holds different objects, so the listing shows which one answered."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Ferry, describe
from s3.servers import S3Server, shared_server


@pytest.fixture
def two() -> Iterator[tuple[S3Server, S3Server, str]]:
    try:
        moto, rclone = shared_server("moto"), shared_server("rclone")
    except RuntimeError as exc:
        pytest.skip(f"S3 test server unavailable: {exc}")
    bucket = f"same-{uuid.uuid4().hex[:12]}"
    for server in (moto, rclone):
        server.client().create_bucket(Bucket=bucket)
        server.client().put_object(Bucket=bucket, Key=f"on-{server.kind}.txt", Body=server.kind.encode())
    yield moto, rclone, bucket


def test_the_endpoint_given_for_the_command_wins_over_a_saved_site_for_the_bucket(
    two: tuple[S3Server, S3Server, str], tmp_path: Path
) -> None:
    moto, rclone, bucket = two
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env=moto.env())  # AWS_ENDPOINT_URL: moto
    ferry.ok("sites", "add", "lab", f"s3://{bucket}", "--option", f"endpoint_url={rclone.endpoint}")
    assert ferry.ok("ls", f"s3://{bucket}/").stdout.split() == ["on-moto.txt"]
    ferry.ok("cp", f"s3://{bucket}/on-moto.txt", tmp_path / "got.txt")
    assert (tmp_path / "got.txt").read_bytes() == b"moto"
    # Without an endpoint for the command, the saved site is what the bucket name means.
    env = {k: v for k, v in moto.env().items() if not k.startswith("AWS_ENDPOINT_URL")}
    plain = Ferry(home=tmp_path, cwd=tmp_path, extra_env=env)
    assert plain.ok("ls", f"s3://{bucket}/").stdout.split() == ["on-rclone.txt"]
    # And the site named explicitly is that site, whatever the environment says.
    assert ferry.ok("ls", "lab:").stdout.split() == ["on-rclone.txt"]


def test_two_saved_sites_on_one_bucket_name_at_different_servers_are_an_error_naming_both(
    two: tuple[S3Server, S3Server, str], tmp_path: Path
) -> None:
    moto, rclone, bucket = two
    env = {k: v for k, v in moto.env().items() if not k.startswith("AWS_ENDPOINT_URL")}
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env=env)
    ferry.ok("sites", "add", "on-moto", f"s3://{bucket}", "--option", f"endpoint_url={moto.endpoint}")
    ferry.ok("sites", "add", "on-rclone", f"s3://{bucket}", "--option", f"endpoint_url={rclone.endpoint}")
    (tmp_path / "f.txt").write_bytes(b"f")
    for args in (["ls", f"s3://{bucket}/"], ["cp", tmp_path / "f.txt", f"s3://{bucket}/"]):
        res = ferry(*args)
        assert res.returncode == 2, describe(res)
        assert "'on-moto'" in res.stderr and "'on-rclone'" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    for server in (moto, rclone):  # nothing was written anywhere
        keys = [o["Key"] for o in server.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
        assert keys == [f"on-{server.kind}.txt"]
    assert ferry.ok("ls", "on-rclone:").stdout.split() == ["on-rclone.txt"]  # a named site still works
