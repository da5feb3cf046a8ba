"""S3 keeps a file's permission bits and exact modification time as object metadata (issue 18):
``x-amz-meta-mtime`` in rclone's form (seconds with nine decimals) and ``x-amz-meta-mode`` (octal,
as rclone's ``--metadata`` writes it), restored on download; s3cmd's ``s3cmd-attrs`` is read too.
Against both real servers (moto and ``rclone serve s3``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import boto3

from ferry.backends.s3.entries import attribute_metadata, stored_attributes
from helpers import Ferry
from s3.servers import S3Server, aws_env

T_NS = 1_600_000_000_123_456_789


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_mode_and_exact_mtime_round_trip_through_metadata(
    s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "run.sh").write_bytes(b"#!/bin/sh\n")
    (src / "private.key").write_bytes(os.urandom(7 << 20))  # multipart with 5 MiB parts
    os.chmod(src / "run.sh", 0o755)
    os.chmod(src / "private.key", 0o600)
    for p in src.iterdir():
        os.utime(p, ns=(T_NS, T_NS))
    s3ferry.extra_env["FERRY_S3_PART_SIZE"] = "5M"
    s3ferry.ok("cp", "-r", src, f"s3://{bucket}/up")
    with aws_env(server):
        client = boto3.client("s3")
        for name, mode in (("run.sh", "0100755"), ("private.key", "0100600")):
            head = client.head_object(Bucket=bucket, Key=f"up/{name}")
            meta = {k.lower(): v for k, v in head["Metadata"].items()}  # rclone answers "Mtime"
            assert meta["mtime"] == "1600000000.123456789", meta
            assert meta["mode"] == mode, meta
    back = tmp_path / "back"
    s3ferry.ok("cp", "-r", f"s3://{bucket}/up", back)
    assert _mode(back / "run.sh") == 0o755
    assert _mode(back / "private.key") == 0o600
    assert os.stat(back / "run.sh").st_mtime_ns == T_NS  # not Last-Modified's whole seconds
    assert os.stat(back / "private.key").st_mtime_ns == T_NS


def test_rclone_and_s3cmd_metadata_are_read(s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path) -> None:
    with aws_env(server):
        client = boto3.client("s3")
        rclone_meta = {"mtime": "1500000000.5", "mode": "100750"}
        client.put_object(Bucket=bucket, Key="rclone.txt", Body=b"r", Metadata=rclone_meta)
        client.put_object(
            Bucket=bucket,
            Key="s3cmd.txt",
            Body=b"s",
            Metadata={"s3cmd-attrs": "atime:1500000001/gid:0/mode:33216/mtime:1500000002/uid:0"},
        )
    s3ferry.ok("cp", f"s3://{bucket}/rclone.txt", tmp_path / "rclone.txt")
    s3ferry.ok("cp", f"s3://{bucket}/s3cmd.txt", tmp_path / "s3cmd.txt")
    assert os.stat(tmp_path / "rclone.txt").st_mtime_ns == 1_500_000_000_500_000_000
    assert _mode(tmp_path / "rclone.txt") == 0o750
    assert os.stat(tmp_path / "s3cmd.txt").st_mtime_ns == 1_500_000_002 * 10**9
    assert _mode(tmp_path / "s3cmd.txt") == 0o700  # 33216 = 0o100700


def test_metadata_format() -> None:
    assert attribute_metadata(None, T_NS, 0o2755) == {"mtime": "1600000000.123456789", "mode": "0102755"}
    assert attribute_metadata(None, -1, None) == {"mtime": "-0.000000001"}
    assert stored_attributes({"Metadata": {"mtime": "-0.000000001"}}) == (-1, None)
    assert stored_attributes({"Metadata": {"mtime": "garbage", "mode": "x"}}) == (None, None)


def test_xattrs_to_s3_is_refused_before_anything_changes(s3ferry: Ferry, bucket: str, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"f")
    res = s3ferry("cp", "--xattrs", tmp_path / "f.txt", f"s3://{bucket}/f.txt")
    assert res.returncode == 2, res
    assert "--xattrs" in res.stderr and "local disks only" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert s3ferry("ls", f"s3://{bucket}/").stdout.strip() == ""
