"""The contract between ``ferry/backends/sftp/paramiko_adapter.py`` and paramiko.

The adapter is the one place where Ferry uses paramiko's internals: private methods of the SFTP
client, the packetizer's name-mangled state, attributes paramiko does not document. This checks,
against the real sshd, that the installed paramiko is one the adapter was checked against (and
the one ``pyproject.toml`` allows), that every name in ``RELIED_ON`` is where the adapter looks
for it, and that each part does what the adapter expects of it: with the fast path on, and with
``FERRY_SSH_FASTPATH=0``, which must leave nothing of the fast path running.

Run it first when paramiko's pin is to be widened.
"""

from __future__ import annotations

import hashlib
import os
import threading
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import paramiko
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import ferry.backends.sftp as sftp_mod
from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.backends.sftp.protocol import listdir, setstat_then, wire
from sftp.conformance_site import sftp_backend
from sshd import SshServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["fast", "off"])
def backend(
    request: pytest.FixtureRequest, sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """A backend on a fresh connection, with the fast path on, or off (``FERRY_SSH_FASTPATH=0``)."""
    sftp_mod.close_all()
    if request.param == "off":
        monkeypatch.setenv(adapter.ENV, "0")
    else:
        monkeypatch.delenv(adapter.ENV, raising=False)
    b = sftp_backend(sshd, sshd.ssh_config(tmp_path / "ssh_config", "adapter"), "adapter")
    yield b
    sftp_mod.close_all()


def test_installed_paramiko_is_one_the_adapter_was_checked_against() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = [Requirement(d) for d in project["dependencies"] if Requirement(d).name == "paramiko"]
    assert len(pins) == 1 and pins[0].specifier == SpecifierSet(adapter.PARAMIKO), (
        "pyproject.toml's paramiko pin and paramiko_adapter.PARAMIKO must be the same range"
    )
    assert paramiko.__version__ in SpecifierSet(adapter.PARAMIKO), (
        f"paramiko {paramiko.__version__} is not one the adapter was checked against ({adapter.PARAMIKO})"
    )


def test_sftp_numbers_are_paramikos() -> None:
    import paramiko.sftp as psftp

    for name in ("OPEN", "CLOSE", "READ", "WRITE", "FSTAT", "SETSTAT", "OPENDIR", "READDIR", "STAT", "RENAME"):
        assert getattr(adapter, f"CMD_{name}") == getattr(psftp, f"CMD_{name}"), name
    for name in ("STATUS", "HANDLE", "DATA", "NAME", "ATTRS", "EXTENDED"):
        assert getattr(adapter, f"CMD_{name}") == getattr(psftp, f"CMD_{name}"), name
    for name in ("READ", "WRITE", "CREATE", "TRUNC"):
        assert getattr(adapter, f"FLAG_{name}") == getattr(psftp, f"SFTP_FLAG_{name}"), name


def test_every_internal_the_adapter_relies_on_exists(backend: Any, sshd: SshServer) -> None:
    from paramiko.agent import AgentSSH

    folder = sshd.mkdir()
    transport = backend._host.transport()
    with backend._host.pool.sftp() as client, client.open(wire(str(folder / "f")), "wb") as f:
        live = {
            "SFTPClient": client,
            "SFTPFile": f,
            "SFTPAttributes": paramiko.SFTPAttributes,
            "AgentSSH": AgentSSH(),
            "Channel": client.sock,
            "Transport": transport,
            "Packetizer": transport.packetizer,
            "Message": paramiko.Message(),
        }
        assert set(live) == set(adapter.RELIED_ON), "a class in RELIED_ON needs a live object here"
        missing = [
            f"{cls}.{name}"
            for cls, names in adapter.RELIED_ON.items()
            for name in names
            if not hasattr(live[cls], name)
        ]
    assert not missing, f"paramiko {paramiko.__version__} lacks what paramiko_adapter uses: {missing}"


def test_sftp_requests_round_trip(backend: Any, sshd: SshServer) -> None:
    """Every request helper against sshd's sftp-server: OPEN, WRITEs (the fast path's or
    paramiko's), READ replies into place, FSTAT, an SFTPFile on Ferry's own handle, CLOSE by
    request, SETSTAT with RENAME, a listing with a name that is not UTF-8, and error statuses."""
    folder = sshd.mkdir()
    path = str(folder / "a.bin")
    data = os.urandom(700_001)
    with backend._host.pool.sftp() as client:
        step = backend._host.request_size
        flags = adapter.FLAG_READ | adapter.FLAG_WRITE | adapter.FLAG_CREATE | adapter.FLAG_TRUNC
        t, msg = adapter.request(client, adapter.CMD_OPEN, wire(path), flags, adapter.no_attributes())
        assert t == adapter.CMD_HANDLE
        handle = msg.get_binary()
        view = memoryview(data)
        writes = [adapter.send_write(client, handle, o, view[o : o + step]) for o in range(0, len(data), step)]
        for num in writes:
            assert adapter.reply(client, num)[0] == adapter.CMD_STATUS
        # READ replies: straight from the channel's ChunkPipe where there is one (the fast path,
        # an OpenSSH server answering in order), through paramiko's reply handling otherwise.
        pipe = adapter.pipe_of(client)
        assert (pipe is not None) == adapter.enabled()
        back = bytearray(len(data))
        reads = [
            (adapter.send(client, adapter.CMD_READ, handle, adapter.offset(o), step), o)
            for o in range(0, len(data), step)
        ]
        for num, o in reads:
            target = memoryview(back)[o : o + step]
            got = adapter.reply_into(client, pipe, num, target) if pipe else adapter.reply_copied(client, num, target)
            assert got == min(step, len(data) - o)
        assert bytes(back) == data
        num = adapter.send(client, adapter.CMD_READ, handle, adapter.offset(len(data)), step)
        if pipe is not None:
            assert adapter.reply_into(client, pipe, num, memoryview(bytearray(step))) == 0  # end of file
        else:
            with pytest.raises(EOFError):  # paramiko's way of saying it
                adapter.reply_copied(client, num, memoryview(bytearray(step)))
        t, msg = adapter.reply(client, adapter.send(client, adapter.CMD_FSTAT, handle))
        assert t == adapter.CMD_ATTRS and adapter.attributes(msg).st_size == len(data)
        f = adapter.file_on(client, handle, "r+b", 1 << 20)
        adapter.set_request_size(f, 32 << 10)
        assert adapter.handle_of(f) == handle and f.read(100_000) == data[:100_000]
        close = adapter.send(client, adapter.CMD_CLOSE, handle)
        adapter.closed_by_request(f)
        f.close()  # sends nothing more: its CLOSE went by request
        assert adapter.reply(client, close)[0] == adapter.CMD_STATUS
        when = datetime(2020, 5, 17, 12, 0, tzinfo=UTC)
        setstat_then(client, wire(path), when, "rename", wire(str(folder / "b.bin")))
        with pytest.raises(FileNotFoundError):
            adapter.request(client, adapter.CMD_STAT, wire(path))
        with open(os.path.join(os.fsencode(folder), b"caf\xe9"), "wb"):  # Latin-1 on disk: not UTF-8
            pass
        odd = b"caf\xe9".decode("utf-8", "surrogateescape")
        names = sorted(a.filename for a in listdir(client, str(folder), depth=2))
    assert (folder / "b.bin").read_bytes() == data
    assert int((folder / "b.bin").stat().st_mtime) == int(when.timestamp())
    assert names == [".", "..", "b.bin", odd] or names == ["b.bin", odd]


def test_channel_data_both_ways_on_exec_channels(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """send_data (one SSH packet built per piece of payload on the fast path, Channel.sendall
    off it), and a ChunkPipe read exactly (install_pipe, recv_exact_into), through a rekey in the
    middle (every 1 MiB), which the fast path must follow as paramiko does."""
    folder = sshd.mkdir()
    packets: list[int] = []
    real = adapter._send_packet

    def counting(transport: Any, parts: Any, length: int) -> None:
        packets.append(length)
        real(transport, parts, length)

    monkeypatch.setattr(adapter, "_send_packet", counting)
    transport = backend._host.transport()
    transport.packetizer.REKEY_BYTES = 1 << 20  # this connection only
    data = os.urandom((5 << 20) + 77)
    view = memoryview(data)
    parts = [view[:1], view[1:300_001], view[300_001:]]
    rc, _out, err = backend._host.shell.run(f"cat > {folder}/c.bin".encode(), stdin=parts)
    assert rc == 0, err
    assert (folder / "c.bin").read_bytes() == data
    assert bool(packets) == adapter.enabled() and adapter.usable(transport) == adapter.enabled()
    assert bool(getattr(transport.packetizer, "_ferry_lean_reads", False)) == adapter.enabled()

    chan, generation = backend._host.pool.open_channel(lambda t: t.open_session(timeout=30))
    try:
        pipe = adapter.install_pipe(chan)
        assert (pipe is None) != adapter.enabled()
        chan.exec_command(f"cat {folder}/c.bin".encode())
        got = bytearray(len(data))
        if pipe is not None:
            adapter.recv_exact_into(chan, pipe, memoryview(got))
        else:
            got[:] = chan.makefile("rb").read()
        assert bytes(got) == data and chan.recv_exit_status() == 0
    finally:
        chan.close()
        backend._host.pool.release(generation)
    assert transport.is_active()


def test_sftp_channels_get_a_chunk_pipe_only_on_the_fast_path(backend: Any) -> None:
    with backend._host.pool.sftp() as client:
        assert isinstance(client.sock.in_buffer, adapter.ChunkPipe) == adapter.enabled()


def test_the_kill_switch_sends_writes_through_paramikos_own_request(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = sshd.mkdir()
    data = os.urandom(3 << 20)
    with backend._host.pool.sftp() as client:
        sent: list[int] = []
        real = client._async_request

        def spy(*args: Any) -> int:
            sent.append(args[1])
            return real(*args)  # type: ignore[no-any-return]

        monkeypatch.setattr(client, "_async_request", spy)
    w = backend.open_write(str(folder / "w.bin"), size=len(data), token="1", readback="sha256")
    for o in range(0, len(data), 1 << 20):
        w.write(data[o : o + (1 << 20)])
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    assert (folder / "w.bin").read_bytes() == data
    assert (adapter.CMD_WRITE in sent) != adapter.enabled()


def test_agent_keys_from_a_given_socket() -> None:
    """AgentSSH._connect takes a socket: an agent that answers with no keys gives none."""
    import socket
    import struct

    server, client = socket.socketpair()

    def agent() -> None:  # SSH2_AGENTC_REQUEST_IDENTITIES (11) -> SSH2_AGENT_IDENTITIES_ANSWER (12), no keys
        length = struct.unpack(">I", server.recv(4))[0]
        assert server.recv(length) == b"\x0b"
        server.sendall(struct.pack(">IBI", 5, 12, 0))

    t = threading.Thread(target=agent, daemon=True)
    t.start()
    try:
        assert adapter.agent_keys(client) == []
    finally:
        t.join(5)
        server.close()
        client.close()


def test_the_rekey_guard_holds_the_transport_threads_messages_during_a_key_exchange() -> None:
    """What the guard does with paramiko's Transport (a Thread with ``_send_user_message`` and the
    ``clear_to_send`` event): from the transport's own thread while keys are being exchanged, a
    message is handed to a helper that sends it once they are in place, in order; every other
    thread sends as paramiko makes it."""
    sent: list[str] = []
    clear = threading.Event()

    class FakeTransport(threading.Thread):
        def __init__(self) -> None:
            super().__init__(daemon=True)
            self.clear_to_send = clear

        def _send_user_message(self, message: str) -> None:
            clear.wait(5)
            sent.append(message)

        def run(self) -> None:
            self._send_user_message("close-1")  # returns at once: held, not waited for
            self._send_user_message("close-2")
            sent.append("transport thread went on")

    fake = FakeTransport()
    adapter.guard_rekey(fake)
    fake.start()
    fake.join(5)
    assert sent == ["transport thread went on"]
    clear.set()
    for _ in range(100):
        if len(sent) == 3:
            break
        threading.Event().wait(0.05)
    assert sent == ["transport thread went on", "close-1", "close-2"]
    fake._send_user_message("from another thread")
    assert sent[-1] == "from another thread"


def test_the_rekey_guard_is_on_every_transport(backend: Any) -> None:
    transport = backend._host.transport()
    assert transport._send_user_message.__qualname__.endswith("guard_rekey.<locals>.send_user_message")
    assert isinstance(transport.clear_to_send, threading.Event)
