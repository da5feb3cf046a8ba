"""``ferry watch`` and ``Shipper`` onto a real OpenSSH server on 127.0.0.1 (tests/sshd.py)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Ferry, file_digests, stop
from sftp.conftest import sshd  # noqa: F401  (the run's sshd fixture)
from sshd import SshServer
from watch.conftest import start_writer, wait_for_event, writer_result

ALIAS = "ferry-watch"


@pytest.fixture
def remote(sshd: SshServer, tmp_path: Path) -> Iterator[tuple[Path, Path]]:  # noqa: F811
    """(ssh_config for ``ALIAS``, an empty folder on the server)."""
    config = sshd.ssh_config(tmp_path / "ssh_config", ALIAS)
    yield config, sshd.mkdir("watch-")


def test_watch_ships_to_sftp_and_deletes_only_verified(ferry: Ferry, tmp_path: Path, remote: tuple[Path, Path]) -> None:
    config, folder = remote
    ferry.extra_env["FERRY_SSH_CONFIG"] = str(config)
    src = tmp_path / "out"
    src.mkdir()
    marker = src / "DONE"
    dest = f"sftp://{ALIAS}{folder}/run42"
    watch = ferry.popen(
        "watch",
        src,
        dest,
        "-r",
        "--pattern",
        "*.h5",
        "--settle",
        "2s",
        "--until",
        marker,
        "--delete-after-verify",
        "--json",
    )
    try:
        wait_for_event(watch, "watching")
        expect = writer_result(start_writer("mixed", src, done=marker))
        out, err = watch.communicate(timeout=120)
    finally:
        if watch.poll() is None:
            stop(watch, signal.SIGKILL)
    assert watch.returncode == 0, f"{out}\n{err}"
    assert file_digests(folder / "run42") == expect
    # Verified on the server, so deleted here; what did not match the pattern stays.
    assert sorted(p.name for p in src.rglob("*") if p.is_file()) == ["DONE", "notes.txt"]


def test_shipper_to_sftp(tmp_path: Path, remote: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from ferry.api import Shipper
    from ferry.transfers.store import Store

    config, folder = remote
    monkeypatch.setenv("FERRY_SSH_CONFIG", str(config))
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(tmp_path / "config"))
    store = Store(tmp_path / "queue.db")
    outs = []
    with Shipper(f"sftp://{ALIAS}{folder}/run7", store=store) as s:
        for i in range(3):
            p = tmp_path / f"o{i}.h5"
            p.write_bytes(bytes([i]) * 300_000)
            s.ship(p)
            outs.append(p)
    for p in outs:
        assert (folder / "run7" / p.name).read_bytes() == p.read_bytes()
    res = s.status()
    assert res["state"] == "done" and res["files_done"] == 3, res


def test_watch_a_folder_on_the_server_by_polling(ferry: Ferry, tmp_path: Path, remote: tuple[Path, Path]) -> None:
    """A remote source has no inotify: it is listed every so often; deletion re-reads it to check."""
    from helpers import wait_until

    config, folder = remote
    ferry.extra_env["FERRY_SSH_CONFIG"] = str(config)
    dst = tmp_path / "here"
    marker = tmp_path / "STOP"
    watch = ferry.popen(
        "watch", f"sftp://{ALIAS}{folder}", dst, "--settle", "1s", "--until", marker, "--delete-after-verify", "--json"
    )
    try:
        wait_for_event(watch, "watching")
        data = b"remote output " * 5000
        (folder / "r1.dat").write_bytes(data)
        wait_until(lambda: (dst / "r1.dat").exists(), timeout=60, what="r1.dat shipped from the server")
        marker.touch()
        out, err = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            stop(watch, signal.SIGKILL)
    assert watch.returncode == 0, f"{out}\n{err}"
    assert (dst / "r1.dat").read_bytes() == data
    assert not (folder / "r1.dat").exists()
