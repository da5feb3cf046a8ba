"""Bad S3 destinations are found before anything is queued (issue 18, and the README's promise):
``s3://`` with no bucket, a bucket that does not exist, a malformed address. ``ferry cp``,
``ferry mv`` and ``ferry queue add`` exit 2 with one line saying why, queue nothing, and ``mv``
keeps its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import Ferry, describe
from s3.servers import S3Server

BAD = {
    "s3://": "Name a bucket",
    "s3://ferry-no-such-bucket-zz/": "No such bucket: s3://ferry-no-such-bucket-zz",
    "s3://ferry-no-such-bucket-zz/in/a.txt": "No such bucket: s3://ferry-no-such-bucket-zz",
    "s3:///in/a.txt": "Name a bucket",
    "s3://Not_A!Bucket/in/": "Malformed bucket name",
}


@pytest.mark.parametrize("command", [("cp",), ("mv",), ("queue", "add")], ids=["cp", "mv", "queue-add"])
def test_a_bad_destination_exits_2_and_queues_nothing(
    s3ferry: Ferry, server: S3Server, tmp_path: Path, command: tuple[str, ...]
) -> None:
    src = tmp_path / "a.txt"
    src.write_bytes(b"a")
    for dest, words in BAD.items():
        res = s3ferry(*command, src, dest)
        assert res.returncode == 2, f"{dest}: {describe(res)}"
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], f"{dest}: {res.stderr}"
        assert src.read_bytes() == b"a"  # mv kept its source
    assert s3ferry.jobs() == []  # nothing queued, not even a failed job
