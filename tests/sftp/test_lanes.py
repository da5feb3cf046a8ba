"""A big file on a long link goes over several TCP connections (``backends/sftp/lanes.py``), as
many as the measured round-trip time and the TCP window ask for; on a LAN over one.

The real sshd sits behind the WAN bench's link emulator (``benchmarks/linkemu.py``: RTT, a TCP
window per connection), which counts the TCP connections made through it: the count is what
the client really opened, not what it says."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ferry.backends.sftp as sftp_mod
import ferry.backends.sftp.parallel_read as pr
import ferry.backends.sftp.parallel_write as pw
from ferry.backends.sftp import lanes, limits
from ferry.backends.sftp.lanes import StreamPlan, Why, plan_for
from sftp.conformance_site import sftp_backend
from sshd import SshServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

# a benchmark script, outside mypy's files (typed as Any here; see tests/test_linkemu.py)
import linkemu  # type: ignore[import-not-found]

MiB = 1 << 20
RTT = 0.050
WINDOW = 512 << 10  # per connection: one connection carries at most 10.5 MB/s at 50 ms
SIZE = 24 * MiB + 777


# ---- the choice, from RTT, window and size ----------------------------------------------------


def test_connections_follow_the_bandwidth_delay_product() -> None:
    six = 6 * MiB
    # 6 MiB / 50 ms = 126 MB/s per connection: two carry LANE_RATE (250 MB/s)
    assert plan_for(256 * MiB, 0.050, six, 2, None, True) == StreamPlan(2, 2, 0.050, six, Why.BDP)
    # 6 MiB / 150 ms = 42 MB/s: six would, at most MAX_CONNECTIONS
    assert plan_for(256 * MiB, 0.150, six, 2, None, True).connections == limits.MAX_CONNECTIONS
    # loopback: one connection already carries it
    assert plan_for(2 << 30, 0.0002, six, 2, None, True) == StreamPlan(1, 2, 0.0002, six, Why.LAN)
    # 64 MiB at 150 ms: more connections would save less than a login's round trips
    assert plan_for(64 * MiB, 0.150, six, 2, None, True).why is Why.SHORT
    # a login that asked a person: never more than one
    assert plan_for(256 * MiB, 0.150, six, 2, None, False).why is Why.NO_LANES
    assert plan_for(256 * MiB, 0.150, six, 2, 3, True) == StreamPlan(3, 2, 0.150, six, Why.FIXED)
    text = StreamPlan(3, 2, 0.051, six, Why.BDP).text()
    assert text == "3 TCP connections x 2 streams (RTT 51 ms, 6 MiB window: window / RTT per connection)"


def test_a_bad_fixed_count_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from ferry.core.errors import UsageError

    monkeypatch.setenv(limits.CONNECTIONS_ENV, "9")
    with pytest.raises(UsageError, match="FERRY_SFTP_CONNECTIONS must be a whole number from 1 to 4, not '9'"):
        lanes.fixed_connections()


# ---- through the emulated link, against the real sshd ----------------------------------------


@pytest.fixture
def link(sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """(backend, emulator): an SFTP backend reaching ``sshd`` through a 50 ms link with a
    512 KiB TCP window per connection; files of 8 MiB and more count as big."""
    monkeypatch.setattr(limits, "PARALLEL_MIN", 8 * MiB)
    monkeypatch.setattr(limits, "REMOTE_WINDOW", WINDOW)  # the window Ferry assumes: the link's
    monkeypatch.setattr(pr, "BLOCK", 1 * MiB)
    monkeypatch.setattr(pw, "BLOCK", 1 * MiB)
    monkeypatch.delenv(limits.CONNECTIONS_ENV, raising=False)
    monkeypatch.delenv(limits.STREAMS_ENV, raising=False)
    emu = linkemu.LinkEmulator(RTT, 1e9, WINDOW).start()
    port = emu.add_route(("127.0.0.1", sshd.port))
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts.read_text().replace(f"]:{sshd.port} ", f"]:{port} "))
    block = sshd.ssh_config_block("lanes").replace(f"Port {sshd.port}\n", f"Port {port}\n")
    config = tmp_path / "ssh_config"
    config.write_text(block.replace(str(sshd.known_hosts), str(known)))
    config.chmod(0o600)
    backend = sftp_backend(sshd, config, "lanes")
    try:
        yield backend, emu
    finally:
        sftp_mod.close_all()
        emu.close()


def download(backend: Any, path: Path) -> bytes:
    r = backend.open_read(str(path))
    try:
        out = bytearray()
        buf = bytearray(1 << 20)
        while n := r.readinto(buf):
            out += buf[:n]
        return bytes(out)
    finally:
        r.close()


def test_a_big_download_on_a_long_link_goes_over_the_connections_the_bdp_asks_for(
    sshd: SshServer, link: tuple[Any, Any]
) -> None:
    backend, emu = link
    folder = sshd.mkdir()
    data = os.urandom(SIZE)
    (folder / "big.bin").write_bytes(data)
    sshd.chown(folder)
    assert download(backend, folder / "big.bin") == data  # logs in: one connection so far...
    plan = backend._host.last_plan
    assert plan is not None and plan.why is Why.BDP, plan
    assert 0.045 <= (plan.rtt or 0) <= 0.5, plan  # the measured RTT: never under the link's
    assert plan.window == WINDOW
    # 512 KiB / 50 ms = 10.5 MB/s per connection: LANE_RATE needs more than MAX_CONNECTIONS
    assert plan.connections == limits.MAX_CONNECTIONS
    assert emu.stats.connections == limits.MAX_CONNECTIONS  # ...and three more, really made
    # The next big files reuse them: no new login, and faster than one connection could be
    # (the quicker of two: load from other processes can only slow a run down).
    took = []
    for _ in range(2):
        start = time.perf_counter()
        assert download(backend, folder / "big.bin") == data
        took.append(time.perf_counter() - start)
    assert emu.stats.connections == limits.MAX_CONNECTIONS
    one_connection = SIZE / (WINDOW / RTT)  # 2.4 s: the least one connection could take
    assert min(took) < 0.75 * one_connection, (took, one_connection)


def test_a_big_upload_on_a_long_link_goes_over_several_connections_and_lands_exact(
    sshd: SshServer, link: tuple[Any, Any]
) -> None:
    backend, emu = link
    folder = sshd.mkdir()
    data = os.urandom(SIZE)
    w = backend.open_write(str(folder / "up.bin"), size=len(data), token="7", resume=False, readback="sha256")
    assert w._ranges is not None
    for at in range(0, len(data), (1 << 20) + 5):
        w.write(data[at : at + (1 << 20) + 5])
    assert w.finish() == hashlib.sha256(data).hexdigest()  # the server's hash of what landed
    w.commit(overwrite=False)
    assert (folder / "up.bin").read_bytes() == data
    plan = backend._host.last_plan
    assert plan is not None and plan.connections == limits.MAX_CONNECTIONS, plan
    assert emu.stats.connections == limits.MAX_CONNECTIONS


def test_a_login_that_asked_a_person_stays_one_connection(sshd: SshServer, link: tuple[Any, Any]) -> None:
    backend, emu = link
    folder = sshd.mkdir()
    data = os.urandom(SIZE)
    (folder / "big.bin").write_bytes(data)
    sshd.chown(folder)
    backend._host.transport()  # logged in by key...
    backend._host.connection.auth.key_only = None  # ...as if a code had been asked for
    assert download(backend, folder / "big.bin") == data
    plan = backend._host.last_plan
    assert plan is not None and plan.why is Why.NO_LANES and plan.connections == 1
    assert emu.stats.connections == 1  # nobody is asked for a second code


def test_a_server_that_leaves_the_rtt_probe_unanswered_gets_one_connection_without_a_stall(
    sshd: SshServer, link: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, emu = link
    folder = sshd.mkdir()
    data = os.urandom(SIZE)
    (folder / "big.bin").write_bytes(data)
    sshd.chown(folder)
    transport = backend._host.transport()
    never = threading.Event()
    asked = []

    def unanswered(*args: Any, **kwargs: Any) -> None:
        asked.append(args)
        never.wait()  # a server that never answers (paramiko waits for it without a timeout)

    monkeypatch.setattr(transport, "global_request", unanswered)
    monkeypatch.setattr(lanes, "RTT_WAIT", 0.3)
    done = threading.Event()

    def both() -> None:
        assert download(backend, folder / "big.bin") == data
        assert download(backend, folder / "big.bin") == data
        done.set()

    threading.Thread(target=both, daemon=True).start()
    finished = done.wait(30)  # two downloads at one connection's 10.5 MB/s: about 5 s
    never.set()
    assert finished, "the download waited for an answer that never comes"
    assert len(asked) == 1  # asked once per host, not once per file
    plan = backend._host.last_plan
    assert plan is not None and plan.why is Why.UNMEASURED and plan.connections == 1, plan
    assert emu.stats.connections == 1


def test_the_backend_says_how_its_last_big_file_moved(sshd: SshServer, link: tuple[Any, Any]) -> None:
    # What the scheduler records with the job (tuning.STREAMS_KEY) and queue show prints as
    # "streams:  big files: 4 TCP connections x 2 streams (RTT 51 ms, 0.5 MiB window: ...)".
    backend, _ = link
    assert backend.stream_plan() is None  # nothing big moved yet: nothing to say
    folder = sshd.mkdir()
    data = os.urandom(SIZE)
    (folder / "big.bin").write_bytes(data)
    sshd.chown(folder)
    assert download(backend, folder / "big.bin") == data
    said = backend.stream_plan()
    assert said is not None and said == backend._host.last_plan.text()
    assert said.startswith(f"{limits.MAX_CONNECTIONS} TCP connections x ") and "RTT " in said, said
