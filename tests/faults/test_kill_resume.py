"""``kill -9`` in the middle of an upload to SFTP or S3, then ``ferry queue run``: the job is
finished, verified, and resumed rather than sent again (issue 18; tests/test_crash_resume.py
covers local disks)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from faults.conftest import S3Site, SftpSite
from helpers import (
    describe,
    file_digests,
    file_events,
    partials,
    result_event,
    sha256_file,
    stop,
    wait_until,
    write_random,
)

MiB = 1 << 20


def make_src(root: Path, big: int) -> dict[str, str]:
    write_random(root / "big.bin", big)
    for i in range(3):
        (root / f"s{i}.dat").write_bytes(os.urandom(3000 + i))
    return file_digests(root)


def kill(proc: subprocess.Popen[str]) -> None:
    stop(proc, signal.SIGKILL)  # reaped: a dead runner's pid must not look alive
    assert proc.returncode == -signal.SIGKILL


def test_sftp_upload_killed_mid_file_resumes_and_verifies(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    size = 32 * MiB
    want = make_src(tmp_path / "src", size)
    ferry.ok("queue", "add", "-r", tmp_path / "src", site.url())
    proc = ferry.popen("queue", "run", "--bwlimit", "8M")
    try:
        wait_until(
            lambda: any(p.stat().st_size >= 8 * MiB for p in partials(site.remote) if p.exists()),
            60,
            0.02,
            "a partial file with 8 MiB in it",
        )
    finally:
        kill(proc)
    assert not (site.remote / "src" / "big.bin").exists()  # nothing under the final name
    before = site.proxy.bytes
    res = ferry("queue", "run", "--json", timeout=120)
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {"1": "done"}
    assert file_digests(site.remote / "src") == want
    assert partials(site.remote) == []
    event = file_events(res.stdout)["src/big.bin"]
    assert "sha256 match" in event["verified"] and "resumed after" in event["verified"], event
    assert site.proxy.bytes - before < size * 0.9  # resumed: the bytes already there were not sent again


def test_s3_multipart_upload_killed_mid_file_resumes_and_verifies(s3_site: S3Site, tmp_path: Path) -> None:
    site, ferry = s3_site, s3_site.ferry
    size = 40 * MiB
    want = make_src(tmp_path / "src", size)
    ferry.ok("queue", "add", "-r", tmp_path / "src", site.url("in/"))
    client = site.server.client()

    def parts_done() -> int:
        uploads = client.list_multipart_uploads(Bucket=site.bucket).get("Uploads", [])
        if not uploads:
            return 0
        u = uploads[0]
        return len(client.list_parts(Bucket=site.bucket, Key=u["Key"], UploadId=u["UploadId"]).get("Parts", []))

    proc = ferry.popen("queue", "run", "--bwlimit", "8M")
    try:
        wait_until(lambda: parts_done() >= 2, 60, 0.05, "two parts of the upload stored")
    finally:
        kill(proc)
    before = site.proxy.bytes
    res = ferry("queue", "run", "--json", timeout=120)
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {"1": "done"}
    assert site.proxy.bytes - before < size * 0.95  # the stored parts were kept, not sent again
    assert client.list_multipart_uploads(Bucket=site.bucket).get("Uploads", []) == []
    back = tmp_path / "back"
    ferry.ok("cp", "-r", site.url("in/src"), f"{back}/")
    assert file_digests(back / "src") == want
    assert sha256_file(back / "src" / "big.bin") == want["big.bin"]
