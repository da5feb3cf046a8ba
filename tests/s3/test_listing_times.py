"""A folder listing and a single-object listing of one S3 object show the same time (issue 18):
the store's Last-Modified in whole seconds, as aws-cli and the console show it, whether the object
carries a kept time in metadata (Ferry's upload) or not (boto3's). The kept time travels apart
(``Entry.kept_mtime_ns``): a download restores it and the conflict policies compare it. Against
both real servers (moto and ``rclone serve s3``). And a copy to S3 says nothing about folders, which
S3 does not have."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3

from ferry.backends.s3.backend import S3Backend
from helpers import Ferry
from s3.servers import S3Server, aws_env

T_NS = 1_600_000_000_123_456_789


def _ls(ferry: Ferry, url: str) -> dict[str, str]:
    out: list[dict[str, Any]] = json.loads(ferry.ok("ls", "--json", url).stdout)
    return {e["name"]: e["mtime"] for e in out}


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def test_folder_and_single_object_listings_agree(
    s3ferry: Ferry, server: S3Server, bucket: str, backend: S3Backend, tmp_path: Path
) -> None:
    src = tmp_path / "kept.txt"
    src.write_bytes(b"uploaded by ferry, with its time in metadata\n")
    os.utime(src, ns=(T_NS, T_NS))
    s3ferry.ok("cp", src, f"s3://{bucket}/up/kept.txt")
    with aws_env(server):
        client = boto3.client("s3")
        client.put_object(Bucket=bucket, Key="up/plain.txt", Body=b"no metadata\n")
        # What 'aws s3 ls' shows: the listing's Last-Modified (moto: the upload time; rclone serve
        # s3 lists its files' times, i.e. the kept one, though its HEAD shows the upload time).
        listing = client.list_objects_v2(Bucket=bucket, Prefix="up/")["Contents"]
        store = {o["Key"].removeprefix("up/"): o["LastModified"] for o in listing}
    folder = _ls(s3ferry, f"s3://{bucket}/up/")
    for name in ("kept.txt", "plain.txt"):
        single = _ls(s3ferry, f"s3://{bucket}/up/{name}")
        assert folder[name] == single[name] == _iso(store[name]), (name, folder, single)
    # The backend's entries: the same store time both ways; the kept time only where a GET/HEAD
    # read the metadata, and exactly.
    listed = {e.name: e for e in backend.list("up")}
    for name in ("kept.txt", "plain.txt"):
        stat = backend.stat(f"up/{name}")
        assert listed[name].mtime == stat.mtime == store[name].replace(microsecond=0), name
    assert backend.stat("up/kept.txt").kept_mtime_ns == T_NS
    assert backend.stat("up/kept.txt").own_mtime_ns == T_NS
    assert backend.stat("up/plain.txt").kept_mtime_ns is None
    assert listed["kept.txt"].kept_mtime_ns is None  # a listing carries no metadata


def test_download_restores_the_kept_time_and_policies_compare_it(
    s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"first version\n")
    os.utime(src / "a.txt", ns=(T_NS, T_NS))
    s3ferry.ok("cp", "-r", src, f"s3://{bucket}/up")
    back = tmp_path / "back"
    s3ferry.ok("cp", "-r", f"s3://{bucket}/up", back)
    assert os.stat(back / "a.txt").st_mtime_ns == T_NS  # the kept time, not Last-Modified

    # Same size and kept time: a re-run skips it as identical (the store's time is years later).
    again = s3ferry.ok("cp", "--on-conflict", "different", f"s3://{bucket}/up/a.txt", back / "a.txt")
    assert "identical" in again.stdout + again.stderr, again.stdout + again.stderr

    # Edited locally an hour after the kept time (still long before the upload): 'newer' compares
    # the kept time, so the edit is newer and replaces the object.
    (src / "a.txt").write_bytes(b"second versio\n")  # same size
    later = T_NS + 3600 * 10**9
    os.utime(src / "a.txt", ns=(later, later))
    s3ferry.ok("cp", "--on-conflict", "newer", src / "a.txt", f"s3://{bucket}/up/a.txt")
    with aws_env(server):
        body = boto3.client("s3").get_object(Bucket=bucket, Key="up/a.txt")["Body"].read()
    assert body == b"second versio\n"


def test_copy_to_s3_notes_nothing_about_folders(s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path) -> None:
    """S3 has no folders (prefix_folders): a copy there used to say "permissions not kept" for
    every folder. Now folders carry no note; the files' permissions are kept (as metadata, checked
    below), so they say nothing either."""
    src = tmp_path / "tree"
    (src / "sub" / "deeper").mkdir(parents=True)
    os.chmod(src / "sub", 0o2750)
    for rel in ("a.txt", "sub/b.txt", "sub/deeper/c.txt"):
        (src / rel).write_bytes(rel.encode())
    os.chmod(src / "sub" / "b.txt", 0o600)
    res = s3ferry.ok("cp", "-r", "--json", src, f"s3://{bucket}/up")
    events = [e for e in (json.loads(line) for line in res.stdout.splitlines()) if e.get("event") == "file"]
    folders = [e for e in events if e.get("kind") == "dir"]
    files = [e for e in events if e.get("kind", "file") == "file"]
    assert len(folders) >= 3 and len(files) == 3, events
    for e in folders:
        assert e["state"] == "done" and not e["not_kept"] and "not kept" not in str(e.get("verified")), e
    for e in files:
        assert e["state"] == "done" and not e["not_kept"], e
    with aws_env(server):
        meta = boto3.client("s3").head_object(Bucket=bucket, Key="up/sub/b.txt")["Metadata"]
    assert {k.lower(): v for k, v in meta.items()}["mode"] == "0100600"
