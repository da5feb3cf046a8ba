#!/usr/bin/env python3
"""Site to site benchmark (issue 22): ``ferry cp -r`` between an SSH host and S3, direct vs relay.

The laptop (Ferry's process) reaches the loopback OpenSSH sshd (``tests/sshd.py``) and the S3
server (``tests/s3/servers.py``: ``rclone serve s3`` by default, or moto) ONLY through
``linkemu.py`` (run in this process: 50 Mbit/s per direction, 30 ms RTT, a 6 MiB window per
connection, by default). The host reaches the store directly: its ``curl`` reads a
``.curlrc`` (sshd's ``SetEnv CURL_HOME``) with ``connect-to`` from the emulator's S3 address to
the server's own, as a cluster whose own network routes to the store would. The URL Ferry signs
is the same; only the host's path to it differs.

Each run copies one folder with ``ferry cp -r --route direct`` or ``--route relay`` (the two
interleaved, the order alternated, median of ``--runs``), up (host -> bucket) and down (bucket ->
host). Reported: wall times, the ratio relay / direct, and the laptop's traffic, i.e. every byte
through the emulated link in both directions (linkemu's own counters, read before and after each
run), as a share of the data moved. Every run's result is checked (exit 0, the route the JSON
result names, and each object's or file's size and SHA-256).

    .venv/bin/python benchmarks/bench_direct.py                       # 8 x 32 MiB, both ways, 3 runs
    .venv/bin/python benchmarks/bench_direct.py --files 4 --size 256M --dir up --runs 1
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(HERE))

import linkemu  # noqa: E402
from s3.servers import S3Server  # noqa: E402
from sshd import SshServer, _descendants  # noqa: E402

MiB = 1 << 20
BIN = Path(sys.executable).parent
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int, *, children: bool = False) -> float:
    """CPU seconds of ``pid`` (user + system), or of its reaped descendants with ``children``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        first = 13 if children else 11  # utime, stime; cutime, cstime
        return (int(fields[first]) + int(fields[first + 1])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def own_cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def log(msg: str = "") -> None:
    print(msg, flush=True)


@dataclass
class Runs:
    seconds: list[float] = field(default_factory=list)
    link_bytes: list[int] = field(default_factory=list)  # through the emulated link, both directions
    routes: list[str] = field(default_factory=list)
    cpu: list[tuple[float, float, float, float]] = field(default_factory=list)  # ferry, host, store, link
    load: list[float] = field(default_factory=list)


class Bench:
    def __init__(self, work: Path, sshd: SshServer, s3: S3Server, emu: linkemu.LinkEmulator, timeout: float) -> None:
        self.work, self.sshd, self.s3, self.emu, self.timeout = work, sshd, s3, emu, timeout
        self.home = work / "home"
        (self.home / ".ssh").mkdir(parents=True, mode=0o700)
        self.ssh_port = emu.add_route(("127.0.0.1", sshd.port))
        self.s3_port = emu.add_route(("127.0.0.1", s3.port))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "AWS_"))}
        self.env.update(
            HOME=str(self.home),
            SSH_AUTH_SOCK="",
            FERRY_DATA_DIR=str(work / "ferry-data"),
            FERRY_CONFIG_DIR=str(work / "ferry-config"),
            PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
            PATH=f"{BIN}:{os.environ.get('PATH', '')}",
            **s3.env(f"http://127.0.0.1:{self.s3_port}"),
        )
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # compiled once, like an installed Ferry
        ssh = self.home / ".ssh"
        text = sshd.known_hosts.read_text().replace(f"]:{sshd.port} ", f"]:{self.ssh_port} ")
        (ssh / "known_hosts").write_text(text)
        block = sshd.ssh_config_block("bench").replace(f"Port {sshd.port}\n", f"Port {self.ssh_port}\n")
        (ssh / "config").write_text(block.replace(str(sshd.known_hosts), str(ssh / "known_hosts")))
        (ssh / "config").chmod(0o600)
        self.client = s3.client()  # direct, for seeding and checking (not through the link)
        self.bucket = s3.new_bucket()

    def link_total(self) -> int:
        return int(sum(self.emu.stats.bytes))

    def cpu(self) -> tuple[float, float, float, float]:
        """CPU seconds so far: Ferry (this process's reaped children), the host (every process the
        sshd ran, reaped), the S3 server, the link emulator (this process: it runs nothing else
        during a run)."""
        assert self.sshd.process is not None and self.s3.proc is not None
        host = cpu_of(self.sshd.process.pid, children=True)
        return own_cpu(resource.RUSAGE_CHILDREN), host, cpu_of(self.s3.proc.pid), own_cpu(resource.RUSAGE_SELF)

    def settle(self) -> None:
        """Until the host's sessions have ended (their CPU is then counted by sshd)."""
        assert self.sshd.process is not None
        deadline = time.monotonic() + 10
        while _descendants(self.sshd.process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def ferry(self, args: list[str], runs: Runs) -> dict[str, Any]:
        self.settle()
        before = self.link_total()
        cpu0 = self.cpu()
        runs.load.append(os.getloadavg()[0])
        start = time.perf_counter()
        proc = subprocess.run(
            [str(BIN / "ferry"), "cp", "-r", "--json", *args],
            env=self.env,
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=self.timeout,
        )
        elapsed = time.perf_counter() - start
        time.sleep(0.5)  # the last bytes (closing handshakes) reach the counters
        self.settle()
        f, h, st, lk = (round(b - a, 2) for a, b in zip(cpu0, self.cpu(), strict=True))
        runs.cpu.append((f, h, st, lk))
        if proc.returncode != 0:
            raise SystemExit(f"ferry cp {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        events = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
        result: dict[str, Any] = next(e for e in events if e.get("event") == "result")
        runs.seconds.append(elapsed)
        runs.link_bytes.append(self.link_total() - before)
        runs.routes.append(str(result.get("route")).split(":")[0])  # "direct: host → s3://…"
        return result

    def up(self, route: str, src: Path, want: dict[str, str], runs: Runs) -> None:
        prefix = f"up-{route}-{uuid.uuid4().hex[:6]}"
        self.ferry(["--route", route, f"bench:{src}", f"s3://{self.bucket}/{prefix}/"], runs)
        got = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=f"{prefix}/"):
            for obj in page.get("Contents", []):
                if not obj["Key"].endswith("/"):
                    body = self.client.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"]
                    h = hashlib.sha256()
                    for chunk in iter(functools.partial(body.read, 8 * MiB), b""):
                        h.update(chunk)
                    got[obj["Key"].rsplit("/", 1)[1]] = h.hexdigest()
                    self.client.delete_object(Bucket=self.bucket, Key=obj["Key"])
        if got != want:
            raise SystemExit(f"{route} upload: the bucket does not hold the files sent")

    def down(self, route: str, prefix: str, want: dict[str, str], runs: Runs) -> None:
        dest = self.sshd.mkdir(f"down-{route}-")
        self.ferry(["--route", route, f"s3://{self.bucket}/{prefix}", f"bench:{dest}/"], runs)
        got = {p.name: sha256_file(p) for p in (dest / Path(prefix).name).iterdir()}
        shutil.rmtree(dest)
        if got != want:
            raise SystemExit(f"{route} download: the host does not hold the files sent")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MiB):
            h.update(chunk)
    return h.hexdigest()


def make_files(folder: Path, count: int, size: int) -> dict[str, str]:
    folder.mkdir(parents=True)
    block = os.urandom(min(size, 8 * MiB))
    out = {}
    for i in range(count):
        name = f"f{i:03d}.bin"
        with open(folder / name, "wb") as f:
            left = size
            while left:
                piece = (i.to_bytes(8, "little") + block)[: min(left, len(block))]  # no two files alike
                f.write(piece)
                left -= len(piece)
        out[name] = sha256_file(folder / name)
    return out


def report(direction: str, total: int, rate: float, res: dict[str, Runs]) -> dict[str, Any]:
    d, r = res["direct"], res["relay"]
    md, mr = statistics.median(d.seconds), statistics.median(r.seconds)
    link_limit = total * 8 / rate  # what any relay needs at least: the data over the link once
    row = {
        "direction": direction,
        "bytes": total,
        "direct_s": [round(x, 2) for x in d.seconds],
        "relay_s": [round(x, 2) for x in r.seconds],
        "direct_median_s": round(md, 2),
        "relay_median_s": round(mr, 2),
        "ratio": round(mr / md, 1),
        "link_limit_s": round(link_limit, 1),
        "direct_link_bytes": d.link_bytes,
        "relay_link_bytes": r.link_bytes,
        "direct_link_pct": round(100 * statistics.median(d.link_bytes) / total, 3),
        "relay_link_pct": round(100 * statistics.median(r.link_bytes) / total, 1),
        "routes": sorted(set(d.routes + r.routes)),
        "cpu_s_ferry_host_store_link": {"direct": d.cpu, "relay": r.cpu},
        "load_at_start": {"direct": d.load, "relay": r.load},
    }
    log(
        f"{direction:5} {total / MiB:.0f} MiB: direct {md:.1f} s {row['direct_s']}, relay {mr:.1f} s {row['relay_s']} "
        f"(link limit {link_limit:.1f} s): relay/direct {row['ratio']}x; laptop traffic direct "
        f"{statistics.median(d.link_bytes):,} B = {row['direct_link_pct']} % of the data, relay "
        f"{statistics.median(r.link_bytes):,} B = {row['relay_link_pct']} %"
    )
    for name, runs in res.items():
        parts = zip(*runs.cpu, strict=True)
        ferry, host, store, link = (statistics.median(x) for x in parts)
        log(
            f"      {name} CPU s (median): Ferry {ferry:.1f}, host {host:.1f}, store {store:.1f}, link emulator "
            f"{link:.1f}; load average at start {[round(x, 1) for x in runs.load]}"
        )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=8, help="files in the folder (default 8)")
    ap.add_argument("--size", default="32M", help="size of each file (default 32M: 256 MiB in all)")
    ap.add_argument("--rtt", type=float, default=30.0, help="the laptop's round trip in ms (default 30)")
    ap.add_argument("--rate", default="50m", help="the laptop's link rate per direction (default 50m)")
    ap.add_argument("--window", default="6M", help="TCP window per connection (default 6M)")
    ap.add_argument("--dir", default="up,down", help="up, down or both (default both)")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs per route (median; default 3)")
    ap.add_argument("--server", default="rclone", choices=["rclone", "moto"], help="the S3 server (default rclone)")
    ap.add_argument("--timeout", type=float, default=900.0, help="give up on a run after this many seconds")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()
    size = linkemu.parse_size(args.size)
    rate = linkemu.parse_rate(args.rate)
    total = size * args.files
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-direct-"))
    work.chmod(0o755)
    curl_home = Path(tempfile.mkdtemp(prefix="ferry-curlhome-", dir="/tmp"))
    curl_home.chmod(0o755)
    sshd = SshServer(extra_config=[f"SetEnv CURL_HOME={curl_home}"]).start()
    s3 = S3Server(args.server).start()
    emu = linkemu.LinkEmulator(args.rtt / 1000, rate, linkemu.parse_size(args.window)).start()
    rows = []
    try:
        bench = Bench(work, sshd, s3, emu, args.timeout)
        rc = curl_home / ".curlrc"  # the host's own way to the store: straight to the server
        rc.write_text(f'connect-to = "127.0.0.1:{bench.s3_port}:127.0.0.1:{s3.port}"\n')
        rc.chmod(0o644)
        log(
            f"# direct bench: {args.files} x {size / MiB:.0f} MiB = {total / MiB:.0f} MiB; laptop link "
            f"{rate / 1e6:g} Mbit/s, {args.rtt:g} ms RTT; S3 server {args.server}; load {os.getloadavg()}, "
            f"cores {os.cpu_count()}"
        )
        src = sshd.mkdir("direct-src-") / "data"
        want = make_files(src, args.files, size)
        sshd.chown(src.parent)
        seed = f"seed-{uuid.uuid4().hex[:6]}/data"
        if "down" in args.dir:
            for name in want:
                bench.client.upload_file(str(src / name), bench.bucket, f"{seed}/{name}")
        for direction in args.dir.split(","):
            res = {"direct": Runs(), "relay": Runs()}
            for i in range(max(1, args.runs)):
                for route in ("direct", "relay") if i % 2 == 0 else ("relay", "direct"):
                    if direction == "up":
                        bench.up(route, src, want, res[route])
                    else:
                        bench.down(route, seed, want, res[route])
                    log(
                        f"  {direction} {route} run {i + 1}: {res[route].seconds[-1]:.2f} s, "
                        f"{res[route].link_bytes[-1]:,} B through the link, route {res[route].routes[-1]}"
                    )
            if any(r != "direct" for r in res["direct"].routes) or any(r != "relay" for r in res["relay"].routes):
                raise SystemExit(f"a run took another route than asked: {res}")
            rows.append(report(direction, total, rate, res))
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
    finally:
        emu.close()
        sshd.stop()
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(curl_home, ignore_errors=True)
    log(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
