#!/usr/bin/env python3
"""Ship output as it appears: a synthetic simulation, with and without overlapping transfer.

The "simulation" (a child process) alternates compute (a sleep, or a pure-Python CPU loop that
holds the GIL) with writing one output file, for --steps steps. Each variant is timed from the
moment the simulation starts until every output is at the destination, verified where the tool
verifies; also the time until the first output is available there.

  (a) write everything, then copy at the end:
        end-cp        cp -r after the simulation (the peer; writes in place, no checksum)
        end-ferry     ferry cp -r after the simulation (sha256-verified)
  (b) ship each file while the next step computes:
        watch         ferry watch OUT DEST --until OUT/DONE, started before the simulation
        shipper       the simulation itself calls ferry.api.Shipper.ship(path) after each step

--bwlimit RATE limits Ferry's transfers (and the peer, via rsync --bwlimit, if rsync is
installed) to mimic a wide-area link, where the overlap matters most.

Run with the venv's Python so ``ferry`` and ``import ferry`` come from this checkout:

    .venv/bin/python benchmarks/bench_watch.py              # 20 steps x 64 MiB, 1 s compute, 3 runs
    .venv/bin/python benchmarks/bench_watch.py --quick      # 6 steps x 8 MiB, 0.3 s compute
    .venv/bin/python benchmarks/bench_watch.py --compute cpu --bwlimit 100M
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20
VARIANTS = ("end-cp", "end-ferry", "watch", "shipper")


# --------------------------------------------------------------------------- the simulation


def simulate(out: str, steps: int, size: int, compute: float, mode: str, ship: str | None) -> int:
    """Child process: compute, write, (ship), repeat; then the DONE marker. Prints timings."""
    base = bytearray(os.urandom(size))
    shipper: Any = None
    if ship:
        sys.path.insert(0, str(REPO / "app"))
        from ferry.api import Shipper

        limit = os.environ.get("BENCH_BWLIMIT")
        shipper = Shipper(ship, on_conflict="overwrite", bwlimit=_parse_rate(limit) if limit else None)
    t0 = time.monotonic()
    for step in range(steps):
        _compute(compute, mode)
        base[:8] = step.to_bytes(8, "little")  # every output differs
        path = os.path.join(out, f"step_{step:04d}.dat")
        with open(path, "wb") as f:
            f.write(base)
        if shipper is not None:
            shipper.ship(path)
    t_written = time.monotonic()
    if shipper is not None:
        shipper.finish()
    with open(os.path.join(out, "DONE"), "w") as f:
        f.write("done\n")
    print(json.dumps({"start": t0, "written": t_written, "end": time.monotonic()}), flush=True)
    return 0


def _compute(seconds: float, mode: str) -> None:
    if mode == "sleep":
        time.sleep(seconds)
        return
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:  # pure Python: holds the GIL, as an unoptimised code would
        for i in range(2000):
            x += i * i


# --------------------------------------------------------------------------- measuring


class FirstArrival:
    """Polls the destination every 5 ms for the first output under its final name."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.when: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for _dirpath, _dirs, files in os.walk(self.dest):
                if any(f.startswith("step_") for f in files):
                    self.when = time.monotonic()
                    return
            self._stop.wait(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_variant(variant: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    out, dest = work / "out", work / "dest"
    for p in (out, dest, work / "data"):
        shutil.rmtree(p, ignore_errors=True)
        p.mkdir(parents=True)
    env = dict(os.environ)
    env["FERRY_DATA_DIR"] = str(work / "data")
    env["FERRY_CONFIG_DIR"] = str(work / "config")
    env["PYTHONPATH"] = str(REPO / "app")
    ferry = [sys.executable, "-m", "ferry"]
    limit = ["--bwlimit", args.bwlimit] if args.bwlimit else []
    sim = [
        sys.executable,
        __file__,
        "_simulate",
        str(out),
        str(args.steps),
        str(args.size),
        str(args.compute_s),
        args.compute,
    ]
    watch: subprocess.Popen[str] | None = None
    if variant == "watch":
        watch = subprocess.Popen(
            [*ferry, "watch", str(out), str(dest), "--settle", "2s", "--until", str(out / "DONE"), "--json", *limit],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert watch.stdout is not None
        for line in watch.stdout:  # wait until it is watching
            if '"watching"' in line:
                break
    if variant == "shipper":
        sim += ["--ship", str(dest)]
        if args.bwlimit:
            env["BENCH_BWLIMIT"] = args.bwlimit
    arrival = FirstArrival(dest)
    t0 = time.monotonic()
    done = subprocess.run(sim, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"simulation failed: {done.stderr}")
    sim_times = json.loads(done.stdout.strip().splitlines()[-1])
    if variant == "end-cp":
        if args.bwlimit and shutil.which("rsync"):
            kbps = str(_parse_rate(args.bwlimit) // 1024)
            cmd = ["rsync", "-a", f"--bwlimit={kbps}", f"{out}/", f"{dest}/"]
        else:
            cmd = ["cp", "-r", f"{out}/.", f"{dest}/"]
        subprocess.run(cmd, check=True)
    elif variant == "end-ferry":
        res = subprocess.run(
            [*ferry, "cp", "-r", f"{out}/", f"{dest}/", *limit], env=env, capture_output=True, text=True, check=False
        )
        if res.returncode != 0:
            raise RuntimeError(f"ferry cp failed: {res.stderr}")
    elif variant == "watch":
        assert watch is not None
        _, err = watch.communicate(timeout=3600)
        if watch.returncode != 0:
            raise RuntimeError(f"ferry watch failed: {err}")
    end = time.monotonic()
    arrival.stop()
    found = sorted(p.name for p in dest.rglob("step_*.dat"))
    if len(found) != args.steps:
        raise RuntimeError(f"{variant}: {len(found)} of {args.steps} outputs arrived")
    return {
        "variant": variant,
        "turnaround": end - t0,
        "first": (arrival.when - t0) if arrival.when is not None else None,
        "sim_written": sim_times["written"] - t0,
    }


def _parse_rate(text: str) -> int:
    sys.path.insert(0, str(REPO / "app"))
    from ferry.core.units import parse_size

    return parse_size(text)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "_simulate":
        ship = None
        if "--ship" in argv:
            ship = argv[argv.index("--ship") + 1]
        return simulate(argv[1], int(argv[2]), int(argv[3]), float(argv[4]), argv[5], ship)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="6 steps x 8 MiB, 0.3 s compute")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--size-mib", type=int, default=64)
    p.add_argument("--compute-s", type=float, default=1.0, help="seconds of compute per step (default 1.0)")
    p.add_argument("--compute", choices=("sleep", "cpu"), default="sleep", help="sleep, or a GIL-holding loop")
    p.add_argument("--bwlimit", help="limit transfers, e.g. 100M (bytes/s), to mimic a wide-area link")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--dir", default="/work/bench-tmp", help="work folder (default /work/bench-tmp)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.size_mib, args.compute_s = 6, 8, 0.3
    args.size = args.size_mib * MiB
    variants = [v for v in args.variants.split(",") if v]
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="watch-", dir=args.dir))
    load0 = os.getloadavg()
    print(
        f"bench_watch: {args.steps} steps x {args.size_mib} MiB, compute {args.compute_s} s ({args.compute}) per step, "
        f"bwlimit {args.bwlimit or 'none'}, {args.runs} runs, in {work}; load {load0[0]:.2f} {load0[1]:.2f}",
        flush=True,
    )
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    try:
        for run in range(args.runs):
            order = variants[run % len(variants) :] + variants[: run % len(variants)]  # interleave, rotate
            for v in order:
                r = run_variant(v, work, args)
                results[v].append(r)
                print(
                    f"  run {run + 1} {v:10} turnaround {r['turnaround']:7.2f} s  first file {r['first']:6.2f} s  "
                    f"load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    compute_total = args.steps * args.compute_s
    print()
    print(f"{'variant':12} {'turnaround':>11} {'first file':>11} {'vs end-cp':>10} {'vs end-ferry':>13}")
    med = {
        v: (statistics.median(r["turnaround"] for r in rs), statistics.median(r["first"] for r in rs))
        for v, rs in results.items()
        if rs
    }
    for v, (t, f) in med.items():
        ratio_cp = f"{t / med['end-cp'][0]:.2f}" if "end-cp" in med else "-"
        ratio_fe = f"{t / med['end-ferry'][0]:.2f}" if "end-ferry" in med else "-"
        print(f"{v:12} {t:10.2f}s {f:10.2f}s {ratio_cp:>10} {ratio_fe:>13}")
    print(f"(compute alone: {compute_total:.1f} s; load at the end {os.getloadavg()[0]:.2f})")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": {k: v for k, v in vars(args).items()}, "results": results, "medians": med}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
