"""SSH hosts over SFTP (paramiko), one authenticated connection per host.

Researchers' clusters often ask for a one-time code at every login, so Ferry logs in **once per
host per process** and multiplexes everything on that transport: a pool of SFTP channels (a
paramiko ``SFTPClient`` is not safe to share between threads, so each worker borrows its own)
plus exec channels for remote checksums, bounded by the server's MaxSessions.

Speed levers measured in ../shared/guide/stack-notes.md: TCP_NODELAY (small files stalled 50 ms
each without it), AES-GCM first when the server offers it, a 64 MiB channel window, pipelined
writes, and a bounded read-ahead depth.

Host keys are checked against known_hosts; an unknown key goes to the prompter (fingerprint
shown, the person decides), a changed key is refused naming the file and line. Nothing is ever
accepted silently.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import posixpath
import socket
import stat as stat_mod
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from ferry.backends.base import Backend, BatchData, Capabilities, Entry, Kind, Reader, Writer, temp_name
from ferry.backends.sftp import fastpath, rekey
from ferry.backends.sftp.parallel_read import REQUEST, ParallelRangeReader
from ferry.backends.sftp.parallel_write import ParallelRangeWriter, safe_resume_offset
from ferry.backends.sftp.remote_hash import FollowingHash, HashBatcher, follow_command
from ferry.core.address import Address
from ferry.core.cancel import CancelToken
from ferry.core.errors import (
    AlreadyExists,
    AuthError,
    FerryError,
    IsADirectory,
    NotADirectory,
    NotFound,
    Transient,
    Unsupported,
    UsageError,
    from_oserror,
)
from ferry.core.outcomes import Evidence
from ferry.credentials import prompts
from ferry.credentials.ssh_config import SshTarget, apply_site, resolve

log = logging.getLogger("ferry.sftp")


class _HandledByFerry(logging.Filter):
    """paramiko logs a refused channel as a warning; Ferry adapts to MaxSessions instead, so
    the person should not see it (it is still logged by Ferry at INFO)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "open FAILED" not in record.getMessage()


logging.getLogger("paramiko.transport").addFilter(_HandledByFerry())

WINDOW = 64 << 20
# Largest SSH packet the server may send on an SFTP channel (paramiko's default is 32 KiB).
# sshd fills a packet with whatever it has buffered for the channel, so when it runs behind
# (parallel range streams) a download arrives in a third to a sixth as many packets, each
# costing paramiko the same Python work however big (measured 8,200 -> 1,400-3,700 packets per
# 256 MiB). Kept well under OpenSSH's 256 KiB packet limit.
MAX_PACKET = 128 << 10
SLOT_WAIT = 120.0  # seconds to wait for a free channel before handing the file back to the queue
READ_DEPTH = 16
PARALLEL_MIN = 64 << 20  # files this big are read as parallel byte-range streams
# Verifying an upload: files up to READBACK_MAX are read back over SFTP (one more round trip, no
# process on the server); bigger ones are hashed by the server, in the shared batched shell
# (remote_hash.HashBatcher) after they close, or from FOLLOW_MIN on by a hash that follows the
# upload as it goes. Reading 1 MiB files back doubled paramiko's work per file: 100 x 1 MiB up
# with --parallel 4 took 2.23 s verified by read-back, 2.03 s by the batched hash, 1.44 s
# unverified (client CPU 1.4 / 0.9 / 0.8 s; medians of 5, load ~5). A follower costs an exec
# channel per file, worth it only where hashing after the last byte would take a while.
READBACK_MAX = 64 << 10
FOLLOW_MIN = 16 << 20
# Streams per big download. Each stream's replies are parsed on its own thread under the one
# GIL, with the transport thread decrypting for all of them: on 2 cores, 4 streams held the GIL
# ~1.0 s per 256 MiB, 2 streams ~0.8 s, 1 stream ~0.6 s; interleaved `ferry cp` runs (5 each,
# load 12) gave 2 streams 5.11 s against 4 streams' 5.62 s, client CPU 1.8 against 2.1 s. Two
# keep 8 MiB in flight for a long network link. (More read-ahead per stream makes paramiko copy
# its growing buffer on every read.)
PARALLEL_STREAMS = 2
# Streams per big upload (PARALLEL_MIN and more; parallel_write). Each SFTP channel has its
# own sftp-server process and its own 2 MiB window from sshd, so the server's work overlaps.
# Interleaved `ferry cp` uploads, 2 cores at load 8-10: 2 GiB (3 runs) 1 stream 8.38 s, 2 streams
# 7.63 s, 4 streams 6.59 s; 256 MiB (5 runs) 1.63 / 1.73 / 3 streams 1.56 / 1.45 s; the same
# client CPU (4.2 s per 2 GiB) whatever the count.
UPLOAD_STREAMS = 4
# The stream count for both directions, for every host ("2"), else a saved site's ``streams``
# option, else the defaults above. Extra streams only ever take channels that are free.
STREAMS_ENV = "FERRY_SFTP_STREAMS"
MAX_STREAMS = 8
WRITE_DEPTH = 64  # WRITE requests in flight before the writer waits for the oldest reply
# Uploads of this size and more send from a thread of their own (_Sender): the copy loop hashes
# the next chunk (hashlib lets go of the GIL) while the previous one is encrypted and sent, so
# the stream hash (sha256 ~0.2-0.3 s of CPU per 256 MiB here) no longer adds to the upload's
# time on a machine with a core to spare. SEND_AHEAD bounds the bytes waiting for the sender.
SEND_THREAD_MIN = 16 << 20
SEND_AHEAD = 8 << 20
_HASH_TOOLS = {"sha256": "sha256sum", "sha1": "sha1sum", "md5": "md5sum", "blake3": "b3sum"}
_EMPTY_DIGESTS = {  # of zero bytes: proves a remote openssl computes the right thing
    "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "sha1": "da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "md5": "d41d8cd98f00b204e9800998ecf8427e",
}


class HostKeyError(AuthError):
    kind = "host-key"


def _map_error(exc: BaseException, path: str) -> FerryError:
    import paramiko

    if isinstance(exc, FerryError):
        return exc
    if isinstance(exc, paramiko.AuthenticationException):
        return AuthError(f"Login failed: {exc}")
    if isinstance(exc, (paramiko.SSHException, EOFError, socket.error)) and not (
        isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.EACCES, errno.EEXIST)
    ):
        lost = (errno.ECONNRESET, errno.EPIPE, errno.ECONNREFUSED, errno.ETIMEDOUT)
        if isinstance(exc, OSError) and not isinstance(exc, socket.timeout) and exc.errno not in (None, *lost):
            return from_oserror(exc, path)
        return Transient(f"Connection lost while working on {path}", detail=f"{type(exc).__name__}: {exc}")
    if isinstance(exc, OSError):
        if exc.errno is None:
            # SFTP's generic "Failure": the server gives no reason (e.g. rename onto an existing name).
            return FerryError(f"The server refused the operation on {path}", detail=str(exc))
        return from_oserror(exc, path)
    return FerryError(f"{type(exc).__name__} on {path}", detail=str(exc))


def _fingerprint(key: Any) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _Host:
    """One authenticated transport to one host, with a pool of SFTP channels."""

    def __init__(self, target: SshTarget) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._transport: Any = None
        self._jump: _Host | None = None
        self._idle: list[Any] = []
        self._open = 0  # session channels open (SFTP, idle or borrowed, and exec)
        self.max_sessions = 10  # OpenSSH's default MaxSessions; lowered when the server says no
        self._generation = 0  # bumped on every (re)connect: channels of an old transport are gone
        self._cond = threading.Condition(threading.Lock())  # the channel budget (not _lock: a
        # login may wait on a person for minutes while channels of the old transport come back)
        self.home = "/"
        self.hash_tools: dict[str, str] = {}
        self.hasher = HashBatcher(lambda command: self.run(command), self.shell_run)
        self._shell: Any = None  # a long-lived remote sh for hash batches (no session per batch)
        self._shell_out: Any = None
        self._shell_generation = -1
        self._shell_lock = threading.Lock()
        self.known_dirs: set[str] = set()  # folders seen to exist (saves ENOTDIR probes)
        self.request_size = 32 << 10  # SFTP's portable maximum until the server is known to be OpenSSH
        self._trusted_once: set[str] = set()
        self.site_streams: int | None = None  # a saved site's ``streams`` option

    def streams(self, *, up: bool) -> int:
        """How many parallel byte-range streams a big file may use (FERRY_SFTP_STREAMS, else the
        site's ``streams``, else the default for the direction)."""
        raw = os.environ.get(STREAMS_ENV, "").strip()
        if raw:
            return stream_count(raw, STREAMS_ENV)
        if self.site_streams is not None:
            return self.site_streams
        return UPLOAD_STREAMS if up else PARALLEL_STREAMS

    def remember_dir(self, path: str) -> None:
        if len(self.known_dirs) > 50_000:
            self.known_dirs.clear()
        self.known_dirs.add(path.rstrip("/") or "/")

    def forget_dirs(self) -> None:
        """A folder was removed or something renamed: folders seen before may be gone (rare)."""
        self.known_dirs.clear()
        from ferry.backends.sftp import small

        small.known(self).forget()  # new folders' emptiness and listed attributes too

    # ---- connecting ----
    def transport(self) -> Any:
        with self._lock:
            if self._transport is None or not self._transport.is_active():
                self._connect()
            return self._transport

    def _sock(self) -> Any:
        import paramiko

        t = self.target
        if t.proxy_jump:
            hops = [h.strip() for h in t.proxy_jump.split(",") if h.strip()]
            jump = _Host(_target_for(hops[-1]))
            if len(hops) > 1:
                jump.target.proxy_jump = ",".join(hops[:-1])
            self._jump = jump
            chan = jump.transport().open_channel(
                "direct-tcpip", (t.hostname, t.port), ("127.0.0.1", 0), timeout=t.connect_timeout
            )
            return chan
        if t.proxy_command:
            cmd = t.proxy_command.replace("%h", t.hostname).replace("%p", str(t.port)).replace("%r", t.user)
            return paramiko.ProxyCommand(cmd)
        sock = socket.create_connection((t.hostname, t.port), timeout=t.connect_timeout)
        # Without TCP_NODELAY every small request waits for delayed ACKs (~50 ms per small file).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _connect(self) -> None:
        import paramiko

        t = self.target
        try:
            sock = self._sock()
        except OSError as exc:
            raise Transient(
                f"Cannot connect to {t.hostname}:{t.port}: {exc.strerror or exc}", detail=repr(exc)
            ) from exc
        transport = paramiko.Transport(sock, default_window_size=WINDOW)
        opts = transport.get_security_options()
        gcm = [c for c in opts.ciphers if "gcm" in c]
        opts.ciphers = tuple(gcm + [c for c in opts.ciphers if c not in gcm])  # AES-GCM first: faster here
        fastpath.lean_reads(transport)  # AES-GCM packets read with fewer copies (paramiko's for the rest)
        rekey.guard(transport)  # a channel closed during a rekey must not stall it (paramiko #822)
        try:
            transport.start_client(timeout=t.connect_timeout)
            self._check_host_key(transport)
            self._authenticate(transport)
        except BaseException:
            transport.close()
            raise
        if t.server_alive_interval:
            transport.set_keepalive(t.server_alive_interval)
        # OpenSSH's sftp-server accepts 256 KiB messages: 8x fewer requests (and Python work) per byte.
        self.request_size = REQUEST if "OpenSSH" in (transport.remote_version or "") else 32 << 10
        with self._cond:
            self._transport = transport
            self._generation += 1
            self._idle.clear()
            self._open = 0
            self._cond.notify_all()

    def _check_host_key(self, transport: Any) -> None:
        import paramiko

        t = self.target
        key = transport.get_remote_server_key()
        name = t.host_key_name
        fingerprint = _fingerprint(key)
        for path in t.known_hosts_files:
            try:
                keys = paramiko.HostKeys(path)
            except (OSError, paramiko.SSHException):
                continue
            known = keys.lookup(name)
            if not known:
                continue
            if key.get_name() in known:
                if known[key.get_name()] == key:
                    return
                line = _known_hosts_line(path, name, key.get_name())
                raise HostKeyError(
                    f"The host key of {name} has CHANGED ({key.get_name()} {fingerprint}); it does not match "
                    f"{path}" + (f" line {line}" if line else "") + ". This may be an attack. If the server's key "
                    "was really replaced, remove that line and connect again."
                )
        if fingerprint in self._trusted_once:
            return
        if t.strict_host_key_checking == "yes":
            raise HostKeyError(
                f"Unknown host key for {name} ({key.get_name()} {fingerprint}) and StrictHostKeyChecking is yes"
            )
        entry = f"{name} {key.get_name()} {key.get_base64()}"  # exactly what "save" appends, shown first
        answer = prompts.confirm_host_key(name, key.get_name(), fingerprint, known_hosts_line=entry)
        if answer == "save" and t.known_hosts_files:
            path = t.known_hosts_files[0]
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(entry + "\n")
        elif answer != "once" and answer != "save":
            raise HostKeyError(
                f"Unknown host key for {name} ({key.get_name()} {fingerprint}) was not trusted", action=None
            )
        self._trusted_once.add(fingerprint)

    def _authenticate(self, transport: Any) -> None:
        """Agent keys, key files, keyboard-interactive, password — OpenSSH's order. A server that
        wants two factors (publickey then keyboard-interactive) gets both."""
        import paramiko

        t = self.target
        title = f"{t.user}@{t.hostname}"
        remaining: list[str] | None = None

        def try_key(key: Any) -> bool:
            nonlocal remaining
            try:
                remaining = transport.auth_publickey(t.user, key)
            except paramiko.AuthenticationException:
                return False
            return True

        done = False
        for key in _agent_keys(t.identity_agent, t.identities_only, t.identity_files):
            if try_key(key):
                done = True
                break
        if not done:
            for path in t.identity_files or _default_identities():
                key = _load_key(path, title)
                if key is not None and try_key(key):
                    done = True
                    break
        if transport.is_authenticated():
            return
        if done and remaining is not None and "keyboard-interactive" not in remaining and "password" not in remaining:
            raise AuthError(f"Login to {title} needs {', '.join(remaining)}, which Ferry cannot do")

        unanswered: list[BaseException] = []
        saved = [_saved_password(t.site)]  # offered once: a wrong one falls back to asking

        def handler(title_: str, instructions: str, fields: list[tuple[str, bool]]) -> list[str]:
            # Runs on paramiko's thread: an unanswerable prompt is kept and raised on ours.
            text = "\n".join(x for x in (title_, instructions) if x)
            answers = []
            try:
                for prompt, echo in fields:
                    if saved[0] is not None and not echo and _is_password_prompt(prompt, text):
                        answers.append(saved[0])
                        saved[0] = None
                        continue
                    answers.append(prompts.prompter().ask(title, (text + "\n" if text else "") + prompt, echo=echo))
                    text = ""
            except BaseException as exc:
                unanswered.append(exc)
                raise
            return answers

        try:
            transport.auth_interactive(t.user, handler)
            if transport.is_authenticated():
                return
        except paramiko.BadAuthenticationType:
            pass
        except paramiko.AuthenticationException as exc:
            if unanswered:
                raise unanswered[0] from exc
            if "keyboard-interactive" not in str(exc).lower():
                raise AuthError(f"Login to {title} failed: wrong answer or code") from exc
        if unanswered:
            raise unanswered[0]
        try:
            if saved[0] is not None:
                try:
                    transport.auth_password(t.user, saved[0])
                except paramiko.BadAuthenticationType:
                    raise
                except paramiko.AuthenticationException:
                    log.info("the password saved for site %s was refused; asking", t.site)
                saved[0] = None
            if not transport.is_authenticated():
                password = prompts.prompter().ask(title, f"{title}'s password: ", echo=False)
                transport.auth_password(t.user, password)
        except paramiko.BadAuthenticationType as exc:
            raise AuthError(f"Login to {title} failed: no usable method (server allows {exc.allowed_types})") from exc
        except paramiko.AuthenticationException as exc:
            raise AuthError(f"Login to {title} failed: wrong password") from exc
        if not transport.is_authenticated():
            raise AuthError(f"Login to {title} failed")

    # ---- channels ----
    @contextmanager
    def sftp(self) -> Iterator[Any]:
        client = self._borrow()
        ok = False
        try:
            yield client
            ok = True
        except (OSError, FerryError) as exc:
            # "No such file" and the like leave the channel in step: keep it (opening a channel
            # per missing destination cost a session setup per file). A dropped or timed-out
            # connection does not.
            ok = not isinstance(exc, (Transient, ConnectionError, socket.timeout))
            raise
        finally:
            self._give_back(client, ok)
            if not ok:
                self._settle(client)

    def _settle(self, client: Any) -> None:
        """A channel failed: if its connection is going down, let paramiko finish noticing.
        Its reader thread wakes the channels with EOF *before* it marks the transport inactive, so
        the next request could otherwise pick the dying transport and fail too instead of
        reconnecting. A live connection (one channel's timeout) is not waited for."""
        transport = getattr(client.sock, "transport", None) if client.sock is not None else None
        if transport is not None and client.sock.closed and transport.is_alive():
            transport.join(1.0)

    def _acquire_slot(self) -> int:
        """Wait for room under the session budget (MaxSessions covers SFTP and exec channels
        alike); returns the connection generation the slot belongs to. An idle SFTP channel is
        closed to make room when nothing else is free."""
        waited = 0.0
        with self._cond:
            while True:
                if self._open < self.max_sessions:
                    self._open += 1
                    return self._generation
                if self._idle:
                    victim = self._idle.pop(0)
                    self._open -= 1
                    try:
                        victim.close()
                    except Exception:
                        pass
                    continue
                if waited >= SLOT_WAIT:
                    # Every channel held by a transfer waiting for another: let the queue retry.
                    raise Transient(f"No free SSH channel to {self.target.hostname} (MaxSessions {self.max_sessions})")
                self._cond.wait(1.0)
                waited += 1.0

    def _release_slot(self, generation: int) -> None:
        with self._cond:
            if generation == self._generation:
                self._open -= 1
            self._cond.notify()

    def _refused(self, exc: BaseException, generation: int) -> None:
        """The server said no to one more channel: its real MaxSessions is what is open now.
        Remember it and wait for a channel instead of failing."""
        with self._cond:
            if generation == self._generation:
                self._open -= 1
                self.max_sessions = max(1, self._open)
            self._cond.notify()
        log.info("%s refused another channel (%s); using at most %d", self.target.hostname, exc, self.max_sessions)

    def _open_channel(self, make: Any) -> tuple[Any, int]:
        import paramiko

        for _attempt in range(50):
            transport = self.transport()
            generation = self._acquire_slot()
            try:
                return make(transport), generation
            except (paramiko.ChannelException, paramiko.SSHException) as exc:
                # paramiko keeps one refusal per transport: of two threads refused at once, one
                # gets the ChannelException and the other "Unable to open channel." (a refusal
                # too; taken for a lost connection it turned tar batches off under MaxSessions 2).
                refused = isinstance(exc, paramiko.ChannelException) or (
                    str(exc) == "Unable to open channel." and transport.is_active()
                )
                if not refused:
                    self._release_slot(generation)
                    raise _map_error(exc, self.target.hostname) from exc
                if self._open <= 1 and generation == self._generation:
                    self._release_slot(generation)
                    raise Transient(f"{self.target.hostname} refused every channel", detail=str(exc)) from exc
                self._refused(exc, generation)
            except Exception as exc:
                self._release_slot(generation)
                raise _map_error(exc, self.target.hostname) from exc
        raise Transient(f"{self.target.hostname} keeps refusing channels")

    def _borrow(self) -> Any:

        with self._cond:
            while self._idle:
                idle = self._pop_idle()
                if idle is not None:
                    return idle
        client, generation = self._open_channel(lambda t: fastpath.open_sftp(t, WINDOW, MAX_PACKET))
        if client is None:
            self._release_slot(generation)
            raise Transient(f"{self.target.hostname} did not start its SFTP subsystem")
        setattr(client, "_ferry_generation", generation)  # noqa: B010 - tags channels of this login
        return client

    def _pop_idle(self) -> Any | None:
        """The newest idle channel, or None after closing it if its connection went down while it
        waited (the caller holds ``_cond``)."""
        client = self._idle.pop()
        chan = client.sock
        transport = chan.get_transport() if chan is not None else None
        if chan is not None and not chan.closed and transport is not None and transport.is_active():
            return client
        if getattr(client, "_ferry_generation", -1) == self._generation:
            self._open -= 1
        try:
            client.close()
        except Exception:
            pass
        return None

    def borrow_nowait(self) -> Any | None:
        """An extra SFTP channel only if one is free right now (keeping one session for exec):
        parallel range streams take what is spare and never wait for, or starve, other files."""
        import paramiko

        with self._cond:
            while self._idle:
                idle = self._pop_idle()
                if idle is not None:
                    return idle
            if self._open >= self.max_sessions - 1:
                return None
            self._open += 1
            generation = self._generation
        try:
            transport = self.transport()
            client = fastpath.open_sftp(transport, WINDOW, MAX_PACKET)
        except paramiko.ChannelException as exc:
            self._refused(exc, generation)
            return None
        except Exception:
            self._release_slot(generation)
            return None
        if client is None:
            self._release_slot(generation)
            return None
        setattr(client, "_ferry_generation", generation)  # noqa: B010 - tags channels of this login
        return client

    def exec_nowait(self, command: bytes) -> tuple[Any, Callable[[], None]] | None:
        """Start ``command`` on an exec channel only if a session is free right now (one stays
        spare): work that only saves time never waits for, or starves, the transfers. Returns
        the channel and the function that gives its session back after it is closed."""
        import paramiko

        with self._cond:
            if self._open >= self.max_sessions - 1:
                return None
            self._open += 1
            generation = self._generation
        chan = None
        try:
            chan = self.transport().open_session(timeout=30)
            chan.exec_command(command)
        except paramiko.ChannelException as exc:
            self._refused(exc, generation)
            return None
        except Exception:
            if chan is not None:
                chan.close()
            self._release_slot(generation)
            return None
        return chan, lambda: self._release_slot(generation)

    def _give_back(self, client: Any, ok: bool) -> None:
        with self._cond:
            current = getattr(client, "_ferry_generation", -1) == self._generation
            if ok and current and client.sock.active and not client.sock.closed:
                self._idle.append(client)
            else:
                if current:
                    self._open -= 1
                try:
                    client.close()
                except Exception:
                    pass
            self._cond.notify()

    def shell_run(self, command: bytes, timeout: float = 600) -> tuple[int, bytes]:
        """Run ``command`` (stderr discarded) in one long-lived remote ``sh``: a session, a login
        and a shell start once per host instead of once per hash batch. Any trouble closes it;
        the caller then falls back to :meth:`run`."""
        with self._shell_lock:
            if self.max_sessions < 4:
                # A tight MaxSessions: a session held for hashing would starve the transfers.
                self._close_shell()
                raise Unsupported("no spare session for a long-lived shell")
            try:
                if self._shell is None or self._shell.closed or self._shell_generation != self._generation:
                    self._close_shell()
                    chan, generation = self._open_channel(lambda transport: transport.open_session(timeout=30))
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

    def _close_shell(self) -> None:
        chan, self._shell = self._shell, None
        if chan is not None:
            try:
                chan.close()
            finally:
                self._release_slot(self._shell_generation)

    def run(
        self,
        command: str | bytes,
        timeout: float = 600,
        stdin: bytes | Sequence[bytes | memoryview] | Iterator[Sequence[bytes | memoryview]] | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Run ``command`` on an exec channel (one session slot while it runs), ``stdin`` (one
        buffer, several sent as their concatenation without joining them, or an iterator of
        such groups, each made and sent in turn) sent by the lean channel path (tar batches send
        megabytes this way)."""
        from ferry.backends.sftp import fastpath

        chan, generation = self._open_channel(
            lambda transport: transport.open_session(window_size=WINDOW, max_packet_size=MAX_PACKET, timeout=30)
        )
        try:
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin is not None:
                # Only a command that reads its input gets our EOF, and such a command must wait
                # for it: paramiko sends EOF outside the channel's lock, so an EOF racing the
                # CLOSE of a command that already ended can reach sshd after the channel is gone,
                # and sshd then drops the whole connection (every transfer on it).
                if isinstance(stdin, bytes):
                    groups: Iterable[Sequence[bytes | memoryview]] = [[stdin]]
                elif isinstance(stdin, Sequence):
                    groups = [cast(Sequence[bytes | memoryview], stdin)]
                else:
                    groups = stdin
                for group in groups:
                    if any(group):
                        fastpath.send_data(chan, group)
                chan.shutdown_write()
            out = chan.makefile("rb").read()
            err = chan.makefile_stderr("rb").read()
            return chan.recv_exit_status(), out, err
        except FerryError:
            raise
        except Exception as exc:
            raise _map_error(exc, self.target.hostname) from exc
        finally:
            chan.close()
            self._release_slot(generation)

    def detect_hash_tools(self) -> None:
        """Which remote tools compute which checksum. ``openssl dgst -r`` is preferred where it
        gives the right answer: it uses the CPU's SHA instructions, which Debian's coreutils
        do not (one 256 MiB file: sha256sum 1.07 s, openssl 0.21 s on the test machine); its
        ``-r`` output is coreutils' format, odd names escaped the same way."""
        probe = (
            "for t in sha256sum sha1sum md5sum b3sum; do command -v $t >/dev/null 2>&1 && echo $t; done; "
            "for a in sha256 sha1 md5; do printf 'openssl-%s ' $a; "
            "openssl dgst -$a -r </dev/null 2>/dev/null | cut -c1-64 || echo; done"
        )
        try:
            _rc, out, _err = self.run(probe, timeout=30)
        except Exception:  # exec refused (sftp-only account): size-only verification, said honestly
            return
        words = out.decode(errors="replace").split()
        found = set(words)
        tools = {algo: tool for algo, tool in _HASH_TOOLS.items() if tool in found}
        for algo, empty in _EMPTY_DIGESTS.items():
            # Only an openssl that prints the known digest of nothing, in -r format, is trusted.
            name = f"openssl-{algo}"
            if name in words and words.index(name) + 1 < len(words) and words[words.index(name) + 1] == empty:
                tools[algo] = f"openssl dgst -{algo} -r"
        self.hash_tools = tools

    def close(self) -> None:
        with self._shell_lock:
            self._close_shell()
        with self._lock:
            for c in self._idle:
                try:
                    c.close()
                except Exception:
                    pass
            self._idle.clear()
            if self._transport is not None:
                self._transport.close()
                self._transport = None
            if self._jump is not None:
                self._jump.close()


def _agent_keys(identity_agent: str | None, identities_only: bool, files: list[str]) -> list[Any]:
    """Keys the agent offers, as OpenSSH would use them: ``IdentityAgent`` picks the socket
    (``none`` turns the agent off); with ``IdentitiesOnly`` only agent keys matching a listed
    IdentityFile's public key are tried."""
    import os

    import paramiko
    from paramiko.agent import AgentSSH

    if identity_agent is not None and identity_agent.lower() == "none":
        return []
    try:
        if identity_agent is None or identity_agent == "SSH_AUTH_SOCK":
            keys = list(paramiko.Agent().get_keys())
        else:
            path = os.environ.get(identity_agent[1:], "") if identity_agent.startswith("$") else identity_agent
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            agent = AgentSSH()
            agent._connect(sock)  # type: ignore[attr-defined]  # paramiko's only way to a given socket
            keys = list(agent.get_keys())
    except (paramiko.SSHException, OSError) as exc:
        log.info("no agent keys: %s", exc)
        return []
    if not identities_only:
        return keys
    wanted = set()
    for f in files:
        try:
            with open(f + ".pub", encoding="ascii") as pub:
                wanted.add(pub.read().split()[1])
        except (OSError, IndexError):
            continue
    return [k for k in keys if k.get_base64() in wanted]


def _default_identities() -> list[str]:
    import os

    home = os.path.expanduser("~/.ssh")
    names = ("id_ed25519", "id_ecdsa", "id_rsa")
    return [os.path.join(home, n) for n in names if os.path.exists(os.path.join(home, n))]


def _load_key(path: str, title: str) -> Any:
    import paramiko

    try:
        return paramiko.PKey.from_path(path)
    except FileNotFoundError:
        return None
    except (paramiko.PasswordRequiredException, TypeError):
        # paramiko 5 raises TypeError ("Key is password-protected...") for encrypted OpenSSH keys.
        passphrase = prompts.prompter().ask(title, f"Enter passphrase for key '{path}': ", echo=False)
        try:
            return paramiko.PKey.from_path(path, passphrase.encode())  # type: ignore[arg-type]  # needs bytes
        except (paramiko.SSHException, ValueError, TypeError) as exc:
            raise AuthError(f"Wrong passphrase for key {path}") from exc
    except (paramiko.SSHException, OSError, ValueError) as exc:
        log.warning("cannot use key %s: %s", path, exc)
        return None


def _saved_password(site: str | None) -> str | None:
    if not site:
        return None
    from ferry.credentials import keychain

    try:
        return keychain.get_secret(keychain.site_secret_key(site))
    except FerryError:
        return None


_CODE_WORDS = ("code", "otp", "token", "verification", "one-time", "passcode", "pin", "duo", "factor")


def _is_password_prompt(prompt: str, text: str) -> bool:
    """Only a plain "Password:" prompt gets the saved password, never a one-time code's."""
    p = prompt.strip().lower()
    if not (p.endswith("password:") or p == "password"):
        return False
    return not any(w in p or w in text.lower() for w in _CODE_WORDS)


def _known_hosts_line(path: str, name: str, key_type: str) -> int | None:
    import paramiko

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) < 3 or parts[1] != key_type:
                    continue
                for host in parts[0].split(","):
                    if host == name or (host.startswith("|1|") and paramiko.HostKeys.hash_host(name, host) == host):
                        return n
    except OSError:
        return None
    return None


def _target_for(spec: str) -> SshTarget:
    """A ProxyJump hop: ``[user@]host[:port]`` or an ssh_config alias."""
    user = None
    port = None
    if spec.startswith("ssh://"):  # ProxyJump also takes ssh://[user@]host[:port]
        spec = spec[len("ssh://") :].rstrip("/")
    if "@" in spec:
        user, _, spec = spec.rpartition("@")
    if spec.count(":") == 1:
        spec, _, p = spec.partition(":")
        port = int(p)
    return resolve(spec, user, port)


_hosts: dict[str, _Host] = {}
_hosts_lock = threading.Lock()


def _site_for(address: Address) -> Any:
    """The saved site whose options apply: the address's own, else the one saved SFTP site on
    the same host (a queued job records the plain URL without the site's name)."""
    from ferry.credentials.sites import SiteStore

    try:
        store = SiteStore()
        if address.site:
            site = store.get(address.site)
            return site if site is not None and site.address.startswith("sftp://") else None
        same = []
        for s in store.list():
            if not s.address.startswith("sftp://"):
                continue
            base = s.base_address()
            if base.host == address.host and (address.user is None or base.user in (None, address.user)):
                same.append(s)
        return same[0] if len(same) == 1 else None
    except FerryError as exc:  # a broken sites.toml must not stop plain ssh_config access
        log.warning("saved sites not used: %s", exc)
        return None


def _host_for(address: Address) -> _Host:
    site = _site_for(address)
    key = address.endpoint + (f"#site={site.name}" if site is not None else "")
    with _hosts_lock:
        host = _hosts.get(key)
        if host is None:
            base = site.base_address() if site is not None else None
            user = address.user or (base.user if base is not None else None)
            port = address.port or (base.port if base is not None else None)
            target = resolve(address.host, user, port)
            if site is not None:
                given = {"user_given": user is not None, "port_given": port is not None}
                apply_site(target, site.name, dict(site.options), **given)
            host = _Host(target)
            raw = dict(site.options).get("streams", "").strip() if site is not None else ""
            if raw and site is not None:
                host.site_streams = stream_count(raw, f"site '{site.name}': streams")
            _hosts[key] = host
        return host


def stream_count(raw: str, where: str) -> int:
    """A configured stream count: a whole number from 1 to MAX_STREAMS."""
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_STREAMS:
        raise UsageError(f"{where} must be a whole number from 1 to {MAX_STREAMS}, not {raw!r}")
    return int(raw)


def _b(path: str) -> bytes:
    """Remote paths go out as bytes: names that are not UTF-8 arrive as surrogate escapes and
    must reach the server exactly as it sent them (paramiko would encode str strictly)."""
    return path.encode("utf-8", "surrogateescape")


def _text(raw: str | bytes | None) -> str:
    if raw is None:
        return ""
    return raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw


def _listdir(client: Any, path: str, depth: int = 16) -> Iterator[Any]:
    """A folder's entries page by page (READDIR batches, ``depth`` requests in flight).

    paramiko's own ``listdir_iter`` decodes names strictly (a non-UTF-8 name breaks the whole
    listing) and leaves the handle open when abandoned; this keeps names exact as surrogate
    escapes and always closes the handle.
    """
    from paramiko.message import Message
    from paramiko.sftp import CMD_CLOSE, CMD_HANDLE, CMD_NAME, CMD_OPENDIR, CMD_READDIR, CMD_STATUS
    from paramiko.sftp_attr import SFTPAttributes

    t, msg = client._request(CMD_OPENDIR, _b(path))
    if t != CMD_HANDLE:
        raise OSError(errno.EIO, "Expected a folder handle")
    handle = msg.get_binary()
    pending: list[int] = []
    done = False
    try:
        while not done:
            while len(pending) < depth:
                pending.append(client._async_request(type(None), CMD_READDIR, handle))
            num = pending.pop(0)
            while True:
                t, data = client._read_packet()
                reply = Message(data)
                if reply.get_int() == num:
                    break  # replies come in order; anything else is a stale reply to skip
            if t == CMD_STATUS:
                try:
                    client._convert_status(reply)
                except EOFError:
                    done = True
                    continue
            if t != CMD_NAME:
                raise OSError(errno.EIO, f"Unexpected SFTP reply {t} to READDIR")
            for _ in range(reply.get_int()):
                name = reply.get_string().decode("utf-8", "surrogateescape")
                longname = reply.get_string().decode("utf-8", "replace")
                yield SFTPAttributes._from_msg(reply, name, longname)  # type: ignore[attr-defined]
    finally:
        # Drain what is still in flight so the channel stays usable for the next borrower.
        for num in pending:
            try:
                while Message(client._read_packet()[1]).get_int() != num:
                    pass
            except Exception:
                break
        try:
            client._request(CMD_CLOSE, handle)
        except Exception:
            pass


def _entry(path: str, name: str, attr: Any) -> Entry:
    mode = attr.st_mode or 0
    if stat_mod.S_ISDIR(mode):
        kind, size = Kind.DIR, None
    elif stat_mod.S_ISLNK(mode):
        kind, size = Kind.LINK, attr.st_size
    elif stat_mod.S_ISREG(mode):
        kind, size = Kind.FILE, attr.st_size
    else:
        kind, size = Kind.SPECIAL, None
    mtime = datetime.fromtimestamp(attr.st_mtime, UTC) if attr.st_mtime is not None else None
    meta = {"special": "special file"} if kind is Kind.SPECIAL else {}
    return Entry(path, name, kind, size, mtime, None, stat_mod.S_IMODE(mode), {}, meta)


class _Reader:
    """A remote file opened for reading, borrowing one SFTP channel until closed."""

    def __init__(self, host: _Host, path: str, offset: int, length: int | None) -> None:
        self._cm: Any = host.sftp()
        client = self._cm.__enter__()
        try:
            self._f = client.open(_b(path), "rb", bufsize=1 << 20)
            st, head = _stat_and_first_read(client, self._f, offset, host.request_size)
            if stat_mod.S_ISDIR(st.st_mode or 0):
                self._f.close()
                raise IsADirectory(f"Is a folder: {path}")
            size = st.st_size or 0
            self._f.MAX_REQUEST_SIZE = host.request_size
            want = (size - offset) if length is None else min(length, size - offset)
            self._left = max(0, want)
            self._head = memoryview(b"")
            self._parallel: ParallelRangeReader | None = None
            if self._left <= len(head):
                # A small file arrived whole with the size: close without waiting for the
                # reply (it is skipped later), one round trip less per file.
                self._head = memoryview(head)[: self._left]
                from paramiko.sftp import CMD_CLOSE

                client._async_request(type(None), CMD_CLOSE, self._f.handle)
                self._f._closed = True
                self._cm.__exit__(None, None, None)
                self._cm = None
                self.path = path
                return
            # The rest streams with READ_DEPTH requests in flight (paramiko's prefetch polls
            # with sleeps); files of PARALLEL_MIN and more also on spare channels, in parallel.
            from paramiko.sftp import CMD_CLOSE

            self._head = memoryview(head)
            start, rest = offset + len(head), self._left - len(head)
            extra = []
            streams = host.streams(up=False) if rest >= PARALLEL_MIN else 1
            if streams > 1:
                extra = [c for c in (host.borrow_nowait() for _ in range(streams - 1)) if c is not None]
            client._async_request(type(None), CMD_CLOSE, self._f.handle)  # the streams open their own
            self._f._closed = True
            self._parallel = ParallelRangeReader(
                [client, *extra],
                _b(path),
                start,
                rest,
                lambda c, ok: None if c is client else host._give_back(c, ok),
                READ_DEPTH,
                host.request_size,
                in_order=host.request_size == REQUEST,  # an OpenSSH server: replies come in order
            )
        except BaseException as exc:
            self._cm.__exit__(type(exc), exc, None)
            raise _map_error(exc, path) from exc
        self.path = path

    def readinto(self, buf: memoryview | bytearray) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buf)
        if len(self._head):
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            self._left -= n
            return n
        try:
            if self._parallel is not None:
                got = self._parallel.readinto(view[: self._left])
                self._left -= got
                return got
            data = self._f.read(min(len(view), self._left))
        except Exception as exc:
            self._failed = _map_error(exc, self.path)
            raise self._failed from exc
        n = len(data)
        view[:n] = data
        self._left -= n
        return n

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n < 0 else min(n, self._left)
        if self._parallel is not None or len(self._head):
            buf = bytearray(n)
            got = 0
            while got < n:
                k = self.readinto(memoryview(buf)[got:])
                if not k:
                    break
                got += k
            return bytes(buf[:got])
        data: bytes = self._f.read(n)
        self._left -= len(data)
        return data

    def close(self) -> None:
        if self._cm is None:  # a small file, already closed
            return
        try:
            if self._parallel is not None:
                self._parallel.close()
            else:
                self._f.close()
        finally:
            # A read that failed hands its channel back as failed: a dropped connection's channel
            # must not wait in the idle pool for the next file (paramiko may not yet have marked
            # the transport inactive, so the pool cannot tell by itself).
            failed = getattr(self, "_failed", None)
            self._cm.__exit__(type(failed) if failed else None, failed, None)
            self._cm = None

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_back_replies(
    client: Any, reads: list[int], close: int, hasher: Any | None, size: int, failure: BaseException | None
) -> str | None:
    """Collect the replies of a read-back (READs sent behind the last WRITEs, then CLOSE): every
    reply is read even after a failure, so the channel stays in step for the next file; the
    first failure is raised after that. Returns the digest of the bytes the server sent back,
    ``short:N`` when it held fewer than ``size`` (equal to no digest: the copy reports a
    mismatch), or None without a hasher."""
    from paramiko.sftp import CMD_DATA

    got = 0
    for num in reads:
        try:
            t, msg = client._read_response(num)
            if t == CMD_DATA:
                chunk: bytes = msg.get_binary()
                if hasher is not None and failure is None:
                    hasher.update(chunk)
                    got += len(chunk)
        except EOFError:
            pass  # the file is shorter than what was written: the size check says so
        except Exception as exc:
            failure = failure or exc
    try:
        client._read_response(close)
    except Exception as exc:
        failure = failure or exc
    if failure is not None:
        raise failure
    if hasher is None:
        return None
    if got != size:
        return f"short:{got}"
    return str(hasher.hexdigest())


def _stat_and_first_read(client: Any, f: Any, offset: int, size: int) -> tuple[Any, bytes]:
    """FSTAT and the first READ in flight together: a small file's size and bytes in one round
    trip. Both replies are read whatever happens (the channel stays in step); a READ error
    (a folder, say) is left for the caller to judge from the attributes."""
    from paramiko.sftp import CMD_ATTRS, CMD_DATA, CMD_FSTAT, CMD_READ, int64
    from paramiko.sftp_attr import SFTPAttributes

    n_stat = client._async_request(type(None), CMD_FSTAT, f.handle)
    n_read = client._async_request(type(None), CMD_READ, f.handle, int64(offset), int(size))
    st: Any = None
    head = b""
    failure: BaseException | None = None
    try:
        t, msg = client._read_response(n_stat)
        if t != CMD_ATTRS:
            raise OSError(errno.EIO, "Expected attributes")
        st = SFTPAttributes._from_msg(msg)  # type: ignore[attr-defined]
    except Exception as exc:
        failure = exc
    try:
        t, msg = client._read_response(n_read)
        if t == CMD_DATA:
            head = msg.get_binary()
    except Exception:  # EOF (empty file) or EISDIR: the attributes say which
        pass
    if failure is not None:
        raise failure
    return st, head


def _setstat_then(client: Any, path: bytes, mtime: datetime | None, how: str, new: bytes) -> None:
    """Set ``path``'s times (if asked) and rename it, both requests in flight at once: one round
    trip per committed file instead of two. The server answers in order; both answers are read
    even when the first is an error, so the channel stays in step."""
    from paramiko.sftp import CMD_EXTENDED, CMD_RENAME, CMD_SETSTAT
    from paramiko.sftp_attr import SFTPAttributes

    nums = []
    if mtime is not None:
        attr = SFTPAttributes()
        attr.st_atime = attr.st_mtime = int(mtime.timestamp())  # SFTP v3 carries whole seconds
        nums.append(client._async_request(type(None), CMD_SETSTAT, path, attr))
    if how == "rename":
        nums.append(client._async_request(type(None), CMD_RENAME, path, new))
    else:
        nums.append(client._async_request(type(None), CMD_EXTENDED, how, path, new))
    errors: list[BaseException | None] = []
    for num in nums:
        try:
            client._read_response(num)
            errors.append(None)
        except Exception as exc:
            errors.append(exc)
    if errors[-1] is not None:
        raise errors[-1]
    if errors[0] is not None:  # renamed, only the time could not be set: not worth failing the file
        log.warning("could not set the modification time of %s: %s", _text(new), errors[0])


def _send_write(client: Any, handle: bytes, pos: int, data: memoryview) -> int:
    """Send one SFTP WRITE request; returns its request number (its reply is read later with
    ``client._read_response``). paramiko's own ``_async_request`` copies the data four times
    before the channel sees it and then re-slices the rest of the message after every 32 KiB
    SSH packet it sends (a 255 KiB WRITE copied ~1 MB that way); profiled, building and sending
    messages was two thirds of the upload's Python time. Here the data is copied once, into the
    plaintext of the SSH packets (``fastpath.send_data``)."""
    from paramiko.sftp import CMD_WRITE

    with client._lock:  # numbering as _async_request does, so _read_response knows the reply
        num: int = client.request_number
        client._expecting[num] = type(None)
        client.request_number = num + 1
    head = struct.pack(">IBII", 21 + len(handle) + len(data), CMD_WRITE, num, len(handle))  # length after itself
    # The data goes from the caller's buffer straight into the SSH packets' plaintext.
    fastpath.send_data(client.sock, (head + handle + struct.pack(">QI", pos, len(data)), data))
    return num


class _Sender:
    """Runs ``send`` on a thread of its own for each chunk put in, in order, with at most
    SEND_AHEAD bytes waiting. A failure stops it; the next :meth:`put` (or :meth:`close`)
    raises it, so a full disk still fails the file early."""

    def __init__(self, send: Callable[[memoryview], None]) -> None:
        self._send = send
        self._queue: deque[memoryview] = deque()
        self._spare: list[bytearray] = []  # buffers already sent, reused (fresh ones page-fault)
        self._queued = 0  # bytes put and not yet sent
        self._done = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sftp-send")
        self._thread.start()

    def put(self, data: bytes | bytearray | memoryview) -> None:
        """Queue a copy of ``data`` (the caller reuses its buffer at once)."""
        view = memoryview(data).cast("B")
        with self._cond:
            while self._queued >= SEND_AHEAD and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            spare = self._spare.pop() if self._spare else None
        if spare is None or len(spare) < len(view):
            spare = bytearray(len(view))
        spare[: len(view)] = view
        with self._cond:
            self._queue.append(memoryview(spare)[: len(view)])
            self._queued += len(view)
            self._cond.notify_all()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._done:
                        self._cond.wait()
                    if not self._queue:
                        return
                    data = self._queue.popleft()
                self._send(data)
                with self._cond:
                    self._queued -= len(data)
                    if len(self._spare) < 4:
                        self._spare.append(cast(bytearray, data.obj))  # every byte is in packets by now
                    self._cond.notify_all()
        except BaseException as exc:
            with self._cond:
                self._error = exc
                self._queue.clear()
                self._cond.notify_all()

    def close(self, *, discard: bool) -> None:
        with self._cond:
            self._done = True
            if discard:
                self._queue.clear()
            self._cond.notify_all()
        self._thread.join()
        if self._error is not None and not discard:
            raise self._error


class SFTPWriter(Writer):
    """Writes go out as pipelined WRITE requests of the server's size, their replies read as they
    arrive (a full disk fails the file early, and the bytes the server has acknowledged are
    known). A big file being verified is hashed on the server while it uploads (FollowingHash)."""

    _follow: FollowingHash | None = None
    _sender: _Sender | None = None
    _ranges: ParallelRangeWriter | None = None
    evidence = (Evidence.HOST_TOOL,)  # finish() returns the host's own sha256sum/b3sum of the file

    def __init__(
        self,
        backend: SFTPBackend,
        final_path: str,
        token: str,
        resume: bool,
        readback: str | None,
        size: int | None = None,
    ) -> None:
        self.backend = backend
        folder, name = posixpath.split(final_path)
        self.final_path = final_path
        self.temp_path = posixpath.join(folder, temp_name(name, token))
        self.offset = 0
        self._written = 0
        self.verified_note = ""
        self._readback = readback
        self._cm: Any = backend._host.sftp()
        client = self._cm.__enter__()
        self._client = client
        self._closed = False
        try:
            self._f = self._open(client, resume, readback is not None)
            if resume and size is not None and size >= PARALLEL_MIN and 0 < self.offset <= size:
                # Parallel streams (this run's or an earlier one's) may have left holes near the
                # end of the partial file: resume only below where none can be.
                self.offset = safe_resume_offset(self.offset)
            if resume and self.offset and readback:
                # Shown in the file's record (the copy path adds it to "sha256 match").
                self.verified_note = (
                    f"resumed after {self.offset} bytes already on the server; that prefix was checked "
                    f"by the {readback} of the whole file as the server holds it"
                )
            self._handle: bytes = self._f.handle
            self._step = backend._host.request_size
            self._pending: deque[tuple[int, int]] = deque()  # (request, end offset) of unacknowledged WRITEs
            self.acknowledged = self.offset  # bytes the server has confirmed writing
            if readback and size is not None and size >= FOLLOW_MIN:
                self._start_follower(readback)
            if size is not None and size >= PARALLEL_MIN and size > self.offset:
                self._start_ranges(client)
            if self._ranges is None and size is not None and size - self.offset >= SEND_THREAD_MIN:
                self._sender = _Sender(self._send)
        except BaseException as exc:
            self._cm.__exit__(type(exc), exc, None)
            raise _map_error(exc, final_path) from exc

    def _open(self, client: Any, resume: bool, readable: bool) -> Any:
        """OPEN the partial file (readable too when verifying: a small file is read back on this
        handle). Resuming, a STAT goes out in the same flight: the server creates the file if it
        is missing, then says how much it holds (one round trip, was two)."""
        import paramiko
        from paramiko.sftp import (
            CMD_ATTRS,
            CMD_HANDLE,
            CMD_OPEN,
            CMD_STAT,
            SFTP_FLAG_CREATE,
            SFTP_FLAG_READ,
            SFTP_FLAG_TRUNC,
            SFTP_FLAG_WRITE,
        )
        from paramiko.sftp_attr import SFTPAttributes

        path = _b(self.temp_path)
        flags = SFTP_FLAG_WRITE | SFTP_FLAG_CREATE | (SFTP_FLAG_READ if readable or resume else 0)
        if not resume:
            flags |= SFTP_FLAG_TRUNC
        n_open = client._async_request(type(None), CMD_OPEN, path, flags, SFTPAttributes())
        n_stat = client._async_request(type(None), CMD_STAT, path) if resume else None
        failure: BaseException | None = None
        handle = b""
        try:  # both replies are read whatever happens: the channel stays in step
            t, msg = client._read_response(n_open)
            if t != CMD_HANDLE:
                raise OSError(errno.EIO, "Expected a file handle")
            handle = msg.get_binary()
        except Exception as exc:
            failure = exc
        if n_stat is not None:
            try:
                t, msg = client._read_response(n_stat)
                if t == CMD_ATTRS and failure is None:
                    self.offset = SFTPAttributes._from_msg(msg).st_size or 0  # type: ignore[attr-defined]
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return paramiko.SFTPFile(client, handle, "r+b" if readable or resume else "wb", 1 << 20)

    def _start_follower(self, algo: str) -> None:
        tool = self.backend._host.hash_tools.get(algo)
        if tool is None:
            return
        started = self.backend._host.exec_nowait(follow_command(self.temp_path, tool))
        if started is not None:
            self._follow = FollowingHash(*started)
            self._follow.advance(self.offset)  # a resumed prefix is already on the server

    def _start_ranges(self, client: Any) -> None:
        """Big files: parallel byte-range streams on channels that are free right now."""
        from paramiko.sftp import CMD_CLOSE, CMD_HANDLE, CMD_OPEN, SFTP_FLAG_WRITE
        from paramiko.sftp_attr import SFTPAttributes

        host = self.backend._host
        streams = host.streams(up=True)
        extra = [c for c in (host.borrow_nowait() for _ in range(streams - 1)) if c is not None] if streams > 1 else []
        if not extra:
            return
        path = _b(self.temp_path)

        def open_handle(c: Any) -> bytes:
            t, msg = c._request(CMD_OPEN, path, SFTP_FLAG_WRITE, SFTPAttributes())
            if t != CMD_HANDLE:
                raise OSError(errno.EIO, "Expected a file handle")
            return cast(bytes, msg.get_binary())

        def acknowledged(n: int) -> None:
            if self._follow is not None:
                self._follow.advance(n)

        self._extra = extra
        self._ranges = ParallelRangeWriter(
            [client, *extra],
            [self._handle, *[None] * len(extra)],
            self.offset,
            self._step,
            _send_write,
            lambda c, num: c._read_response(num),
            open_handle,
            lambda c, h: c._request(CMD_CLOSE, h),
            lambda c: c.sock.recv_ready(),
            acknowledged,
        )

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._ranges is not None:
            try:
                self._ranges.put(data)
            except Exception as exc:
                raise _map_error(exc, self.final_path) from exc
            self._written += len(memoryview(data).cast("B"))
            return
        if self._sender is not None:
            try:
                self._sender.put(data)
            except Exception as exc:
                raise _map_error(exc, self.final_path) from exc
            return
        self._send(data)

    def _send(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        client, step, pending = self._client, self._step, self._pending
        pos = self.offset + self._written
        try:
            for start in range(0, len(view), step):
                piece = view[start : start + step]
                num = _send_write(client, self._handle, pos, piece)
                pos += len(piece)
                self._written += len(piece)
                pending.append((num, pos))
            # Replies already here are read now, and the oldest once too many are out.
            while pending and (len(pending) > WRITE_DEPTH or client.sock.recv_ready()):
                self._ack()
            if self._follow is not None:
                self._follow.advance(self.acknowledged)
        except Exception as exc:
            raise _map_error(exc, self.final_path) from exc

    def _ack(self) -> None:
        """Read the oldest WRITE's reply; after a failure every other reply is read too (the
        channel stays in step for the next borrower) before the failure is raised."""
        num, end = self._pending.popleft()
        try:
            self._client._read_response(num)
        except Exception:
            try:
                self._drain()
            except Exception:
                pass
            raise
        self.acknowledged = end

    def _drain(self) -> None:
        """Read every outstanding WRITE reply; the first failure is raised after all are read."""
        failure: BaseException | None = None
        while self._pending:
            num, end = self._pending.popleft()
            try:
                self._client._read_response(num)
                if failure is None:
                    self.acknowledged = end
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def _read_back(self, algo: str) -> str:
        """Hash what the server now holds by reading it back on the open handle: the READs go
        out right behind the last WRITEs (the server answers in order) and need no remote
        process, no exec channel and no batch to wait for, where a remote hash costs a process
        start per batch (small files spent most of their time waiting for it). The CLOSE goes
        out behind the READs: one wait for all of it, and the handle is closed."""
        from paramiko.sftp import CMD_CLOSE, CMD_READ, int64

        from ferry.core.hashing import new_hasher

        f, client = self._f, self._client
        size = self.offset + self._written
        step = self.backend._host.request_size
        nums = [
            (client._async_request(type(None), CMD_READ, f.handle, int64(o), min(step, size - o)), o)
            for o in range(0, size, step)
        ]
        close = client._async_request(type(None), CMD_CLOSE, f.handle)
        f._closed = self._closed = True
        hasher = new_hasher(algo)
        failure: BaseException | None = None
        try:
            self._drain()
        except Exception as exc:
            failure = exc
        digest = read_back_replies(client, [num for num, _o in nums], close, hasher, size, failure)
        return cast(str, digest)  # never None: a hasher was given

    def _close_file(self) -> None:
        self._stop_sender(discard=False)
        if not self._closed:
            self._closed = True
            failure: BaseException | None = None
            try:
                self._drain()
            except Exception as exc:
                failure = exc
            try:
                self._f.close()
            except Exception as exc:
                failure = failure or exc
            if failure is not None:
                raise _map_error(failure, self.final_path) from failure

    def _stop_sender(self, *, discard: bool) -> None:
        """Wait for the sender thread to send what it holds (or drop it, ``discard``); its
        failure is raised here unless discarding."""
        sender, self._sender = self._sender, None
        if sender is not None:
            try:
                sender.close(discard=discard)
            except Exception as exc:
                raise _map_error(exc, self.final_path) from exc
        ranges, self._ranges = self._ranges, None
        if ranges is not None:
            ok = False
            try:
                ranges.close(discard=discard)
                self.acknowledged = ranges.acknowledged
                ok = not discard
            except Exception as exc:
                raise _map_error(exc, self.final_path) from exc
            finally:
                for c in self._extra:
                    self.backend._host._give_back(c, ok and not any(ranges.handles_open[1:]))
                self._extra = []

    def finish(self) -> str | None:
        try:
            self._stop_sender(discard=False)
        except BaseException:
            self._stop_follower()
            raise
        if self._readback is not None and not self._closed and self.offset + self._written <= READBACK_MAX:
            self._stop_follower()  # the source turned out small: reading back is quicker
            try:
                digest = self._read_back(self._readback)
            except Exception as exc:
                raise _map_error(exc, self.final_path) from exc
            self._close_file()
            return digest
        try:
            self._close_file()
        except BaseException:
            self._stop_follower()
            raise
        # Give the channel back before hashing: the remote hash needs an exec channel of its own,
        # and under a small MaxSessions every worker holding one while waiting for another deadlocks.
        self._release()
        follow, self._follow = self._follow, None
        if follow is not None:
            followed = follow.result(self.offset + self._written)
            if followed is not None:
                return followed
            log.info("the remote hash that followed %s gave no answer; hashing it again", self.temp_path)
        if self._readback is None:
            return None
        if self._readback not in self.backend.capabilities.hashes:  # (detects the host's tools once)
            # The host hashes other algorithms but has no tool for this one (most clusters have
            # no b3sum): the file is good as far as its size goes, and the record says exactly
            # that. Failing it after the whole upload would throw the transfer away.
            tool = _HASH_TOOLS.get(self._readback, self._readback)
            self.verified_note = f"the server has no {tool} to check {self._readback}"
            return None
        return self.backend.hash(self.temp_path, self._readback)

    def _stop_follower(self) -> None:
        follow, self._follow = self._follow, None
        if follow is not None:
            follow.close()

    def _channel(self) -> Any:
        if self._cm is None:
            self._cm = self.backend._host.sftp()
            self._client = self._cm.__enter__()
        return self._client

    def commit(self, *, overwrite: bool, mtime: datetime | None = None) -> None:
        try:
            self._close_file()
            c = self._channel()
            if overwrite:
                _setstat_then(c, _b(self.temp_path), mtime, "posix-rename@openssh.com", _b(self.final_path))
            else:
                # SFTP's RENAME never replaces (OpenSSH: link()+unlink()): no lstat round trip
                # first, which also closes the window for a name appearing in between.
                try:
                    _setstat_then(c, _b(self.temp_path), mtime, "rename", _b(self.final_path))
                except OSError as exc:
                    try:
                        c.lstat(_b(self.final_path))
                    except OSError:
                        raise _map_error(exc, self.backend.display(self.final_path)) from exc
                    raise AlreadyExists(f"Already exists: {self.backend.display(self.final_path)}") from exc
        except FerryError:
            raise
        except Exception as exc:
            raise _map_error(exc, self.final_path) from exc
        finally:
            self._release()

    def abort(self, *, keep_partial: bool = False) -> None:
        try:
            self._stop_sender(discard=True)
        except FerryError:
            pass
        self._stop_follower()
        try:
            try:
                self._close_file()
            except FerryError:
                pass
            if not keep_partial:
                try:
                    self._channel().remove(_b(self.temp_path))
                except Exception:
                    pass
        finally:
            self._release()

    def _release(self) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(None, None, None)


class SFTPBackend(Backend):
    scheme = "sftp"
    _BASE = Capabilities(
        range_read=True,
        resume_write=True,
        hashes=(),
        slow_hash=True,
        readback=False,
        symlinks=True,
        set_mtime=True,
        mtime_precision=1.0,
        max_connections=9,
    )

    def __init__(self, address: Address) -> None:
        super().__init__(address)
        _import_paramiko()
        self._host = _host_for(address)
        self._caps: Capabilities | None = None

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        """Known after connecting: which checksums the host can compute decides hashes/readback."""
        if self._caps is None:
            self._host.transport()
            if not self._host.hash_tools:
                self._host.detect_hash_tools()
            hashes = tuple(self._host.hash_tools)
            self._caps = replace(
                self._BASE, hashes=hashes, readback=bool(hashes), max_connections=max(1, self._host.max_sessions - 1)
            )
        return self._caps

    def display(self, path: str) -> str:
        return str(replace(self.address, path=path, site=None, trailing_slash=False))

    def _abs(self, path: str) -> str:
        if not path:
            with self._host.sftp() as c:
                return str(c.normalize("."))
        return path

    def list(self, path: str, cancel: CancelToken | None = None) -> Iterator[Entry]:
        from ferry.backends.sftp import small

        path = self._abs(path)
        names = small.known(self._host)
        links: list[Entry] = []
        with self._host.sftp() as c:
            try:
                # listdir_iter pages (READDIR batches) instead of building one huge list.
                for i, attr in enumerate(_listdir(c, path)):
                    if cancel is not None and not i % 1024:
                        cancel.check()
                    name = attr.filename
                    if name in (".", ".."):
                        continue
                    entry = _entry(posixpath.join(path, name), name, attr)
                    if entry.kind is Kind.LINK:
                        # No other request on this channel while READDIRs are in flight: later.
                        links.append(entry)
                        continue
                    names.listed(entry)  # the copy's stat of a file just listed needs no round trip
                    yield entry
                for entry in links:
                    yield replace(entry, link_target=_text(c.readlink(_b(entry.path))))
            except FerryError:
                raise
            except Exception as exc:
                raise self._refine(c, exc, path) from exc

    def _refine(self, c: Any, exc: BaseException, path: str, *, from_parent: bool = False) -> FerryError:
        """SFTP v3 reports ENOTDIR as "No such file": find the file in the way to say it right.
        Folders known to exist end the search without a round trip (a missing destination file
        is stat'ed before every copy; its folder is almost always known)."""
        err = _map_error(exc, self.display(path))
        if isinstance(err, NotFound):
            probe = path.rstrip("/") or "/"
            if from_parent:
                probe = posixpath.dirname(probe)
            while probe not in ("/", ""):
                if probe in self._host.known_dirs:
                    break
                try:
                    attr = c.stat(_b(probe))
                except OSError:
                    probe = posixpath.dirname(probe)
                    continue
                if not stat_mod.S_ISDIR(attr.st_mode or 0):
                    return NotADirectory(f"Not a folder: {self.display(probe)}")
                self._host.remember_dir(probe)
                break
        return err

    def stat(self, path: str) -> Entry:
        from ferry.backends.sftp import small  # answers known without a round trip (see there)

        path = self._abs(path)
        names = small.known(self._host)
        if names.absent(path):
            raise NotFound(f"No such file or folder: {self.display(path)}")
        listed = names.take_listed(path)
        if listed is not None:
            return listed
        with self._host.sftp() as c:
            try:
                attr = c.lstat(_b(path))
                entry = _entry(path, posixpath.basename(path.rstrip("/")) or path, attr)
                if entry.kind is Kind.LINK:
                    entry = replace(entry, link_target=_text(c.readlink(_b(path))))
                elif entry.kind is Kind.DIR:
                    self._host.remember_dir(path)
                return entry
            except Exception as exc:
                raise self._refine(c, exc, path, from_parent=True) from exc

    def open_read(self, path: str, offset: int = 0, length: int | None = None) -> Reader:
        return _Reader(self._host, self._abs(path), offset, length)

    def open_write(
        self, path: str, *, size: int | None, token: str, resume: bool = False, readback: str | None = None
    ) -> SFTPWriter:
        from ferry.backends.sftp import small  # small files: three round trips, not six

        small.known(self._host).touch(self._abs(path))
        if small.is_small(size):
            return small.SmallFileWriter(self, self._abs(path), token, readback)
        return SFTPWriter(self, self._abs(path), token, resume, readback, size)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        path = self._abs(path)
        try:
            self._mkdir(path, parents, exist_ok)
        except FerryError:
            raise
        except Exception as exc:
            # A connection dropped under a folder's creation (paramiko's SSHException is no
            # OSError) must fail as Transient so the task is retried, not as a plain failure.
            raise _map_error(exc, self.display(path)) from exc

    def _mkdir(self, path: str, parents: bool, exist_ok: bool) -> None:
        from ferry.backends.sftp import small

        with self._host.sftp() as c:
            todo = [path]
            if parents:
                parent = posixpath.dirname(path.rstrip("/"))
                while parent and parent != "/":
                    try:
                        c.stat(_b(parent))
                        break
                    except FileNotFoundError:
                        todo.append(parent)
                        parent = posixpath.dirname(parent)
            names = small.known(self._host)
            for p in reversed(todo):
                self._host.known_dirs.discard(p)
                names.touch(p)
                try:
                    c.mkdir(_b(p))
                    names.created_folder(p)  # empty but for what Ferry writes into it
                except OSError as exc:
                    try:
                        attr = c.stat(_b(p))
                    except OSError:
                        raise _map_error(exc, self.display(p)) from exc
                    if not stat_mod.S_ISDIR(attr.st_mode or 0):
                        raise AlreadyExists(f"A file is in the way of folder {self.display(p)}") from exc
                    if p == path and not exist_ok:
                        raise AlreadyExists(f"Already exists: {self.display(p)}") from exc
                self._host.remember_dir(p)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        path = self._abs(path)
        entry = self.stat(path)
        if entry.kind is Kind.DIR:
            self._host.forget_dirs()
        with self._host.sftp() as c:
            try:
                if entry.kind is Kind.DIR:
                    if recursive:
                        for child in list(self.list(path)):
                            self.remove(child.path, recursive=True)
                    c.rmdir(_b(path))
                else:
                    c.remove(_b(path))
            except FerryError:
                raise
            except Exception as exc:
                if isinstance(exc, OSError) and exc.errno is None and entry.kind is Kind.DIR:
                    raise AlreadyExists(f"Folder not empty: {self.display(path)}") from exc
                raise _map_error(exc, self.display(path)) from exc

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self._host.forget_dirs()
        with self._host.sftp() as c:
            try:
                if overwrite:
                    c.posix_rename(_b(src), _b(dst))
                    return
                try:
                    c.lstat(_b(dst))
                    raise AlreadyExists(f"Already exists: {self.display(dst)}")
                except FileNotFoundError:
                    pass
                c.rename(_b(src), _b(dst))
            except FerryError:
                raise
            except Exception as exc:
                raise _map_error(exc, self.display(src)) from exc

    def hash(self, path: str, algo: str, cancel: CancelToken | None = None) -> str:
        tool = self._host.hash_tools.get(algo) if self.capabilities.hashes else None
        if tool is None:
            raise Unsupported(f"{self.address.host} cannot compute {algo} checksums")
        req = self._host.hasher.hash(self._abs(path), tool)
        if req.error is not None:
            raise _map_error(req.error, self.display(path)) from req.error
        if req.problem == "missing":
            raise NotFound(f"No such file or folder: {self.display(path)}")
        if req.problem == "not-a-file":
            raise IsADirectory(f"Not a regular file: {self.display(path)}")
        if req.problem or not req.digest:
            raise FerryError(f"Remote {tool} could not read {self.display(path)}", detail=str(req.problem))
        return req.digest

    def symlink(self, target: str, path: str) -> None:
        from ferry.backends.sftp import small

        small.known(self._host).touch(path)
        with self._host.sftp() as c:
            try:
                c.symlink(_b(target), _b(path))
            except Exception as exc:
                if self.exists(path):
                    raise AlreadyExists(f"Already exists: {self.display(path)}") from exc
                raise _map_error(exc, self.display(path)) from exc

    def set_mtime(self, path: str, mtime: datetime) -> None:
        ts = mtime.timestamp()
        with self._host.sftp() as c:
            try:
                c.utime(_b(path), (ts, ts))
            except Exception as exc:
                raise _map_error(exc, self.display(path)) from exc

    # ---- many small files in one tar stream (batches; driven by ferry.transfers.batch) ----
    def batch_usable(self, direction: str, algo: str | None) -> bool:
        """Whether small files may go in tar batches: up (``write_batch``) needs the remote tool
        for ``algo`` to check what tar extracted (``wc -c`` when only sizes are checked); down
        (``read_batch``) only the tar."""
        from ferry.backends.sftp import batches

        if not batches.usable(self._host):
            return False
        return direction == "down" or algo is None or algo in self.capabilities.hashes

    def write_batch(
        self, items: Sequence[tuple[str, bytes | BatchData, str, datetime | None]], algo: str | None
    ) -> Sequence[str | BaseException]:
        from ferry.backends.sftp import batches

        return batches.write_batch(self, [(self._abs(p), data, tok, mt) for p, data, tok, mt in items], algo)

    def commit_batch(self, items: Sequence[tuple[str, str, bool, int]]) -> Sequence[BaseException | None]:
        from ferry.backends.sftp import batches

        return batches.commit_batch(self, items)

    def read_batch(self, paths: Sequence[str]) -> Sequence[tuple[Entry, bytes | bytearray] | BaseException]:
        from ferry.backends.sftp import batches

        return batches.read_batch(self, [self._abs(p) for p in paths])

    def close(self) -> None:
        """Connections are shared per host for the whole process (one login per host per run)."""


def _import_paramiko() -> None:
    """Import paramiko without ``invoke`` unless an ssh_config asks for ``Match exec``, the one
    thing paramiko wants it for. invoke pulls in importlib.metadata and more: ~0.2 s of the
    0.43 s ``import paramiko`` took here (``-X importtime``), paid by every ``ferry`` run that
    touches an SSH host. paramiko imports invoke inside ``try/except ImportError``."""
    import sys

    if "paramiko" in sys.modules or "invoke" in sys.modules:
        return
    from ferry.credentials.ssh_config import _expand_includes, config_paths

    for path in config_paths():
        if path.exists():
            for line in _expand_includes(path):
                words = line.lower().replace("=", " ").split()
                if words[:1] == ["match"] and "exec" in words:
                    return
            break
    sys.modules["invoke"] = None  # type: ignore[assignment]  # makes "import invoke" fail at once
    try:
        import paramiko  # noqa: F401
    finally:
        del sys.modules["invoke"]


def close_all() -> None:
    with _hosts_lock:
        hosts = list(_hosts.values())
        _hosts.clear()
    for h in hosts:
        h.close()
