"""A killed upload continues where it stopped: UploadId and parts kept in the queue, re-checked
with ListParts, only the missing parts sent again."""

from __future__ import annotations

import signal
from pathlib import Path

from helpers import Ferry, sha256_file, stop, wait_until, write_random
from s3.servers import S3Server

PART = 5 * 1024 * 1024


def _uploads(server: S3Server, bucket: str) -> list[dict[str, str]]:
    from botocore.exceptions import ClientError

    try:
        return list(server.client().list_multipart_uploads(Bucket=bucket).get("Uploads") or [])
    except ClientError as exc:  # rclone answers NoSuchUpload when there are none
        if exc.response["Error"]["Code"] == "NoSuchUpload":
            return []
        raise


def _parts_on_server(server: S3Server, bucket: str) -> int:
    c = server.client()
    uploads = _uploads(server, bucket)
    if not uploads:
        return 0
    up = uploads[0]
    return len(c.list_parts(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"]).get("Parts") or [])


def test_killed_upload_resumes_with_list_parts(s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    digest = write_random(src, 6 * PART + 123)  # 7 parts
    s3ferry.extra_env["FERRY_S3_PART_SIZE"] = "5M"
    s3ferry.extra_env["FERRY_S3_PART_CONCURRENCY"] = "1"
    # Slow enough that the kill lands mid-upload, whatever the machine.
    proc = s3ferry.popen("cp", "--bwlimit", "6M", src, f"s3://{bucket}/big.bin")
    try:
        wait_until(lambda: _parts_on_server(server, bucket) >= 2, timeout=60, what="two parts uploaded")
    finally:
        stop(proc, signal.SIGKILL)
    c = server.client()
    assert "Contents" not in c.list_objects_v2(Bucket=bucket)  # nothing under the final name yet
    assert len(_uploads(server, bucket)) == 1

    s3ferry.ok("queue", "run")
    assert not _uploads(server, bucket)  # completed, not left behind
    out = tmp_path / "back.bin"
    s3ferry.ok("cp", f"s3://{bucket}/big.bin", out)
    assert sha256_file(out) == digest
    job = s3ferry.jobs()[0]
    shown = s3ferry.ok("queue", "show", "--files", str(job["id"])).stdout
    assert "resumed:" in shown and "checked with ListParts" in shown, shown
    assert "sha256 match" in shown
