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

MAX_BATCH = 200
MAX_COMMAND = 64 << 10  # bytes of command line; far below ARG_MAX everywhere

# One line per file, in argument order: the digest, or "! reason".
_SCRIPT = (
    'for f; do if [ -f "$f" ]; then {tool} < "$f" 2>/dev/null || echo "! unreadable"; '
    'elif [ -e "$f" ]; then echo "! not-a-file"; else echo "! missing"; fi; done'
)

Runner = Callable[[bytes], tuple[int, bytes, bytes]]


@dataclass
class _Request:
    path: str
    tool: str
    done: threading.Event = field(default_factory=threading.Event)
    digest: str | None = None
    problem: str | None = None  # "missing", "not-a-file", "unreadable" or an error text
    error: BaseException | None = None


class HashBatcher:
    def __init__(self, run: Runner, shell: Callable[[bytes], tuple[int, bytes]] | None = None) -> None:
        self._run = run
        self._shell = shell
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

    def _run_batch(self, tool: str, batch: list[_Request]) -> None:
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
            lines = out.decode("ascii", "replace").splitlines()
            if rc == 0 and len(lines) == len(batch) and all(line.split() for line in lines):
                for r, line in zip(batch, lines, strict=True):
                    r.digest = line.split()[0].lstrip("\\")
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
