"""One SSH connection per host and the channels multiplexed on it.

Researchers' clusters often ask for a one-time code at every login, so Ferry logs in **once per
host per process** (:class:`Connection`) and multiplexes everything on that transport
(:class:`ChannelPool`): SFTP channels (a paramiko ``SFTPClient`` is not safe to share between
threads, so each worker borrows its own) plus exec channels, bounded by the server's MaxSessions.

Speed levers measured in ../shared/guide/stack-notes.md: TCP_NODELAY (small files stalled 50 ms
each without it), AES-GCM first when the server offers it, a 64 MiB channel window.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ferry.backends.sftp import limits
from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.backends.sftp.auth import Authenticator, HostKeys
from ferry.backends.sftp.errors import map_error
from ferry.core.errors import FerryError, Transient
from ferry.credentials.ssh_config import SshTarget, resolve

log = logging.getLogger("ferry.sftp")


class _HandledByFerry(logging.Filter):
    """paramiko logs a refused channel as a warning; Ferry adapts to MaxSessions instead, so
    the person should not see it (it is still logged by Ferry at INFO)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "open FAILED" not in record.getMessage()


logging.getLogger("paramiko.transport").addFilter(_HandledByFerry())


class Connection:
    """One authenticated transport to one host (through ProxyJump hosts, each a connection of
    its own, or a ProxyCommand), made on first use and again after it drops. ``on_login`` runs
    after every new login, before anyone gets the new transport."""

    def __init__(self, target: SshTarget, on_login: Callable[[], None] | None = None) -> None:
        self.target = target
        self.host_keys = HostKeys(target)
        self.auth = Authenticator(target)
        self._on_login = on_login
        self._lock = threading.Lock()
        self._transport: Any = None
        self._jump: Connection | None = None
        self.request_size = limits.PORTABLE_REQUEST  # until the server is known to be OpenSSH

    def transport(self) -> Any:
        with self._lock:
            if self._transport is None or not self._transport.is_active():
                transport = self._connect()
                if self._on_login is not None:
                    self._on_login()
                self._transport = transport
            return self._transport

    def _sock(self) -> Any:
        import paramiko

        t = self.target
        if t.proxy_jump:
            hops = [h.strip() for h in t.proxy_jump.split(",") if h.strip()]
            jump = Connection(target_for(hops[-1]))
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

    def _connect(self) -> Any:
        import paramiko

        t = self.target
        try:
            sock = self._sock()
        except OSError as exc:
            raise Transient(
                f"Cannot connect to {t.hostname}:{t.port}: {exc.strerror or exc}", detail=repr(exc)
            ) from exc
        transport = paramiko.Transport(sock, default_window_size=limits.WINDOW)
        opts = transport.get_security_options()
        gcm = [c for c in opts.ciphers if "gcm" in c]
        opts.ciphers = tuple(gcm + [c for c in opts.ciphers if c not in gcm])  # AES-GCM first: faster here
        opts.key_types = known_types_first(opts.key_types, self.host_keys.known_types())
        adapter.lean_reads(transport)  # AES-GCM packets read with fewer copies (paramiko's for the rest)
        adapter.guard_rekey(transport)  # a channel closed during a rekey must not stall it (paramiko #822)
        try:
            transport.start_client(timeout=t.connect_timeout)
            self._login(transport)
        except BaseException:
            transport.close()
            raise
        if t.server_alive_interval:
            transport.set_keepalive(t.server_alive_interval)
        # OpenSSH's sftp-server accepts 256 KiB messages: 8x fewer requests (and Python work) per byte.
        openssh = "OpenSSH" in (transport.remote_version or "")
        self.request_size = limits.REQUEST if openssh else limits.PORTABLE_REQUEST
        return transport

    def _login(self, transport: Any) -> None:
        """Check the host's key, then log in (a lane logs in its own way: lanes.py)."""
        self.host_keys.check(transport)
        self.auth.login(transport)

    def close(self) -> None:
        with self._lock:
            if self._transport is not None:
                self._transport.close()
                self._transport = None
            if self._jump is not None:
                self._jump.close()


def target_for(spec: str) -> SshTarget:
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


class ChannelPool:
    """The session budget of one connection (MaxSessions covers SFTP and exec channels alike)
    and its idle SFTP channels, borrowed one per worker.

    Every channel belongs to a *generation*, bumped by :meth:`renew` on every new login: the
    channels of an old transport are gone and no longer count.
    """

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._idle: list[Any] = []
        self._open = 0  # session channels open (SFTP, idle or borrowed, and exec)
        self.max_sessions = 10  # OpenSSH's default MaxSessions; lowered when the server says no
        self.generation = 0
        # Not the connection's lock: a login may wait on a person for minutes while channels of
        # the old transport come back.
        self._cond = threading.Condition(threading.Lock())

    @property
    def hostname(self) -> str:
        return self.connection.target.hostname

    def renew(self) -> None:
        """A new login: channels of the old transport no longer count."""
        with self._cond:
            self.generation += 1
            self._idle.clear()
            self._open = 0
            self._cond.notify_all()

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
            self.give_back(client, ok)
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

    def _acquire(self) -> int:
        """Wait for room under the session budget; returns the generation the slot belongs to.
        An idle SFTP channel is closed to make room when nothing else is free."""
        waited = 0.0
        with self._cond:
            while True:
                if self._open < self.max_sessions:
                    self._open += 1
                    return self.generation
                if self._idle:
                    victim = self._idle.pop(0)
                    self._open -= 1
                    try:
                        victim.close()
                    except Exception:
                        pass
                    continue
                if waited >= limits.SLOT_WAIT:
                    # Every channel held by a transfer waiting for another: let the queue retry.
                    raise Transient(f"No free SSH channel to {self.hostname} (MaxSessions {self.max_sessions})")
                self._cond.wait(1.0)
                waited += 1.0

    def reserve_spare(self) -> int | None:
        """A session slot only if one is free right now with one more kept spare (work that
        only saves time never waits for, or starves, the transfers): its generation, or None."""
        with self._cond:
            return self._spare_slot()

    def _spare_slot(self) -> int | None:
        """(the caller holds ``_cond``)"""
        if self._open >= self.max_sessions - 1:
            return None
        self._open += 1
        return self.generation

    def release(self, generation: int) -> None:
        """Give back a session slot (its channel is closed)."""
        with self._cond:
            if generation == self.generation:
                self._open -= 1
            self._cond.notify()

    def refused(self, exc: BaseException, generation: int) -> None:
        """The server said no to one more channel: its real MaxSessions is what is open now.
        Remember it and wait for a channel instead of failing."""
        with self._cond:
            if generation == self.generation:
                self._open -= 1
                self.max_sessions = max(1, self._open)
            self._cond.notify()
        log.info("%s refused another channel (%s); using at most %d", self.hostname, exc, self.max_sessions)

    def open_channel(self, make: Callable[[Any], Any]) -> tuple[Any, int]:
        """``make(transport)`` under the session budget: the channel and its generation (give
        the slot back with :meth:`release` once the channel is closed)."""
        import paramiko

        for _attempt in range(50):
            transport = self.connection.transport()
            generation = self._acquire()
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
                    self.release(generation)
                    raise map_error(exc, self.hostname) from exc
                if self._open <= 1 and generation == self.generation:
                    self.release(generation)
                    raise Transient(f"{self.hostname} refused every channel", detail=str(exc)) from exc
                self.refused(exc, generation)
            except Exception as exc:
                self.release(generation)
                raise map_error(exc, self.hostname) from exc
        raise Transient(f"{self.hostname} keeps refusing channels")

    def _new_sftp(self, transport: Any) -> Any:
        return adapter.open_sftp(transport, limits.WINDOW, limits.MAX_PACKET)

    def _borrow(self) -> Any:
        with self._cond:
            while self._idle:
                idle = self._pop_idle()
                if idle is not None:
                    return idle
        client, generation = self.open_channel(self._new_sftp)
        if client is None:
            self.release(generation)
            raise Transient(f"{self.hostname} did not start its SFTP subsystem")
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
        if getattr(client, "_ferry_generation", -1) == self.generation:
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
            generation = self._spare_slot()
        if generation is None:
            return None
        try:
            client = self._new_sftp(self.connection.transport())
        except paramiko.ChannelException as exc:
            self.refused(exc, generation)
            return None
        except Exception:
            self.release(generation)
            return None
        if client is None:
            self.release(generation)
            return None
        setattr(client, "_ferry_generation", generation)  # noqa: B010 - tags channels of this login
        return client

    def give_back(self, client: Any, ok: bool) -> None:
        """Return a borrowed SFTP channel: kept for the next borrower when ``ok`` and still of
        this login, else closed. A channel of another pool (an extra connection's, lanes.py)
        goes back to that pool."""
        owner = getattr(client, "_ferry_pool", None)
        if owner is not None and owner is not self:
            owner.give_back(client, ok)
            return
        with self._cond:
            current = getattr(client, "_ferry_generation", -1) == self.generation
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

    def close(self) -> None:
        """Close the idle channels (borrowed ones go when their connection closes)."""
        with self._cond:
            idle, self._idle = self._idle, []
        for c in idle:
            try:
                c.close()
            except Exception:
                pass


# Host key algorithms of each known_hosts key type (RSA keys sign with SHA-2 algorithms too).
_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")}


def known_types_first(offered: Sequence[str], known: list[str]) -> tuple[str, ...]:
    """paramiko's host key algorithms with those of the key types known_hosts holds for the host
    first, as OpenSSH orders them: a host known by its RSA key is asked for that key, not greeted
    as unknown because it also has an Ed25519 one. Where the server offers none of the known
    types, the key it shows is refused as changed (:meth:`HostKeys._known`)."""
    first = [alg for t in known for alg in _ALGORITHMS.get(t, (t,)) if alg in offered]
    return tuple(dict.fromkeys([*first, *offered]))
