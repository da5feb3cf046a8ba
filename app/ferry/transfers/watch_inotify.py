"""Linux inotify through ctypes: told when a writer closes a file, instead of guessing by polling.

Only what ``ferry watch`` needs: watch folders, read events with a timeout, wake from another
thread. Everything else (other platforms, network file systems where inotify sees nothing from
other machines, a full event queue) falls back to polling, which the watcher always keeps as a
safety net.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import sys
from dataclasses import dataclass

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

WATCH_MASK = (
    IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_MODIFY
)

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


@dataclass(frozen=True)
class Event:
    folder: str  # the watched folder the event is about
    name: str  # entry name inside it ("" for events on the folder itself)
    mask: int

    @property
    def path(self) -> str:
        return os.path.join(self.folder, self.name) if self.name else self.folder

    @property
    def is_dir(self) -> bool:
        return bool(self.mask & IN_ISDIR)


class InotifyUnavailable(OSError):
    pass


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c") or "libc.so.6"
    return ctypes.CDLL(name, use_errno=True)


class Inotify:
    """One inotify instance; ``read(timeout)`` returns the events that arrived (possibly none)."""

    def __init__(self) -> None:
        if not sys.platform.startswith("linux"):
            raise InotifyUnavailable("inotify exists only on Linux")
        try:
            self._libc = _libc()
            init1 = self._libc.inotify_init1
        except (OSError, AttributeError) as exc:
            raise InotifyUnavailable(f"inotify is not available: {exc}") from exc
        fd = init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise InotifyUnavailable(err, f"inotify_init1: {os.strerror(err)}")
        self.fd: int = fd
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._folders: dict[int, str] = {}
        self._wds: dict[str, int] = {}
        self.overflowed = False

    def add(self, folder: str) -> bool:
        """Watch ``folder``; False when the kernel refuses (limit reached, gone): poll it instead."""
        if folder in self._wds:
            return True
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(folder), WATCH_MASK)
        if wd < 0:
            return False
        self._folders[wd] = folder
        self._wds[folder] = wd
        return True

    def watching(self, folder: str) -> bool:
        return folder in self._wds

    def forget(self, folder: str) -> None:
        """Drop a folder that went away (the kernel already removed its watch)."""
        for f in [f for f in self._wds if f == folder or f.startswith(folder.rstrip(os.sep) + os.sep)]:
            wd = self._wds.pop(f)
            self._folders.pop(wd, None)

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def read(self, timeout: float) -> list[Event]:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            ready = poller.poll(max(0, int(timeout * 1000)))
        except InterruptedError:
            return []
        events: list[Event] = []
        for fd, _ in ready:
            if fd == self._wake_r:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
                continue
            while True:
                try:
                    data = os.read(self.fd, 65536)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno == errno.EINTR:
                        continue
                    raise
                events.extend(self._parse(data))
        return events

    def _parse(self, data: bytes) -> list[Event]:
        out: list[Event] = []
        pos = 0
        while pos + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, pos)
            pos += _HEADER.size
            raw = data[pos : pos + length].split(b"\0", 1)[0]
            pos += length
            if mask & IN_Q_OVERFLOW:
                self.overflowed = True  # events were lost: the watcher rescans everything
                continue
            folder = self._folders.get(wd)
            if folder is None:
                continue
            if mask & IN_IGNORED:
                self._folders.pop(wd, None)
                self._wds.pop(folder, None)
                continue
            out.append(Event(folder, os.fsdecode(raw), mask))
        return out

    def close(self) -> None:
        for fd in (self.fd, self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
