"""Ferry's S3 transfers side by side with s5cmd, ``aws s3 cp --recursive``, ``rclone copy`` and
plain boto3 ``upload_file``/``download_file``, all against one ``rclone serve s3`` on loopback.

A benchmark, not a test: it prints medians of ``--runs`` runs (interleaved: Ferry, then each peer,
round after round, so load from other processes falls on everyone alike), ratios against the
peers, the targets from issue 4, and the load average seen. Cases:

    big     one object (2 GiB; --quick 256 MiB), up and down
    mid     1,000 x 1 MiB (--quick 200), up and down
    small   10,000 x 4 KiB (--quick 1,000), up and down (files per second)
    verify  Ferry big upload with --verify sha256 against --verify none

    .venv/bin/python benchmarks/bench_s3.py --quick            # a few minutes
    .venv/bin/python benchmarks/bench_s3.py big mid --runs 3   # the issue's sizes
    .venv/bin/python benchmarks/bench_s3.py --quick small --baseline /tmp/old/app --tools s5cmd,rclone

``--baseline`` runs a second Ferry from another source tree (``git archive OLDREV app | tar -x``)
in the same rounds, as ``ferry-base``: before/after ratios that the machine's load cannot skew.
Each table also gives the tool's CPU seconds and the server's over the same runs, which says
which side was the bottleneck.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "app"))

from s3.servers import ACCESS_KEY, SECRET_KEY, S3Server  # noqa: E402

BIN = Path(sys.executable).parent
MiB = 1 << 20


def _env(server: S3Server, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "AWS_"))}
    env.update(server.env())
    env["FERRY_DATA_DIR"] = str(home / "data")
    env["FERRY_CONFIG_DIR"] = str(home / "config")
    env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    # Ferry runs from its source tree, where a shell's PYTHONDONTWRITEBYTECODE=1 (set where these
    # figures were taken) made every run compile its own ~40 modules again: ~0.06 s of each run's
    # start-up that no installed Ferry pays (pip and the bundle ship bytecode), while the Python
    # peers (aws, boto3) ran from compiled site-packages. A private bytecode cache, warmed before
    # the first timed run (Bench.warm_up), puts every tool on the same footing without writing
    # into the source trees that others measure.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(home / "pycache")
    return env


def _rclone_remote(server: S3Server, bucket: str, prefix: str) -> str:
    return (
        f":s3,provider=Other,endpoint='{server.endpoint}',access_key_id={ACCESS_KEY},"
        f"secret_access_key={SECRET_KEY}:{bucket}/{prefix}"
    )


def make_tree(root: Path, count: int, size: int) -> None:
    root.mkdir(parents=True)
    block = os.urandom(size)
    for i in range(count):
        # Same bytes with a different head: no tool can dedupe, and making 10,000 files stays fast.
        (root / f"f{i:05d}.bin").write_bytes(i.to_bytes(8, "little") + block[8:])


def make_big(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left = size
        chunk = os.urandom(16 * MiB)
        while left:
            n = min(left, len(chunk))
            f.write(chunk[:n])
            left -= n


class Bench:
    def __init__(self, server: S3Server, work: Path, runs: int) -> None:
        self.server = server
        self.work = work
        self.runs = runs
        self.bucket = server.new_bucket()
        self.env = _env(server, work / "home")
        self.loads: list[float] = []
        self.base_env: dict[str, str] | None = None  # --baseline: Ferry from another source tree
        self.last_cpu = 0.0
        self.last_server_cpu = 0.0
        self.cpu: dict[str, list[tuple[float, float]]] = {}  # tool -> (tool CPU s, server CPU s) per run
        # s5cmd reads no AWS_ENDPOINT_URL; it needs the flag.
        self.s5cmd = [str(BIN / "s5cmd"), "--endpoint-url", server.endpoint]
        # Ferry runs with its default --parallel (4), as a user's `ferry cp -r` does, and as every
        # peer runs with its own defaults. The flag used to be forced to 16; measured 2026-11-26,
        # 16 cost Ferry a third more CPU on downloads (1,000 x 1 MiB: 4.62 s against 3.30 s with
        # 4) and won nothing anywhere else on 2 cores.
        self.ferry_parallel: list[str] = []

    def server_cpu(self) -> float:
        """CPU seconds the rclone server has used so far (user + system), from /proc."""
        proc = self.server.proc
        try:
            fields = Path(f"/proc/{proc.pid if proc else 0}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def run(self, cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> float:
        self.loads.append(os.getloadavg()[0])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        server = self.server_cpu()
        t = time.perf_counter()
        res = subprocess.run(cmd, env=env or self.env, cwd=cwd, capture_output=True, text=True, check=False)
        took = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # Which side was busy: the tool's own CPU, and the server's, over the same run.
        self.last_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        self.last_server_cpu = self.server_cpu() - server
        if res.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({res.returncode}): {res.stderr[-800:]}")
        return took

    def drop_prefix(self, prefix: str) -> None:
        # Straight from the server's folder: deleting 10,000 objects through the API would take longer
        # than the benchmark itself.
        shutil.rmtree(self.server.dir / "data" / self.bucket / prefix, ignore_errors=True)

    # -- uploads: each returns seconds --
    def up(self, tool: str, src: Path, single: bool, verify: str = "sha256") -> float:
        prefix = f"up-{tool}-{uuid.uuid4().hex[:8]}"
        dst = f"s3://{self.bucket}/{prefix}/"
        try:
            if tool in ("ferry", "ferry-base"):
                args = ["cp", "--verify", verify, "--on-conflict", "overwrite", *self.ferry_parallel]
                cmd = [str(BIN / "ferry"), *args, *(["-r"] if not single else []), str(src), dst]
                return self.run(cmd, env=self.base_env if tool == "ferry-base" else None)
            if tool == "s5cmd":
                return self.run([*self.s5cmd, "cp", str(src) if single else f"{src}/*", dst])
            if tool == "aws":
                return self.run([str(BIN / "aws"), "s3", "cp", *([] if single else ["--recursive"]), str(src), dst])
            if tool == "rclone":
                return self.run([str(BIN / "rclone"), "copy", "--config", "/dev/null", str(src),
                                 _rclone_remote(self.server, self.bucket, prefix)])  # fmt: skip
            if tool == "boto3":
                script = (
                    "import boto3,os,sys;c=boto3.client('s3');b,p,src=sys.argv[1:4]\n"
                    "if os.path.isdir(src):\n"
                    " [c.upload_file(os.path.join(src,n),b,p+'/'+n) for n in sorted(os.listdir(src))]\n"
                    "else: c.upload_file(src,b,p+'/'+os.path.basename(src))"
                )
                return self.run([sys.executable, "-c", script, self.bucket, prefix, str(src)])
            raise ValueError(tool)
        finally:
            self.drop_prefix(prefix)

    def seed(self, src: Path, single: bool) -> str:
        prefix = f"seed-{uuid.uuid4().hex[:8]}"
        self.run([*self.s5cmd, "cp", str(src) if single else f"{src}/*", f"s3://{self.bucket}/{prefix}/"])
        return prefix

    def down(self, tool: str, prefix: str, name: str | None) -> float:
        out = self.work / f"down-{tool}-{uuid.uuid4().hex[:8]}"
        src = f"s3://{self.bucket}/{prefix}/" + (name or "")
        try:
            if tool in ("ferry", "ferry-base"):
                args = ["cp", "--on-conflict", "overwrite", *self.ferry_parallel]
                env = self.base_env if tool == "ferry-base" else None
                if name:
                    return self.run([str(BIN / "ferry"), *args, src, str(out / name)], env=env)
                return self.run([str(BIN / "ferry"), *args, "-r", src.rstrip("/"), str(out)], env=env)
            if tool == "s5cmd":
                return self.run([*self.s5cmd, "cp", src if name else src + "*", f"{out}/"])
            if tool == "aws":
                return self.run([str(BIN / "aws"), "s3", "cp", *([] if name else ["--recursive"]), src, f"{out}/"])
            if tool == "rclone":
                return self.run([str(BIN / "rclone"), "copy", "--config", "/dev/null",
                                 _rclone_remote(self.server, self.bucket, f"{prefix}/{name or ''}".rstrip("/")),
                                 str(out)])  # fmt: skip
            if tool == "boto3":
                script = (
                    "import boto3,os,sys;c=boto3.client('s3');b,p,out=sys.argv[1:4];os.makedirs(out,exist_ok=True)\n"
                    "for pg in c.get_paginator('list_objects_v2').paginate(Bucket=b,Prefix=p+'/'):\n"
                    " [c.download_file(b, o['Key'], os.path.join(out, os.path.basename(o['Key'])))"
                    " for o in pg.get('Contents', [])]"
                )
                return self.run([sys.executable, "-c", script, self.bucket, prefix, str(out)])
            raise ValueError(tool)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def warm_up(self, tools: list[str]) -> None:
        """One untimed small upload and download per tool: fills the bytecode cache (see _env)."""
        src = self.work / "warm" / "w.bin"
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_bytes(b"w" * 1000)
        prefix = self.seed(src, True)
        for tool in tools:
            self.up(tool, src, True)
            self.down(tool, prefix, "w.bin")
        self.take_cpu()
        self.loads.clear()

    def take_cpu(self) -> dict[str, list[tuple[float, float]]]:
        cpu, self.cpu = self.cpu, {}
        return cpu

    def interleaved(self, tools: list[str], once: Callable[[str], float]) -> dict[str, list[float]]:
        times: dict[str, list[float]] = {t: [] for t in tools}
        for _ in range(self.runs):
            for t in tools:
                try:
                    times[t].append(once(t))
                    self.cpu.setdefault(t, []).append((self.last_cpu, self.last_server_cpu))
                except RuntimeError as exc:
                    print(f"  {t}: FAILED {exc}", file=sys.stderr)
        return times


def report(
    title: str,
    times: dict[str, list[float]],
    amount: float,
    unit: str,
    targets: dict[str, float],
    cpu: dict[str, list[tuple[float, float]]] | None = None,
) -> None:
    print(f"\n## {title}")
    print(f"| tool | median s | {unit} | Ferry / tool | target | tool CPU s | server CPU s |")
    print("|---|---|---|---|---|---|---|")
    med = {t: statistics.median(v) for t, v in times.items() if v}
    ferry = med.get("ferry")
    for t, m in med.items():
        rate = amount / m
        ratio = "" if t == "ferry" or ferry is None else f"{m / ferry:.2f}x"
        target = f">= {targets[t]:.1f}x" if t in targets else ""
        runs = (cpu or {}).get(t, [])
        tool_cpu = f"{statistics.median(c for c, _ in runs):.2f}" if runs else ""
        server_cpu = f"{statistics.median(c for _, c in runs):.2f}" if runs else ""
        print(
            f"| {t} | {m:.2f} (min {min(times[t]):.2f}, max {max(times[t]):.2f}) | {rate:.1f} | {ratio} | {target} "
            f"| {tool_cpu} | {server_cpu} |"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", default=["big", "mid", "small", "verify"])
    ap.add_argument("--quick", action="store_true", help="smaller workloads (a few minutes in all)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument(
        "--baseline",
        default=None,
        help="another checkout's app/ folder: its Ferry runs too, interleaved, as 'ferry-base' (before/after)",
    )
    ap.add_argument("--tools", default=None, help="comma-separated subset of tools to run (default: all)")
    ap.add_argument("--ferry-parallel", default=None, metavar="N", help="Ferry's --parallel (default: Ferry's own)")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="ferry-bench-s3-"))
    server = S3Server("rclone", cache_dirs=True).start()
    bench = Bench(server, work, args.runs)
    if args.ferry_parallel:
        bench.ferry_parallel = ["--parallel", args.ferry_parallel]
    if args.baseline:
        bench.base_env = {**bench.env, "PYTHONPATH": str(Path(args.baseline).resolve())}
    base = ["ferry-base"] if args.baseline else []
    chosen = set(args.tools.split(",")) | {"ferry"} if args.tools else None

    def pick(tools: list[str]) -> list[str]:
        return [t for t in ["ferry", *base, *tools[1:]] if chosen is None or t in chosen or t == "ferry-base"]

    peers = pick(["ferry", "s5cmd", "aws", "rclone", "boto3"])
    bench.warm_up(peers)
    big = (256 if args.quick else 2048) * MiB
    mid_n = 200 if args.quick else 1000
    small_n = 1000 if args.quick else 10_000
    print(
        f"# Ferry S3 benchmark against rclone serve s3 on loopback ({os.cpu_count()} cores, runs={args.runs}, "
        f"ferry --parallel {args.ferry_parallel or 'default'})"
    )
    try:
        if "big" in args.cases or "verify" in args.cases:
            make_big(work / "big" / "big.bin", big)
        if "big" in args.cases:
            t = bench.interleaved(peers, lambda tool: bench.up(tool, work / "big" / "big.bin", True))
            report(f"one {big // MiB} MiB object, upload", t, big / 1e6, "MB/s", {}, bench.take_cpu())
            prefix = bench.seed(work / "big" / "big.bin", True)
            bench.take_cpu()
            t = bench.interleaved(peers, lambda tool: bench.down(tool, prefix, "big.bin"))
            report(f"one {big // MiB} MiB object, download", t, big / 1e6, "MB/s", {"s5cmd": 0.8}, bench.take_cpu())
        if "mid" in args.cases:
            make_tree(work / "mid", mid_n, MiB)
            mid_peers = pick(["ferry", "s5cmd", "aws", "rclone"])  # boto3 one file at a time is no peer here
            t = bench.interleaved(mid_peers, lambda tool: bench.up(tool, work / "mid", False))
            report(
                f"{mid_n} x 1 MiB, upload", t, mid_n * MiB / 1e6, "MB/s", {"aws": 1.0, "rclone": 1.0}, bench.take_cpu()
            )
            prefix = bench.seed(work / "mid", False)
            bench.take_cpu()
            t = bench.interleaved(mid_peers, lambda tool: bench.down(tool, prefix, None))
            report(
                f"{mid_n} x 1 MiB, download",
                t,
                mid_n * MiB / 1e6,
                "MB/s",
                {"aws": 1.0, "rclone": 1.0},
                bench.take_cpu(),
            )
        if "small" in args.cases:
            make_tree(work / "small", small_n, 4096)
            small_peers = pick(["ferry", "s5cmd", "aws", "rclone"])  # boto3 one by one would take minutes
            t = bench.interleaved(small_peers, lambda tool: bench.up(tool, work / "small", False))
            report(f"{small_n} x 4 KiB, upload", t, small_n, "files/s", {"s5cmd": 0.7}, bench.take_cpu())
            prefix = bench.seed(work / "small", False)
            bench.take_cpu()
            t = bench.interleaved(small_peers, lambda tool: bench.down(tool, prefix, None))
            report(f"{small_n} x 4 KiB, download", t, small_n, "files/s", {"s5cmd": 0.7}, bench.take_cpu())
        if "verify" in args.cases:
            # With --baseline the old tree's pair runs in the same rounds: its on/off ratio is the
            # "before" under the very same load.
            ferries = ["ferry", "ferry-base"] if args.baseline else ["ferry"]
            times: dict[str, list[float]] = {}
            cpu: dict[str, list[tuple[float, float]]] = {}
            for _ in range(args.runs):
                for f in ferries:
                    for name, verify in ((f, "sha256"), (f"{f}-noverify", "none")):
                        times.setdefault(name, []).append(bench.up(f, work / "big" / "big.bin", True, verify))
                        cpu.setdefault(name, []).append((bench.last_cpu, bench.last_server_cpu))
            report("verification on (ferry) vs off (ferry-noverify), big upload; target on/off <= 1.1x", times,
                   big / 1e6, "MB/s", {}, cpu)  # fmt: skip
        loads = bench.loads
        print(f"\nload average (1 min) during runs: median {statistics.median(loads):.1f}, max {max(loads):.1f}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
