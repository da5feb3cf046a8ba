"""Everything one process keeps for one SSH host (:class:`Host`), one per host and site
(:func:`host_for`), shared by every backend and transfer that reaches it."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ferry.backends.sftp import limits
from ferry.backends.sftp.connection import ChannelPool, Connection
from ferry.backends.sftp.lanes import Lanes, StreamPlan, concurrently, fixed_connections, plan_for, tcp_window
from ferry.backends.sftp.names import KnownNames
from ferry.backends.sftp.remote_hash import HashBatcher
from ferry.backends.sftp.shell import RemoteShell, detect_hash_tools, detect_plain_hash_tools
from ferry.core.address import Address
from ferry.core.errors import FerryError
from ferry.credentials.ssh_config import SshTarget, apply_site, resolve

log = logging.getLogger("ferry.sftp")


class Host:
    """One SSH host, made of parts by role: the :class:`Connection` (one login per process),
    the :class:`ChannelPool` on it, the :class:`RemoteShell` for commands, the checksum tools
    found there with the batcher that runs them, and what is known about folders and names
    without asking the server."""

    def __init__(self, target: SshTarget) -> None:
        self.target = target
        self.connection = Connection(target, on_login=self._logged_in)
        self.pool = ChannelPool(self.connection)
        self.lanes = Lanes(self.connection)  # more TCP connections for big files on a long link
        self.last_plan: StreamPlan | None = None  # what the last big file went over, and why
        self.shell = RemoteShell(self.pool)
        self.hash_tools: dict[str, str] = {}  # algorithm -> the remote command computing it
        self.hasher = HashBatcher(lambda command: self.shell.run(command), self.shell.shell_run)
        self.known_dirs: set[str] = set()  # folders seen to exist (saves ENOTDIR probes)
        self.names = KnownNames()
        self.site_streams: int | None = None  # a saved site's ``streams`` option
        # Found on the way, said once: the server refuses writes at out-of-order offsets (parallel
        # byte ranges), so big files go to it as one sequential stream.
        self.sequential_writes = False
        # Its exec channel runs commands without a POSIX shell (rclone serve sftp answers
        # ``sha256sum PATH`` itself): one plain command per file, no scripts.
        self.plain_commands = False
        # Whether it reads a file on the handle it is being written through (None: not known
        # yet). rclone serve sftp without a VFS cache does not: small files are then read back
        # through a handle of their own.
        self.reads_write_handles: bool | None = None

    def _logged_in(self) -> None:
        self.pool.renew()

    def transport(self) -> Any:
        """The logged-in transport (logging in first if there is none, or it dropped)."""
        return self.connection.transport()

    @property
    def request_size(self) -> int:
        """Bytes per SFTP READ or WRITE this server takes."""
        return self.connection.request_size

    def streams(self, *, up: bool) -> int:
        """How many parallel byte-range streams a big file may use (FERRY_SFTP_STREAMS, else the
        site's ``streams``, else the default for the direction)."""
        raw = os.environ.get(limits.STREAMS_ENV, "").strip()
        if raw:
            return limits.stream_count(raw, limits.STREAMS_ENV)
        if self.site_streams is not None:
            return self.site_streams
        return limits.UPLOAD_STREAMS if up else limits.PARALLEL_STREAMS

    def stream_channels(self, *, up: bool, size: int, label: str) -> list[Any]:
        """Channels for the extra byte-range streams of a big file (beside the one its caller
        holds), spread over as many TCP connections as the link's bandwidth-delay product asks
        for (lanes.py); only channels free right now. The plan is logged and kept in
        :attr:`last_plan`. Give each channel back with ``self.pool.give_back``."""
        streams = self.streams(up=up)
        possible = self.lanes.possible()
        fixed = fixed_connections()
        rtt = self.lanes.rtt() if possible and fixed is None else None
        plan = plan_for(size, rtt, tcp_window(up), streams, fixed, possible)
        calls: list[Callable[[], list[Any]]] = [lambda: [self.pool.borrow_nowait()] for _ in range(streams - 1)]
        if plan.connections > 1:
            calls.append(lambda: self.lanes.channels(plan.connections - 1, streams))
        extra = [c for got in concurrently(calls) for c in got if c is not None]
        self.last_plan = plan
        log.info("%s %s: %s", "up" if up else "down", label, plan.text())
        return extra

    def detect_hash_tools(self) -> None:
        tools = detect_hash_tools(self.shell)
        if tools == {}:  # commands run (None: refused) but the shell probe found nothing
            plain = detect_plain_hash_tools(self.shell)
            if plain:
                self.plain_commands = True
                self.hasher = HashBatcher(lambda command: self.shell.run(command), plain=True)
                log.info("%s runs commands without a shell; checksums by %s", self.target.hostname, sorted(plain))
                tools = plain
        if tools is not None:
            self.hash_tools = tools

    def refuses_out_of_order(self) -> None:
        """The server refused a write at an out-of-order offset: big files go to it as one
        sequential stream, and partial files are written again instead of resumed, from now on
        (said once per host)."""
        if not self.sequential_writes:
            self.sequential_writes = True
            log.warning(
                "%s refuses writes at out-of-order offsets (parallel streams, resuming): big files go to it "
                "as one sequential stream from now on",
                self.target.hostname,
            )

    def refuses_reads_on_write_handles(self) -> None:
        """The server answered the READs of a read-back on the write handle with "Failure": files
        are read back through a read-only handle of their own from now on (one more round trip)."""
        if self.reads_write_handles is not False:
            self.reads_write_handles = False
            log.info("%s cannot read a file on its write handle: read-backs open the file again", self.target.hostname)

    def remember_dir(self, path: str) -> None:
        if len(self.known_dirs) > 50_000:
            self.known_dirs.clear()
        self.known_dirs.add(path.rstrip("/") or "/")

    def forget_dirs(self) -> None:
        """A folder was removed or something renamed: folders seen before may be gone (rare)."""
        self.known_dirs.clear()
        self.names.forget()  # new folders' emptiness and listed attributes too

    def close(self) -> None:
        self.shell.close()
        self.lanes.close()
        self.pool.close()
        self.connection.close()


class OnHost(Protocol):
    """What the role modules need of the backend they work for, without importing it."""

    _host: Host

    def display(self, path: str) -> str: ...


_hosts: dict[str, Host] = {}
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


def host_for(address: Address) -> Host:
    """The :class:`Host` of this address's endpoint (and saved site), made on first use."""
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
            host = Host(target)
            raw = dict(site.options).get("streams", "").strip() if site is not None else ""
            if raw and site is not None:
                host.site_streams = limits.stream_count(raw, f"site '{site.name}': streams")
            _hosts[key] = host
        return host


def close_all() -> None:
    """Log out of every host (the next use logs in again)."""
    with _hosts_lock:
        hosts = list(_hosts.values())
        _hosts.clear()
    for h in hosts:
        h.close()
