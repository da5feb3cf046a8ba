"""Commands on the host: an exec channel per command (:meth:`RemoteShell.run`), one long-lived
``sh`` for hash batches (:meth:`RemoteShell.shell_run`), commands started only when a session
is spare (:meth:`RemoteShell.exec_nowait`), and which checksum tools the host has
(:func:`detect_hash_tools`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

from ferry.backends.sftp import limits
from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.backends.sftp.connection import ChannelPool
from ferry.backends.sftp.errors import map_error
from ferry.core.errors import FerryError, Unsupported

HASH_TOOLS = {"sha256": "sha256sum", "sha1": "sha1sum", "md5": "md5sum", "blake3": "b3sum"}
_EMPTY_DIGESTS = {  # of zero bytes: proves a remote openssl computes the right thing
    "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "sha1": "da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "md5": "d41d8cd98f00b204e9800998ecf8427e",
}
_EMPTY_BLAKE3 = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"

Stdin = bytes | Sequence[bytes | memoryview] | Iterator[Sequence[bytes | memoryview]]


class RemoteShell:
    """Remote commands on the channels of one :class:`ChannelPool` (each takes a session slot
    while it runs)."""

    def __init__(self, pool: ChannelPool) -> None:
        self.pool = pool
        self._shell: Any = None  # a long-lived remote sh for hash batches (no session per batch)
        self._shell_out: Any = None
        self._shell_generation = -1
        self._shell_lock = threading.Lock()

    def run(self, command: str | bytes, timeout: float = 600, stdin: Stdin | None = None) -> tuple[int, bytes, bytes]:
        """Run ``command`` on an exec channel, ``stdin`` (one buffer, several sent as their
        concatenation without joining them, or an iterator of such groups, each made and sent
        in turn) sent by the lean channel path (tar batches send megabytes this way)."""
        chan, generation = self.pool.open_channel(
            lambda transport: transport.open_session(
                window_size=limits.WINDOW, max_packet_size=limits.MAX_PACKET, timeout=30
            )
        )
        try:
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin is not None:
                # Only a command that reads its input gets our EOF, and such a command must wait
                # for it: paramiko sends EOF outside the channel's lock, so an EOF racing the
                # CLOSE of a command that already ended can reach sshd after the channel is gone,
                # and sshd then drops the whole connection (every transfer on it).
                for group in _groups(stdin):
                    if any(group):
                        adapter.send_data(chan, group)
                chan.shutdown_write()
            out = chan.makefile("rb").read()
            err = chan.makefile_stderr("rb").read()
            return chan.recv_exit_status(), out, err
        except FerryError:
            raise
        except Exception as exc:
            raise map_error(exc, self.pool.hostname) from exc
        finally:
            chan.close()
            self.pool.release(generation)

    def shell_run(self, command: bytes, timeout: float = 600) -> tuple[int, bytes]:
        """Run ``command`` (stderr discarded) in one long-lived remote ``sh``: a session, a login
        and a shell start once per host instead of once per hash batch. Any trouble closes it;
        the caller then falls back to :meth:`run`."""
        with self._shell_lock:
            if self.pool.max_sessions < 4:
                # A tight MaxSessions: a session held for hashing would starve the transfers.
                self._close_shell()
                raise Unsupported("no spare session for a long-lived shell")
            try:
                if self._shell is None or self._shell.closed or self._shell_generation != self.pool.generation:
                    self._close_shell()
                    chan, generation = self.pool.open_channel(lambda transport: transport.open_session(timeout=30))
                    self._shell, self._shell_generation = chan, generation
                    chan.exec_command("sh")
                    self._shell_out = chan.makefile("rb")
                self._shell.settimeout(timeout)
                marker = b"__ferry_end_" + os.urandom(8).hex().encode() + b"__"
                # "echo" puts the marker on a line of its own even after output without a newline.
                self._shell.sendall(command + b" 2>/dev/null; echo; echo " + marker + b" $?\n")
                out = bytearray()
                while True:
                    line = self._shell_out.readline()
                    if not line:
                        raise EOFError("the remote shell ended")
                    if line.startswith(marker):
                        rc = int(line.split()[1])
                        break
                    out += line
                return rc, bytes(out[:-1])  # without the newline "echo" added
            except BaseException:
                self._close_shell()
                raise

    @property
    def holds_session(self) -> bool:
        """Whether the long-lived shell holds a session slot now."""
        return self._shell is not None

    def _close_shell(self) -> None:
        chan, self._shell = self._shell, None
        if chan is not None:
            try:
                chan.close()
            finally:
                self.pool.release(self._shell_generation)

    def exec_nowait(self, command: bytes) -> tuple[Any, Callable[[], None]] | None:
        """Start ``command`` on an exec channel only if a session is free right now (one stays
        spare): work that only saves time never waits for, or starves, the transfers. Returns
        the channel and the function that gives its session back after it is closed."""
        import paramiko

        generation = self.pool.reserve_spare()
        if generation is None:
            return None
        chan = None
        try:
            chan = self.pool.connection.transport().open_session(timeout=30)
            chan.exec_command(command)
        except paramiko.ChannelException as exc:
            self.pool.refused(exc, generation)
            return None
        except Exception:
            if chan is not None:
                chan.close()
            self.pool.release(generation)
            return None
        return chan, lambda: self.pool.release(generation)

    def close(self) -> None:
        with self._shell_lock:
            self._close_shell()


def _groups(stdin: Stdin) -> Iterable[Sequence[bytes | memoryview]]:
    if isinstance(stdin, bytes):
        return [[stdin]]
    if isinstance(stdin, Sequence):
        return [cast(Sequence[bytes | memoryview], stdin)]
    return stdin


def detect_hash_tools(shell: RemoteShell) -> dict[str, str] | None:
    """Which remote tools compute which checksum (None when the host runs no commands: an
    sftp-only account gets size-only verification, said honestly). ``openssl dgst -r`` is
    preferred where it gives the right answer: it uses the CPU's SHA instructions, which
    Debian's coreutils do not (one 256 MiB file: sha256sum 1.07 s, openssl 0.21 s on the test
    machine); its ``-r`` output is coreutils' format, odd names escaped the same way."""
    probe = (
        "for t in sha256sum sha1sum md5sum b3sum; do command -v $t >/dev/null 2>&1 && echo $t; done; "
        "for a in sha256 sha1 md5; do printf 'openssl-%s ' $a; "
        "openssl dgst -$a -r </dev/null 2>/dev/null | cut -c1-64 || echo; done"
    )
    try:
        _rc, out, _err = shell.run(probe, timeout=30)
    except Exception:  # exec refused (sftp-only account)
        return None
    words = out.decode(errors="replace").split()
    found = set(words)
    tools = {algo: tool for algo, tool in HASH_TOOLS.items() if tool in found}
    for algo, empty in _EMPTY_DIGESTS.items():
        # Only an openssl that prints the known digest of nothing, in -r format, is trusted.
        name = f"openssl-{algo}"
        if name in words and words.index(name) + 1 < len(words) and words[words.index(name) + 1] == empty:
            tools[algo] = f"openssl dgst -{algo} -r"
    return tools


def detect_plain_hash_tools(shell: RemoteShell) -> dict[str, str]:
    """Checksum tools a server answers without a POSIX shell: each tool run bare, its empty
    input must give the known digest of nothing. ``rclone serve sftp`` answers ``sha256sum``,
    ``sha1sum``, ``md5sum`` and ``b3sum`` itself this way (its exec channel runs no shell, so the
    probe in :func:`detect_hash_tools` finds nothing). An sftp-only account (``ForceCommand
    internal-sftp``) runs the SFTP server instead, which ends at the empty input: nothing found,
    nothing hangs."""
    empty = {**_EMPTY_DIGESTS, "blake3": _EMPTY_BLAKE3}
    tools: dict[str, str] = {}
    for algo, tool in HASH_TOOLS.items():
        try:
            rc, out, _err = shell.run(tool, timeout=30, stdin=b"")
        except FerryError:
            continue
        words = out.split()
        if rc == 0 and words[:1] == [empty[algo].encode()]:
            tools[algo] = tool
    return tools
