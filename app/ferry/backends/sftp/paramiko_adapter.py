"""Every use of paramiko's internals, in this one module.

Ferry relies on parts of paramiko that are not its public API: for speed (measured in
docs/sftp.md) and for what paramiko's public calls cannot do (pipelined requests, names as the
server's exact bytes). They are all here and nowhere else in Ferry.
``tests/sftp/test_paramiko_adapter.py`` checks every one of them (:data:`RELIED_ON`) against a
real sshd, and ``pyproject.toml`` pins paramiko to the versions that test passed with
(:data:`PARAMIKO`). To allow a new paramiko: run that test with it, read what changed in its
``packet.py``, ``transport.py``, ``channel.py``, ``buffered_pipe.py``, ``sftp_client.py`` and
``sftp_file.py``, then widen both pins together.

Three parts:

* **SFTP requests** (always used). paramiko's ``SFTPClient`` keeps its request layer private
  (``_request``, ``_async_request``, ``_read_response``, ...) and its public calls wait for each
  reply in turn. Ferry pipelines requests (READDIR pages, FSTAT with the first READ, OPEN with
  STAT, read-back READs behind the WRITEs, SETSTAT with RENAME) and keeps names as the server's
  exact bytes, which ``listdir_iter`` does not: :func:`request`, :func:`send`, :func:`reply`,
  :func:`attributes` and the rest give those private calls names of their own.
* **The fast path** (``FERRY_SSH_FASTPATH=0`` turns all of it off, :func:`enabled`). Channel
  data sent and received with fewer copies, by rebuilding paramiko's packet layer for AES-GCM
  through the packetizer's name-mangled state (:func:`send_data`, :func:`lean_reads`,
  :class:`ChunkPipe`, :func:`reply_into`), and WRITE requests built straight into packets
  (:func:`send_write`). Off, paramiko's own code moves every byte: ``Channel.sendall``, its
  ``BufferedPipe``, ``Packetizer.read_message`` and ``_async_request`` for WRITEs. CI runs the
  conformance suite both ways (``.ci/run``).
* **The rekey guard** (always installed, :func:`guard_rekey`): paramiko issue #822.

About the fast path: paramiko moves every byte through several Python-level copies under the
GIL. Sending one 32 KiB SSH packet of channel data it builds a ``Message`` (a copy), takes its
bytes (a copy), pads it (two copies), slices off the length (a copy), encrypts, and joins
length and ciphertext (a copy). Receiving, each channel's ``BufferedPipe`` keeps an ``array``
that it slices and shifts on every read, so reading a 255 KiB SFTP reply out of it copies the
whole buffered tail again and again, and the SFTP layer concatenates the pieces and copies them
twice more. The fast path keeps the SSH protocol exactly as paramiko does it (same packets, same
sequence numbers, IV counter, rekey accounting and window handling) and only removes copies:

* :func:`send_data` sends channel data as CHANNEL_DATA packets whose plaintext is built with one
  join (header, the caller's buffers, padding) and encrypted with the transport's AES-GCM
  engine; used only while the outbound cipher is an AEAD one without compression, otherwise it
  falls back to ``Channel.sendall``.
* :class:`ChunkPipe` replaces a channel's inbound ``BufferedPipe``: fed bytes are kept as they
  are (a deque of chunks) and read out with :meth:`ChunkPipe.readinto`, straight into the
  caller's buffer (one copy), while ``read`` keeps paramiko's semantics for everything else.

The packetizer's state is reached through its (name-mangled) attributes; :func:`usable` checks
they exist, so a paramiko that renamed them simply gets the ordinary path.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
import time
import types
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PARAMIKO = ">=5.1,<5.2"  # the paramiko versions this module was checked against (pyproject.toml pins the same)
ENV = "FERRY_SSH_FASTPATH"  # "0": paramiko's own paths everywhere (a way out if a paramiko release breaks these)


def enabled() -> bool:
    """Whether the fast path may be used (``FERRY_SSH_FASTPATH=0`` turns it off everywhere)."""
    return os.environ.get(ENV, "1") != "0"


# ---- SFTP requests ----

# SFTP v3 message types and open flags (draft-ietf-secsh-filexfer-02), numbered as in paramiko.sftp.
CMD_OPEN, CMD_CLOSE, CMD_READ, CMD_WRITE = 3, 4, 5, 6
CMD_FSTAT, CMD_SETSTAT = 8, 9
CMD_OPENDIR, CMD_READDIR = 11, 12
CMD_STAT, CMD_RENAME = 17, 18
CMD_STATUS, CMD_HANDLE, CMD_DATA, CMD_NAME, CMD_ATTRS = 101, 102, 103, 104, 105
CMD_EXTENDED = 200
FLAG_READ, FLAG_WRITE, FLAG_CREATE, FLAG_TRUNC = 0x01, 0x02, 0x08, 0x10


CMD_EXTENDED_REPLY = 201
# SFTP v3 status codes (draft-ietf-secsh-filexfer-02 section 7).
FX_OK, FX_EOF, FX_NO_SUCH_FILE, FX_PERMISSION_DENIED, FX_FAILURE = 0, 1, 2, 3, 4
FX_NO_CONNECTION, FX_CONNECTION_LOST, FX_OP_UNSUPPORTED = 6, 7, 8


class StatusError(OSError):
    """An SFTP status reply that is an error other than "no such file" and "permission denied"
    (those stay paramiko's ``OSError`` with ``ENOENT``/``EACCES``): ``code`` is the ``FX_*``
    number the server sent. paramiko turns all of them into one ``IOError(text)``, so a full
    disk, a read-only folder and a server refusing a write looked alike (SFTP v3 sends
    ``FX_FAILURE`` for ENOSPC, EDQUOT and EROFS, OpenSSH's sftp-server too)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


def _convert_status(client: Any, msg: Any) -> None:
    """paramiko's ``SFTPClient._convert_status``, with :class:`StatusError` for the codes it
    folds into a bare ``IOError``."""
    code = msg.get_int()
    text = msg.get_text()
    if code == FX_OK:
        return
    if code == FX_EOF:
        raise EOFError(text)
    if code == FX_NO_SUCH_FILE:
        raise OSError(errno.ENOENT, text)
    if code == FX_PERMISSION_DENIED:
        raise OSError(errno.EACCES, text)
    raise StatusError(code, text)


@dataclass(frozen=True)
class StatVfs:
    """A ``statvfs@openssh.com`` reply (the fields of POSIX ``statvfs``)."""

    frsize: int
    blocks: int
    bavail: int
    flag: int

    @property
    def free(self) -> int:
        """Bytes the login user may still write."""
        return self.bavail * self.frsize

    @property
    def read_only(self) -> bool:
        return bool(self.flag & 0x1)  # SSH_FXE_STATVFS_ST_RDONLY


def statvfs(client: Any, path: bytes) -> StatVfs | None:
    """``statvfs@openssh.com`` of the file system holding ``path`` (paramiko has no call for
    it); None where the server does not offer the extension, cannot answer, or answers with a
    file system of no blocks (servers that fill the reply with zeros: not a full disk)."""
    try:
        t, msg = request(client, CMD_EXTENDED, "statvfs@openssh.com", path)
    except (OSError, EOFError):
        return None
    if t != CMD_EXTENDED_REPLY:
        return None
    _bsize, frsize, blocks, _bfree, bavail, _files, _ffree, _favail, _fsid, flag, _namemax = (
        msg.get_int64() for _ in range(11)
    )
    if blocks == 0 or frsize == 0:
        return None  # no file system has no blocks: a placeholder answer, as good as none
    return StatVfs(frsize, blocks, bavail, flag)


def request(client: Any, kind: int, *args: Any) -> tuple[int, Any]:
    """Send one request and wait for its reply: (message type, paramiko ``Message``). An error
    status raises as paramiko's own calls do (``OSError``; ``EOFError`` at the end)."""
    return client._request(kind, *args)  # type: ignore[no-any-return]


def send(client: Any, kind: int, *args: Any) -> int:
    """Send one request without waiting; its number, for :func:`reply`."""
    return client._async_request(type(None), kind, *args)  # type: ignore[no-any-return]


def reply(client: Any, num: int) -> tuple[int, Any]:
    """Wait for the reply to request ``num`` (replies to requests no one waits for any more
    are read and dropped on the way, as paramiko does); raises as :func:`request` does."""
    return client._read_response(num)  # type: ignore[no-any-return]


def next_message(client: Any) -> tuple[int, bytes]:
    """The next SFTP message on the channel, whichever request it answers: (type, body)."""
    return client._read_packet()  # type: ignore[no-any-return]


def raise_status(client: Any, msg: Any) -> None:
    """Raise what a STATUS message says (``EOFError`` at the end of a file or folder, an
    ``OSError`` for a failure); return if it says OK."""
    client._convert_status(msg)


def offset(n: int) -> Any:
    """``n`` as SFTP's 64-bit offsets go on the wire (paramiko writes a plain int as 32 bits)."""
    from paramiko.sftp import int64

    return int64(n)


def attributes(msg: Any, filename: str | None = None, longname: str | None = None) -> Any:
    """The ``SFTPAttributes`` encoded next in ``msg`` (an ATTRS reply, or a NAME reply's entry)."""
    from paramiko.sftp_attr import SFTPAttributes

    return SFTPAttributes._from_msg(msg, filename, longname)  # type: ignore[attr-defined]


def no_attributes() -> Any:
    """Empty ``SFTPAttributes`` (an OPEN's: the server's defaults)."""
    from paramiko.sftp_attr import SFTPAttributes

    return SFTPAttributes()


def file_on(client: Any, handle: bytes, mode: str, bufsize: int) -> Any:
    """A paramiko ``SFTPFile`` on a handle Ferry opened itself (its OPEN went out with :func:`send`)."""
    import paramiko

    return paramiko.SFTPFile(client, handle, mode, bufsize)


def handle_of(f: Any) -> bytes:
    """The server's handle of a paramiko ``SFTPFile``."""
    return f.handle  # type: ignore[no-any-return]


def closed_by_request(f: Any) -> None:
    """``f``'s CLOSE went out with :func:`send` (its reply is read, or skipped, with the others):
    paramiko must not send another when ``f`` goes."""
    f._closed = True


def set_request_size(f: Any, size: int) -> None:
    """Bytes per READ or WRITE that paramiko's own ``read``/``write`` on ``f`` ask for."""
    f.MAX_REQUEST_SIZE = size


def send_write(client: Any, handle: bytes, pos: int, data: memoryview) -> int:
    """Send one WRITE of ``data`` at ``pos``; its number, for :func:`reply`.

    On the fast path the data is copied once, into the plaintext of the SSH packets
    (:func:`send_data`): paramiko's own ``_async_request`` copies it four times before the
    channel sees it and then re-slices the rest of the message after every 32 KiB SSH packet it
    sends (a 255 KiB WRITE copied ~1 MB that way); profiled, building and sending messages was
    two thirds of the upload's Python time. The request is numbered as ``_async_request``
    numbers it, so :func:`reply` knows its answer."""
    if not enabled():
        return send(client, CMD_WRITE, handle, offset(pos), bytes(data))
    with client._lock:
        num: int = client.request_number
        client._expecting[num] = type(None)
        client.request_number = num + 1
    head = struct.pack(">IBII", 21 + len(handle) + len(data), CMD_WRITE, num, len(handle))  # length after itself
    # The data goes from the caller's buffer straight into the SSH packets' plaintext.
    send_data(client.sock, (head + handle + struct.pack(">QI", pos, len(data)), data))
    return num


def agent_keys(sock: socket.socket) -> list[Any]:
    """The keys of the SSH agent answering on ``sock`` (paramiko's ``Agent`` only finds the one
    ``SSH_AUTH_SOCK`` names; ``AgentSSH._connect`` is its only way to another socket)."""
    from paramiko.agent import AgentSSH

    agent = AgentSSH()
    agent._connect(sock)  # type: ignore[attr-defined]
    return list(agent.get_keys())


# ---- the fast path: the packet layer ----

_MSG_CHANNEL_DATA = 94
_MSG_CHANNEL_WINDOW_ADJUST = 93
_P = "_Packetizer__"
_NEEDED = (
    "write_lock",
    "block_engine_out",
    "aead_out",
    "iv_out",
    "sequence_number_out",
    "sent_bytes",
    "sent_packets",
    "need_rekey",
    "block_size_out",
    "compress_engine_out",
    "dump_packets",
    "socket",
)

Buffer = bytes | bytearray | memoryview
_pool = threading.local()  # random bytes for padding, taken 64 KiB at a time per thread


def _random_padding(n: int) -> bytes:
    """``os.urandom(n)`` for packet padding (4-19 bytes), without a system call per packet
    (profiled: one ``getrandom`` per 32 KiB packet was a tenth of the sender's time)."""
    buf: bytes = getattr(_pool, "buf", b"")
    at: int = getattr(_pool, "at", 0)
    if at + n > len(buf):
        buf, at = os.urandom(65536), 0
        _pool.buf = buf
    _pool.at = at + n
    return buf[at : at + n]


def usable(transport: Any) -> bool:
    """Whether this transport's packetizer has the state :func:`send_data` relies on, and sends
    with an AEAD cipher (AES-GCM: no separate MAC to compute)."""
    if not enabled():
        return False
    pk = getattr(transport, "packetizer", None)
    if pk is None or not all(hasattr(pk, _P + name) for name in _NEEDED):
        return False
    if not hasattr(pk, "_inc_iv_counter") or not hasattr(pk, "_trigger_rekey") or not hasattr(pk, "write_all"):
        return False
    return bool(getattr(pk, _P + "aead_out")) and getattr(pk, _P + "compress_engine_out") is None


class _Payload:
    """What ``Packetizer.send_message`` wants (``asbytes``) for the fallback path."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def asbytes(self) -> bytes:
        return self._data


def _clear_to_send(transport: Any) -> None:
    """Wait while keys are being renegotiated, as ``Transport._send_user_message`` does, and take
    ``clear_to_send_lock`` (the caller releases it)."""
    start = time.time()
    while True:
        transport.clear_to_send.wait(0.1)
        if not transport.active:
            raise EOFError("the SSH connection is closed")
        transport.clear_to_send_lock.acquire()
        if transport.clear_to_send.is_set():
            return
        transport.clear_to_send_lock.release()
        if time.time() > start + transport.clear_to_send_timeout:
            from paramiko import SSHException

            raise SSHException("Key-exchange timed out waiting for key negotiation")


def _send_packet(transport: Any, parts: Sequence[Buffer], length: int) -> None:
    """One SSH packet whose payload is ``parts`` joined (``length`` bytes)."""
    pk = transport.packetizer
    _clear_to_send(transport)
    try:
        with getattr(pk, _P + "write_lock"):
            engine = getattr(pk, _P + "block_engine_out")
            if (
                not getattr(pk, _P + "aead_out")
                or engine is None
                or getattr(pk, _P + "compress_engine_out") is not None
                or getattr(pk, _P + "dump_packets")
            ):
                pk.send_message(_Payload(b"".join(parts)))  # rekeyed to something else: paramiko's way
                return
            bsize = getattr(pk, _P + "block_size_out")
            padding = 3 + bsize - ((length + 4) % bsize)  # as Packetizer._build_packet pads under AEAD
            aad = struct.pack(">I", length + padding + 1)
            iv = getattr(pk, _P + "iv_out")
            sealed = engine.encrypt(iv, b"".join((bytes((padding,)), *parts, _random_padding(padding))), aad)
            setattr(pk, _P + "iv_out", pk._inc_iv_counter(iv))
            seq = (getattr(pk, _P + "sequence_number_out") + 1) & 0xFFFFFFFF
            if seq == 0 and not pk._initial_kex_done:
                from paramiko import SSHException

                raise SSHException("Sequence number rolled over during initial kex!")
            setattr(pk, _P + "sequence_number_out", seq)
            _write(pk, aad, sealed)
            sent_bytes = getattr(pk, _P + "sent_bytes") + len(aad) + len(sealed)
            sent_packets = getattr(pk, _P + "sent_packets") + 1
            setattr(pk, _P + "sent_bytes", sent_bytes)
            setattr(pk, _P + "sent_packets", sent_packets)
            if (sent_packets >= pk.REKEY_PACKETS or sent_bytes >= pk.REKEY_BYTES) and not getattr(
                pk, _P + "need_rekey"
            ):
                setattr(pk, _P + "received_bytes_overflow", 0)
                setattr(pk, _P + "received_packets_overflow", 0)
                pk._trigger_rekey()
    finally:
        transport.clear_to_send_lock.release()


def _write(pk: Any, head: bytes, body: bytes) -> None:
    """Length and ciphertext in one system call (two sends would put the 4-byte length in a TCP
    segment of its own under TCP_NODELAY); anything left over goes through paramiko's loop,
    which knows the socket's timeouts and errors."""
    sock = getattr(pk, _P + "socket")
    sent = 0
    if isinstance(sock, socket.socket):
        try:
            sent = sock.sendmsg((head, body))
        except (TimeoutError, BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            raise EOFError("the SSH connection is closed") from None
    total = len(head) + len(body)
    if sent < total:
        rest = memoryview(head + body)[sent:] if sent < len(head) else memoryview(body)[sent - len(head) :]
        pk.write_all(rest)
    else:
        setattr(pk, _P + "keepalive_last", time.time())


def send_data(chan: Any, parts: Sequence[Buffer]) -> None:
    """Send the concatenation of ``parts`` on ``chan`` (like ``chan.sendall``), each SSH packet's
    payload built with a single copy. Falls back to ``sendall`` when the transport is not
    :func:`usable`."""
    transport = chan.transport
    views = [memoryview(p).cast("B") for p in parts]
    if not usable(transport):
        for v in views:
            chan.sendall(v)
        return
    left = sum(len(v) for v in views)
    i = 0
    while left:
        with chan.lock:
            if chan.closed:
                raise OSError("Socket is closed")
            size = chan._wait_for_send_window(left)
        if size == 0:
            raise OSError("the SSH channel was closed while sending")
        packet: list[Buffer] = [struct.pack(">BII", _MSG_CHANNEL_DATA, chan.remote_chanid, size)]
        need = size
        while need:
            v = views[i]
            if len(v) <= need:
                packet.append(v)
                need -= len(v)
                i += 1
            else:
                packet.append(v[:need])
                views[i] = v[need:]
                need = 0
        _send_packet(transport, packet, 9 + size)
        left -= size


_IN_NEEDED = (
    "aead_in",
    "etm_in",
    "block_engine_in",
    "iv_in",
    "mac_size_in",
    "compress_engine_in",
    "dump_packets",
    "remainder",
    "socket",
    "closed",
    "sequence_number_in",
    "received_bytes",
    "received_packets",
    "received_bytes_overflow",
    "received_packets_overflow",
    "need_rekey",
)


def lean_reads(transport: Any) -> bool:
    """Have the transport's reader thread take :func:`_read_message` for AES-GCM packets (and
    paramiko's own ``read_message`` for anything else); False if this paramiko's packetizer
    does not look as expected."""
    pk = transport.packetizer
    if not enabled():
        return False
    if not all(hasattr(pk, _P + name) for name in _IN_NEEDED) or not hasattr(pk, "read_all"):
        return False
    if not all(hasattr(transport, name) for name in ("_channels", "_expected_packet")):
        return False
    if getattr(pk, "_ferry_lean_reads", False):
        return True
    original = pk.read_message
    inbox = _Inbox()
    pk.read_message = lambda: _read_message(pk, original, inbox, transport)
    pk._ferry_lean_reads = True
    return True


_IN_BUFFER = 256 << 10
_MSG_IGNORE = 2


class _Inbox:
    """Bytes received from the socket ahead of the packet being read: several packets come in
    one ``recv_into`` (paramiko makes at least two system calls per packet, one for the length
    and one for the rest; sshd sends 32 KiB packets, ~32,000 per GiB)."""

    def __init__(self) -> None:
        self.buf = bytearray(_IN_BUFFER)
        self.view = memoryview(self.buf)
        self.start = 0
        self.end = 0

    def hand_to(self, pk: Any) -> None:
        """Give what is buffered to paramiko's own reader (its ``remainder``), before it reads."""
        if self.end > self.start:
            rest = bytes(self.view[self.start : self.end])
            setattr(pk, _P + "remainder", getattr(pk, _P + "remainder") + rest)
        self.start = self.end = 0

    def fill(self, pk: Any, sock: socket.socket, need: int, check_rekey: bool = False) -> None:
        """Have at least ``need`` bytes from ``start`` on, receiving as much as the socket has
        (timeouts handled as ``Packetizer.read_all`` does: how paramiko notices a closed
        transport, sends keepalives and starts a pending rekey while idle)."""
        if self.end - self.start >= need:
            return
        if self.start + need > len(self.buf):  # move the partial packet to the front (or grow)
            held = self.end - self.start
            if need > len(self.buf):
                bigger = bytearray(need)
                bigger[:held] = self.view[self.start : self.end]
                self.buf, self.view = bigger, memoryview(bigger)
            else:
                self.buf[:held] = self.view[self.start : self.end]
            self.start, self.end = 0, held
        while self.end - self.start < need:
            try:
                n = sock.recv_into(self.view[self.end :])
            except (TimeoutError, BlockingIOError, InterruptedError):
                if getattr(pk, _P + "closed"):
                    raise EOFError() from None
                if check_rekey and self.end == self.start and getattr(pk, _P + "need_rekey"):
                    from paramiko.packet import NeedRekeyException

                    raise NeedRekeyException() from None
                pk._check_keepalive()
                continue
            except OSError:
                if getattr(pk, _P + "closed"):
                    raise EOFError() from None
                raise
            if n == 0:
                raise EOFError()
            self.end += n


def _read_message(pk: Any, original: Any, inbox: _Inbox, transport: Any) -> tuple[int, Any]:
    """``Packetizer.read_message`` for AES-GCM with fewer copies and system calls: packets are
    received into one buffer several at a time (:class:`_Inbox`) and decrypted from it, and a
    CHANNEL_DATA packet for a channel reading through a :class:`ChunkPipe` is fed to it here,
    its data a view of the plaintext (paramiko copies it out of a ``Message`` after dispatching
    the packet through ``Transport.run``); the transport then sees an IGNORE. Sequence numbers,
    the IV counter and the rekey accounting are paramiko's."""
    sock = getattr(pk, _P + "socket")
    engine = getattr(pk, _P + "block_engine_in")
    if not _lean_readable(pk, sock, engine):
        inbox.hand_to(pk)
        return original()  # type: ignore[no-any-return]
    from paramiko import SSHException
    from paramiko.message import Message

    inbox.fill(pk, sock, 4, check_rekey=True)
    at = inbox.start
    packet_size = struct.unpack_from(">I", inbox.buf, at)[0]
    mac_size = getattr(pk, _P + "mac_size_in")
    if packet_size < 5 or packet_size > (1 << 20):
        raise SSHException(f"Invalid packet length {packet_size}")
    raw = packet_size + mac_size + 4
    inbox.fill(pk, sock, raw)
    at = inbox.start
    view = inbox.view
    iv = getattr(pk, _P + "iv_in")
    plain = engine.decrypt(iv, view[at + 4 : at + raw], view[at : at + 4])
    inbox.start = at + raw
    if inbox.start == inbox.end:
        inbox.start = inbox.end = 0
    setattr(pk, _P + "iv_in", pk._inc_iv_counter(iv))
    padding = plain[0]
    cmd = plain[1]
    seqno = _count_received(pk, raw)
    if cmd == _MSG_CHANNEL_DATA:
        if not transport._expected_packet and _fed_to_pipe(transport, plain, packet_size - padding):
            ignored = Message()
            ignored.seqno = seqno
            return _MSG_IGNORE, ignored
        msg = Message(plain)  # shares the bytes; channel data is read by its length, never to the end
        msg.packet.seek(2)
    else:
        msg = Message(plain[2 : packet_size - padding])
    msg.seqno = seqno
    return cmd, msg


def _lean_readable(pk: Any, sock: Any, engine: Any) -> bool:
    """Whether the next packet can be read the lean way: an AEAD cipher without
    encrypt-then-MAC or compression, no packet dump, nothing paramiko's own reader holds, and a
    real socket; otherwise paramiko's ``read_message`` reads it."""
    return not (
        not getattr(pk, _P + "aead_in")
        or engine is None
        or getattr(pk, _P + "etm_in")
        or getattr(pk, _P + "compress_engine_in") is not None
        or getattr(pk, _P + "dump_packets")
        or getattr(pk, _P + "remainder")
        or not isinstance(sock, socket.socket)
    )


def _count_received(pk: Any, raw: int) -> int:
    """Account for one packet of ``raw`` bytes received as ``Packetizer.read_message`` does
    (byte and packet counts, a rekey asked for or overdue, the sequence number); returns the
    packet's sequence number. (paramiko's exception is imported only to be raised: this runs
    for every packet.)"""
    seqno: int = getattr(pk, _P + "sequence_number_in")
    received_bytes = getattr(pk, _P + "received_bytes") + raw
    received_packets = getattr(pk, _P + "received_packets") + 1
    setattr(pk, _P + "received_bytes", received_bytes)
    setattr(pk, _P + "received_packets", received_packets)
    if getattr(pk, _P + "need_rekey"):
        over_bytes = getattr(pk, _P + "received_bytes_overflow") + raw
        over_packets = getattr(pk, _P + "received_packets_overflow") + 1
        setattr(pk, _P + "received_bytes_overflow", over_bytes)
        setattr(pk, _P + "received_packets_overflow", over_packets)
        if over_packets >= pk.REKEY_PACKETS_OVERFLOW_MAX or over_bytes >= pk.REKEY_BYTES_OVERFLOW_MAX:
            from paramiko import SSHException

            raise SSHException("Remote transport is ignoring rekey requests")
    elif received_packets >= pk.REKEY_PACKETS or received_bytes >= pk.REKEY_BYTES:
        setattr(pk, _P + "received_bytes_overflow", 0)
        setattr(pk, _P + "received_packets_overflow", 0)
        pk._trigger_rekey()
    next_seqno = (seqno + 1) & 0xFFFFFFFF
    if next_seqno == 0 and not pk._initial_kex_done:
        from paramiko import SSHException

        raise SSHException("Sequence number rolled over during initial kex!")
    setattr(pk, _P + "sequence_number_in", next_seqno)
    return seqno


def _fed_to_pipe(transport: Any, plain: bytes, end: int) -> bool:
    """Feed a CHANNEL_DATA packet's data (``plain[10:end]`` at most) to its channel's
    :class:`ChunkPipe`, if it reads through one; False otherwise (paramiko dispatches it)."""
    chanid, size = struct.unpack_from(">II", plain, 2)
    chan = transport._channels.get(chanid)
    pipe = getattr(chan, "in_buffer", None)
    if isinstance(pipe, ChunkPipe) and 10 + size <= end:
        pipe.feed(memoryview(plain)[10 : 10 + size])  # a fresh bytes object per packet: a view is safe
        return True
    return False


class ChunkPipe:
    """Drop-in for paramiko's ``BufferedPipe`` on a channel's inbound side, keeping fed chunks as
    they came (no array to grow, slice and shift) so :meth:`readinto` copies each byte once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._event: Any = None
        self._chunks: deque[memoryview] = deque()
        self._size = 0
        self._closed = False
        # Bytes the waiting reader needs before it can do anything: feeds short of it do not
        # wake it (a 255 KiB reply arrives in several SSH packets; waking the reader for each
        # cost the transport thread more than decrypting them, profiled).
        self._want = 1

    def set_event(self, event: Any) -> None:
        with self._lock:
            self._event = event
            if self._closed or self._size:
                event.set()
            else:
                event.clear()

    def feed(self, data: Buffer) -> None:
        with self._lock:
            if self._event is not None:
                self._event.set()
            if len(data):
                self._chunks.append(memoryview(data).cast("B"))
                self._size += len(data)
            if self._size >= self._want:
                self._cv.notify_all()

    def read_ready(self) -> bool:
        with self._lock:
            return self._size > 0

    def _wait(self, timeout: float | None, need: int = 1) -> None:
        """Wait for ``need`` bytes or close (the caller holds the lock)."""
        if self._size >= need or self._closed:
            return
        if timeout == 0.0:
            from paramiko.buffered_pipe import PipeTimeout

            raise PipeTimeout()
        deadline = None if timeout is None else time.monotonic() + timeout
        self._want = need
        try:
            while self._size < need and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    from paramiko.buffered_pipe import PipeTimeout

                    raise PipeTimeout()
                self._cv.wait(left)
        finally:
            self._want = 1

    def _took(self, n: int) -> None:
        self._size -= n
        if not self._size and self._event is not None and not self._closed:
            self._event.clear()

    def read(self, nbytes: int, timeout: float | None = None) -> bytes:
        """Up to ``nbytes`` (at least one unless closed), as ``BufferedPipe.read``."""
        with self._lock:
            self._wait(timeout)
            out = []
            got = 0
            while self._chunks and got < nbytes:
                c = self._chunks[0]
                if len(c) <= nbytes - got:
                    out.append(c)
                    got += len(c)
                    self._chunks.popleft()
                else:
                    out.append(c[: nbytes - got])
                    self._chunks[0] = c[nbytes - got :]
                    got = nbytes
            self._took(got)
        return out[0].tobytes() if len(out) == 1 else b"".join(out)

    def readinto(self, view: memoryview, timeout: float | None = None, *, whole: bool = False) -> int:
        """Copy up to ``len(view)`` buffered bytes into ``view``, waiting for the first (or, with
        ``whole``, for all of them unless the channel closes first); 0 once closed and empty."""
        with self._lock:
            self._wait(timeout, len(view) if whole else 1)
            got = 0
            want = len(view)
            while self._chunks and got < want:
                c = self._chunks[0]
                n = min(len(c), want - got)
                view[got : got + n] = c[:n]
                got += n
                if n == len(c):
                    self._chunks.popleft()
                else:
                    self._chunks[0] = c[n:]
            self._took(got)
        return got

    def empty(self) -> bytes:
        with self._lock:
            out = b"".join(self._chunks)
            self._chunks.clear()
            self._took(self._size)
            return out

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._cv.notify_all()
            if self._event is not None:
                self._event.set()

    def __len__(self) -> int:
        with self._lock:
            return self._size


def open_sftp(transport: Any, window_size: int, max_packet_size: int) -> Any:
    """``paramiko.SFTPClient.from_transport`` with a :class:`ChunkPipe` on the channel: put in
    place before the subsystem starts, so no byte can be fed to the pipe it replaces."""
    import paramiko

    chan = transport.open_session(window_size=window_size, max_packet_size=max_packet_size)
    if chan is None:
        return None
    if enabled():
        chan.in_buffer = ChunkPipe()
    chan.invoke_subsystem("sftp")
    client = paramiko.SFTPClient(chan)
    client._convert_status = types.MethodType(_convert_status, client)  # type: ignore[attr-defined]  # typed codes
    return client


def pipe_of(client: Any) -> ChunkPipe | None:
    """The :class:`ChunkPipe` of an SFTP client's channel, if it was opened with one."""
    chan = getattr(client, "sock", None)
    pipe = getattr(chan, "in_buffer", None)
    return pipe if isinstance(pipe, ChunkPipe) else None


def recv_exact_into(chan: Any, pipe: ChunkPipe, view: memoryview) -> None:
    """Fill ``view`` from the channel (one copy per byte), giving the server its window back as
    ``Channel.recv`` does; EOFError if the channel closes first."""
    got = 0
    while got < len(view):
        n = pipe.readinto(view[got:], chan.timeout, whole=True)
        if n == 0:
            raise EOFError("the SSH channel closed")
        got += n
        ack = chan._check_add_window(n)
        if ack > 0:
            from paramiko.message import Message

            m = Message()
            m.add_byte(bytes((_MSG_CHANNEL_WINDOW_ADJUST,)))
            m.add_int(chan.remote_chanid)
            m.add_int(ack)
            chan.transport._send_user_message(m)


def install_pipe(chan: Any) -> ChunkPipe | None:
    """On the fast path, have ``chan`` (an exec channel whose command has not started, so no
    byte can have been fed to the pipe it replaces) buffer what it receives in a
    :class:`ChunkPipe`, read with :func:`recv_exact_into`; None when the fast path is off."""
    if not enabled():
        return None
    pipe = ChunkPipe()
    chan.in_buffer = pipe
    return pipe


# ---- SFTP READ replies straight into place ----


def reply_into(client: Any, pipe: ChunkPipe, num: int, target: memoryview) -> int:
    """Read the reply to READ ``num`` (the next one on the channel: the server answers in
    order) from ``pipe``, the channel's :class:`ChunkPipe`, with its data copied straight into
    ``target``; returns the bytes it carried (0 at end of file). A status other than end of
    file raises as paramiko would (IOError with the server's reason)."""
    from paramiko.message import Message
    from paramiko.sftp import SFTPError

    chan = client.sock
    head = bytearray(9)
    recv_exact_into(chan, pipe, memoryview(head))
    length, kind, rid = struct.unpack(">IBI", head)
    if rid != num:
        raise SFTPError(f"reply #{rid} came where #{num} was expected (the server answers out of order)")
    with client._lock:
        client._expecting.pop(num, None)
    if kind == CMD_DATA:
        recv_exact_into(chan, pipe, memoryview(head)[:4])
        size: int = struct.unpack(">I", head[:4])[0]
        if size > len(target) or size != length - 9:
            raise SFTPError(f"READ reply of {size} bytes for {len(target)} asked")
        recv_exact_into(chan, pipe, target[:size])
        return size
    body = bytearray(length - 5)
    recv_exact_into(chan, pipe, memoryview(body))
    if kind != CMD_STATUS:
        raise SFTPError(f"Expected data, got message type {kind}")
    try:
        raise_status(client, Message(bytes(body)))  # raises IOError for a real error
    except EOFError:
        return 0
    return 0


def reply_copied(client: Any, num: int, target: memoryview) -> int:
    """:func:`reply_into` through paramiko's own reply handling (any server, any order)."""
    t, msg = reply(client, num)
    data = msg.get_binary() if t == CMD_DATA else b""
    size = min(len(data), len(target))
    target[:size] = data[:size]
    return len(data)


# ---- the rekey guard ----

# A paramiko transport that survives a channel closing while it renegotiates keys.
#
# paramiko asks for new keys after 512 MiB each way (``Packetizer.REKEY_BYTES``). From the moment
# it sends its KEXINIT until the new keys are in use, ``Transport._send_user_message`` holds every
# other message back (RFC 4253 7.1). But the server may have closed a channel just before our
# KEXINIT reached it; that CLOSE arrives during the exchange, and paramiko answers it with its own
# CLOSE *on the transport thread*, which then waits for the exchange to finish. Only the transport
# thread can finish it: nothing is read for 30 s (``clear_to_send_timeout``), then "Key-exchange
# timed out waiting for key negotiation" and the whole connection drops (paramiko issue #822, open
# since 2016). Tar batches close an exec channel every few MiB, so 1,000 x 1 MiB down (1 GiB, one
# rekey) took 41-43 s here instead of ~6, every time.
#
# :func:`guard` lets the transport thread hand such a message to a helper thread instead of
# waiting: the helper sends it (in order, with any others so held) once the keys are in place, and
# the transport thread goes on reading the exchange's replies. Every other thread still waits
# as paramiko makes it wait.


def guard_rekey(transport: Any) -> None:
    """Install the hand-off on ``transport`` (a ``paramiko.Transport``; once, before use)."""
    send = getattr(transport, "_send_user_message", None)
    event = getattr(transport, "clear_to_send", None)
    if send is None or event is None:
        return  # a paramiko without these: its own behaviour
    held: deque[Any] = deque()
    lock = threading.Lock()
    draining = [False]

    def drain() -> None:
        while True:
            with lock:
                if not held:
                    draining[0] = False
                    return
                message = held.popleft()
            try:
                send(message)  # waits for the new keys as paramiko's own senders do
            except Exception:
                pass  # the transport went: its readers see that themselves

    def send_user_message(message: Any) -> None:
        # While some are held, the transport thread's later messages queue behind them (order kept).
        if threading.current_thread() is transport and (not event.is_set() or draining[0]):
            with lock:
                held.append(message)
                if draining[0]:
                    return
                draining[0] = True
            threading.Thread(target=drain, name="ferry-ssh-held", daemon=True).start()
            return
        send(message)

    transport._send_user_message = send_user_message


# ---- what this module relies on ----

# Everything of paramiko's that is not its public API and that this module uses, by the paramiko
# class it belongs to; tests/sftp/test_paramiko_adapter.py looks each up on live objects.
RELIED_ON: dict[str, tuple[str, ...]] = {
    "SFTPClient": (
        "sock",
        "_request",
        "_async_request",
        "_read_response",
        "_read_packet",
        "_convert_status",
        "_lock",
        "_expecting",
        "request_number",
    ),
    "SFTPFile": ("handle", "_closed", "MAX_REQUEST_SIZE"),
    "SFTPAttributes": ("_from_msg",),
    "AgentSSH": ("_connect", "get_keys"),
    "Channel": (
        "in_buffer",
        "lock",
        "closed",
        "timeout",
        "transport",
        "remote_chanid",
        "_wait_for_send_window",
        "_check_add_window",
    ),
    "Transport": (
        "packetizer",
        "active",
        "clear_to_send",
        "clear_to_send_lock",
        "clear_to_send_timeout",
        "_send_user_message",
        "_channels",
        "_expected_packet",
    ),
    "Packetizer": (
        *(_P + name for name in dict.fromkeys((*_NEEDED, *_IN_NEEDED, "keepalive_last"))),
        "REKEY_PACKETS",
        "REKEY_BYTES",
        "REKEY_PACKETS_OVERFLOW_MAX",
        "REKEY_BYTES_OVERFLOW_MAX",
        "_initial_kex_done",
        "_inc_iv_counter",
        "_trigger_rekey",
        "_check_keepalive",
        "send_message",
        "read_message",
        "write_all",
        "read_all",
    ),
    "Message": ("packet",),
}
