"""Pre-signed links fetched with plain HTTP clients, as a collaborator without Ferry would."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers import Ferry
from s3.servers import S3Server


def test_presigned_get_works_with_urllib(s3ferry: Ferry, server: S3Server, bucket: str) -> None:
    server.client().put_object(Bucket=bucket, Key="results/run 1.txt", Body=b"the results")
    res = s3ferry.ok("share", f"s3://{bucket}/results/run 1.txt", "--expires", "2h", "--curl")
    url, curl = res.stdout.splitlines()[:2]
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url and "X-Amz-Expires=7200" in url
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.read() == b"the results"
    assert curl.startswith("curl ") and shlex.split(curl)[-1] == url
    listed = s3ferry.ok("share", "list").stdout
    assert f"s3://{bucket}/results/run 1.txt" in listed and "cannot be revoked early" in listed


def test_presigned_put_with_curl_upload(s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path) -> None:
    res = s3ferry.ok("share", f"s3://{bucket}/inbox/data.bin", "--upload", "--curl", "--expires", "30m")
    curl = shlex.split(res.stdout.splitlines()[1])
    assert curl[:3] == ["curl", "-f", "-T"]
    (tmp_path / "data.bin").write_bytes(b"delivered by a collaborator")
    subprocess.run(curl, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    body = server.client().get_object(Bucket=bucket, Key="inbox/data.bin")["Body"].read()
    assert body == b"delivered by a collaborator"  # not empty: -T, not --data-binary
    kinds = {link["kind"] for link in json.loads(s3ferry.ok("share", "list", "--json").stdout)}
    assert kinds == {"upload"}


def test_expiry_limits_and_refusals(s3ferry: Ferry, server: S3Server, bucket: str) -> None:
    server.client().put_object(Bucket=bucket, Key="k", Body=b"x")
    res = s3ferry("share", f"s3://{bucket}/k", "--expires", "8d")
    assert res.returncode == 2 and "at most 7 days" in res.stderr and "SigV4" in res.stderr
    s3ferry.ok("share", f"s3://{bucket}/k", "--expires", "7d")
    res = s3ferry("share", f"s3://{bucket}/missing", "--expires", "1h")
    assert res.returncode != 0 and "No such" in res.stderr
    res = s3ferry("share", "revoke", json.loads(s3ferry.ok("share", "list", "--json").stdout)[0]["id"])
    assert res.returncode == 2 and "rotated" in res.stderr


def test_expired_link_is_refused_by_a_signature_checking_server(rclone: S3Server, tmp_path: Path) -> None:
    bucket = rclone.new_bucket()
    rclone.client().put_object(Bucket=bucket, Key="k", Body=b"x")
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env=rclone.env())
    url = ferry.ok("share", f"s3://{bucket}/k", "--expires", "1s").stdout.splitlines()[0]
    time.sleep(2.5)  # the behaviour under test is the passing of time itself
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url, timeout=30)
    assert info.value.code in (400, 403)  # rclone says 400, AWS 403


def test_temporary_credentials_warn(moto: S3Server, tmp_path: Path) -> None:
    bucket = moto.new_bucket()
    moto.client().put_object(Bucket=bucket, Key="k", Body=b"x")
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env={**moto.env(), "AWS_SESSION_TOKEN": "sts-session"})
    res = ferry.ok("share", f"s3://{bucket}/k", "--expires", "1h")
    assert "temporary" in res.stderr and "sts-session" not in res.stderr


def test_post_policy_upload_with_size_limit(moto: S3Server, tmp_path: Path) -> None:
    # rclone serve s3 has no POST uploads; moto accepts them (without enforcing the size condition).
    bucket = moto.new_bucket()
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env=moto.env())
    res = ferry.ok("share", f"s3://{bucket}/drop/f.txt", "--upload", "--max-size", "1M", "--curl")
    curl = shlex.split(res.stdout.splitlines()[1])
    assert "content-length-range" not in " ".join(curl)  # the policy is signed into the form fields
    assert any(a.startswith("policy=") for a in curl)
    (tmp_path / "f.txt").write_bytes(b"posted")
    subprocess.run(curl, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    assert moto.client().get_object(Bucket=bucket, Key="drop/f.txt")["Body"].read() == b"posted"
