"""SFTP destinations keep no partial files after a cancel or a source that cannot be read (issue
18, QA findings F2 and F3), against real servers on loopback (OpenSSH's sshd, and ``rclone serve
sftp``, a server that writes only sequentially): ``ferry queue cancel`` while ``ferry queue run``
is uploading the job leaves no ``.NAME.N.ferry-part`` on the server (before: it stayed for good,
nothing recording it any more), and a source file that cannot be read leaves no empty one beside
the files that were copied.

Both came from one cause: in a folder the job had just made, the SFTP name cache took the partial
name for absent (only the final name was noted), so the cleanup's stat and remove never asked the
server."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from faults.conftest import SftpSite
from helpers import FERRY, Ferry, describe, partials, stop, wait_until, write_random
from sftp.rclone_sftp import RcloneSftp

MiB = 1 << 20
SETPRIV = shutil.which("setpriv") or ""


@pytest.fixture
def rclone_site(tmp_path: Path) -> Iterator[tuple[Ferry, Path]]:
    """``rc:/`` on ``rclone serve sftp`` (its root folder), and ``ferry`` pointed at it."""
    try:
        server = RcloneSftp().start()
    except RuntimeError as exc:
        pytest.skip(f"rclone serve sftp unavailable: {exc}")
    try:
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        (home / ".ssh" / "config").write_text(server.ssh_config("rc"))
        (home / ".ssh" / "known_hosts").write_text(server.known_hosts())
        yield Ferry(home=tmp_path, cwd=tmp_path, extra_env={"HOME": str(home), "SSH_AUTH_SOCK": ""}), server.root
    finally:
        server.stop()


def _cancel_mid_flight(ferry: Ferry, url: str, remote: Path, src: Path, files: int, size: int = 24 * MiB) -> None:
    src.mkdir()
    for i in range(files):
        write_random(src / f"big{i}.bin", size)
    ferry.ok("queue", "add", "-r", src, url)
    proc = ferry.popen("queue", "run", "--bwlimit", "4M", "--parallel", "4")
    try:
        wait_until(lambda: any(p.stat().st_size >= 2 * MiB for p in partials(remote)), 60, 0.05, "a file mid-flight")
        res = ferry("queue", "cancel", "1")
        assert res.returncode == 0 and "Cancelled job 1" in res.stdout, describe(res)
        out, err = proc.communicate(timeout=60)  # the runner sees the cancel and stops the job
    finally:
        if proc.poll() is None:
            stop(proc, signal.SIGKILL)
    assert ferry.job(1)["state"] == "cancelled", (out, err)
    assert "cancelled" in err, (out, err)
    # before: .big0.bin.2.ferry-part (MiBs) stayed on the server after the run ended
    assert partials(remote) == [], (out, err)
    assert not any((remote / "src" / f"big{i}.bin").exists() for i in range(files))


def _unreadable_source(ferry: Ferry, url: str, remote: Path, src: Path) -> None:
    src.mkdir()
    (src / "ok.txt").write_text("ok\n")
    (src / "noread.txt").write_text("secret\n")  # a small file: the small-file writer
    (src / "noread.txt").chmod(0)
    write_random(src / "noread-big.bin", 3 * MiB)  # a bigger one: the streamed writer
    (src / "noread-big.bin").chmod(0)
    # The tests run as root, who reads any file: the ferry process drops that capability.
    drop = "-dac_override,-dac_read_search"
    cmd = [SETPRIV, f"--bounding-set={drop}", f"--inh-caps={drop}", *FERRY, "cp", "-r", str(src), url]
    res = subprocess.run(
        cmd, cwd=ferry.cwd, env=ferry.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120
    )
    shown = describe(res)
    assert res.returncode == 1, shown
    for name in ("noread.txt", "noread-big.bin"):
        assert f"failed: src/{name}: Permission denied" in res.stderr, shown
        assert not (remote / "src" / name).exists()
    assert (remote / "src" / "ok.txt").read_text() == "ok\n", shown
    assert partials(remote) == [], shown  # before: an empty .noread.txt.N.ferry-part stayed


@pytest.mark.parametrize(
    ("files", "size"),
    [(1, 24 * MiB), (3, 24 * MiB), (1, 72 * MiB)],
    ids=["one-file", "several-files", "parallel-streams"],  # 64 MiB and more go out as byte ranges
)
def test_cancel_during_a_live_queue_run_removes_the_sftp_partials(
    sftp_site: SftpSite, tmp_path: Path, files: int, size: int
) -> None:
    _cancel_mid_flight(sftp_site.ferry, sftp_site.url(), sftp_site.remote, tmp_path / "src", files, size)


def test_cancel_during_a_live_queue_run_removes_the_partial_on_rclone_serve_sftp(
    rclone_site: tuple[Ferry, Path], tmp_path: Path
) -> None:
    ferry, root = rclone_site
    _cancel_mid_flight(ferry, "rc:/", root, tmp_path / "src", 1)


def test_cancel_again_cleans_up_after_a_runner_killed_before_its_cleanup(sftp_site: SftpSite, tmp_path: Path) -> None:
    """The cancel reaches a live runner (so the cancel leaves the cleanup to it), and the runner is
    killed before it acts: the job is cancelled, its file still 'running' with its partial on the
    server. Cancelling it again does the cleanup (before: "already cancelled", the partial stayed,
    and after 'ferry queue clear' nothing recorded it)."""
    site, ferry = sftp_site, sftp_site.ferry
    write_random(tmp_path / "big.bin", 24 * MiB)
    ferry.ok("queue", "add", tmp_path / "big.bin", site.url())
    proc = ferry.popen("queue", "run", "--bwlimit", "4M")
    try:
        wait_until(lambda: any(p.stat().st_size >= 2 * MiB for p in partials(site.remote)), 60, 0.05, "a partial")
        proc.send_signal(signal.SIGSTOP)  # alive (its pid and heartbeat say so) but acting on nothing
        res = ferry("queue", "cancel", "1")
        assert res.returncode == 0 and "Cancelled job 1" in res.stdout, describe(res)
    finally:
        stop(proc, signal.SIGKILL)
    assert ferry.job(1)["state"] == "cancelled"
    assert partials(site.remote) != []  # the runner never did its cleanup
    res = ferry("queue", "cancel", "1")
    assert res.returncode == 0 and "Cancelled job 1" in res.stdout, describe(res)
    assert partials(site.remote) == [] and not (site.remote / "big.bin").exists()
    res = ferry("queue", "cancel", "1")  # nothing left to do: said so, as for any cancelled job
    assert res.returncode == 1 and "already cancelled" in res.stderr, describe(res)
    ferry.ok("queue", "clear", "1")


@pytest.mark.skipif(not SETPRIV, reason="setpriv (util-linux) is needed to drop root's read-anything capability")
def test_an_unreadable_source_leaves_no_empty_sftp_partial(sftp_site: SftpSite, tmp_path: Path) -> None:
    _unreadable_source(sftp_site.ferry, sftp_site.url(), sftp_site.remote, tmp_path / "src")


@pytest.mark.skipif(not SETPRIV, reason="setpriv (util-linux) is needed to drop root's read-anything capability")
def test_an_unreadable_source_leaves_no_empty_partial_on_rclone_serve_sftp(
    rclone_site: tuple[Ferry, Path], tmp_path: Path
) -> None:
    ferry, root = rclone_site
    _unreadable_source(ferry, "rc:/", root, tmp_path / "src")
