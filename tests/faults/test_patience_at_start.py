"""A server that is restarting when a copy starts (issue 18, QA F4): the checks made before a job
is queued (does the destination exist, may it be written) meet a refused connection. That is no
bad input: with ``--patience`` it is waited out with the queue's backoff, saying so; without, the
command fails as a failed transfer does (exit 1), not as a usage error (exit 2). And while
``ferry queue run`` waits for such a server, it says it waits for the server, not for a window."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from faults.conftest import SftpSite
from helpers import describe, file_digests, result_event

REFUSED = 12.0  # seconds the server's port refuses connections (sshd restarting)


def make_src(root: Path) -> dict[str, str]:
    root.mkdir()
    for i in range(2):
        (root / f"f{i}.dat").write_bytes(os.urandom(3000 + i))
    return file_digests(root)


def test_cp_with_patience_waits_for_a_restarting_server_before_queueing(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    want = make_src(tmp_path / "src")
    site.proxy.refuse(REFUSED)
    started = time.monotonic()
    res = ferry("cp", "-r", "--patience", "60s", tmp_path / "src", site.url("dst/"), timeout=120)
    took = time.monotonic() - started
    assert res.returncode == 0, describe(res)
    assert took >= REFUSED - 1, f"{took:.1f}s: the copy cannot have waited for the server"
    assert site.proxy.refusals == 1
    assert "waiting for the server: Cannot connect to" in res.stderr, describe(res)
    assert "next try (attempt 2) at" in res.stderr
    assert file_digests(site.remote / "dst" / "src") == want
    (job,) = ferry.jobs()
    assert job["state"] == "done" and job["files_done"] == 2


def test_cp_json_with_patience_says_it_waits_as_an_event(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    make_src(tmp_path / "src")
    site.proxy.refuse(6)
    res = ferry("cp", "-r", "--json", "--patience", "40s", tmp_path / "src", site.url("dst/"), timeout=120)
    assert res.returncode == 0, describe(res)
    events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    waits = [e for e in events if e["event"] == "waiting"]
    assert waits and waits[0]["reason"] == "server" and waits[0]["error_kind"] == "transient", events[:3]
    assert waits[0]["attempt"] == 2 and waits[0]["next_try"]
    assert result_event(res.stdout)["state"] == "done"


def test_cp_without_patience_to_a_refusing_server_is_a_failed_transfer_not_bad_input(
    sftp_site: SftpSite, tmp_path: Path
) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    make_src(tmp_path / "src")
    site.proxy.refuse(30)
    res = ferry("cp", "-r", tmp_path / "src", site.url("dst/"), timeout=60)
    assert res.returncode == 1, describe(res)  # EXIT_FAILED (README): not 2, the request was fine
    assert "Cannot connect to" in res.stderr and "Cannot write to" not in res.stderr, describe(res)
    assert not ferry.jobs()  # nothing was queued


def test_queue_add_with_patience_waits_for_the_server_then_queues(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    make_src(tmp_path / "src")
    site.proxy.refuse(8)
    started = time.monotonic()
    res = ferry("queue", "add", "-r", "--patience", "40s", tmp_path / "src", site.url("dst/"), timeout=120)
    assert res.returncode == 0, describe(res)
    assert time.monotonic() - started >= 7
    assert "waiting for the server" in res.stderr
    (job,) = ferry.jobs()
    assert job["state"] == "queued"


def test_queue_run_says_it_waits_for_the_server_not_for_a_window(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    want = make_src(tmp_path / "src")
    ferry.ok("queue", "add", "-r", "--patience", "60s", tmp_path / "src", site.url("dst/"))
    site.proxy.refuse(REFUSED)
    res = ferry("queue", "run", timeout=120)
    assert res.returncode == 0, describe(res)
    assert site.proxy.refusals == 1
    assert "time window" not in res.stderr and "start time" not in res.stderr, describe(res)
    assert "waiting for the server: job 1 could not start: Cannot connect to" in res.stderr, describe(res)
    assert "(until " in res.stderr  # the time of the next try
    assert file_digests(site.remote / "dst" / "src") == want
