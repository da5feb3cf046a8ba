"""What the terminal says about each file (issue 18, QA F5 and the minor findings): a name mapped
on the way (an S3 key's control characters written as U+24xx symbols) is said as it happens and
counted, as other lossy outcomes are; a name that is not UTF-8 is printed as ``ls -b`` and the
queue's record write it (``\\xff``), never as Python's surrogates; and the job's line counts
files and folders apart, as the summary counts files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Ferry, describe, result_event
from s3.servers import S3Server, shared_server


@pytest.fixture(scope="module")
def moto() -> Iterator[S3Server]:
    try:
        yield shared_server("moto")
    except RuntimeError as exc:  # the moto server is part of the dev install; CI has it
        pytest.skip(f"moto S3 server unavailable: {exc}")


def s3_ferry(server: S3Server, tmp_path: Path) -> Ferry:
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env=server.env())


MAPPED_KEYS = ("hx/ctl\x01\x1b[31mred.txt", "hx/tab\there.txt")


def put_keys(server: S3Server) -> str:
    bucket = server.new_bucket()
    client = server.client()
    for key in (*MAPPED_KEYS, "hx/plain.txt"):
        client.put_object(Bucket=bucket, Key=key, Body=key.encode())
    return bucket


def test_names_mapped_on_the_way_are_said_as_they_happen_and_counted(moto: S3Server, tmp_path: Path) -> None:
    ferry = s3_ferry(moto, tmp_path)
    bucket = put_keys(moto)
    res = ferry("cp", "-r", f"s3://{bucket}/hx", tmp_path / "dst")
    assert res.returncode == 0, describe(res)
    assert sorted(os.listdir(tmp_path / "dst")) == ["ctl\u2401\u241b[31mred.txt", "plain.txt", "tab\u2409here.txt"]
    said = [line for line in res.stderr.splitlines() if line.startswith("copied, name mapped: ")]
    assert len(said) == 2, describe(res)
    assert any(
        line.startswith("copied, name mapped: dst/tab\u2409here.txt: ") and "'tab\\there.txt'" in line for line in said
    ), said
    assert "2 file(s) copied under a name mapped for the destination" in res.stderr, describe(res)
    assert "not all kept" not in res.stderr


def test_names_mapped_are_typed_in_json(moto: S3Server, tmp_path: Path) -> None:
    ferry = s3_ferry(moto, tmp_path)
    bucket = put_keys(moto)
    res = ferry("cp", "-r", "--json", f"s3://{bucket}/hx", tmp_path / "dst")
    assert res.returncode == 0, describe(res)
    files = [e for e in map(json.loads, res.stdout.splitlines()) if e["event"] == "file"]
    mapped = sorted(e["path"] for e in files if "name" in e["not_kept"])
    assert mapped == ["dst/ctl\u2401\u241b[31mred.txt", "dst/tab\u2409here.txt"], files
    assert result_event(res.stdout)["names_mapped"] == 2


def test_a_name_that_is_not_utf8_is_printed_as_ls_b_does(moto: S3Server, tmp_path: Path) -> None:
    ferry = s3_ferry(moto, tmp_path)
    bucket = moto.new_bucket()
    src = tmp_path / "nu"
    src.mkdir()
    (src / "ok.txt").write_text("ok")
    with open(bytes(src) + b"/bad\xff\xfe.txt", "wb") as f:
        f.write(b"x")
    res = ferry("cp", "-r", src, f"s3://{bucket}/")
    assert res.returncode == 1, describe(res)  # a file left out for its name is no success
    assert "nu/bad\\xff\\xfe.txt" in res.stderr, describe(res)  # as the queue's record writes it
    assert "\\udc" not in res.stderr


def test_the_job_line_counts_files_and_folders_apart(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "a.txt").write_text("a")
    (src / "b.txt").write_text("b")
    dst = tmp_path / "dst"
    (dst / "src").mkdir(parents=True)
    (dst / "src" / "d").write_text("a file where the folder d must go")
    res = ferry("cp", "-r", "--on-conflict", "overwrite", src, dst)
    print(res.stderr)
    assert res.returncode == 1, describe(res)
    assert "1 file(s) and 1 folder(s) failed" in res.stderr, describe(res)
    assert "item(s)" not in res.stderr


def test_queue_run_says_and_counts_mapped_names_too(moto: S3Server, tmp_path: Path) -> None:
    ferry = s3_ferry(moto, tmp_path)
    bucket = put_keys(moto)
    ferry.ok("queue", "add", "-r", f"s3://{bucket}/hx", tmp_path / "dst")
    res = ferry("queue", "run")
    assert res.returncode == 0, describe(res)
    assert sum(line.startswith("copied, name mapped: ") for line in res.stderr.splitlines()) == 2, describe(res)
    assert "2 file(s) copied under a name mapped for the destination" in res.stderr, describe(res)
    ferry.ok("queue", "add", "-r", f"s3://{bucket}/hx", tmp_path / "dst2")
    res = ferry("queue", "run", "--json")
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["names_mapped"] == 2
