"""``ferry --demo``: throwaway loopback servers with sample data, so anyone can try Ferry.

Starts an OpenSSH ``sshd`` on 127.0.0.1 (its own host key, client key and config in a temporary
folder; it logs in the current user with the demo key only) and an S3-compatible server (moto's
``ThreadedMotoServer``, from the ``demo`` extra that ``scripts/run.sh`` installs) with a sample
bucket. This process is pointed at them through a private ssh_config (``FERRY_SSH_CONFIG``, host
alias ``ferry-demo``, the host key already trusted) and the standard ``AWS_*`` variables, so
nothing in the person's own configuration changes. Everything is deleted when the window closes,
and the window does not remember the demo's folders for the next start. No test code is imported
here.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ferry.core.errors import FerryError

HOST = "127.0.0.1"
SSH_ALIAS = "ferry-demo"
BUCKET = "ferry-demo"

SAMPLE_FILES = {
    "README.txt": "Sample data for trying Ferry. Drag files between the panes, press F5 to copy.\n",
    "results/run-001.csv": "step,energy\n" + "".join(f"{i},{-1.5 + i * 0.001:.4f}\n" for i in range(2000)),
    "results/run-002.csv": "step,energy\n" + "".join(f"{i},{-1.4 + i * 0.001:.4f}\n" for i in range(2000)),
    "images/plot.svg": '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>\n',
    "notes/2026-11-23.md": "# Lab notes\n\n- copied run 1 to the archive\n",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _find_sshd() -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/sbin"])
    sshd = shutil.which("sshd", path=path)
    return sshd if sshd and shutil.which("ssh-keygen") else None


def write_samples(root: Path, bulk: int = 200) -> None:
    for rel, text in SAMPLE_FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    many = root / "many-small-files"
    many.mkdir(exist_ok=True)
    for i in range(bulk):
        (many / f"sample-{i:04d}.dat").write_bytes(os.urandom(1024 + i))


class DemoServers:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ferry-demo-"))
        self.dir.chmod(0o755)  # sshd reads authorized_keys as the login user
        self.sshd: subprocess.Popen[bytes] | None = None
        self.ssh_port = 0
        self.s3: object | None = None
        self.s3_port = 0
        self.local = self.dir / "this-computer"
        self.problems: list[str] = []
        self._saved_env: dict[str, str | None] = {}

    # ---- lifecycle ----
    def start(self) -> None:
        self.local.mkdir()
        write_samples(self.local, bulk=50)
        try:
            self._start_sshd()
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            self.problems.append(f"The demo SFTP server did not start: {exc}")
        try:
            self._start_s3()
        except ImportError:  # the demo extra is not installed: say how to get it
            self.problems.append(
                "The demo S3 server is not installed: scripts/run.sh --demo installs it (or pip install -e '.[demo]')"
            )
        except Exception as exc:  # port trouble: the rest of the demo still works
            self.problems.append(f"The demo S3 server did not start: {exc}")

    def stop(self) -> None:
        if self.sshd is not None:
            self.sshd.terminate()
            try:
                self.sshd.wait(5)
            except subprocess.TimeoutExpired:
                self.sshd.kill()
            self.sshd = None
        if self.s3 is not None:
            self.s3.stop()  # type: ignore[attr-defined]
            self.s3 = None
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.dir, ignore_errors=True)

    def _setenv(self, key: str, value: str) -> None:
        self._saved_env.setdefault(key, os.environ.get(key))
        os.environ[key] = value

    # ---- SFTP ----
    def _start_sshd(self) -> None:
        sshd = _find_sshd()
        if sshd is None:
            raise RuntimeError("OpenSSH sshd is not installed (apt-get install openssh-server)")
        d = self.dir
        host_key, client_key = d / "host_ed25519", d / "client_ed25519"
        for key in (host_key, client_key):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ferry-demo", "-f", str(key)],
                check=True,
                capture_output=True,
            )
        (d / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
        remote = d / "remote"
        remote.mkdir()
        write_samples(remote)
        remote.chmod(0o755)
        user = pwd.getpwuid(os.geteuid()).pw_name
        self.ssh_port = _free_port()
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
        config = d / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress {HOST}",
                    f"Port {self.ssh_port}",
                    f"HostKey {host_key}",
                    f"AuthorizedKeysFile {d / 'authorized_keys'}",
                    f"PidFile {d / 'sshd.pid'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    "StrictModes no",
                    f"AllowUsers {user}",
                    "Subsystem sftp internal-sftp",
                    "",
                ]
            )
        )
        log = d / "sshd.log"
        cmd = [sshd, "-D", "-e", "-f", str(config)]
        if shutil.which("setpriv"):  # the server dies with us even if Ferry is killed
            cmd = ["setpriv", "--pdeathsig", "TERM", "--", *cmd]
        with log.open("ab") as out:
            self.sshd = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.sshd.poll() is not None:
                raise RuntimeError(f"sshd exited: {log.read_text(errors='replace')[-400:]}")
            try:
                with socket.create_connection((HOST, self.ssh_port), timeout=1) as s:
                    if s.recv(8).startswith(b"SSH-"):
                        break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("sshd did not answer within 10 s")
        pub = host_key.with_suffix(".pub").read_text().split()
        (d / "known_hosts").write_text(f"[{HOST}]:{self.ssh_port} {pub[0]} {pub[1]}\n")
        (d / "ssh_config").write_text(
            f"Host {SSH_ALIAS}\n  HostName {HOST}\n  Port {self.ssh_port}\n  User {user}\n"
            f"  IdentityFile {client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {d / 'known_hosts'}\n"
        )
        self._setenv("FERRY_SSH_CONFIG", str(d / "ssh_config"))
        self.remote = remote

    # ---- S3 ----
    def _start_s3(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on the terminal

        self.s3_port = _free_port()
        server = ThreadedMotoServer(ip_address=HOST, port=self.s3_port, verbose=False)
        server.start()
        self.s3 = server
        endpoint = f"http://{HOST}:{self.s3_port}"
        for k, v in (
            ("AWS_ENDPOINT_URL", endpoint),
            ("AWS_ACCESS_KEY_ID", "demo"),
            ("AWS_SECRET_ACCESS_KEY", "demo-secret"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
        ):
            self._setenv(k, v)
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket=BUCKET)
        for rel, text in SAMPLE_FILES.items():
            s3.put_object(Bucket=BUCKET, Key=rel, Body=text.encode())

    # ---- the window ----
    def open_in(self, window: object) -> None:
        """Left pane: sample files on this computer; right pane: the SFTP server (or S3)."""
        from ferry.backends.registry import backend_class
        from ferry.ui.sites_menu import Place

        left, right = window.left, window.right  # type: ignore[attr-defined]
        left.navigate(str(self.local), remember=False)
        targets = []
        if self.sshd is not None:
            targets.append(f"{SSH_ALIAS}:{self.remote}")
        if self.s3 is not None:
            try:
                backend_class("s3")
                targets.append(f"s3://{BUCKET}/")
            except (ImportError, FerryError):
                self.problems.append(
                    "The S3 backend is not installed in this build, so the S3 demo bucket is not shown"
                )
        places = [Place(f"Demo: {t}", t, "demo", "a throwaway loopback server started by --demo") for t in targets]
        places.insert(0, Place("Demo: this computer", str(self.local), "demo", str(self.local)))
        for pane in (left, right):
            pane.extra_places = places
            pane.reload_places()
            pane.remember_folder = False  # deleted when the demo ends: the next start keeps the person's own
        if targets:
            right.navigate(targets[0], remember=False)
        hint = "Demo: " + " · ".join([f"left: {self.local}", *(f"try {t}" for t in targets), *self.problems])
        left.show_hint(hint)
