"""Keep the computer from sleeping while transfers run (no Qt).

On Linux this holds a ``systemd-inhibit`` lock (sleep and idle) for as long as a job runs; where
that tool does not exist, :attr:`KeepAwake.available` is False and the settings dialog says so.
"""

from __future__ import annotations

import shutil
import subprocess


class KeepAwake:
    def __init__(self) -> None:
        self.tool = shutil.which("systemd-inhibit")
        self._proc: subprocess.Popen[bytes] | None = None
        self.failed = ""  # why keeping awake stopped working, if it did

    @property
    def available(self) -> bool:
        return self.tool is not None

    @property
    def held(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def hold(self) -> None:
        if self.held or self.tool is None:
            return
        if self._proc is not None:  # the last lock ended by itself: no logind here (a container)
            self.tool = None
            self.failed = f"systemd-inhibit exited with status {self._proc.returncode}"
            self._proc = None
            return
        try:
            self._proc = subprocess.Popen(
                [self.tool, "--what=sleep:idle", "--who=Ferry", "--why=Transfers are running", "--mode=block",
                 "sleep", "infinity"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        except OSError:
            self._proc = None

    def release(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is not None:
            return  # exited by itself: keep it, so hold() can tell the lock does not work here
        self._proc = None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
