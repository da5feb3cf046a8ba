"""Remote checksums for many files in one exec channel (group commit).

Starting a remote command costs a session, a shell and a process (several ms, far more with a
slow login shell); one per small file capped rclone at ~330 files/s. Here, whoever asks for a
hash while no batch is running runs one for everything queued so far, and everyone who asks
meanwhile waits for the next batch: with N transfers in parallel, one exec hashes up to N files,
without any timer. Each file is fed to the tool on stdin, so its output never has to be parsed
around odd names (newlines, backslashes, non-UTF-8 bytes).
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_BATCH = 200
MAX_COMMAND = 64 << 10  # bytes of command line; far below ARG_MAX everywhere

# One line per file, in argument order: the digest, or "! reason".
_SCRIPT = (
    'for f; do if [ -f "$f" ]; then {tool} < "$f" 2>/dev/null || echo "! unreadable"; '
    'elif [ -e "$f" ]; then echo "! not-a-file"; else echo "! missing"; fi; done'
)

Runner = Callable[[bytes], tuple[int, bytes, bytes]]


def parse_digests(out: bytes, count: int) -> list[str] | None:
    """The digests of ``TOOL -- f1 f2 ...`` (coreutils' format, or ``openssl dgst -r``): one line
    per file in argument order; a name with a newline or backslash is escaped and its line
    starts with a backslash. None unless there is exactly one non-empty line per file."""
    lines = out.decode("ascii", "replace").splitlines()
    if len(lines) != count or not all(line.split() for line in lines):
        return None
    return [line.split()[0].lstrip("\\") for line in lines]


@dataclass
class _Request:
    path: str
    tool: str
    done: threading.Event = field(default_factory=threading.Event)
    digest: str | None = None
    problem: str | None = None  # "missing", "not-a-file", "unreadable" or an error text
    error: BaseException | None = None


def plain_argument(path: str) -> bytes:
    """``path`` as a server without a shell reads one argument (rclone serve sftp: the rest of
    the command line, with ``\\x`` for ``x`` and ``'\\n'`` for a newline): every ASCII character
    but letters, digits and ``/._-`` escaped; other bytes go as they are."""
    out = bytearray()
    for byte in path.encode("utf-8", "surrogateescape"):
        if byte == 0x0A:
            out += b"'\n'"
        elif byte < 0x80 and not (chr(byte).isalnum() or chr(byte) in "/._-"):
            out += b"\\" + bytes([byte])
        else:
            out.append(byte)
    return bytes(out)


class HashBatcher:
    """Hashes asked for while a batch runs go in the next one. ``plain``: the server runs
    commands without a shell (see :func:`plain_argument`), so each file is one command."""

    def __init__(
        self, run: Runner, shell: Callable[[bytes], tuple[int, bytes]] | None = None, *, plain: bool = False
    ) -> None:
        self._run = run
        self._shell = shell
        self._plain = plain
        self._lock = threading.Lock()
        self._pending: list[_Request] = []
        self._running = False

    def hash(self, path: str, tool: str) -> _Request:
        req = _Request(path, tool)
        with self._lock:
            self._pending.append(req)
            lead = not self._running
            if lead:
                self._running = True
        if lead:
            self._lead()
        req.done.wait()
        return req

    def _lead(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._running = False
                    return
                tool = self._pending[0].tool
                batch: list[_Request] = []
                size = 0
                rest: list[_Request] = []
                for r in self._pending:
                    quoted = len(shlex.quote(r.path)) + 1
                    if r.tool == tool and len(batch) < MAX_BATCH and size + quoted < MAX_COMMAND:
                        batch.append(r)
                        size += quoted
                    else:
                        rest.append(r)
                self._pending = rest
            self._run_batch(tool, batch)

    def _run_plain(self, tool: str, batch: list[_Request]) -> None:
        for r in batch:
            try:
                rc, out, _err = self._run(tool.encode() + b" " + plain_argument(r.path))
                words = out.split()
                if rc == 0 and words:
                    r.digest = words[0].decode("ascii", "replace")
                else:
                    r.problem = f"the server's {tool} failed (exit {rc})"
            except BaseException as exc:
                r.error = exc
            finally:
                r.done.set()

    def _run_batch(self, tool: str, batch: list[_Request]) -> None:
        if self._plain:
            self._run_plain(tool, batch)
            return
        args = " ".join(shlex.quote(r.path) for r in batch)
        try:
            # Fast path: one process for the whole batch. GNU tools print one line per file in
            # argument order (a name with a newline or backslash is escaped and its line starts
            # with a backslash). On any failure the batch is redone file by file below, which
            # tells each file's problem apart.
            fast = f"{tool} -- {args}".encode("utf-8", "surrogateescape")
            if self._shell is not None:
                rc, out = self._shell(fast)
            else:
                rc, out, _err = self._run(fast)
            digests = parse_digests(out, len(batch)) if rc == 0 else None
            if digests is not None:
                for r, digest in zip(batch, digests, strict=True):
                    r.digest = digest
                    r.done.set()
                return
        except Exception as exc:  # e.g. the connection dropped: the per-file run reports it
            del exc
        script = _SCRIPT.format(tool=tool)
        command = f"sh -c {shlex.quote(script)} sh {args}".encode("utf-8", "surrogateescape")
        try:
            _rc, out, err = self._run(command)
            lines = out.decode("ascii", "replace").splitlines()
            if len(lines) != len(batch):
                raise OSError(f"remote {tool} gave {len(lines)} answers for {len(batch)} files: {err[-300:]!r}")
            for r, line in zip(batch, lines, strict=True):
                if line.startswith("!"):
                    r.problem = line[1:].strip()
                else:
                    r.digest = line.split()[0].lstrip("\\") if line.split() else None
                    if not r.digest:
                        r.problem = "no output"
        except BaseException as exc:
            for r in batch:
                r.error = exc
        finally:
            for r in batch:
                r.done.set()


# A remote hash that follows an upload: the shell holds the partial file open on fd 3; every
# number Ferry sends on stdin makes ``dd`` pass that many more bytes (already acknowledged by
# the server, so present in the file) to the tool, which prints the digest when stdin ends.
# ``dd`` on a regular file reads whole blocks unless the file is shorter; at the end ``wc -c``
# of what is left after fd 3's offset proves every byte went through exactly once (a short read
# would leave bytes behind and the answer is not trusted). Blocks of 64 KiB (the pipe's size),
# then one block for the rest: one 8 MiB block per step cost the server 0.72-0.78 s of CPU per
# 256 MiB against 0.41-0.47 s this way (a fresh 8 MiB buffer each time, written into a 64 KiB
# pipe in pieces); ``openssl dgst`` reading the finished file costs 0.22 s.
_FOLLOW_SCRIPT = (
    'exec 3< "$1" || exit 97; '
    "{{ while read -r n; do case $n in ''|*[!0-9]*) break;; esac; "
    "q=$((n / 65536)); r=$((n % 65536)); "
    "if [ $q -gt 0 ]; then dd bs=65536 count=$q <&3 2>/dev/null || exit 98; fi; "
    "if [ $r -gt 0 ]; then dd bs=$r count=1 <&3 2>/dev/null || exit 98; fi; done; "
    'echo "left $(wc -c <&3)" >&2; }} | {tool}'
)
FOLLOW_STEP = 8 << 20  # bytes per dd: the hash lags the upload by about this much


def follow_command(path: str, tool: str) -> bytes:
    script = _FOLLOW_SCRIPT.format(tool=tool)
    return f"sh -c {shlex.quote(script)} sh {shlex.quote(path)}".encode("utf-8", "surrogateescape")


class FollowingHash:
    """Hashes a file on the server while it is being uploaded, so the check of a big file ends a
    few milliseconds after its last byte instead of a whole remote pass later (profiled: a third
    of a verified 256 MiB upload was the remote hash after the upload).

    ``chan`` is an exec channel running :func:`follow_command`. :meth:`advance` is told how many
    bytes the server has acknowledged; :meth:`result` returns the digest of exactly ``total``
    bytes, or None when anything went wrong (the caller then hashes the finished file the usual
    way, so a broken follower can cost time but never a wrong verdict).
    """

    def __init__(self, chan: Any, close: Callable[[], None]) -> None:
        self._chan = chan
        self._close = close
        self._sent = 0
        self.broken = False

    def advance(self, confirmed: int, *, final: bool = False) -> bool:
        """Let the remote side hash up to ``confirmed`` bytes; False once the follower broke."""
        if self.broken:
            return False
        lines = []
        while confirmed - self._sent >= (1 if final else FOLLOW_STEP):
            n = min(FOLLOW_STEP, confirmed - self._sent)
            lines.append(b"%d\n" % n)
            self._sent += n
        if lines:
            try:
                self._chan.sendall(b"".join(lines))
            except Exception:
                self.broken = True
        return not self.broken

    def result(self, total: int, timeout: float = 600) -> str | None:
        try:
            if self.broken or self._sent > total:
                return None
            if not self.advance(total, final=True):
                return None
            self._chan.settimeout(timeout)
            self._chan.shutdown_write()
            out = self._chan.makefile("rb").read()
            err = self._chan.makefile_stderr("rb").read()
            rc = self._chan.recv_exit_status()
            words = out.decode("ascii", "replace").split()
            left = [line.split()[1:] for line in err.decode("ascii", "replace").splitlines() if line.startswith("left")]
            if rc != 0 or left != [["0"]] or not words:
                return None
            return str(words[0]).lstrip("\\")
        except Exception:
            return None
        finally:
            self.close()

    def close(self) -> None:
        chan, self._chan = self._chan, None
        if chan is not None:
            try:
                chan.close()
            finally:
                self._close()
