"""QA of issues 22/23 from the command line: small files relayed from an SSH host to S3.

Small files from an SFTP source go down in tar batches (``transfers/batch.py``) and up through
the S3 writer. The S3 writer learns its evidence (the MD5 ETag, the store's SHA-256 check) when
it commits; the batch read the evidence before the commit, so such files were recorded "size
only (the destination offers no independent check)" although the store had confirmed them, and
``ferry mv`` kept their sources and exited 1. Real sshd and moto on loopback.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import describe, file_events, result_event
from s3.servers import S3Server, shared_server
from sftp.test_cli_sftp import url
from sftp.test_direct_s3 import bucket_files, ferry_for
from sshd import SshServer


@pytest.fixture
def moto() -> S3Server:
    try:
        return shared_server("moto")
    except RuntimeError as exc:
        pytest.skip(f"moto S3 server unavailable: {exc}")


def _seed(folder: Path, server: SshServer) -> dict[str, bytes]:
    files = {f"f{i}": os.urandom(1000 * i) for i in range(1, 6)} | {"sub/a.txt": b"hi\n"}
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    server.chown(folder)
    return files


def test_relayed_small_files_from_a_host_to_s3_are_checksum_checked(
    sshd: SshServer, moto: S3Server, tmp_path: Path
) -> None:
    bucket = moto.new_bucket()
    remote = sshd.mkdir()
    want = _seed(remote / "run", sshd)
    ferry = ferry_for(sshd, moto, tmp_path)
    res = ferry("cp", "-r", "--json", "--route", "relay", url(sshd, f"{remote}/run"), f"s3://{bucket}/c/")
    assert res.returncode == 0, describe(res)
    assert bucket_files(moto, bucket, "c/run/") == want
    files = {p: e for p, e in file_events(res.stdout).items() if e["kind"] == "file"}
    assert len(files) == len(want)
    for path, event in files.items():
        assert event["level"] == "checksum" and event["evidence"], (path, event)
        assert "size only" not in event["verified"], (path, event)
    assert result_event(res.stdout)["route"] == "relay"


def test_mv_r_from_a_host_to_s3_moves_every_small_file(sshd: SshServer, moto: S3Server, tmp_path: Path) -> None:
    bucket = moto.new_bucket()
    remote = sshd.mkdir()
    want = _seed(remote / "run", sshd)
    ferry = ferry_for(sshd, moto, tmp_path)
    res = ferry("mv", "-r", url(sshd, f"{remote}/run"), f"s3://{bucket}/m/")
    assert res.returncode == 0, describe(res)
    assert "kept" not in res.stderr, describe(res)
    assert bucket_files(moto, bucket, "m/run/") == want
    assert not (remote / "run").exists()
