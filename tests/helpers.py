"""Running the real ``ferry`` command in tests, as a new user would, isolated from the machine.

Every run gets ``FERRY_DATA_DIR`` / ``FERRY_CONFIG_DIR`` inside the test's own folder, a keychain
that cannot touch the real one, stdin closed (not a terminal) and a timeout, so a hang fails the
test instead of the whole suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FERRY = [sys.executable, "-m", "ferry"]
PARTIAL_GLOB = "*.ferry-part"


def ferry_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    env["FERRY_DATA_DIR"] = str(home / "data")
    env["FERRY_CONFIG_DIR"] = str(home / "config")
    env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    env.pop("PYTHONUTF8", None)
    if extra:
        env.update(extra)
    return env


@dataclass
class Ferry:
    """``ferry`` bound to one isolated home (``data`` and ``config`` under ``home``)."""

    home: Path
    cwd: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return ferry_env(self.home, self.extra_env)

    def __call__(self, *args: str | os.PathLike[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FERRY, *(os.fspath(a) for a in args)],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            timeout=timeout,
            check=False,
        )

    def popen(self, *args: str | os.PathLike[str], **kw: Any) -> subprocess.Popen[str]:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen(
            [*FERRY, *(os.fspath(a) for a in args)],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            **kw,
        )

    def ok(self, *args: str | os.PathLike[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run and insist on exit 0, showing the output if not."""
        res = self(*args, timeout=timeout)
        assert res.returncode == 0, describe(res)
        return res

    def jobs(self) -> list[dict[str, Any]]:
        """``ferry queue list --json``."""
        res = self.ok("queue", "list", "--json")
        data: list[dict[str, Any]] = json.loads(res.stdout)
        return data

    def job(self, job_id: int) -> dict[str, Any]:
        for j in self.jobs():
            if j["id"] == job_id:
                return j
        raise AssertionError(f"job {job_id} is not in the queue: {self.jobs()}")


def describe(res: subprocess.CompletedProcess[str]) -> str:
    return f"exit {res.returncode}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"


def events(stdout: str) -> list[dict[str, Any]]:
    """Parse JSON lines; every non-empty line must be one JSON object with an "event"."""
    out = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        assert isinstance(obj, dict) and "event" in obj, line
        out.append(obj)
    return out


def result_event(stdout: str) -> dict[str, Any]:
    results = [e for e in events(stdout) if e["event"] == "result"]
    assert len(results) == 1, stdout
    return results[0]


def file_events(stdout: str) -> dict[str, dict[str, Any]]:
    """The last "file" event per relative path."""
    return {e["path"]: e for e in events(stdout) if e["event"] == "file"}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


def write_random(path: Path, size: int, chunk: int = 8 << 20) -> str:
    """Write ``size`` random bytes in chunks; returns their sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            data = os.urandom(min(chunk, left))
            h.update(data)
            f.write(data)
            left -= len(data)
    return h.hexdigest()


# A fixed modification time with nanoseconds (hosts that keep whole seconds keep part of it).
FIXED_NS = 1_700_000_000_123_456_789


def put(root: Path, rel: str, data: bytes, ns: int = FIXED_NS) -> Path:
    """Write ``data`` at ``root/rel`` (folders made) with modification time ``ns``."""
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    os.utime(p, ns=(ns, ns))
    return p


def file_digests(root: Path) -> dict[str, str]:
    """sha256 of every regular file under ``root`` (not following links), by relative path."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath, name)
            if p.is_file() and not p.is_symlink():
                out[p.relative_to(root).as_posix()] = sha256_file(p)
    return out


def snapshot(root: Path, exclude: Iterable[str] = ()) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with (mode, size, mtime_ns): to show that nothing changed."""
    skip = set(exclude)
    out: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirs, files in os.walk(root):
        top = Path(dirpath) == root
        dirs[:] = [d for d in dirs if not (top and d in skip)]
        for name in [*dirs, *(f for f in files if not (top and f in skip))]:
            p = Path(dirpath, name)
            st = p.lstat()
            out[p.relative_to(root).as_posix()] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def partials(root: Path) -> list[Path]:
    return sorted(root.rglob(PARTIAL_GLOB))


def wait_until(cond: Callable[[], Any], timeout: float, interval: float = 0.02, what: str = "") -> Any:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or cond}")
        time.sleep(interval)


def stop(proc: subprocess.Popen[str], sig: int | None = None, timeout: float = 30) -> tuple[str, str]:
    """Send ``sig`` (default: terminate) if still running, reap it, return its output."""
    if proc.poll() is None:
        if sig is None:
            proc.terminate()
        else:
            proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"ferry did not stop within {timeout}s\n{out}\n{err}") from None
    return out, err


# ---- the engine, in-process, on the memory backend ----


@dataclass
class MemSite:
    """A fresh ``memory://NAME`` store with helpers to put and get files."""

    name: str

    @property
    def backend(self) -> Any:
        from ferry.backends.memory import MemoryBackend
        from ferry.core.address import Address

        return MemoryBackend(Address("memory", "/", host=self.name))

    @property
    def store(self) -> Any:
        from ferry.backends.memory import get_store

        return get_store(self.name)

    def url(self, path: str) -> str:
        return f"memory://{self.name}{path}"

    def put(self, path: str, data: bytes) -> None:
        b = self.backend
        b.mkdir(path.rsplit("/", 1)[0] or "/", parents=True, exist_ok=True)
        w = b.open_write(path, size=len(data), token="put")
        w.write(data)
        w.finish()
        w.commit(overwrite=True)

    def get(self, path: str) -> bytes:
        with self.backend.open_read(path) as f:
            data: bytes = f.read()
            return data

    def exists(self, path: str) -> bool:
        return bool(self.backend.exists(path))

    def partials(self, folder: str = "/") -> list[tuple[str, int]]:
        """(path, size) of every partial file under ``folder`` (none if it does not exist)."""
        from ferry.core.errors import NotFound

        try:
            return [
                (f"{folder.rstrip('/')}/{rel}", e.size or 0)
                for rel, e in self.backend.walk(folder)
                if e.name.endswith(".ferry-part")
            ]
        except NotFound:
            return []


def mem_job(store: Any, sources: list[str], dest: str, **options: Any) -> int:
    """Record a job exactly as ``ferry queue add`` does (validated, canonical addresses)."""
    from ferry.backends.registry import BackendPool
    from ferry.cli.transfer_common import create_job
    from ferry.core.address import parse_address
    from ferry.transfers.options import JobOptions
    from ferry.transfers.planner import resolve_roots

    opts = JobOptions(**{"on_conflict": "overwrite", **options})
    srcs = [parse_address(s) for s in sources]
    dst = parse_address(dest)
    with BackendPool() as pool:
        roots = resolve_roots(srcs, dst, pool, recursive=opts.recursive)
    return int(create_job(store, srcs, dst, roots, opts))


class Recorder:
    """A scheduler listener that keeps every event with the time it arrived."""

    def __init__(self) -> None:
        self.jobs: list[tuple[float, int, str, str | None]] = []
        self.tasks: list[tuple[float, int, Any, Any]] = []

    def task_finished(self, job_id: int, task: Any, result: Any) -> None:
        self.tasks.append((time.monotonic(), job_id, task, result))

    def job_changed(self, job_id: int, state: str, message: str | None) -> None:
        self.jobs.append((time.monotonic(), job_id, state, message))

    def waiting(self, until: Any, why: str) -> None:
        pass

    def when(self, job_id: int, state: str, after: float = 0.0) -> float | None:
        for t, j, s, _ in self.jobs:
            if j == job_id and s == state and t >= after:
                return t
        return None


class OsWritingWrong:
    """``os`` as the local backend sees it (``monkeypatch.setattr(local, "os", ...)``), but the
    first ``write`` lands one byte changed on disk while the caller's buffer stays as it was: a
    layer below that does not store what it was given."""

    def __init__(self) -> None:
        self.damaged: list[int] = []  # the descriptor written wrong

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        if self.damaged:
            return os.write(fd, data)
        self.damaged.append(fd)
        wrong = bytearray(data)
        wrong[len(wrong) // 2] ^= 1
        return os.write(fd, wrong)
