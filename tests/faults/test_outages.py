"""Overnight outages (issue 18): the network goes down, a server restarts, and the queue waits
it out within the job's patience, reconnects and finishes verified; each outage is longer than
Ferry's few quick retries (at most 1+2+4+8 s), so only the patience carries the job through."""

from __future__ import annotations

import os
from pathlib import Path

from faults.conftest import S3Site, SftpSite
from helpers import describe, file_digests, partials, result_event, write_random

MiB = 1 << 20
OUTAGE = 16.0  # longer than five quick attempts can last (their delays add up to 15 s at most)


def make_src(root: Path, big: int) -> dict[str, str]:
    write_random(root / "big.bin", big)
    for i in range(3):
        (root / f"s{i}.dat").write_bytes(os.urandom(5000 + i))
    return file_digests(root)


def test_sftp_network_down_mid_file_is_waited_out_with_the_jobs_patience(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    want = make_src(tmp_path / "src", 16 * MiB)
    ferry.ok("queue", "add", "-r", "--patience", "40s", tmp_path / "src", site.url())
    assert ferry.jobs()[0]["options"]["patience"] == 40
    site.proxy.after(4 * MiB, lambda: site.proxy.down(OUTAGE))
    res = ferry("queue", "run", "--json", "--bwlimit", "8M", timeout=120)
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {"1": "done"}
    assert site.proxy.cuts == 1 and site.proxy.refusals == 1  # the outage really happened ...
    assert site.proxy.connections >= 2  # ... and Ferry connected again after it
    assert file_digests(site.remote / "src") == want
    assert not partials(site.remote)
    (job,) = ferry.jobs()
    assert job["files_done"] == 4 and job["files_failed"] == 0


def test_sftp_server_down_when_the_job_starts_is_waited_for(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    want = make_src(tmp_path / "src", 1 * MiB)
    ferry.ok("queue", "add", "-r", tmp_path / "src", site.url())
    site.proxy.refuse(6)  # restarting: nothing answers on its port for a while
    res = ferry("queue", "run", "--json", "--patience", "30s", timeout=120)
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {"1": "done"}
    assert file_digests(site.remote / "src") == want


def test_s3_network_down_mid_upload_is_waited_out_by_queue_runs_default_patience(
    s3_site: S3Site, tmp_path: Path
) -> None:
    site, ferry = s3_site, s3_site.ferry
    # botocore's own retries off (a setting users have too), so the outage outlasts every quick
    # retry and only the queue's patience can carry the job through it.
    ferry.extra_env["FERRY_S3_MAX_ATTEMPTS"] = "1"
    want = make_src(tmp_path / "src", 12 * MiB)
    ferry.ok("queue", "add", "-r", tmp_path / "src", site.url("in/"))
    site.proxy.after(3 * MiB, lambda: site.proxy.down(OUTAGE))
    res = ferry("queue", "run", "--json", "--bwlimit", "6M", timeout=150)  # no --patience: an hour
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {"1": "done"}
    assert site.proxy.cuts == 1 and site.proxy.refusals == 1
    back = tmp_path / "back"
    site.ferry.ok("cp", "-r", site.url("in/src"), f"{back}/")
    assert file_digests(back / "src") == want


def test_patience_that_runs_out_fails_the_file_and_the_run(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    make_src(tmp_path / "src", 8 * MiB)
    ferry.ok("queue", "add", "-r", "--patience", "2s", tmp_path / "src", site.url())
    site.proxy.after(2 * MiB, lambda: site.proxy.down(60))
    res = ferry("queue", "run", "--json", "--bwlimit", "8M", timeout=120)
    assert res.returncode == 1, describe(res)
    assert result_event(res.stdout)["jobs"] == {"1": "failed"}
    (job,) = ferry.jobs()
    assert job["state"] == "failed" and job["files_failed"] >= 1


def test_s3_503_storm_mid_upload_is_waited_out(s3_site: S3Site, tmp_path: Path) -> None:
    site, ferry = s3_site, s3_site.ferry
    ferry.extra_env["FERRY_S3_MAX_ATTEMPTS"] = "1"  # as above: only the queue's patience can help
    want = make_src(tmp_path / "src", 12 * MiB)
    ferry.ok("queue", "add", "-r", "--patience", "1m", tmp_path / "src", site.url("in/"))
    site.proxy.after(3 * MiB, lambda: site.proxy.storm(OUTAGE))
    res = ferry("queue", "run", "--json", "--bwlimit", "6M", timeout=150)
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {"1": "done"}
    assert site.proxy.storm_answers >= 5  # every quick retry met the storm
    back = tmp_path / "back"
    site.ferry.ok("cp", "-r", site.url("in/src"), f"{back}/")
    assert file_digests(back / "src") == want
