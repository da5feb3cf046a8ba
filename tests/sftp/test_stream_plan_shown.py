"""How a big file moved (TCP connections x streams, and why: ``lanes.StreamPlan``) is recorded
with its job and shown by ``ferry queue show`` (issue 21: the tuner's choices are visible). On
loopback the plan is one connection; through a long link ``test_lanes.py`` checks the plan."""

from __future__ import annotations

import io
import os
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from ferry.backends.registry import BackendPool
from ferry.backends.sftp import limits
from ferry.cli import cmd_queue
from ferry.transfers import jobs, scheduler
from ferry.transfers.options import JobOptions
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from ferry.transfers.tuning import STREAMS_KEY
from sftp.test_cli_sftp import url, user_home
from sshd import SshServer

MIB = 1 << 20


def test_a_big_files_connections_and_streams_are_recorded_and_shown(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(user_home(sshd, tmp_path)))
    monkeypatch.setenv("SSH_AUTH_SOCK", "")
    monkeypatch.setattr(limits, "PARALLEL_MIN", 8 * MIB)  # 8 MiB counts as big here
    monkeypatch.setattr(scheduler, "STREAM_PLAN_MIN", 8 * MIB)
    remote = sshd.mkdir()
    (remote / "big.bin").write_bytes(os.urandom(12 * MIB))
    (remote / "small.txt").write_bytes(b"x" * 100)
    sshd.chown(remote)
    store = Store(tmp_path / "q.db")
    pool = BackendPool()
    try:
        options = JobOptions(recursive=True)
        prepared = jobs.prepare([url(sshd, f"{remote}/")], str(tmp_path / "back") + "/", options, pool)
        job = jobs.create(store, prepared, options)
        Runner(store, RunConfig(job_ids=[job], parallel=16, auto_parallel=True), pool=pool).run()
        assert store.job(job).state == "done"
        said = store.job_value(job, STREAMS_KEY)
        assert said is not None and said.startswith("1 TCP connection x "), said  # loopback: one
        out = io.StringIO()
        with redirect_stdout(out):
            cmd_queue._print_job(store, store.job(job), cmd_queue._job_dict(store, store.job(job)))
        assert f"  streams:  big files: {said}" in out.getvalue(), out.getvalue()
    finally:
        store.close()
        pool.close()
