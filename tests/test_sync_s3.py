"""``ferry compare`` and ``ferry sync`` against both S3 servers on loopback (moto and
``rclone serve s3``): the listing's upload time is not the file's time (the object's metadata
is asked where they differ), content compared with what the store keeps (Ferry's stored
SHA-256, or the ETag with only the local side read), deletions and ``--backup-dir`` in a bucket."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from helpers import Ferry, describe, file_digests, put
from s3.conftest import bucket, s3ferry, server
from s3.servers import S3Server

__all__ = ["bucket", "s3ferry", "server"]  # the S3 tests' fixtures: each test runs on both servers

T = 1_700_000_000_123_456_789


def local_tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for i in range(4):
        put(src, f"keep/f{i}.txt", f"same {i}\n".encode())
    put(src, "top.bin", os.urandom(70_000))
    return src


def items(stdout: str) -> dict[str, dict[str, Any]]:
    return {o["path"]: o for o in map(json.loads, stdout.splitlines()) if o["event"] == "item"}


def last(stdout: str, event: str) -> dict[str, Any]:
    found: dict[str, Any] = [o for o in map(json.loads, stdout.splitlines()) if o["event"] == event][-1]
    return found


def keys(server: S3Server, bucket: str, prefix: str) -> dict[str, bytes]:
    c = server.client()
    out: dict[str, bytes] = {}
    for obj in c.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
        if obj["Key"].endswith("/") or "/.ferry-probe-" in "/" + obj["Key"]:
            # A folder's marker (moto keeps the ones mkdir makes), or an S3 checksum probe that
            # 'rclone serve s3' now and then still lists after Ferry deleted it.
            continue
        out[obj["Key"][len(prefix) :]] = c.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return out


def digests(server: S3Server, bucket: str, prefix: str) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in keys(server, bucket, prefix).items()}


def test_sync_up_compare_and_delete(s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path) -> None:
    src = local_tree(tmp_path)
    there = f"s3://{bucket}/mirror"
    res = s3ferry("sync", src, there)
    assert res.returncode == 0, describe(res)
    assert digests(server, bucket, "mirror/") == file_digests(src)
    # The listing says when each object was uploaded; the file's time is in its metadata.
    res = s3ferry("compare", "-r", src, there)
    assert res.returncode == 0, describe(res)
    res = s3ferry("compare", "-r", "--by", "checksum", "--json", src, there)
    assert res.returncode == 0, describe(res)
    got = items(res.stdout)
    assert got["top.bin"]["how"] == "sha256: A read, B stored with the object"
    assert last(res.stdout, "summary")["read_b"] == 0  # nothing downloaded
    # Changed locally by size and by time; a new file; an object the source does not have.
    put(src, "keep/f0.txt", b"longer than before\n")
    os.utime(src / "keep/f1.txt", ns=(T + 5 * 10**9, T + 5 * 10**9))
    put(src, "new.txt", b"new")
    server.client().put_object(Bucket=bucket, Key="mirror/extra.txt", Body=b"only in the bucket")
    (src / "keep/f3.txt").unlink()  # sent by Ferry earlier (its time in the metadata), now gone at home
    got = items(s3ferry("compare", "-r", "--json", src, there).stdout)
    assert got["keep/f0.txt"]["reasons"] == ["size"] and got["keep/f1.txt"]["reasons"] == ["time"]
    assert got["new.txt"]["state"] == "only-a" and got["extra.txt"]["state"] == "only-b"
    res = s3ferry("sync", "--delete", "--max-delete", "2", src, there)
    assert res.returncode == 0, describe(res)
    assert digests(server, bucket, "mirror/") == file_digests(src)
    assert s3ferry("compare", "-r", src, there).returncode == 0


def test_content_by_etag_reads_only_the_local_side(
    s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path
) -> None:
    """Objects another tool wrote (no SHA-256 of Ferry's): the local bytes are compared with the
    ETag (the MD5 of a single-part upload), and the object is not downloaded."""
    src = tmp_path / "src"
    put(src, "a.txt", b"AAAA")
    put(src, "b.txt", b"same")
    c = server.client()
    c.put_object(Bucket=bucket, Key="other/a.txt", Body=b"BBBB")
    c.put_object(Bucket=bucket, Key="other/b.txt", Body=b"same")
    res = s3ferry("compare", "-r", "--by", "checksum", "--json", src, f"s3://{bucket}/other")
    assert res.returncode == 1, describe(res)
    got = items(res.stdout)
    assert got["a.txt"]["reasons"] == ["content"] and got["b.txt"]["state"] == "same"
    assert "s3-etag-md5" in got["b.txt"]["how"] and "A read" in got["b.txt"]["how"]
    s = last(res.stdout, "summary")
    assert s["read_b"] == 0 and s["read_a"] == 2


def test_backup_dir_dry_run_and_empty_source_in_a_bucket(
    s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path
) -> None:
    src = local_tree(tmp_path)
    there = f"s3://{bucket}/mirror"
    assert s3ferry("sync", src, there).returncode == 0
    server.client().put_object(Bucket=bucket, Key="mirror/old/gone.txt", Body=b"old")
    before = keys(server, bucket, "")
    res = s3ferry("sync", "--dry-run", "--delete", "--max-delete", "1", src, there)
    assert res.returncode == 0 and "delete  old/gone.txt" in res.stdout, describe(res)
    empty = tmp_path / "empty"
    empty.mkdir()
    res = s3ferry("sync", "--delete", "--max-delete", "100", empty, there)
    assert res.returncode == 2 and "is empty: refusing to delete" in res.stderr, describe(res)
    assert keys(server, bucket, "") == before
    res = s3ferry("sync", "--delete", "--backup-dir", f"s3://{bucket}/trash", "--max-delete", "1", src, there)
    assert res.returncode == 0, describe(res)
    assert keys(server, bucket, "trash/") == {"old/gone.txt": b"old"}
    assert "old/gone.txt" not in keys(server, bucket, "mirror/")


def test_sync_down_from_a_bucket(s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path) -> None:
    src = local_tree(tmp_path)
    there = f"s3://{bucket}/mirror"
    assert s3ferry("sync", src, there).returncode == 0
    down = tmp_path / "down"
    put(down, "stale.txt", b"x")
    for i in range(3):
        put(down, f"keep/f{i}.txt", f"same {i}\n".encode())
    res = s3ferry("sync", "--delete", "--by", "checksum", there, down)
    assert res.returncode == 0, describe(res)
    assert file_digests(down) == file_digests(src)
    assert s3ferry("compare", "-r", there, down).returncode == 0


def test_a_name_s3_cannot_hold_is_skipped_and_said(
    s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path
) -> None:
    src = local_tree(tmp_path)
    bad = os.fsencode(src) + b"/caf\xe9.txt"  # Latin-1 bytes: not UTF-8, so no S3 key
    with open(bad, "wb") as f:
        f.write(b"latin-1 name")
    res = s3ferry("sync", "--json", src, f"s3://{bucket}/mirror")
    assert res.returncode == 1, describe(res)
    out = last(res.stdout, "result")
    assert out["outcomes"]["skipped_by_reason"] == {"unrepresentable": 1}, out
    assert len(digests(server, bucket, "mirror/")) == 5  # everything else arrived
