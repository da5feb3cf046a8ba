"""A paused upload to an SFTP server records the bytes a resume keeps (issue 20, "a paused job
shows the bytes already in its partial files"). The QA pass saw a paused row claim 210 MiB over a
208 MiB partial file: the count was of bytes handed on, not written. And a big file goes up in
parallel streams, which may leave holes near the partial's end, so the writer resumes below them
(up to 64 MiB): before this change the row said 104 MiB where a resume kept 40."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from ferry.backends.registry import BackendPool
from ferry.backends.sftp.parallel_write import safe_resume_offset
from ferry.transfers import control, jobs
from ferry.transfers.options import JobOptions
from ferry.transfers.scheduler import PARTIAL_BYTES_KEY, RunConfig, Runner
from ferry.transfers.store import Store
from sftp.test_cli_sftp import url, user_home
from sshd import SshServer

MIB = 1 << 20


def test_a_paused_upload_records_what_its_partial_file_holds(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(user_home(sshd, tmp_path)))
    monkeypatch.setenv("SSH_AUTH_SOCK", "")
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(160 * MIB))  # big enough for parallel streams
    remote = sshd.mkdir()
    store = Store(tmp_path / "q.db")
    pool = BackendPool()
    try:
        options = JobOptions(bwlimit=32 * MIB)  # 5 s: paused long before the end
        prepared = jobs.prepare([str(src)], url(sshd, f"{remote}/"), options, pool)
        job = jobs.create(store, prepared, options)
        runner = Runner(store, RunConfig(job_ids=[job]), pool=pool)
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()

        def partial() -> Path | None:
            found = [p for p in remote.iterdir() if p.name.endswith(".ferry-part")]
            return found[0] if found else None

        deadline = time.monotonic() + 60
        while (p := partial()) is None or p.stat().st_size < 90 * MIB:
            assert time.monotonic() < deadline, "the upload never got going"
            time.sleep(0.05)
        control.pause(store, [job])
        thread.join(60)
        assert not thread.is_alive()
        assert store.job(job).state == "paused"
        held = partial()
        assert held is not None
        size = held.stat().st_size
        recorded = store.job_value(job, PARTIAL_BYTES_KEY)
        # Parallel streams may leave holes near the partial's end, so a resume starts below them:
        # what the paused job really keeps is that point, not the bytes handed on nor the size.
        keeps = safe_resume_offset(size)
        assert recorded is not None and int(recorded) == keeps, (recorded, keeps, size)
        assert 0 < keeps < 160 * MIB
        # ... and the resume sends exactly the rest.
        control.resume(store, [job])
        Runner(store, RunConfig(job_ids=[job]), pool=pool).run()
        assert store.job(job).state == "done"
        assert (remote / "big.bin").read_bytes() == src.read_bytes()
    finally:
        store.close()
        pool.close()
