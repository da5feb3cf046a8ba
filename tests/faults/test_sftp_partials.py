"""SFTP destinations keep no partial files after a cancel or a source that cannot be read (issue
18, QA findings F2 and F3), against the real loopback OpenSSH sshd: ``ferry queue cancel`` while
``ferry queue run`` is uploading the job leaves no ``.NAME.N.ferry-part`` on the server (before:
it stayed for good, nothing recording it any more), and a source file that cannot be read leaves
no empty one beside the files that were copied."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from faults.conftest import SftpSite
from helpers import FERRY, describe, partials, stop, wait_until, write_random

MiB = 1 << 20


def _big_partial(remote: Path, at_least: int) -> bool:
    return any(p.stat().st_size >= at_least for p in partials(remote))


@pytest.mark.parametrize("files", [1, 3], ids=["one-file", "several-files"])
def test_cancel_during_a_live_queue_run_removes_the_sftp_partials(
    sftp_site: SftpSite, tmp_path: Path, files: int
) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    src = tmp_path / "src"
    src.mkdir()
    for i in range(files):
        write_random(src / f"big{i}.bin", 24 * MiB)
    ferry.ok("queue", "add", "-r", src, site.url())
    proc = ferry.popen("queue", "run", "--bwlimit", "4M", "--parallel", "4")
    try:
        wait_until(lambda: _big_partial(site.remote, 2 * MiB), 60, 0.05, "a file mid-flight")
        res = ferry("queue", "cancel", "1")
        assert res.returncode == 0 and "Cancelled job 1" in res.stdout, describe(res)
        out, err = proc.communicate(timeout=60)  # the runner sees the cancel and stops the job
    finally:
        if proc.poll() is None:
            stop(proc, signal.SIGKILL)
    assert ferry.job(1)["state"] == "cancelled", (out, err)
    assert "cancelled" in out + err, (out, err)
    # before: .big0.bin.2.ferry-part (MiBs) stayed on the server after the run ended
    assert partials(site.remote) == [], (out, err)
    assert not any((site.remote / "src" / f"big{i}.bin").exists() for i in range(files))


SETPRIV = shutil.which("setpriv") or ""


@pytest.mark.skipif(not SETPRIV, reason="setpriv (util-linux) is needed to drop root's read-anything capability")
def test_an_unreadable_source_leaves_no_empty_sftp_partial(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.txt").write_text("ok\n")
    (src / "noread.txt").write_text("secret\n")
    (src / "noread.txt").chmod(0)
    write_random(src / "noread-big.bin", 3 * MiB)  # a big file takes the streamed writer
    (src / "noread-big.bin").chmod(0)
    # The tests run as root, who reads any file: the ferry process drops that capability.
    drop = "-dac_override,-dac_read_search"
    cmd = [SETPRIV, f"--bounding-set={drop}", f"--inh-caps={drop}", *FERRY, "cp", "-r", str(src), site.url()]
    res = subprocess.run(
        cmd, cwd=ferry.cwd, env=ferry.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120
    )
    shown = describe(res)
    assert res.returncode == 1, shown
    assert "noread.txt" in res.stdout + res.stderr and "ermission denied" in res.stdout + res.stderr, shown
    assert (site.remote / "src" / "ok.txt").read_text() == "ok\n", shown
    assert not (site.remote / "src" / "noread.txt").exists()
    assert partials(site.remote) == [], shown  # before: an empty .noread.txt.N.ferry-part stayed
