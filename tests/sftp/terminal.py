"""Run ``ferry`` on a real pseudo-terminal and answer its questions like a person would.

The CLI asks for passwords, passphrases, one-time codes and host-key decisions on ``/dev/tty``;
``pty.fork`` gives the child a controlling terminal, so the questions are the real ones.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from helpers import FERRY, ferry_env

Answer = Callable[[], str]


@dataclass
class TerminalRun:
    returncode: int
    output: str
    asked: list[str] = field(default_factory=list)  # which prompt keys were answered, in order

    def count(self, key: str) -> int:
        return self.asked.count(key)


def run_on_terminal(
    args: Sequence[str | os.PathLike[str]],
    *,
    home: Path,
    cwd: Path,
    extra_env: dict[str, str],
    answers: dict[str, Answer],
    timeout: float = 120,
) -> TerminalRun:
    """Run ``ferry ARGS``; whenever the output ends with a prompt containing one of ``answers``'
    keys, type that answer. Output is collected until the process exits."""
    env = ferry_env(home, extra_env)
    argv = [*FERRY, *(str(os.fspath(a)) for a in args)]
    pid, fd = pty.fork()
    if pid == 0:  # the child: never returns
        try:
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    output = b""
    pending = ""  # output since the last answer
    asked: list[str] = []
    deadline = time.monotonic() + timeout
    status: int | None = None
    try:
        while True:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"ferry did not finish in {timeout}s:\n{output.decode(errors='replace')}")
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk:
                    break
                output += chunk
                pending += chunk.decode(errors="replace")
                for key, answer in answers.items():
                    if key in pending:
                        asked.append(key)
                        pending = ""
                        os.write(fd, (answer() + "\n").encode())
                        break
            else:
                done, st = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = st
                    break
    finally:
        os.close(fd)
        if status is None:
            _, status = os.waitpid(pid, 0)
    return TerminalRun(os.waitstatus_to_exitcode(status), output.decode(errors="replace"), asked)
