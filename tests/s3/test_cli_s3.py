"""``ferry`` against both S3 servers, driven as a user would: environment variables only."""

from __future__ import annotations

import json
from pathlib import Path

from ferry.core.outcomes import Evidence, Level
from helpers import Ferry, sha256_bytes, write_random
from s3.conftest import queue_tasks
from s3.servers import S3Server


def test_upload_download_round_trip_multipart_and_verified(
    s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    big = write_random(src / "big.bin", 12 * 1024 * 1024 + 5)  # 3 parts of 5 MiB
    (src / "small.txt").write_bytes(b"hello")
    (src / "sub" / "empty").write_bytes(b"")
    s3ferry.extra_env["FERRY_S3_PART_SIZE"] = "5M"
    s3ferry.ok("cp", "-r", src, f"s3://{bucket}/up/")
    objects = {o["Key"]: o for o in server.client().list_objects_v2(Bucket=bucket)["Contents"]}
    assert {"up/src/big.bin", "up/src/small.txt", "up/src/sub/empty"} <= set(objects)
    if server.kind == "moto":  # rclone lists the whole file's MD5 whatever the upload was
        assert objects["up/src/big.bin"]["ETag"].strip('"').endswith("-3")  # really multipart
    job = s3ferry.jobs()[-1]
    shown = s3ferry.ok("queue", "show", "--files", str(job["id"])).stdout
    assert "MD5 ETags of 3 parts + multipart ETag matched" in shown
    # Parts carry Content-MD5 too: rclone checks it, moto does not (so it is not claimed there).
    assert ("server checked Content-MD5 of 3 parts" in shown) == (server.kind == "rclone")
    head = server.client().head_object(Bucket=bucket, Key="up/src/small.txt")
    assert {k.lower(): v for k, v in head["Metadata"].items()}["ferry-sha256"] == sha256_bytes(b"hello")

    down = tmp_path / "down"
    s3ferry.ok("cp", "-r", f"s3://{bucket}/up/src", down)
    from helpers import sha256_file

    assert sha256_file(down / "big.bin") == big
    assert (down / "small.txt").read_bytes() == b"hello"
    assert (down / "sub" / "empty").read_bytes() == b""
    tasks = queue_tasks(s3ferry)
    assert all(t.level is Level.CHECKSUM for t in tasks.values()), {k: t.verified for k, t in tasks.items()}
    assert Evidence.SOURCE_RECORD in tasks["up/src/small.txt"].evidence  # Ferry's SHA-256 kept in metadata


def test_ls_buckets_and_folders(s3ferry: Ferry, server: S3Server, bucket: str) -> None:
    c = server.client()
    c.put_object(Bucket=bucket, Key="a/b/c.txt", Body=b"x" * 10)
    c.put_object(Bucket=bucket, Key="top.txt", Body=b"y")
    assert f"{bucket}/" in s3ferry.ok("ls", "s3://").stdout
    out = s3ferry.ok("ls", f"s3://{bucket}/").stdout.split()
    assert out == ["a/", "top.txt"]
    entries = json.loads(s3ferry.ok("ls", "--json", f"s3://{bucket}/a/b").stdout)
    assert [(e["name"], e["size"]) for e in entries] == [("c.txt", 10)]


def test_missing_bucket_wrong_keys_are_specific(s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path) -> None:
    res = s3ferry("ls", "s3://no-such-bucket-here/")
    assert res.returncode != 0 and "No such bucket: s3://no-such-bucket-here" in res.stderr
    if server.checks_signatures:
        s3ferry.extra_env["AWS_SECRET_ACCESS_KEY"] = "not-the-right-secret-at-all"
        res = s3ferry("ls", f"s3://{bucket}/")
        assert "secret key does not match" in res.stderr, res.stderr
        assert "not-the-right-secret" not in res.stderr + res.stdout  # secrets never echoed
        s3ferry.extra_env["AWS_ACCESS_KEY_ID"] = "unknownkey0123456789"
        res = s3ferry("ls", f"s3://{bucket}/x")
        assert "access key is not known" in res.stderr, res.stderr


def test_mb_and_cleanup_of_orphaned_uploads(s3ferry: Ferry, server: S3Server) -> None:
    s3ferry.ok("s3", "mb", "s3://ferry-mb-test-" + server.kind)
    c = server.client()
    c.head_bucket(Bucket="ferry-mb-test-" + server.kind)
    bucket = server.new_bucket()
    upload = c.create_multipart_upload(Bucket=bucket, Key="orphan.bin")["UploadId"]
    listed = json.loads(s3ferry.ok("s3", "cleanup", f"s3://{bucket}/", "--dry-run", "--json").stdout)
    assert [(r["key"], r["action"]) for r in listed] == [
        ("orphan.bin", "would abort" if _old(listed) else "kept (too recent)")
    ]
    s3ferry.ok("s3", "cleanup", f"s3://{bucket}/", "--older-than", "0")
    assert not c.list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert upload


def _old(rows: list[dict[str, object]]) -> bool:
    # moto reports a fixed 2010 start time for every upload; rclone the real one.
    age = rows[0]["age_seconds"]
    return isinstance(age, float) and age >= 7 * 86400


def test_server_side_rename_within_bucket_and_copy(s3ferry: Ferry, server: S3Server, bucket: str) -> None:
    c = server.client()
    c.put_object(Bucket=bucket, Key="x/one.txt", Body=b"1" * 100)
    s3ferry.ok("cp", "--verify", "size", f"s3://{bucket}/x/one.txt", f"s3://{bucket}/y/one.txt")
    assert c.get_object(Bucket=bucket, Key="y/one.txt")["Body"].read() == b"1" * 100


def test_saved_site_with_keychain_free_env(s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path) -> None:
    # A site names the endpoint and addressing; the keys still come from the environment.
    env = dict(s3ferry.extra_env)
    endpoint = env.pop("AWS_ENDPOINT_URL")
    s3ferry.extra_env = env
    s3ferry.ok("sites", "add", "store", f"s3://{bucket}", "--option", f"endpoint_url={endpoint}",
               "--option", "addressing=path", "--option", "region=us-east-1")  # fmt: skip
    (tmp_path / "f.txt").write_bytes(b"via site")
    s3ferry.ok("cp", tmp_path / "f.txt", "store:in/f.txt")
    assert server.client().get_object(Bucket=bucket, Key="in/f.txt")["Body"].read() == b"via site"
    assert "f.txt" in s3ferry.ok("ls", "store:in/").stdout
