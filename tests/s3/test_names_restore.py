"""Hostile keys on download, and archived objects: restore, then the download goes through."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ferry.backends.s3 import Archived
from ferry.backends.s3.names import decode_name, encode_name
from ferry.backends.s3.restore import restore_state, wait_for_restore
from ferry.core.outcomes import SkipReason
from helpers import Ferry
from s3.conftest import queue_tasks
from s3.servers import S3Server

HOSTILE = [
    "../evil.txt",
    "/abs.txt",
    "a//b.txt",
    "dir/",
    "ok/..",
    "ctl\x01name.txt",
    "Case.txt",
    "case.txt",
    "fine.txt",
]


def test_hostile_keys_never_escape_and_are_reported(moto: S3Server, tmp_path: Path) -> None:
    # moto stores any key (rclone serve s3 refuses most of these at upload, being a file system).
    bucket = moto.new_bucket()
    c = moto.client()
    for key in HOSTILE:
        c.put_object(Bucket=bucket, Key=key, Body=b"data")
    ferry = Ferry(home=tmp_path / "home", cwd=tmp_path, extra_env=moto.env())
    dest = tmp_path / "dest"
    res = ferry("cp", "-r", "--json", f"s3://{bucket}/", dest)
    outside = {p.name for p in tmp_path.iterdir()} - {"home", "dest"}
    assert outside == set(), outside  # nothing escaped the destination
    assert not Path("/abs.txt").exists()
    landed = {str(p.relative_to(dest)) for p in dest.rglob("*")}
    assert "fine.txt" in landed and "Case.txt" in landed and "case.txt" in landed
    assert "ctl\u2401name.txt" in landed  # mapped reversibly, visibly
    assert not any("\x01" in n for n in landed)
    assert "evil.txt" not in landed and "abs.txt" not in landed and "b.txt" not in landed
    job = ferry.jobs()[-1]
    shown = ferry.ok("queue", "show", "--files", str(job["id"])).stdout + res.stdout + res.stderr
    assert "unsafe name" in shown  # the refused ones are listed with the reason
    assert "name mapped from" in shown  # and the mapped one says so
    skipped = {src: t.skip_reason for src, t in queue_tasks(ferry).items() if t.state == "skipped"}
    # "..", "ok/..": unsafe; the keys under "/" and "a//" and the data in "dir/": unrepresentable.
    assert skipped == {
        "../": SkipReason.UNSAFE_NAME,
        "ok/..": SkipReason.UNSAFE_NAME,
        "/": SkipReason.UNREPRESENTABLE,
        "a//": SkipReason.UNREPRESENTABLE,
        "dir/": SkipReason.UNREPRESENTABLE,
    }, skipped


def test_name_mapping_is_reversible() -> None:
    for raw in ["plain", "tab\there", "del\x7fx", "nl\nx"]:
        name, note = encode_name(raw)
        assert decode_name(name) == raw
        assert (note == "") == (raw == "plain")
    assert encode_name("..")[1].startswith("refused")
    assert encode_name("\u2401\x01")[0] == ""  # not reversible: refused


def test_case_collision_is_noted(server: S3Server, bucket: str, backend: Any) -> None:
    c = server.client()
    c.put_object(Bucket=bucket, Key="Data.csv", Body=b"1")
    c.put_object(Bucket=bucket, Key="data.csv", Body=b"2")
    notes = {e.name: e.meta.get("name_note", "") for e in backend.list("")}
    assert "collide" in notes["data.csv"] or "collide" in notes["Data.csv"]


def test_archived_download_needs_restore_then_succeeds(moto: S3Server, tmp_path: Path) -> None:
    bucket = moto.new_bucket()
    moto.client().put_object(Bucket=bucket, Key="cold.dat", Body=b"frozen", StorageClass="GLACIER")
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env=moto.env())
    entries = json.loads(ferry.ok("ls", "--json", f"s3://{bucket}/").stdout)
    assert entries[0].get("meta", {}).get("storage_class", "GLACIER") == "GLACIER"
    res = ferry("cp", f"s3://{bucket}/cold.dat", tmp_path / "cold.dat")
    assert res.returncode == 1 and f"ferry s3 restore s3://{bucket}/cold.dat" in res.stderr
    assert not (tmp_path / "cold.dat").exists()
    out = ferry.ok("s3", "restore", f"s3://{bucket}/cold.dat", "--days", "1").stdout
    assert "restore" in out
    ferry.ok("cp", f"s3://{bucket}/cold.dat", tmp_path / "cold.dat")
    assert (tmp_path / "cold.dat").read_bytes() == b"frozen"


def test_restore_state_machine_waits_while_restoring() -> None:
    heads = iter(
        [
            {"StorageClass": "DEEP_ARCHIVE", "Restore": 'ongoing-request="true"'},
            {"StorageClass": "DEEP_ARCHIVE", "Restore": 'ongoing-request="true"'},
            {"StorageClass": "DEEP_ARCHIVE", "Restore": 'ongoing-request="false", expiry-date="Fri, 1 Jan 2027"'},
        ]
    )
    slept: list[float] = []
    now = [0.0]

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    state = wait_for_restore(lambda: next(heads), "s3://b/k", poll=60, max_wait=3600, sleep=sleep, clock=lambda: now[0])
    assert state == "restored" and slept == [60, 60]


def test_restore_state_machine_refuses_without_request_and_gives_up_after_max_wait() -> None:
    with pytest.raises(Archived, match="ferry s3 restore"):
        wait_for_restore(lambda: {"StorageClass": "GLACIER"}, "s3://b/k", poll=1, max_wait=10, sleep=lambda s: None)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(Archived, match="still being restored"):
        wait_for_restore(
            lambda: {"StorageClass": "GLACIER", "Restore": 'ongoing-request="true"'},
            "s3://b/k",
            poll=30,
            max_wait=100,
            sleep=sleep,
            clock=lambda: now[0],
        )
    assert restore_state({"StorageClass": "STANDARD"}) == "available"
