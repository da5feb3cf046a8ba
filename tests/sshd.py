"""Real OpenSSH ``sshd`` servers on 127.0.0.1 for the SFTP tests (never mocks).

Each :class:`SshServer` gets its own temp folder with host keys, client keys, ``sshd_config``,
``authorized_keys``, ``known_hosts``, a log and a ``root`` folder the login user may write in.

Run as root (CI), the server logs in the unprivileged user ``ferrytest`` (created once, shell
``/bin/sh``: a slow login shell makes every remote command slow). Run as anyone else (a developer's
machine), sshd runs as that user and can only log that user in.

What sshd needs here (OpenSSH 9.2, Debian 12, checked by hand):

* As root it refuses to start without its privilege-separation folder ``/run/sshd``.
* ``UsePAM no``: sshd checks ``/etc/shadow`` itself. Password login then works for a root-run sshd
  (``chpasswd`` hashes with yescrypt, which sshd's ``crypt()`` reads), but an account whose
  password field starts with ``!`` counts as *locked* and is refused even for public keys, and
  ``useradd`` creates exactly that: the field is set to ``*`` (no password, not locked).
* Keyboard-interactive needs ``use_pam=True``: without PAM, Linux sshd has no kbd-interactive
  device, so that method always fails. With PAM, password and kbd-interactive both work here
  (PAM's pam_unix then adds a ~2 s delay to every failed attempt).
* A non-root sshd cannot read ``/etc/shadow``: password login only works when run as root.
* sshd reads ``AuthorizedKeysFile`` as the login user, so the folders above it must be
  traversable by that user (hence 0755 and a temp folder outside pytest's 0700 ``tmp_path``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from types import TracebackType

import pytest

HOST = "127.0.0.1"
TEST_USER = "ferrytest"
KEY_PASSPHRASE = "correct horse"
INSTALL_HINT = (
    "OpenSSH sshd is needed for the SFTP tests: run `bash scripts/system-packages.sh` "
    "(or `apt-get install --no-install-recommends openssh-server`). "
    "Set FERRY_SKIP_SSHD=1 to skip these tests instead."
)


def find_sshd() -> str | None:
    # sbin is often missing from a non-root PATH.
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/sbin"])
    sshd = shutil.which("sshd", path=path)
    return sshd if sshd and shutil.which("ssh-keygen") else None


def require_sshd() -> str:
    """sshd's path; a missing sshd fails the test loudly unless FERRY_SKIP_SSHD=1 asks to skip."""
    sshd = find_sshd()
    if sshd is None:
        if os.environ.get("FERRY_SKIP_SSHD") == "1":
            pytest.skip("OpenSSH sshd is not installed (FERRY_SKIP_SSHD=1)")
        pytest.fail(INSTALL_HINT, pytrace=False)
    return sshd


@cache
def sshd_version(sshd: str) -> tuple[int, int]:
    out = subprocess.run([sshd, "-V"], capture_output=True, text=True, check=False)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", out.stderr + out.stdout)
    return (int(m[1]), int(m[2])) if m else (0, 0)


@cache
def login_account() -> pwd.struct_passwd:
    """The account the servers log in: ``ferrytest`` as root (created once), else ourselves."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        pw = pwd.getpwnam(TEST_USER)
    except KeyError:
        cmd = ["useradd", "--create-home", "--home-dir", f"/home/{TEST_USER}", "--shell", "/bin/sh"]
        done = subprocess.run([*cmd, "--comment", "Ferry SFTP tests", TEST_USER], capture_output=True, text=True)
        if done.returncode not in (0, 9):  # 9: created meanwhile by a parallel test process
            raise RuntimeError(f"useradd {TEST_USER} failed: {done.stderr.strip()}")
        pw = pwd.getpwnam(TEST_USER)
    if pw.pw_shell != "/bin/sh":
        subprocess.run(["usermod", "--shell", "/bin/sh", TEST_USER], check=True)
    _clear_password()
    return pwd.getpwnam(TEST_USER)


def _clear_password() -> None:
    # useradd leaves "!" (locked), which sshd without PAM refuses even for keys; a crashed run may
    # have left a test password. "*" means: no password, account usable.
    if _shadow_field(TEST_USER) != "*":
        subprocess.run(["usermod", "--password", "*", TEST_USER], check=True)


def _shadow_field(user: str) -> str:
    for line in Path("/etc/shadow").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name == user:
            return rest.split(":", 1)[0]
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _fingerprint(pub_line: str) -> str:
    """``SHA256:...`` as ``ssh-keygen -lf`` prints it."""
    blob = base64.b64decode(pub_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _descendants(pid: int) -> list[list[int]]:
    """The processes below ``pid``, level by level (per-connection sshd, its children, sessions)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*") if Path("/proc/self").exists() else ():
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if state != "Z":  # exited already, only not reaped yet
            children.setdefault(int(ppid), []).append(int(entry.name))
    levels = [children.get(pid, [])]
    while levels[-1]:
        levels.append([kid for parent in levels[-1] for kid in children.get(parent, [])])
    return levels[:-1]


def _state(pid: int) -> str | None:
    """``ps``'s state letter (``Z``: exited, not yet reaped), None once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _terminate(levels: Sequence[Sequence[int]], timeout: float) -> None:
    # Deepest first (sessions before the sshd processes serving them). An exited process counts as
    # gone even before it is reaped: sshd's per-connection monitor exits without reaping its child,
    # which PID 1 then reaps in its own time (up to ~1 s in this sandbox).
    for pids in reversed(levels):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + timeout
            while any(_state(pid) not in (None, "Z") for pid in pids) and time.monotonic() < deadline:
                time.sleep(0.01)
            if all(_state(pid) in (None, "Z") for pid in pids):
                break


class SshServer:
    """One OpenSSH sshd on 127.0.0.1; a context manager (``with SshServer() as s:``).

    ``extra_config`` lines go *before* the defaults, so they override them (sshd keeps the first
    value of a keyword); lines from the first ``Match`` on go at the end, where sshd wants them.
    """

    host = HOST

    def __init__(
        self,
        *,
        max_sessions: int = 10,
        password_authentication: bool = True,
        kbd_interactive_authentication: bool = False,
        authentication_methods: str | None = None,
        use_pam: bool = False,
        extra_config: Sequence[str] = (),
        startup_timeout: float = 10.0,
        pam_stack: str | None = None,
    ) -> None:
        self.sshd = require_sshd()
        # sshd names its PAM service after the program it runs as (``__progname``): a symlink with
        # a name of our own selects an /etc/pam.d file of our own, leaving the system's sshd alone.
        self.pam_stack = pam_stack
        self.pam_file: Path | None = None
        self.options = {
            "MaxSessions": str(max_sessions),
            "PasswordAuthentication": "yes" if password_authentication else "no",
            "KbdInteractiveAuthentication": "yes" if kbd_interactive_authentication else "no",
            "UsePAM": "yes" if use_pam else "no",
        }
        if authentication_methods:
            self.options["AuthenticationMethods"] = authentication_methods
        self.extra_config = list(extra_config)
        self.startup_timeout = startup_timeout
        account = login_account()
        self.user, self.uid, self.gid = account.pw_name, account.pw_uid, account.pw_gid
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._password_set = False
        self.dir = Path(tempfile.mkdtemp(prefix="ferry-sshd-", dir=self._temp_base()))
        self.dir.chmod(0o755)
        self.config = self.dir / "sshd_config"
        self.log = self.dir / "sshd.log"
        self.known_hosts = self.dir / "known_hosts"
        self.authorized_keys = self.dir / "authorized_keys"
        self.client_key = self.dir / "client_ed25519"
        self.encrypted_key = self.dir / "client_encrypted_ed25519"
        self.host_keys = [self.dir / "host_ed25519", self.dir / "host_rsa"]
        self.root = self.dir / "root"
        self.host_key_fingerprints: dict[str, str] = {}  # key type ("ssh-ed25519") -> "SHA256:..."

    @staticmethod
    def _temp_base() -> str:
        # The login user must traverse down to authorized_keys: fall back to /tmp if TMPDIR is private.
        base = Path(tempfile.gettempdir())
        ok = all(p.stat().st_mode & 0o001 for p in [base, *base.parents])
        return str(base) if ok or os.geteuid() != 0 else "/tmp"

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> SshServer:
        try:
            self._make_keys()
            self.root.mkdir(mode=0o755)
            self.chown(self.root)
            if self.pam_stack is not None:
                if os.geteuid() != 0:
                    raise PermissionError("a PAM stack of its own needs a root-run sshd (/etc/pam.d)")
                service = f"ferry-test-{self.dir.name.rsplit('-', 1)[-1].lower()}"
                link = self.dir / service
                link.symlink_to(self.sshd)
                self.sshd = str(link)
                self.pam_file = Path("/etc/pam.d") / service
                self.pam_file.write_text(self.pam_stack)
            if os.geteuid() == 0:
                Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # privsep chroot
            for _attempt in range(5):
                self.port = _free_port()
                self._write_config()
                self.known_hosts.write_text(
                    "".join(
                        f"[{HOST}]:{self.port} {' '.join(k.with_suffix('.pub').read_text().split()[:2])}\n"
                        for k in self.host_keys
                    )
                )
                if self._spawn():
                    return self
            raise RuntimeError(f"sshd found no free port in 5 attempts; log:\n{self.log_text()}")
        except BaseException:
            self.stop()
            raise

    def _spawn(self) -> bool:
        """Start sshd on ``self.port``; False if another process took the port meanwhile."""
        cmd = [self.sshd, "-D", "-e", "-E", str(self.log), "-f", str(self.config)]
        offset = self.log.stat().st_size if self.log.exists() else 0
        if shutil.which("setpriv"):  # a crashed/killed pytest must not leave servers behind
            cmd = ["setpriv", "--pdeathsig", "TERM", "--", *cmd]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            self.wait_ready(self.startup_timeout)
            return True
        except RuntimeError:
            if "Address already in use" in self.log_text(offset):
                self.stop(cleanup=False)
                return False
            raise

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Until *our* sshd listens (its log says so) and answers with an ``SSH-2.0`` banner."""
        deadline = time.monotonic() + timeout
        listening = f"Server listening on {HOST} port {self.port}."
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"sshd exited ({self.process and self.process.returncode}); log:\n{self.log_text()}")
            if listening in self.log_text() and self._banner().startswith(b"SSH-2.0"):
                return
            time.sleep(0.02)
        raise RuntimeError(f"sshd not ready on port {self.port} after {timeout} s; log:\n{self.log_text()}")

    def _banner(self) -> bytes:
        try:
            with socket.create_connection((HOST, self.port), timeout=1) as s:
                data = b""
                while b"\n" not in data:
                    chunk = s.recv(256)
                    if not chunk:
                        break
                    data += chunk
                return data
        except OSError:
            return b""

    def kill_connections(self, timeout: float = 5.0) -> None:
        """Drop every live connection (and its sessions); the server keeps accepting new ones."""
        if self.process is not None:
            _terminate(_descendants(self.process.pid), timeout)

    def stop(self, timeout: float = 5.0, *, cleanup: bool = True) -> None:
        """Stop sshd and every connection it serves (a test may rely on that), then delete its folder."""
        if self.process is not None:
            self.kill_connections(timeout)  # first, while the listener still reaps them
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout)
            self.process = None
        if self.pam_file is not None:
            self.pam_file.unlink(missing_ok=True)
            self.pam_file = None
        if self._password_set:
            _clear_password()
            self._password_set = False
        if cleanup and self.dir.exists():
            # A test may leave read-only folders; as non-root they would block the removal.
            for folder, dirs, _files in os.walk(self.dir):
                for d in dirs:
                    path = os.path.join(folder, d)
                    if not os.path.islink(path):  # chmod follows links: never touch a link's target
                        os.chmod(path, 0o700)
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SshServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- files -----------------------------------------------------------------------------------

    def _make_keys(self) -> None:
        # All four in parallel: RSA generation dominates start-up otherwise.
        jobs = [
            ["-t", "ed25519", "-N", "", "-f", str(self.host_keys[0])],
            ["-t", "rsa", "-b", "2048", "-N", "", "-f", str(self.host_keys[1])],
            ["-t", "ed25519", "-N", "", "-C", "ferry-test", "-f", str(self.client_key)],
            ["-t", "ed25519", "-N", KEY_PASSPHRASE, "-C", "ferry-test-encrypted", "-f", str(self.encrypted_key)],
        ]
        procs = [subprocess.Popen(["ssh-keygen", "-q", *args], stdin=subprocess.DEVNULL) for args in jobs]
        if any(p.wait() for p in procs):
            raise RuntimeError("ssh-keygen failed")
        for key in self.host_keys:
            pub = key.with_suffix(".pub").read_text()
            self.host_key_fingerprints[pub.split()[0]] = _fingerprint(pub)
        self.authorized_keys.write_text("")
        self.authorized_keys.chmod(0o644)  # sshd reads it as the login user
        for key in (self.client_key, self.encrypted_key):
            self.authorize(key.with_suffix(".pub").read_text())

    def authorize(self, public_key: str) -> None:
        """Accept one more public key (an OpenSSH ``.pub`` line); takes effect for the next login."""
        with self.authorized_keys.open("a") as f:
            f.write(public_key.strip() + "\n")

    def _write_config(self) -> None:
        split = next((i for i, line in enumerate(self.extra_config) if line.lower().split()[:1] == ["match"]), None)
        head = self.extra_config[:split] if split is not None else self.extra_config
        match = self.extra_config[split:] if split is not None else []
        lines = [
            *head,
            f"ListenAddress {HOST}:{self.port}",
            "AddressFamily inet",
            *(f"HostKey {k}" for k in self.host_keys),
            f"PidFile {self.dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            *(f"{k} {v}" for k, v in self.options.items()),
            "PubkeyAuthentication yes",
            "PermitRootLogin no",
            "StrictModes no",  # our temp folders are not root-owned the way sshd insists on
            "Subsystem sftp internal-sftp",  # in-process: no login shell, no sftp-server exec
            "LogLevel VERBOSE",
            "MaxStartups 100",  # tests open many connections at once; the default drops some
            "PrintMotd no",
            "PrintLastLog no",
            "UseDNS no",
            "X11Forwarding no",
            "AllowTcpForwarding yes",  # ProxyJump through this server
        ]
        if sshd_version(self.sshd) >= (9, 8):
            lines.append("PerSourcePenalties no")  # else failed-login tests get 127.0.0.1 blocked
        self.config.write_text("\n".join([*lines, *match]) + "\n")

    def log_text(self, offset: int = 0) -> str:
        try:
            with self.log.open("rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace").replace("\r\n", "\n")  # sshd ends stderr lines in CRLF
        except FileNotFoundError:
            return ""

    def ssh_config_block(self, alias: str = "ferry-test", extra: Sequence[str] = ()) -> str:
        lines = [
            f"HostName {HOST}",
            f"Port {self.port}",
            f"User {self.user}",
            f"IdentityFile {self.client_key}",
            "IdentitiesOnly yes",  # ignore the developer's agent and ~/.ssh keys
            f"UserKnownHostsFile {self.known_hosts}",
            "GlobalKnownHostsFile /dev/null",
            "StrictHostKeyChecking yes",
            "BatchMode yes",
            *extra,
        ]
        return f"Host {alias}\n" + "".join(f"  {line}\n" for line in lines)

    def ssh_config(self, path: Path, alias: str = "ferry-test", extra: Sequence[str] = ()) -> Path:
        """Write an ssh_config with Host ``alias`` for this server (for ``ssh -F path alias``)."""
        path.write_text(self.ssh_config_block(alias, extra))
        path.chmod(0o600)  # ssh rejects a config others may write
        return path

    # -- the login user ----------------------------------------------------------------------------

    def chown(self, path: Path) -> Path:
        """Give ``path`` (recursively) to the login user, e.g. after seeding files as root."""
        if os.geteuid() == 0:
            for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
                os.lchown(p, self.uid, self.gid)
        return path

    def mkdir(self, prefix: str = "t-") -> Path:
        """A new empty folder under ``root``, owned by the login user (one per test on a shared server)."""
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root))
        path.chmod(0o755)
        return self.chown(path)

    def set_password(self, password: str) -> None:
        """Give the login user a password (root only: a non-root sshd cannot check passwords anyway)."""
        if os.geteuid() != 0:
            raise PermissionError("password logins need a root-run sshd (it reads /etc/shadow)")
        subprocess.run(["chpasswd"], input=f"{self.user}:{password}\n", text=True, check=True)
        self._password_set = True  # stop() removes it: a known password must not outlive the test
