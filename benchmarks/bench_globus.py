#!/usr/bin/env python3
"""Globus benchmarks on loopback: Ferry beside curl and rclone on the same servers.

Cases:

  https-down   a GCSv5-style collection read over HTTPS into a local folder. The collection's
               HTTPS server is ``rclone serve http`` (Go) over a folder; its Transfer API (ls/stat)
               is the local fake (tests/globus/fake_globus.py) describing the same files.
                 ferry cp -r globus://ID/dir DEST (sha256 verified, --parallel 4)
                 curl (one process, every URL, sequential; no checksum)
                 rclone copy --http-url (4 transfers; size check only)
               on one big file and on many small files.
  delegated    the overhead Ferry adds to a Globus-to-Globus job: ferry cp between two fake
               collections (submit, follow, record each file) vs the bare SDK calls a script would
               make (get_submission_id, submit_transfer, get_task until done) — same fake, same
               task script, so the difference is Ferry's own bookkeeping.

Timings are medians of --runs runs (>= 3), tools interleaved run by run (other engineers share
the CPU: the load average is printed with the results). ``--quick`` uses small sizes.

    .venv/bin/python benchmarks/bench_globus.py --quick
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from globus.fake_globus import FakeGlobusServer  # noqa: E402
from helpers import ferry_env  # noqa: E402

MiB = 1 << 20
# What a script using the SDK directly does for the same copy (the "peer" of the delegated case).
SDK_SCRIPT = """
import os, time
import globus_sdk
env = os.environ
app = globus_sdk.ConfidentialAppAuthClient(env["GLOBUS_CLIENT_ID"], env["GLOBUS_CLIENT_SECRET"])
az = globus_sdk.ClientCredentialsAuthorizer(app, "urn:globus:auth:scope:transfer.api.globus.org:all")
tc = globus_sdk.TransferClient(authorizer=az)
td = globus_sdk.TransferData("{a}", "{b}", verify_checksum=True)
td.add_item("/src", "/dst", recursive=True)
t = tc.submit_transfer(td)["task_id"]
while tc.get_task(t)["status"] not in ("SUCCEEDED", "FAILED"):
    time.sleep(float(env["FERRY_GLOBUS_POLL"]))
list(tc.paginated.task_successful_transfers(t).items())
"""
RCLONE = str(REPO / ".venv" / "bin" / "rclone")


def log(msg: str = "") -> None:
    print(msg, flush=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int) -> None:
    import socket

    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on {port} did not start")


def _make_tree(root: Path, files: list[tuple[str, int]]) -> None:
    for rel, size in files:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "wb") as f:
            left = size
            block = os.urandom(min(size, 4 * MiB)) if size else b""
            while left > 0:
                f.write(block[:left])
                left -= len(block[:left])


def _load_into_fake(server: FakeGlobusServer, cid: str, root: Path, under: str) -> None:
    for dirpath, _dirs, names in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        folder = under if rel_dir == "." else f"{under}/{rel_dir}"
        server.fake.put(cid, folder, None)
        for n in names:
            server.fake.put(cid, f"{folder}/{n}", (Path(dirpath) / n).read_bytes())


def _time(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({res.returncode}): {res.stderr[-2000:]}")


def bench_https_down(label: str, files: list[tuple[str, int]], runs: int, work: Path) -> list[tuple[str, str, float]]:
    src = work / "served"
    _make_tree(src / "data", files)
    total = sum(s for _, s in files)
    port = _free_port()
    rclone = subprocess.Popen(
        [RCLONE, "serve", "http", str(src), "--addr", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rows: list[tuple[str, str, float]] = []
    try:
        _wait_port(port)
        with FakeGlobusServer() as server:
            cid = server.fake.add_collection(name="bench")
            server.fake.endpoints[cid]["https_server"] = f"http://127.0.0.1:{port}"
            _load_into_fake(server, cid, src / "data", "/data")
            home = work / "home"
            env = ferry_env(home, server.env())
            urls = [f"http://127.0.0.1:{port}/data/{rel}" for rel, _ in files]
            times: dict[str, list[float]] = {"ferry": [], "curl": [], "rclone": []}
            for i in range(runs):
                order = ["ferry", "curl", "rclone"]
                order = order[i % 3 :] + order[: i % 3]
                for tool in order:
                    dest = work / f"out-{tool}"
                    shutil.rmtree(dest, ignore_errors=True)
                    if tool == "ferry":
                        shutil.rmtree(home / "data", ignore_errors=True)
                        cmd = [
                            sys.executable,
                            "-m",
                            "ferry",
                            "cp",
                            "-r",
                            "--parallel",
                            "4",
                            f"globus://{cid}/data",
                            str(dest),
                        ]
                        times[tool].append(_time(lambda c=cmd: _run(c, env)))
                    elif tool == "curl":
                        dest.mkdir()
                        args = ["curl", "-sf", "--create-dirs"]
                        for (rel, _), u in zip(files, urls, strict=True):
                            args += ["-o", str(dest / rel), u]
                        times[tool].append(_time(lambda a=args: _run(a)))
                    else:
                        cmd = [
                            RCLONE,
                            "copy",
                            "--http-url",
                            f"http://127.0.0.1:{port}",
                            ":http:data",
                            str(dest),
                            "--transfers",
                            "4",
                        ]
                        times[tool].append(_time(lambda c=cmd: _run(c)))
                    got = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
                    assert got == total, (tool, got, total)
            for tool, ts in times.items():
                med = statistics.median(ts)
                rows.append((label, tool, med))
                rate = f"{total / MiB / med:8.1f} MiB/s  {len(files) / med:8.1f} files/s"
                log(f"  {label:<28} {tool:<7} median {med:7.2f} s  {rate}")
    finally:
        rclone.terminate()
        rclone.wait(10)
    return rows


def bench_delegated(n_files: int, runs: int, work: Path) -> list[tuple[str, str, float]]:
    import globus_sdk

    rows = []
    with FakeGlobusServer() as server:
        fake = server.fake
        fake.task_script = ["ACTIVE", "ACTIVE", "SUCCEEDED"]
        a = fake.add_collection(name="A")
        for i in range(n_files):
            fake.put(a, f"/src/d{i % 10}/f{i}", b"x" * 100)
        env = ferry_env(work / "home", server.env())
        times: dict[str, list[float]] = {"ferry": [], "sdk": []}
        for i in range(runs):
            for tool in ["ferry", "sdk"] if i % 2 == 0 else ["sdk", "ferry"]:
                b = fake.add_collection(name=f"B{i}{tool}")
                if tool == "ferry":
                    shutil.rmtree(work / "home" / "data", ignore_errors=True)
                    cmd = [sys.executable, "-m", "ferry", "cp", "-r", f"globus://{a}/src", f"globus://{b}/dst"]
                    times[tool].append(_time(lambda c=cmd: _run(c, env)))
                else:
                    code = SDK_SCRIPT.format(a=a, b=b)
                    times[tool].append(_time(lambda c=code: _run([sys.executable, "-c", c], env)))
        for tool, ts in times.items():
            med = statistics.median(ts)
            rows.append((f"delegated {n_files} files", tool, med))
            log(f"  delegated {n_files:>6} files       {tool:<7} median {med:7.2f} s")
    del globus_sdk
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a check in a minute or two")
    args = ap.parse_args()
    runs = max(3, args.runs)
    big = (64 if args.quick else 1024) * MiB
    n_small = 100 if args.quick else 1000
    log(f"load average before: {os.getloadavg()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ferry-bench-globus-") as tmp:
        work = Path(tmp)
        (work / "big").mkdir()
        rows += bench_https_down(f"https-down 1 x {big // MiB} MiB", [("big.bin", big)], runs, work / "big")
        (work / "small").mkdir()
        rows += bench_https_down(
            f"https-down {n_small} x 64 KiB",
            [(f"d{i % 10}/f{i:05d}", 64 * 1024) for i in range(n_small)],
            runs,
            work / "small",
        )
        (work / "del").mkdir()
        rows += bench_delegated(100 if args.quick else 2000, runs, work / "del")
    log(f"load average after: {os.getloadavg()}")
    log("\ncase                            ferry s   peer      peer s   ratio (peer/ferry time)")
    by_case: dict[str, dict[str, float]] = {}
    for case, tool, t in rows:
        by_case.setdefault(case, {})[tool] = t
    for case, tools in by_case.items():
        f = tools.pop("ferry")
        for peer, t in tools.items():
            log(f"{case:<30} {f:8.2f}   {peer:<8} {t:8.2f}   {t / f:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
