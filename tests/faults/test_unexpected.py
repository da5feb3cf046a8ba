"""Something unexpected in one file fails that file only (issue 18): the runner, the rest of the
job and every later run go on. Before, a local name that is not valid UTF-8 sent to S3 stopped
``ferry cp`` with a traceback (its error message could not be written to the queue), and every
later ``ferry queue run`` stopped the same way."""

from __future__ import annotations

from pathlib import Path

from faults.conftest import S3Site
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from helpers import MemSite, describe, mem_job


def test_a_name_that_is_not_utf8_fails_that_file_only(s3_site: S3Site, tmp_path: Path) -> None:
    site, ferry = s3_site, s3_site.ferry
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.txt").write_bytes(b"fine")
    with open(bytes(src) + b"/bad\xff.txt", "wb") as f:
        f.write(b"latin-1 name")
    res = ferry("cp", "-r", "--json", src, site.url("in/"))
    assert res.returncode == 1, describe(res)
    assert "Traceback" not in res.stderr, describe(res)
    (job,) = ferry.jobs()
    # S3 keys are text: the name is skipped as that one file, typed "unrepresentable", before
    # anything is sent (tests/s3/test_unrepresentable_names.py); exit 1 says not all was copied.
    assert job["state"] == "done" and job["files_done"] == 1 and job["files_skipped"] == 1
    client = site.server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=site.bucket)["Contents"]]
    assert [k for k in keys if not k.endswith("/")] == ["in/src/good.txt"]  # (and a folder marker)
    shown = ferry("queue", "show", "--files", "1")
    assert shown.returncode == 0 and "bad\\xff.txt" in shown.stdout, describe(shown)  # as ls -b writes it
    again = ferry("queue", "run")  # the queue is not poisoned for later runs
    assert again.returncode == 0 and "Traceback" not in again.stderr, describe(again)


def test_a_source_raising_something_unexpected_fails_that_file_only(site: MemSite, store: Store) -> None:
    for name in ("a", "b", "c"):
        site.put(f"/src/{name}.bin", name.encode() * 1000)
    site.store.fail_on("open_read", "/src/b.bin", RuntimeError("a bug somewhere below"), times=None)
    job = mem_job(store, [site.url("/src/")], site.url("/dst/"), recursive=True)
    summary = Runner(store, RunConfig(parallel=2, backoff_base=0.01, job_ids=[job])).run()
    assert summary.jobs == {job: "failed"}
    tasks = {t.rel: t for t in store.tasks(job, kinds=("file",))}
    assert tasks["src/b.bin"].state == "failed" and tasks["src/b.bin"].attempts == 1  # not retried
    assert tasks["src/b.bin"].error == "RuntimeError: a bug somewhere below"
    assert tasks["src/a.bin"].state == tasks["src/c.bin"].state == "done"
    assert site.get("/dst/src/a.bin") == b"a" * 1000 and site.get("/dst/src/c.bin") == b"c" * 1000
