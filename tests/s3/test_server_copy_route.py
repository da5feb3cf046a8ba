"""S3 to S3 within one endpoint goes site to site (issue 22): the store copies (CopyObject,
UploadPartCopy), Ferry checks each copy against the source's own evidence, and not one byte of
the objects passes through Ferry's process. Against both loopback servers: moto copies parts and
computes SHA-256 on a copy; ``rclone serve s3`` does neither, so its large objects relay, saying
why, and its copies are checked by their MD5 ETags."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.backends.registry import BackendPool
from ferry.backends.s3 import S3Backend, server_copy
from ferry.backends.s3.server_copy import DIFFERENT_ACCOUNTS, PART_COPY_REFUSED
from ferry.core.errors import UsageError
from ferry.core.outcomes import Evidence, Level
from ferry.transfers import jobs
from ferry.transfers.delegated import choose_route
from ferry.transfers.options import JobOptions, Route
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store, Task
from helpers import Ferry
from s3.conftest import make_backend
from s3.servers import S3Server, aws_env

MIB = 1 << 20


class ReadCounter:
    """Every byte Ferry's process reads from or writes to an S3 object, counted in the backend."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opened_reads = self.opened_writes = 0
        self.lock = threading.Lock()
        read, write = S3Backend.open_read, S3Backend.open_write

        def open_read(b: S3Backend, *a: Any, **kw: Any) -> Any:
            with self.lock:
                self.opened_reads += 1
            return read(b, *a, **kw)

        def open_write(b: S3Backend, *a: Any, **kw: Any) -> Any:
            with self.lock:
                self.opened_writes += 1
            return write(b, *a, **kw)

        monkeypatch.setattr(S3Backend, "open_read", open_read)
        monkeypatch.setattr(S3Backend, "open_write", open_write)


@pytest.fixture
def env(server: S3Server) -> Iterator[None]:
    with aws_env(server):
        yield


def _run(tmp_path: Path, sources: list[str], dest: str, **opts: Any) -> tuple[Store, int, str]:
    store = Store(tmp_path / "q.db")
    options = JobOptions(recursive=True, **opts)
    with BackendPool() as pool:
        prepared = jobs.prepare(sources, dest, options, pool)
        job_id = jobs.create(store, prepared, options)
        summary = Runner(store, RunConfig(job_ids=[job_id], parallel=2), pool=pool).run()
    return store, job_id, summary.jobs.get(job_id, store.job(job_id).state)


def _tasks(store: Store, job_id: int) -> dict[str, Task]:
    return {t.rel: t for t in store.tasks(job_id, kinds=("file",))}


def _keys(server: S3Server, bucket: str) -> dict[str, bytes]:
    c = server.client()
    return {
        o["Key"]: c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        for o in c.list_objects_v2(Bucket=bucket).get("Contents", [])
    }


def test_bucket_to_bucket_is_copied_by_the_store_checked_against_the_source_and_no_byte_read_here(
    server: S3Server, env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    c.put_object(Bucket=a, Key="run/with-sha.txt", Body=b"hello", ChecksumAlgorithm="SHA256")
    c.put_object(Bucket=a, Key="run/sub/plain.txt", Body=b"world", Metadata={"mtime": "1700000000.5", "owner": "me"})
    counter = ReadCounter(monkeypatch)
    store, job_id, state = _run(tmp_path, [f"s3://{a}/run"], f"s3://{b}/out/")
    assert state == "done"
    assert (counter.opened_reads, counter.opened_writes) == (0, 0)  # the store moved every byte
    job = store.job(job_id)
    assert (job.route, job.route_reason) == ("direct", None)
    assert _keys(server, b) == {"out/run/with-sha.txt": b"hello", "out/run/sub/plain.txt": b"world"}
    tasks = _tasks(store, job_id)
    assert {t.state for t in tasks.values()} == {"done"}
    sha, plain = tasks["run/with-sha.txt"], tasks["run/sub/plain.txt"]
    assert sha.level is plain.level is Level.CHECKSUM
    # moto computes the copy's SHA-256 as asked and it is compared with the source's stored one;
    # rclone computes none, so the MD5 ETags are compared (named as such).
    if server.kind == "moto":
        assert (sha.hash_algo, sha.evidence) == ("sha256", (Evidence.S3_CHECKSUM,)), sha.verified
    else:
        assert sha.evidence == (Evidence.S3_ETAG_MD5,), sha.verified
    assert plain.evidence == (Evidence.S3_ETAG_MD5,) and plain.verified and "MD5 ETag" in plain.verified
    meta = {k.lower(): v for k, v in c.head_object(Bucket=b, Key="out/run/sub/plain.txt")["Metadata"].items()}
    assert meta["mtime"] == "1700000000.5" and meta["owner"] == "me"  # kept (MetadataDirective COPY)
    store.close()


def test_a_source_without_a_kept_time_gets_its_last_modified_as_metadata(
    server: S3Server, env: None, tmp_path: Path
) -> None:
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    c.put_object(Bucket=a, Key="x.txt", Body=b"x", Metadata={"owner": "me"}, ContentType="text/plain")
    store, _, state = _run(tmp_path, [f"s3://{a}/x.txt"], f"s3://{b}/x.txt")
    assert state == "done"
    src, dst = c.head_object(Bucket=a, Key="x.txt"), c.head_object(Bucket=b, Key="x.txt")
    meta = {k.lower(): v for k, v in dst["Metadata"].items()}
    assert meta["owner"] == "me" and abs(float(meta["mtime"]) - src["LastModified"].timestamp()) < 1
    assert dst["ContentType"] == "text/plain"
    store.close()


@pytest.mark.parametrize(
    ("policy", "expect_state", "expect_keys"),
    [
        ("skip", "skipped", {"d/x.txt": b"old"}),
        ("overwrite", "done", {"d/x.txt": b"new!"}),
        ("rename", "done", {"d/x.txt": b"old", "d/x (1).txt": b"new!"}),
        ("different", "done", {"d/x.txt": b"new!"}),
    ],
)
def test_conflict_policies_hold_on_the_direct_route(
    server: S3Server,
    env: None,
    tmp_path: Path,
    policy: str,
    expect_state: str,
    expect_keys: dict[str, bytes],
) -> None:
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    c.put_object(Bucket=b, Key="d/x.txt", Body=b"old")
    c.put_object(Bucket=a, Key="x.txt", Body=b"new!")
    store, job_id, _ = _run(tmp_path, [f"s3://{a}/x.txt"], f"s3://{b}/d/x.txt", on_conflict=policy)
    (task,) = _tasks(store, job_id).values()
    assert task.state == expect_state, task.error
    assert store.job(job_id).route == "direct"
    assert _keys(server, b) == expect_keys
    if policy == "rename":
        assert task.dst.endswith("d/x (1).txt")  # the row names where the copy really is
    store.close()


def test_a_multipart_source_is_copied_in_its_own_part_layout_and_checked_by_its_multipart_etag(
    moto: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = moto.client()
    a, b = moto.new_bucket(), moto.new_bucket()
    data = os.urandom(12 * MIB + 5)
    up = c.create_multipart_upload(Bucket=a, Key="big.bin")
    parts = []
    for n, lo in enumerate(range(0, len(data), 5 * MIB), start=1):
        r = c.upload_part(Bucket=a, Key="big.bin", UploadId=up["UploadId"], PartNumber=n, Body=data[lo : lo + 5 * MIB])
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    c.complete_multipart_upload(Bucket=a, Key="big.bin", UploadId=up["UploadId"], MultipartUpload={"Parts": parts})
    counter = ReadCounter(monkeypatch)
    with aws_env(moto):
        store, job_id, state = _run(tmp_path, [f"s3://{a}/big.bin"], f"s3://{b}/big.bin")
    assert state == "done" and counter.opened_reads == 0
    (task,) = _tasks(store, job_id).values()
    assert (task.level, task.evidence) == (Level.CHECKSUM, (Evidence.S3_MULTIPART_ETAG,)), task.verified
    assert c.head_object(Bucket=b, Key="big.bin")["ETag"] == c.head_object(Bucket=a, Key="big.bin")["ETag"]
    assert c.get_object(Bucket=b, Key="big.bin")["Body"].read() == data
    store.close()


def test_a_large_object_is_part_copied_or_relayed_with_the_reason(
    server: S3Server, env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above CopyObject's limit (lowered here to 5 MiB) the store copies parts; rclone cannot, so
    the job relays what is left and says why, and every file still arrives checked."""
    monkeypatch.setattr(server_copy, "single_copy_limit", 5 * MIB)
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    data = os.urandom(6 * MIB)
    c.put_object(Bucket=a, Key="d/big.bin", Body=data)
    counter = ReadCounter(monkeypatch)
    store, job_id, state = _run(tmp_path, [f"s3://{a}/d"], f"s3://{b}/d2/")
    assert state == "done"
    job = store.job(job_id)
    (task,) = _tasks(store, job_id).values()
    assert c.get_object(Bucket=b, Key="d2/d/big.bin")["Body"].read() == data
    if server.kind == "moto":
        assert (job.route, counter.opened_reads) == ("direct", 0)
        # One part of 6 MiB: its multipart ETag is no MD5 of the bytes and the source keeps no
        # SHA-256, so it is said plainly to be checked by size only, never called checked.
        assert task.level is Level.SIZE and task.verified and task.verified.startswith("size only"), task.verified
    else:
        assert (job.route, job.route_reason) == ("relay", PART_COPY_REFUSED)
        assert counter.opened_reads >= 1  # relayed through Ferry
        assert task.level is Level.CHECKSUM, task.verified
    store.close()


def test_route_direct_fails_the_job_when_the_store_cannot_copy_parts(
    rclone: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_copy, "single_copy_limit", 5 * MIB)
    c = rclone.client()
    a, b = rclone.new_bucket(), rclone.new_bucket()
    c.put_object(Bucket=a, Key="big.bin", Body=os.urandom(6 * MIB))
    with aws_env(rclone):
        store, job_id, state = _run(tmp_path, [f"s3://{a}/big.bin"], f"s3://{b}/big.bin", route="direct")
    assert state == "failed"
    assert PART_COPY_REFUSED in (store.job(job_id).message or "")
    assert "Contents" not in c.list_objects_v2(Bucket=b)  # nothing relayed
    store.close()


class _Crash(BaseException):
    """The process dies right after the store made a copy, before Ferry recorded it."""


def test_a_crash_after_a_copy_landed_neither_duplicates_nor_loses(
    server: S3Server, env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    c.put_object(Bucket=a, Key="d/x.txt", Body=b"one")
    c.put_object(Bucket=a, Key="d/y.txt", Body=b"two")
    c.put_object(Bucket=b, Key="d/x.txt", Body=b"already there")  # rename: the copy goes to x (1).txt
    real = server_copy.verify
    crashed = threading.Event()

    def crash_once(*a: Any, **kw: Any) -> Any:
        if not crashed.is_set():
            crashed.set()
            raise _Crash
        return real(*a, **kw)

    monkeypatch.setattr(server_copy, "verify", crash_once)
    monkeypatch.setattr(server_copy, "WORKERS", 1)
    store, job_id, state = _run(tmp_path, [f"s3://{a}/d"], f"s3://{b}/", on_conflict="rename")
    assert crashed.is_set() and state != "done"
    store.release_job(job_id, "queued", None)  # as the next run finds a job whose runner died
    store.close()
    runner_store = Store(tmp_path / "q.db")
    runner = Runner(runner_store, RunConfig(job_ids=[job_id], parallel=2))
    assert runner.run().jobs[job_id] == "done"
    runner.pool.close()
    keys = _keys(server, b)
    assert sorted(keys) == ["d/x (1).txt", "d/x.txt", "d/y.txt"]
    assert keys["d/x.txt"] == b"already there" and keys["d/x (1).txt"] == b"one"
    assert not any("(2)" in k for k in keys)  # the landed copy was not made again under a new name
    tasks = _tasks(runner_store, job_id)
    assert {t.state for t in tasks.values()} == {"done"} and len(tasks) == 2
    runner_store.close()


def test_cp_between_buckets_says_direct(s3ferry: Ferry, server: S3Server) -> None:
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    c.put_object(Bucket=a, Key="f.txt", Body=b"data")
    res = s3ferry.ok("cp", f"s3://{a}/f.txt", f"s3://{b}/f.txt")
    assert res.stderr.strip().splitlines()[-1].endswith("; route direct")
    out = s3ferry.ok("cp", "--json", "--route", "relay", f"s3://{a}/f.txt", f"s3://{b}/g.txt").stdout
    result = json.loads(out.splitlines()[-1])
    assert (result["route"], result["exit_code"]) == ("relay", 0)
    shown = s3ferry.ok("queue", "show", str(s3ferry.jobs()[0]["id"])).stdout
    assert "  route:    direct" in shown


def test_sync_between_buckets_goes_direct_and_copies_only_the_differences(
    s3ferry: Ferry, server: S3Server, tmp_path: Path
) -> None:
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    c.put_object(Bucket=a, Key="d/same.txt", Body=b"same")
    c.put_object(Bucket=a, Key="d/new.txt", Body=b"new")
    s3ferry.ok("cp", "-r", f"s3://{a}/d/same.txt", f"s3://{b}/d/same.txt")
    before = c.head_object(Bucket=b, Key="d/same.txt")["LastModified"]
    out = json.loads(s3ferry.ok("sync", "--json", f"s3://{a}/d", f"s3://{b}/d").stdout.splitlines()[-1])
    assert (out["route"], out["exit_code"], out["outcomes"]["copied"]) == ("direct", 0, 1), out
    assert _keys(server, b) == {"d/same.txt": b"same", "d/new.txt": b"new"}
    assert c.head_object(Bucket=b, Key="d/same.txt")["LastModified"] == before  # not copied again


def test_pause_stops_between_copies_and_the_next_run_copies_only_the_rest(
    server: S3Server, env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    for name in ("1.txt", "2.txt", "3.txt"):
        c.put_object(Bucket=a, Key=f"d/{name}", Body=name.encode())
    store = Store(tmp_path / "q.db")
    options = JobOptions(recursive=True)
    pool = BackendPool()
    job_id = jobs.create(store, jobs.prepare([f"s3://{a}/d"], f"s3://{b}/", options, pool), options)
    runner = Runner(store, RunConfig(job_ids=[job_id], parallel=2), pool=pool)
    real = server_copy.verify

    def pause_after_first(*args: Any, **kw: Any) -> Any:
        if not store.job_value(job_id, "paused-by-test"):
            store.set_job_value(job_id, "paused-by-test", "1")
            store.set_job_state(job_id, "paused", "paused by the test")
            for _ in range(300):  # until the runner has seen it and told the copy to stop
                if runner._runs[job_id].cancel.cancelled:
                    break
                threading.Event().wait(0.1)
        return real(*args, **kw)

    monkeypatch.setattr(server_copy, "verify", pause_after_first)
    monkeypatch.setattr(server_copy, "WORKERS", 1)
    runner.run()
    assert store.job(job_id).state == "paused"
    first = _keys(server, b)
    assert len(first) == 1  # the copy under way finished; nothing more started
    (copied,) = first
    landed = c.head_object(Bucket=b, Key=copied)["LastModified"]
    states = sorted(t.state for t in store.tasks(job_id, kinds=("file",)))
    assert states == ["done", "queued", "queued"]
    store.set_job_state(job_id, "queued", None)
    copies: list[int] = []

    def counted(*args: Any, **kw: Any) -> Any:
        copies.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(server_copy, "verify", counted)
    assert Runner(store, RunConfig(job_ids=[job_id], parallel=2), pool=pool).run().jobs[job_id] == "done"
    pool.close()
    assert len(copies) == 2  # only the two left: the first is not copied again
    assert _keys(server, b) == {"d/1.txt": b"1.txt", "d/2.txt": b"2.txt", "d/3.txt": b"3.txt"}
    assert c.head_object(Bucket=b, Key=copied)["LastModified"] == landed
    assert {t.state for t in store.tasks(job_id, kinds=("file",))} == {"done"}
    store.close()


def test_mv_between_buckets_relays_so_each_source_goes_only_after_ferrys_own_check(
    s3ferry: Ferry, server: S3Server
) -> None:
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    c.put_object(Bucket=a, Key="m.txt", Body=b"move me")
    res = s3ferry.ok("mv", f"s3://{a}/m.txt", f"s3://{b}/m.txt")
    assert res.stderr.strip().splitlines()[0].endswith("; route relay")
    assert _keys(server, b) == {"m.txt": b"move me"}
    assert "Contents" not in c.list_objects_v2(Bucket=a)  # moved


def test_the_manifest_lists_what_the_store_checked_by_sha256_and_says_what_it_leaves_out(
    s3ferry: Ferry, server: S3Server, tmp_path: Path
) -> None:
    c = server.client()
    a, b = server.new_bucket(), server.new_bucket()
    c.put_object(Bucket=a, Key="d/s.txt", Body=b"sha", ChecksumAlgorithm="SHA256")
    c.put_object(Bucket=a, Key="d/m.txt", Body=b"md5 only")
    manifest = tmp_path / "m.sha256"
    res = s3ferry.ok("cp", "-r", "--manifest", manifest, f"s3://{a}/d", f"s3://{b}/")
    lines = manifest.read_text().splitlines()
    if server.kind == "moto":  # the copy's SHA-256, computed by the store, matched the source's
        assert lines == [f"{hashlib.sha256(b'sha').hexdigest()}  d/s.txt"]
        assert "1 copied file(s) are not in the manifest" in res.stderr  # m.txt: MD5 ETag only
    else:  # rclone computes no SHA-256 on a copy: both rest on MD5 ETags, neither is listed
        assert lines == []
        assert "2 copied file(s) are not in the manifest" in res.stderr


def test_buckets_on_two_endpoints_relay_and_say_why(moto: S3Server, rclone: S3Server) -> None:
    here, there = make_backend(moto, moto.new_bucket()), make_backend(rclone, rclone.new_bucket())
    try:
        auto = choose_route(here, there, "auto")
        assert (auto.route, auto.reason) == (Route.RELAY, DIFFERENT_ACCOUNTS)
        with pytest.raises(UsageError, match="--route direct: the buckets are on different endpoints"):
            choose_route(here, there, "direct")
        assert choose_route(here, make_backend(moto, moto.new_bucket()), "direct").route is Route.DIRECT
    finally:
        here.close()
        there.close()
