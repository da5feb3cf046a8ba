"""A local file whose name is not valid UTF-8 (bytes a local disk allows, ``os.fsencode``) sent
to S3 (issue 18): it used to crash ``ferry cp`` (and every later ``queue run``), then failed as an
untyped "S3 failure ... UnicodeEncodeError". Now that one file is skipped before anything is sent,
with the typed reason ``unrepresentable`` and a note naming its bytes; the rest of the job is
copied, the exit code says not everything was (1), and the queue holds and shows the name."""

from __future__ import annotations

import os
from pathlib import Path

from ferry.core.outcomes import SkipReason
from helpers import Ferry, describe
from s3.conftest import queue_tasks
from s3.servers import S3Server


def _bad(folder: Path, raw: bytes, data: bytes) -> str:
    path = os.fsencode(folder) + b"/" + raw
    with open(path, "wb") as f:
        f.write(data)
    return os.fsdecode(path)


def test_a_name_that_is_not_utf8_is_skipped_as_that_one_file(
    s3ferry: Ferry, server: S3Server, bucket: str, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "good.txt").write_bytes(b"good")
    (src / "sub" / "fine.txt").write_bytes(b"fine")
    bad = _bad(src, b"bad\xff.txt", b"bad")
    worse = _bad(src / "sub", b"latin1-\xe9t\xe9.bin", b"worse")

    res = s3ferry("cp", "-r", src, f"s3://{bucket}/up/")
    assert res.returncode == 1, describe(res)  # not everything was copied: says so
    assert "Traceback" not in res.stderr + res.stdout
    keys = sorted(o["Key"] for o in server.client().list_objects_v2(Bucket=bucket)["Contents"])
    assert [k for k in keys if not k.endswith("/")] == ["up/src/good.txt", "up/src/sub/fine.txt"]
    tasks = queue_tasks(s3ferry)
    for path, raw in ((bad, b"bad\xff.txt"), (worse, b"latin1-\xe9t\xe9.bin")):
        t = tasks[path]
        assert t.state == "skipped" and t.skip_reason is SkipReason.UNREPRESENTABLE, (t.state, t.skip_reason, t.error)
        assert repr(raw) in (t.verified or t.error or ""), (t.verified, t.error)
    assert tasks[str(src / "good.txt")].state == "done"

    # The queue holds the name: listing, showing and running it again never crash.
    job = s3ferry.jobs()[-1]
    shown = s3ferry.ok("queue", "show", "--files", str(job["id"]))
    assert "Traceback" not in shown.stderr
    ran = s3ferry("queue", "run")
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, describe(ran)

    # One such file named alone: refused before anything is queued (bad input, exit 2).
    before = len(s3ferry.jobs())
    alone = s3ferry("cp", bad, f"s3://{bucket}/one/")
    assert alone.returncode == 2 and "not valid UTF-8" in alone.stderr, describe(alone)
    # So is a destination or a listing typed with such bytes: one line, no traceback, nothing queued.
    typed = os.fsdecode(f"s3://{bucket}/in/".encode() + b"caf\xe9.txt")
    for args in (("cp", src / "good.txt", typed), ("ls", typed)):
        res = s3ferry(*args)
        assert res.returncode == 2 and "not valid UTF-8" in res.stderr and "Traceback" not in res.stderr, describe(res)
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert len(s3ferry.jobs()) == before
