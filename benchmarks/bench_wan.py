#!/usr/bin/env python3
"""Wide-area benchmark (issue 21): Ferry and its peers through an emulated long fat link.

The loopback OpenSSH sshd (``tests/sshd.py``) and ``rclone serve s3`` (``tests/s3/servers.py``)
sit behind ``linkemu.py`` (a TCP proxy in its own process: RTT, a shared 1 Gbit/s link per
direction, a 6 MiB TCP window per connection; see its docstring for what it models and not).

Cases, each up and down, at each RTT:

    big     one 256 MiB file
    mid     1,000 x 1 MiB
    small   2,000 x 16 KiB

Tools, each at its defaults: SFTP: ``ferry cp -r``, ``scp -r``, ``sftp -b`` (put -r / get -r),
``rclone copy`` (``:sftp:``); S3: ``ferry cp -r``, ``s5cmd cp``, ``aws s3 cp --recursive``,
``rclone copy`` (``:s3:``). Every tool copies the same folder. Runs are interleaved (run 1 of every
tool, then run 2, with the order rotated) and the median of ``--runs`` is reported with the
link's limit (bytes / link rate: no tool can be faster), the ratio of the best peer's time to
Ferry's (> 1: Ferry faster), the load average at the start of the runs, and the CPU seconds of
the tool, the server and the emulator (which side was busy). A run slower than ``--timeout`` is
stopped and counted as that many seconds, marked ``>`` (a lower bound on its time).

    .venv/bin/python benchmarks/bench_wan.py --rtt 50 --case small --dir up
    .venv/bin/python benchmarks/bench_wan.py --rtt 50,150 --proto s3 --tools ferry,s5cmd --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(HERE))

import linkemu  # noqa: E402
from s3.servers import ACCESS_KEY, SECRET_KEY, S3Server  # noqa: E402
from sshd import SshServer, _descendants  # noqa: E402

MiB = 1 << 20
BIN = Path(sys.executable).parent
TICK = os.sysconf("SC_CLK_TCK")
SFTP_TOOLS = ["ferry", "scp", "sftp -b", "rclone"]
S3_TOOLS = ["ferry", "s5cmd", "aws", "rclone"]


def log(msg: str = "") -> None:
    print(msg, flush=True)


@dataclass
class Case:
    name: str
    files: int
    size: int

    @property
    def total(self) -> int:
        return self.files * self.size

    def describe(self) -> str:
        each = f"{self.size // MiB} MiB" if self.size >= MiB else f"{self.size // 1024} KiB"
        return f"{self.files:,} x {each}" if self.files > 1 else f"one {each} file"

    def make(self, root: Path) -> Path:
        src = root / self.name
        src.mkdir(parents=True)
        block = os.urandom(min(self.size, 8 * MiB))
        for i in range(self.files):
            with open(src / f"f{i:05d}.bin", "wb") as f:
                left = self.size
                head = i.to_bytes(8, "little")  # no two files alike
                while left:
                    piece = (head + block)[: min(left, len(block))]
                    f.write(piece)
                    left -= len(piece)
        return src


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 if gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class Runs:
    seconds: list[float] = field(default_factory=list)
    timed_out: int = 0
    cpu: list[tuple[float, float, float]] = field(default_factory=list)  # tool, server, emulator
    load: list[float] = field(default_factory=list)
    failed: str = ""


class Bench:
    def __init__(self, work: Path, sshd: SshServer | None, s3: S3Server | None, timeout: float) -> None:
        self.work = work
        self.sshd = sshd
        self.s3 = s3
        self.timeout = timeout
        self.emu: subprocess.Popen[str] | None = None
        self.home = work / "home"
        (self.home / ".ssh").mkdir(parents=True, mode=0o700)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "AWS_"))}
        self.env.update(
            HOME=str(self.home),
            SSH_AUTH_SOCK="",
            FERRY_DATA_DIR=str(work / "ferry-data"),
            FERRY_CONFIG_DIR=str(work / "ferry-config"),
            PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
            PATH=f"{BIN}:{os.environ.get('PATH', '')}",
        )
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # compiled once, like an installed Ferry
        self.bucket = s3.new_bucket() if s3 else ""
        self.ssh_port = self.s3_port = 0

    # -- the link ---------------------------------------------------------------------------------

    def start_link(self, rtt_ms: float, rate: str, window: str) -> None:
        targets = []
        if self.sshd:
            targets.append(("127.0.0.1", self.sshd.port))
        if self.s3:
            targets.append(("127.0.0.1", self.s3.port))
        proc, ports = linkemu.spawn(targets, rtt_ms, rate, window)
        assert isinstance(proc, subprocess.Popen)
        self.emu = proc
        if self.sshd:
            self.ssh_port = ports.pop(0)
            self._ssh_files(self.ssh_port)
        if self.s3:
            self.s3_port = ports.pop(0)
            self.env.update(self.s3.env(f"http://127.0.0.1:{self.s3_port}"))

    def stop_link(self) -> None:
        if self.emu is None:
            return
        self.emu.terminate()
        try:
            self.emu.wait(10)
        except subprocess.TimeoutExpired:
            self.emu.kill()
        self.emu = None

    def _ssh_files(self, port: int) -> None:
        """~/.ssh/config (Host bench -> the emulator's port) and a known_hosts for that port."""
        assert self.sshd is not None
        ssh = self.home / ".ssh"
        text = self.sshd.known_hosts.read_text().replace(f"]:{self.sshd.port} ", f"]:{port} ")
        (ssh / "known_hosts").write_text(text)
        block = self.sshd.ssh_config_block("bench").replace(f"Port {self.sshd.port}\n", f"Port {port}\n")
        block = block.replace(str(self.sshd.known_hosts), str(ssh / "known_hosts"))
        (ssh / "config").write_text(block)
        (ssh / "config").chmod(0o600)

    # -- one timed run -----------------------------------------------------------------------------

    def timed(self, argv: list[str], runs: Runs, server: str) -> None:
        runs.load.append(os.getloadavg()[0])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        emu0 = proc_cpu(self.emu.pid) if self.emu else 0.0
        s3_0 = proc_cpu(self.s3.proc.pid) if server == "s3" and self.s3 and self.s3.proc else 0.0
        seen: dict[int, float] = {}
        stop = threading.Event()
        sampler = None
        if server == "sftp" and self.sshd and self.sshd.process:
            sampler = threading.Thread(target=self._sample_sshd, args=(seen, stop), daemon=True)
            sampler.start()
        start = time.perf_counter()
        timed_out = False
        err = self.work / "stderr.txt"
        with open(err, "w") as errf:
            proc = subprocess.Popen(argv, env=self.env, cwd=self.work, stdout=subprocess.DEVNULL, stderr=errf)
            try:
                rc = proc.wait(self.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
                timed_out = True
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        stop.set()
        if sampler:
            sampler.join()
        self.settle()
        if rc != 0 and not timed_out:
            runs.failed = f"exit {rc}: {err.read_text().strip()[-300:]}"
            return
        runs.seconds.append(self.timeout if timed_out else elapsed)
        runs.timed_out += timed_out
        tool_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if server == "s3" and self.s3 and self.s3.proc:
            server_cpu = proc_cpu(self.s3.proc.pid) - s3_0
        else:
            server_cpu = sum(seen.values())
        runs.cpu.append((tool_cpu, server_cpu, (proc_cpu(self.emu.pid) if self.emu else 0.0) - emu0))

    def _sample_sshd(self, seen: dict[int, float], stop: threading.Event) -> None:
        """CPU of every process under sshd (sessions, sftp-server, scp), sampled every 0.1 s."""
        assert self.sshd and self.sshd.process
        while True:
            for level in _descendants(self.sshd.process.pid):
                for pid in level:
                    seen[pid] = max(seen.get(pid, 0.0), proc_cpu(pid))
            if stop.wait(0.1):
                return

    def settle(self) -> None:
        """Wait until the last connection's sshd processes are gone."""
        if not (self.sshd and self.sshd.process):
            return
        deadline = time.monotonic() + 10
        while _descendants(self.sshd.process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    # -- the tools ---------------------------------------------------------------------------------

    def sftp_argv(self, tool: str, src: Path, remote: Path, local: Path, up: bool) -> list[str]:
        """``src`` is the local folder (up) or ``remote/NAME`` (down)."""
        assert self.sshd is not None
        name = src.name
        cfg = ["-F", str(self.home / ".ssh" / "config")]
        if tool.startswith("ferry"):
            ferry = [*ferry_command(tool), "cp", "-r", *ferry_flags(tool)]
            return [*ferry, str(src), f"bench:{remote}/"] if up else [*ferry, f"bench:{src}", f"{local}/"]
        if tool == "scp":
            scp = ["scp", "-q", "-r", *cfg]
            return [*scp, str(src), f"bench:{remote}/"] if up else [*scp, f"bench:{src}", f"{local}/"]
        if tool == "sftp -b":
            batch = self.work / f"batch-{uuid.uuid4().hex[:6]}"
            batch.write_text(f"put -r {src} {remote}/\n" if up else f"get -r {src} {local}/\n")
            return ["sftp", "-q", *cfg, "-b", str(batch), "bench"]
        if tool == "rclone":
            s = self.sshd
            kh = self.home / ".ssh" / "known_hosts"
            r = f":sftp,host=127.0.0.1,port={self.ssh_port},user={s.user},key_file={s.client_key}"
            r += f",known_hosts_file={kh}:"
            rc = [str(BIN / "rclone"), "copy", "--config", "/dev/null"]
            return [*rc, str(src), f"{r}{remote}/{name}"] if up else [*rc, f"{r}{src}", f"{local}/{name}"]
        raise ValueError(tool)

    def s3_argv(self, tool: str, src: str, dst: str, up: bool) -> list[str]:
        """Up: the local folder ``src`` into ``dst`` = s3://bucket/prefix/NAME; down: the prefix
        ``src`` = s3://bucket/seed/NAME into the local folder ``dst`` (= .../NAME)."""
        if tool.startswith("ferry"):  # cp -r copies the folder itself into the parent given
            return [*ferry_command(tool), "cp", "-r", *ferry_flags(tool), src, f"{dst.rsplit('/', 1)[0]}/"]
        if tool == "s5cmd":
            s5 = [str(BIN / "s5cmd"), "--endpoint-url", f"http://127.0.0.1:{self.s3_port}", "cp"]
            return [*s5, f"{src}/*", f"{dst}/"]
        if tool == "aws":
            return [str(BIN / "aws"), "s3", "cp", "--recursive", "--only-show-errors", src, dst]
        if tool == "rclone":

            def remote(url: str) -> str:
                if not url.startswith("s3://"):
                    return url
                return (
                    f":s3,provider=Other,endpoint='http://127.0.0.1:{self.s3_port}',access_key_id={ACCESS_KEY},"
                    f"secret_access_key={SECRET_KEY}:{url.removeprefix('s3://')}"
                )

            return [str(BIN / "rclone"), "copy", "--config", "/dev/null", remote(src), remote(dst)]
        raise ValueError(tool)

    # -- one case ----------------------------------------------------------------------------------

    def run_case(self, proto: str, case: Case, up: bool, tools: list[str], n: int) -> dict[str, Runs]:
        src = self.work / "data" / case.name
        out: dict[str, Runs] = {t: Runs() for t in tools}
        if proto == "sftp":
            assert self.sshd is not None
            base = self.sshd.mkdir("wan-")
            seeded = base / "seed"
            if not up:
                seeded.mkdir()
                shutil.copytree(src, seeded / case.name)
                self.sshd.chown(seeded)
        else:
            assert self.s3 is not None
            seed_prefix = f"seed-{uuid.uuid4().hex[:8]}"
            if not up:  # straight to the server (not through the link), once per case
                s5 = [str(BIN / "s5cmd"), "--endpoint-url", self.s3.endpoint, "cp"]
                subprocess.run([*s5, f"{src}/*", f"s3://{self.bucket}/{seed_prefix}/{case.name}/"],
                               env=self.env, check=True, capture_output=True)  # fmt: skip
        for i in range(n):
            order = tools[i % len(tools) :] + tools[: i % len(tools)]
            for tool in order:
                runs = out[tool]
                if runs.failed:
                    continue
                if proto == "sftp":
                    assert self.sshd is not None
                    target = base / "up" if up else self.work / "down"
                    target.mkdir(parents=True)
                    if up:
                        self.sshd.chown(target)
                    argv = self.sftp_argv(tool, src if up else seeded / case.name, target, target, up)
                    self.timed(argv, runs, "sftp")
                    self.check(target / case.name, case, runs, tool)
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    assert self.s3 is not None
                    prefix = f"up-{uuid.uuid4().hex[:8]}"
                    url = f"s3://{self.bucket}/{prefix}/{case.name}"
                    local = self.work / "down" / case.name
                    if up:
                        self.timed(self.s3_argv(tool, str(src), url, True), runs, "s3")
                        got = self.s3.dir / "data" / self.bucket / prefix / case.name
                    else:
                        local.parent.mkdir(parents=True)
                        seed = f"s3://{self.bucket}/{seed_prefix}/{case.name}"
                        self.timed(self.s3_argv(tool, seed, str(local), False), runs, "s3")
                        got = local
                    self.check(got, case, runs, tool)
                    shutil.rmtree(self.s3.dir / "data" / self.bucket / prefix, ignore_errors=True)
                    shutil.rmtree(self.work / "down", ignore_errors=True)
        if proto == "sftp":
            shutil.rmtree(base, ignore_errors=True)
        else:
            assert self.s3 is not None
            shutil.rmtree(self.s3.dir / "data" / self.bucket / seed_prefix, ignore_errors=True)
        return out

    @staticmethod
    def check(folder: Path, case: Case, runs: Runs, tool: str) -> None:
        """A run counts only if every file landed whole (a timed-out run is a lower bound anyway)."""
        if runs.failed or (runs.timed_out and len(runs.seconds) == runs.timed_out):
            return
        files = list(folder.glob("*")) if folder.is_dir() else []
        size = sum(f.stat().st_size for f in files)
        if len(files) != case.files or size != case.total:
            runs.failed = f"incomplete: {len(files)} files, {size} bytes in {folder}"
            runs.seconds.pop()


def ferry_flags(tool: str) -> list[str]:
    """``ferry -j16`` (an extra row from --ferry-parallel) -> ``--parallel 16``; plain ``ferry``: none."""
    return ["--parallel", tool.split("-j", 1)[1]] if "-j" in tool else []


BASELINE: list[str] = []  # --baseline: the source tree ``ferry@before`` runs from


def ferry_command(tool: str) -> list[str]:
    """The ``ferry`` command of a Ferry row: ``ferry[K=V;K2=V2]`` (an extra row from --ferry-env)
    runs with those settings in its environment, ``ferry@before`` from the --baseline tree."""
    env = []
    if tool == "ferry@before":
        env = [f"PYTHONPATH={BASELINE[0]}"]
    elif "[" in tool:
        env = [kv for kv in tool[tool.index("[") + 1 : tool.rindex("]")].split(";") if kv]
    return ["env", *env, str(BIN / "ferry")] if env else [str(BIN / "ferry")]


def capped(r: Runs) -> bool:
    """Most runs hit --timeout: the median is a lower bound on the tool's time."""
    return r.timed_out * 2 > len(r.seconds)


def report(
    rtt: float, rate_bps: float, proto: str, case: Case, up: bool, res: dict[str, Runs]
) -> list[dict[str, object]]:
    limit = case.total / (rate_bps / 8)
    direction = "up" if up else "down"
    med = {t: statistics.median(r.seconds) for t, r in res.items() if r.seconds and not r.failed}
    peers = {t: s for t, s in med.items() if not t.startswith("ferry")}
    best = min(peers, key=lambda t: peers[t]) if peers else None
    ferry = med.get("ferry")
    loads = [x for r in res.values() for x in r.load]
    log(
        f"\n### {proto} {case.describe()} {direction}, RTT {rtt:g} ms, link limit {limit:.2f} s "
        f"({rate_bps / 1e9:g} Gbit/s); load avg (1 min) median {statistics.median(loads) if loads else 0:.1f}"
    )
    log(
        "| tool | median s (min-max) | rate | x link limit | best peer / tool | CPU s tool / server / emulator "
        "| RTTs per file |"
    )
    log("|---|---|---|---|---|---|---|")
    rows: list[dict[str, object]] = []
    for tool, r in res.items():
        row: dict[str, object] = {"rtt_ms": rtt, "proto": proto, "case": case.name, "direction": direction,
                                  "tool": tool, "limit_s": limit, "load": r.load}  # fmt: skip
        if tool not in med:
            log(f"| {tool} | FAILED {r.failed} | | | | | |")
            rows.append({**row, "failed": r.failed})
            continue
        s = med[tool]
        more = ">" if capped(r) else ""  # stopped at --timeout: its time is a lower bound
        less = "<" if more else ""
        rate = f"{case.total / s / 1e6:.1f} MB/s" if case.files == 1 else f"{case.files / s:.0f} files/s"
        at_least = ">=" if best is not None and capped(res[best]) else ""
        at_least = "<=" if tool.startswith("ferry") and capped(r) else at_least  # Ferry itself stopped: an upper bound
        vs = f"{at_least}{peers[best] / s:.2f}x" if best is not None and tool.startswith("ferry") else ""
        if tool == best:
            vs = "best peer"
        cpu = [statistics.median(c[k] for c in r.cpu) for k in range(3)]
        # Wall time per file in round trips: ~N for a tool that waits N round trips per file in turn.
        per_file = f"{s / case.files / (rtt / 1000):.2f}" if rtt and case.files > 1 else ""
        log(
            f"| {tool} | {more}{s:.2f} ({min(r.seconds):.2f}-{max(r.seconds):.2f}) | {less}{rate} | {s / limit:.1f} "
            f"| {vs} | {cpu[0]:.1f} / {cpu[1]:.1f} / {cpu[2]:.1f} | {per_file} |"
        )
        rows.append({**row, "seconds": r.seconds, "median": s, "timed_out": r.timed_out, "cpu": r.cpu})
    if ferry and best:
        at_least = "at least " if capped(res[best]) else ""
        at_least = "at most " if capped(res["ferry"]) else at_least
        log(f"Ferry against the best peer ({best}): {at_least}{peers[best] / ferry:.2f}x its speed")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtt", default="50,150", help="round-trip times in ms, comma-separated (default 50,150)")
    ap.add_argument("--rate", default="1g", help="link rate per direction (default 1g)")
    ap.add_argument("--window", default="6M", help="TCP window per connection (default 6M)")
    ap.add_argument("--case", default="big,mid,small", help="big, mid, small (comma-separated)")
    ap.add_argument("--dir", default="up,down", help="up, down or both")
    ap.add_argument("--proto", default="sftp,s3", help="sftp, s3 or both")
    ap.add_argument("--tools", default="", help=f"subset of {sorted(set(SFTP_TOOLS + S3_TOOLS))} (ferry always runs)")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs per tool (median; default 3)")
    ap.add_argument("--timeout", type=float, default=120.0, help="stop a run after this many seconds (default 120)")
    ap.add_argument("--big-size", default="256M", help="size of the big case's file (default 256M)")
    ap.add_argument("--small-count", type=int, default=2000, help="files in the small case (default 2000)")
    ap.add_argument(
        "--ferry-parallel",
        default="",
        help="extra Ferry rows with --parallel N (comma-separated, e.g. 16,64,auto), beside Ferry at its defaults",
    )
    ap.add_argument(
        "--ferry-env",
        default="",
        help="extra Ferry rows run with environment settings: rows separated by ',', settings of one row by"
        " ';' (e.g. FERRY_SFTP_CONNECTIONS=1,FERRY_S3_PART_CONCURRENCY=8)",
    )
    ap.add_argument(
        "--baseline", default=None, help="also run 'ferry cp' from this source tree (a folder holding 'ferry')"
    )
    ap.add_argument("--json", default=None, help="write every run's figures here")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args()
    try:
        rtts = [float(x) for x in args.rtt.split(",") if x]
        rate = linkemu.parse_rate(args.rate)
        big = linkemu.parse_size(args.big_size)
    except ValueError as exc:
        ap.error(f"bad value: {exc}")
    small = Case("small", args.small_count, 16 * 1024)
    cases = {"big": Case("big", 1, big), "mid": Case("mid", 1000, MiB), "small": small}
    bad = [c for c in args.case.split(",") if c not in cases] + [
        p for p in args.proto.split(",") if p not in ("sftp", "s3")
    ]
    if bad or not re.fullmatch(r"(up|down)(,(up|down))?", args.dir):
        ap.error(f"unknown case, protocol or direction: {bad or args.dir}")
    chosen = set(args.tools.split(",")) | {"ferry"} if args.tools else None

    extra = [f"ferry -j{n}" for n in args.ferry_parallel.split(",") if n]
    extra += [f"ferry[{spec}]" for spec in args.ferry_env.split(",") if spec]
    if args.baseline:
        BASELINE.append(str(Path(args.baseline).resolve()))
        extra.append("ferry@before")

    def pick(tools: list[str]) -> list[str]:
        return [*[t for t in tools if chosen is None or t in chosen], *extra]

    protos = args.proto.split(",")
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-wan-", dir=args.work))
    work.chmod(0o755)
    sshd = SshServer().start() if "sftp" in protos else None
    s3 = S3Server("rclone", cache_dirs=True).start() if "s3" in protos else None
    rows: list[dict[str, object]] = []
    aws = (BIN / "aws").exists()
    found = "yes" if aws else "NOT found"
    log(f"# WAN bench: load average {os.getloadavg()}, cores {os.cpu_count()}; aws-cli: {found}")
    bench = Bench(work, sshd, s3, args.timeout)
    try:
        for name in args.case.split(","):
            cases[name].make(work / "data")
            for rtt in rtts:
                bench.start_link(rtt, args.rate, args.window)
                for proto in protos:
                    tools = pick(SFTP_TOOLS if proto == "sftp" else [t for t in S3_TOOLS if t != "aws" or aws])
                    for direction in args.dir.split(","):
                        up = direction == "up"
                        res = bench.run_case(proto, cases[name], up, tools, max(1, args.runs))
                        rows += report(rtt, rate, proto, cases[name], up, res)
                        if args.json:
                            Path(args.json).write_text(json.dumps(rows, indent=1))
                bench.stop_link()
            shutil.rmtree(work / "data" / name, ignore_errors=True)
    finally:
        bench.stop_link()
        if sshd:
            sshd.stop()
        if s3:
            s3.stop()
        shutil.rmtree(work, ignore_errors=True)
    log(f"\nload average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
