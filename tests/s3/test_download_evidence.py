"""End to end, with ``ferry cp``: every S3 file ends at the level its evidence allows, a transfer
damaged on the way fails the file (and never leaves it under its name), and names that a
destination cannot hold are reported, not lost.

The damage comes from :class:`~s3.checking_proxy.CheckingProxy` with ``checks=False``: it checks
nothing itself (as moto does) and flips one byte of the GET answers or PUT bodies the test names.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.core.outcomes import Evidence, Level, SkipReason
from helpers import Ferry, describe, events
from s3.checking_proxy import CheckingProxy
from s3.conftest import queue_tasks
from s3.servers import S3Server
from s3.test_evidence import _multipart, _plain_client

MiB = 1 << 20
AWS = Path(sys.executable).parent / "aws"


def _result(stdout: str) -> dict[str, Any]:
    return [e for e in events(stdout) if e["event"] == "result"][-1]


def _aws(server: S3Server, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(server.env())
    subprocess.run([str(AWS), "--endpoint-url", server.endpoint, *args], env=env, check=True, capture_output=True)


@pytest.fixture
def proxied(server: S3Server, tmp_path: Path) -> Iterator[tuple[CheckingProxy, Ferry, str]]:
    proxy = CheckingProxy(server.port, checks=False)
    ferry = Ferry(home=tmp_path / "home", cwd=tmp_path, extra_env=server.env(proxy.endpoint))
    try:
        yield proxy, ferry, server.new_bucket()
    finally:
        proxy.close()


# What each object's download rests on, per server (moto, rclone): see test_evidence.EXPECTED.
MADE_BY_BOTO3 = {
    "in/default-crc32.bin": (Evidence.S3_CHECKSUM, Evidence.S3_CHECKSUM),
    "in/no-checksum.bin": (Evidence.S3_ETAG_MD5, Evidence.S3_ETAG_MD5),
    "in/no-checksum-big.bin": (Evidence.S3_ETAG_MD5, Evidence.S3_ETAG_MD5),
    "in/mp-odd.bin": (Evidence.S3_MULTIPART_ETAG, Evidence.S3_ETAG_MD5),
    "in/mp-sha256.bin": (Evidence.S3_CHECKSUM, Evidence.S3_ETAG_MD5),
    "in/mp-crc32-odd.bin": (Evidence.S3_CHECKSUM, Evidence.S3_ETAG_MD5),
}


def test_objects_written_by_other_tools_are_checked_against_the_server(
    server: S3Server, bucket: str, s3ferry: Ferry, tmp_path: Path
) -> None:
    c, plain = server.client(), _plain_client(server)
    c.put_object(Bucket=bucket, Key="in/default-crc32.bin", Body=os.urandom(5000))
    plain.put_object(Bucket=bucket, Key="in/no-checksum.bin", Body=os.urandom(4000))
    plain.put_object(Bucket=bucket, Key="in/no-checksum-big.bin", Body=os.urandom(3 * MiB + 1))
    odd = [os.urandom(5 * MiB), os.urandom(6 * MiB + 3), os.urandom(999)]
    uniform = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(77)]
    _multipart(plain, bucket, "in/mp-odd.bin", odd)
    _multipart(c, bucket, "in/mp-sha256.bin", uniform, "SHA256")
    _multipart(c, bucket, "in/mp-crc32-odd.bin", odd, "CRC32")
    expected = dict(MADE_BY_BOTO3)
    if AWS.exists():
        src = tmp_path / "for-aws"
        src.mkdir()
        (src / "single.bin").write_bytes(os.urandom(70_000))
        (src / "multi.bin").write_bytes(os.urandom(17 * MiB + 5))  # aws-cli: 8 MiB parts above 8 MiB
        _aws(server, "s3", "cp", str(src / "single.bin"), f"s3://{bucket}/in/aws-single.bin")
        _aws(server, "s3", "cp", str(src / "multi.bin"), f"s3://{bucket}/in/aws-multi.bin")
        expected["in/aws-single.bin"] = (Evidence.S3_CHECKSUM, Evidence.S3_CHECKSUM)  # aws-cli sends a CRC32
        expected["in/aws-multi.bin"] = (Evidence.S3_CHECKSUM, Evidence.S3_ETAG_MD5)
    res = s3ferry("cp", "-r", "--json", f"s3://{bucket}/in", tmp_path / "out")
    assert res.returncode == 0, describe(res)
    tasks = queue_tasks(s3ferry)
    assert set(tasks) == set(expected)
    for key, want in expected.items():
        t = tasks[key]
        evidence = want[0 if server.kind == "moto" else 1]
        assert t.level is Level.CHECKSUM, (key, t.level, t.verified)
        assert evidence in t.evidence and Evidence.READBACK in t.evidence, (key, t.evidence, t.verified)
    counts = _result(res.stdout)["outcomes"]
    assert counts["copied_by_level"] == {"checksum": len(expected)}
    if not AWS.exists():
        pytest.skip("aws-cli is not installed (pip install awscli): its uploads were not tried")


def test_a_download_damaged_on_the_way_fails_naming_the_file(
    proxied: tuple[CheckingProxy, Ferry, str], server: S3Server, tmp_path: Path
) -> None:
    proxy, ferry, bucket = proxied
    c = _plain_client(server)
    good, bad = os.urandom(300_000), os.urandom(2 * MiB + 5)
    c.put_object(Bucket=bucket, Key="run/good.bin", Body=good)
    c.put_object(Bucket=bucket, Key="run/bad.bin", Body=bad)
    proxy.corrupt_gets(1000, match="/run/bad.bin")  # every answer for it, retries included
    res = ferry("cp", "-r", f"s3://{bucket}/run", tmp_path / "out")
    assert res.returncode == 1, describe(res)
    assert "bad.bin" in res.stdout + res.stderr
    assert proxy.damaged_gets >= 2  # the first attempt and its retry
    assert (tmp_path / "out" / "good.bin").read_bytes() == good
    assert not (tmp_path / "out" / "bad.bin").exists()
    assert not list((tmp_path / "out").glob("*.ferry-part"))
    tasks = queue_tasks(ferry)
    assert tasks["run/bad.bin"].state == "failed" and tasks["run/bad.bin"].error_kind == "checksum-mismatch"
    assert tasks["run/good.bin"].level is Level.CHECKSUM

    # Damaged once: the retry reads it right, and it ends checked.
    proxy.corrupt_gets(1, match="/run/bad.bin")
    res = ferry("cp", "-r", f"s3://{bucket}/run/bad.bin", tmp_path / "again.bin")
    assert res.returncode == 0, describe(res)
    assert (tmp_path / "again.bin").read_bytes() == bad
    assert queue_tasks(ferry)["run/bad.bin"].level is Level.CHECKSUM


def test_an_upload_damaged_on_the_way_never_stays_under_its_name(
    proxied: tuple[CheckingProxy, Ferry, str], server: S3Server, tmp_path: Path
) -> None:
    proxy, ferry, bucket = proxied
    ferry.extra_env["FERRY_S3_PART_SIZE"] = "5M"
    c = server.client()
    src = tmp_path / "src"
    src.mkdir()
    one, big = os.urandom(40_000), os.urandom(11 * MiB + 1)
    (src / "one.bin").write_bytes(one)
    (src / "big.bin").write_bytes(big)

    # Damaged once (the single PUT, then one part): refused or caught, sent again, right in the end.
    proxy.corrupt(1, match="/up/one.bin")
    ferry.ok("cp", src / "one.bin", f"s3://{bucket}/up/one.bin")
    proxy.corrupt(1, match="partNumber=2")
    ferry.ok("cp", src / "big.bin", f"s3://{bucket}/up/big.bin")
    assert proxy._corrupt == 0  # both were damaged
    assert c.get_object(Bucket=bucket, Key="up/one.bin")["Body"].read() == one
    assert c.get_object(Bucket=bucket, Key="up/big.bin")["Body"].read() == big
    tasks = queue_tasks(ferry)
    assert tasks[str(src / "big.bin")].level is Level.CHECKSUM

    # Damaged every time: the file fails as a mismatch (not "already exists"), and nothing stays.
    for name in ("one.bin", "big.bin"):
        proxy.corrupt(1000, match=f"/again/{name}")
        res = ferry("cp", src / name, f"s3://{bucket}/again/{name}")
        proxy.corrupt(0)
        assert res.returncode == 1, describe(res)
        t = queue_tasks(ferry)[str(src / name)]
        # rclone drops the whole multipart upload after refusing a damaged part, and the parts
        # still in flight then meet NoSuchUpload or a closed connection: the file still fails as
        # the refusal it was (issue 18), never as an upload that vanished.
        assert t.state == "failed" and t.error_kind == "checksum-mismatch", (t.error_kind, t.error)
        assert "already exists" not in (t.error or "").lower()
        keys = [o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="again/").get("Contents", [])]
        assert keys == [], keys
    # The failed multipart upload is kept for the queue's retry (which checks its parts with
    # ListParts and re-sends the damaged one), never completed: it is no object.
    uploads = c.list_multipart_uploads(Bucket=bucket).get("Uploads") or []
    assert {u["Key"] for u in uploads} <= {"again/big.bin"}


def test_uploads_record_what_the_store_confirmed(server: S3Server, bucket: str, s3ferry: Ferry, tmp_path: Path) -> None:
    s3ferry.extra_env["FERRY_S3_PART_SIZE"] = "5M"
    src = tmp_path / "src"
    src.mkdir()
    (src / "small.bin").write_bytes(os.urandom(10_000))
    (src / "big.bin").write_bytes(os.urandom(6 * MiB))
    s3ferry.ok("cp", "-r", src, f"s3://{bucket}/u/")
    tasks = queue_tasks(s3ferry)
    small, big = tasks[str(src / "small.bin")], tasks[str(src / "big.bin")]
    # moto checks no body digest (its ETag is compared); rclone checks Content-MD5 as well.
    if server.kind == "rclone":
        assert set(small.evidence) == {Evidence.S3_CONTENT_MD5, Evidence.S3_ETAG_MD5}
        assert set(big.evidence) == {Evidence.S3_CONTENT_MD5, Evidence.S3_MULTIPART_ETAG}
    else:
        assert set(small.evidence) == {Evidence.S3_ETAG_MD5}
        assert set(big.evidence) == {Evidence.S3_MULTIPART_ETAG}
    assert small.level is Level.CHECKSUM and big.level is Level.CHECKSUM
    # And downloading them again rests on what the store keeps about them.
    s3ferry.ok("cp", "-r", f"s3://{bucket}/u", tmp_path / "back")
    back = queue_tasks(s3ferry)
    assert all(t.level is Level.CHECKSUM for t in back.values()), {k: t.verified for k, t in back.items()}


def test_names_with_telling_words_are_found(server: S3Server, tmp_path: Path) -> None:
    """Not-found used to be told from other errors by searching the message for "bucket"."""
    bucket = f"bucket-not-found-permission-{uuid.uuid4().hex[:8]}"
    server.client().create_bucket(Bucket=bucket)
    c = server.client()
    c.put_object(Bucket=bucket, Key="bucket/not found/permission denied/x.txt", Body=b"x")
    c.put_object(Bucket=bucket, Key="no such bucket.txt", Body=b"y")
    ferry = Ferry(home=tmp_path / "home", cwd=tmp_path, extra_env=server.env())
    ferry.ok("cp", "-r", f"s3://{bucket}/bucket", tmp_path / "a")
    assert (tmp_path / "a" / "not found" / "permission denied" / "x.txt").read_bytes() == b"x"
    ferry.ok("cp", "-r", f"s3://{bucket}/bucket/not found", tmp_path / "b")
    assert (tmp_path / "b" / "permission denied" / "x.txt").read_bytes() == b"x"
    ferry.ok("cp", f"s3://{bucket}/no such bucket.txt", tmp_path / "c.txt")
    res = ferry("cp", "-r", f"s3://{bucket}/bucket/missing", tmp_path / "d")
    assert res.returncode == 2 and "Source not found" in res.stderr, describe(res)
    res = ferry("cp", "-r", f"s3://{bucket}-gone/bucket", tmp_path / "e")
    assert res.returncode == 2 and f"s3://{bucket}-gone/bucket" in res.stderr, describe(res)


def test_keys_that_collide_as_file_and_folder_are_reported(moto: S3Server, tmp_path: Path) -> None:
    # moto keeps any key; rclone serve s3, a file system underneath, cannot hold these.
    bucket = moto.new_bucket()
    c = moto.client()
    for key in ("run/x", "run/x/y", "run/x-1", "run/x.txt", "/lead.txt", "run//empty", "run/d/", "run/d/f"):
        c.put_object(Bucket=bucket, Key=key, Body=key.encode())
    ferry = Ferry(home=tmp_path / "home", cwd=tmp_path, extra_env=moto.env())
    res = ferry("cp", "-r", "--json", f"s3://{bucket}/", tmp_path / "out")
    assert res.returncode == 1, describe(res)  # not everything could be copied
    landed = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert landed == ["run/d/f", "run/x-1", "run/x.txt", "run/x/y"]
    tasks = queue_tasks(ferry)
    skipped = {k: t for k, t in tasks.items() if t.state == "skipped"}
    assert set(skipped) == {"run/x", "/", "run//", "run/d/"}, {k: t.verified for k, t in skipped.items()}
    assert all(t.skip_reason is SkipReason.UNREPRESENTABLE for t in skipped.values())
    assert "also a folder" in (skipped["run/x"].verified or skipped["run/x"].error or "")
    counts = _result(res.stdout)["outcomes"]
    assert counts["skipped_by_reason"] == {"unrepresentable": 4} and counts["copied"] == 4


def test_a_file_key_beside_its_folder_across_listing_pages(moto: S3Server) -> None:
    """The prefix ``a/x/`` comes pages after the key ``a/x`` when many keys sort between them."""
    from s3.conftest import make_backend

    bucket = moto.new_bucket()
    c = moto.client()
    keys = ["a/x", "a/x/y"] + [f"a/x-{i:04d}" for i in range(25)]
    for key in keys:
        c.put_object(Bucket=bucket, Key=key, Body=b"1")
    b = make_backend(moto, bucket)
    try:
        real = b._pages
        b._pages = lambda prefix, delimiter=None, page_size=1000: real(prefix, delimiter, 7)  # type: ignore[method-assign]
        entries = list(b.list("a"))
    finally:
        b.close()
    by_path = {e.path: e for e in entries}
    assert by_path["a/x"].meta.get("skip") == "unrepresentable"
    assert by_path["a/x/"].is_dir and by_path["a/x/"].name == "x"
    assert sum(1 for e in entries if e.name == "x") == 2 and len(entries) == 27
