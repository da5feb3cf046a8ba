#!/usr/bin/env python3
"""Local benchmarks: Ferry side by side with the usual tools on this machine.

Cases (see benchmarks/README.md for targets and how to read the ratios):

  big      one large file (2 GiB), local -> local:
             ferry cp --verify none   vs  cp
             ferry cp (sha256)        vs  cp, then sha256sum of the source
  small    10,000 x 4 KiB files in nested folders (10 x 10 x 100):
             ferry cp -r (default --parallel, and --parallel 1)  vs  cp -r, rsync -a
  enqueue  1,000,000 synthetic tasks inserted into the queue store (Store.add_tasks in
           batches of 1,000, from a generator), in a child process: wall time and peak RSS
  all      all of the above (the default)

Every case runs in two places: a folder on the disk (--dir, default /work/bench-tmp) and a
tmpfs (--shm-dir, default /dev/shm/ferry-bench). Timings are medians of --runs runs (>= 3).
Between timed runs the output is deleted, the script calls sync and waits until the disk is
quiet, and the order of the tools rotates from run to run. Nothing is dropped from the page
cache: sources are page-cache warm for every tool.

Run it with the Python of Ferry's venv, e.g.

    .venv/bin/python benchmarks/bench_local.py all --runs 3 --json bench.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
CASES = ("big", "small", "enqueue")
REPO = Path(__file__).resolve().parent.parent
SAMPLE = 1 * MiB  # bytes compared at start / middle / end of the big file after each copy


# --------------------------------------------------------------------------- small helpers


def log(msg: str = "") -> None:
    print(msg, flush=True)


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 2G, 512M, 4096)")
    mult = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * mult)


def fmt_size(n: float) -> str:
    for unit, div in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{int(n)} B"


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def rm(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def mount_of(path: Path) -> tuple[str, str, str]:
    """(mount point, fs type, options) of the file system holding ``path``."""
    real = os.path.realpath(path)
    best = ("/", "?", "")
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 4:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
                    best = (mnt, parts[2], parts[3])
    except OSError:
        pass
    return best


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


class DiskWatch:
    """Wait until the block device behind a path stops writing/discarding (after a sync)."""

    def __init__(self, path: Path, settle: float, max_wait: float = 30.0) -> None:
        self.settle = settle
        self.max_wait = max_wait
        self.stat_file: Path | None = None
        self.timeouts = 0
        try:
            st = os.stat(path)
            cand = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat")
            if cand.exists():
                self.stat_file = cand
        except OSError:
            pass

    def _read(self) -> tuple[int, int, int] | None:
        if self.stat_file is None:
            return None
        try:
            f = [int(x) for x in self.stat_file.read_text().split()]
        except (OSError, ValueError):
            return None
        write_sectors = f[6]
        in_flight = f[8]
        discard_sectors = f[13] if len(f) > 13 else 0
        return write_sectors, discard_sectors, in_flight

    def quiesce(self) -> None:
        os.sync()
        start = time.monotonic()
        time.sleep(self.settle)
        prev = self._read()
        if prev is None:
            return
        while time.monotonic() - start < self.max_wait:
            time.sleep(0.5)
            cur = self._read()
            if cur is None:
                return
            wrote = cur[0] - prev[0]
            discarded = cur[1] - prev[1]
            # "Quiet": under 1 MiB written and nothing discarded in the last half second.
            if wrote < 2048 and discarded == 0 and cur[2] == 0:
                return
            prev = cur
        self.timeouts += 1


@dataclass
class Place:
    name: str  # "disk" or "tmpfs"
    base: Path
    work: Path = field(init=False)
    mount: str = ""
    fstype: str = ""
    options: str = ""

    def describe(self) -> str:
        opts = [o for o in self.options.split(",") if o in ("discard", "relatime", "noatime", "sync", "nojournal")]
        return f"{self.work} ({self.fstype} on {self.mount}{', ' + ','.join(opts) if opts else ''})"

    def free(self) -> int:
        return shutil.disk_usage(self.work).free


@dataclass
class Tool:
    key: str
    label: str
    argv: Callable[[Path, Path], list[str]]  # (source, output) -> command line
    requires: tuple[str, ...] = ()
    ferry: bool = False


@dataclass
class ToolResult:
    label: str
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # user + sys seconds of the process tree, per ok run
    failures: list[str] = field(default_factory=list)
    skipped: str | None = None

    @property
    def median(self) -> float | None:
        return median(self.times)

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "times": self.times, "median": self.median,
                "cpu_times": self.cpu, "cpu_median": median(self.cpu),
                "min": min(self.times) if self.times else None, "max": max(self.times) if self.times else None,
                "failures": self.failures, "skipped": self.skipped}


# --------------------------------------------------------------------------- the bench object


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ferry = self._find_ferry(args.ferry)
        self.python = self._find_python(args.python)
        self.stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        self.places: list[Place] = []
        self.skipped_places: list[str] = []
        self.results: dict[str, Any] = {"header": {}, "cases": {}}
        self.notes: list[str] = []
        self.summary_lines: list[str] = []
        self.notes_end: list[str] = []
        self.watch: DiskWatch | None = None

    # ---- discovery
    @staticmethod
    def _find_ferry(given: str | None) -> str:
        cands = [given] if given else [
            str(Path(sys.executable).parent / "ferry"), shutil.which("ferry") or "", str(REPO / ".venv/bin/ferry")]
        for c in cands:
            if c and os.path.isfile(c) and os.access(c, os.X_OK):
                return c
        sys.exit("ERROR: the 'ferry' command was not found (use --ferry PATH, or run with the venv's python)")

    def _find_python(self, given: str | None) -> str:
        cands = [given] if given else [sys.executable]
        if not given:
            try:
                first = Path(self.ferry).read_text(errors="replace").splitlines()[0]
                if first.startswith("#!"):
                    cands.append(first[2:].strip().split()[0])
            except (OSError, IndexError):
                pass
        for c in cands:
            if c and subprocess.run([c, "-c", "import ferry.transfers.store"], capture_output=True).returncode == 0:
                return c
        return ""  # enqueue case will be skipped with a message

    def setup_places(self) -> None:
        wanted = [p.strip() for p in self.args.places.split(",") if p.strip()]
        for name in wanted:
            base = Path(self.args.dir if name == "disk" else self.args.shm_dir)
            if name not in ("disk", "tmpfs"):
                sys.exit(f"ERROR: unknown place {name!r} (disk, tmpfs)")
            try:
                base.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                msg = f"SKIP place {name}: cannot create {base}: {exc}"
                log(msg)
                self.skipped_places.append(msg)
                continue
            place = Place(name, base)
            place.work = base / f"run-{self.stamp}"
            place.work.mkdir()
            place.mount, place.fstype, place.options = mount_of(place.work)
            if name == "tmpfs" and place.fstype != "tmpfs":
                self.notes.append(f"WARNING: the 'tmpfs' place {base} is on {place.fstype}, not tmpfs")
            if place.fstype == "ext4":
                with open("/proc/self/mounts") as mf:
                    dev = next((ln.split()[0] for ln in mf if ln.split()[1] == place.mount), "")
                jt = Path(f"/sys/fs/ext4/{os.path.basename(dev)}/journal_task")
                try:
                    nojournal = jt.read_text().strip() == "<none>"
                except OSError:
                    nojournal = False
                place.options += ",nojournal" if nojournal else ""
                if nojournal:
                    self.notes.append(
                        f"NOTE: {place.mount} is ext4 WITHOUT a journal: after many deletes the kernel skips recently "
                        "freed inodes one by one when creating files (ext4 recently_deleted(), up to ~5 min), so "
                        "many-file outputs on the disk are deleted only at the end of a case (--disk-cleanup)")
            if name == "disk" and place.fstype in ("tmpfs", "ramfs"):
                self.notes.append(f"WARNING: the 'disk' place {base} is on {place.fstype}, not a disk")
            self.places.append(place)
        disk = next((p for p in self.places if p.name == "disk"), None)
        self.watch = DiskWatch(disk.work if disk else Path(self.args.dir if os.path.exists(self.args.dir) else "/"),
                               self.args.settle)

    def cleanup(self) -> None:
        if self.args.keep:
            log(f"--keep: leaving {', '.join(str(p.work) for p in self.places)}")
            return
        for p in self.places:
            rm(p.work)
        os.sync()

    # ---- header
    def header(self) -> dict[str, Any]:
        ver = subprocess.run([self.ferry, "--version"], capture_output=True, text=True)
        ferry_version = (ver.stdout or ver.stderr).strip() or f"? (exit {ver.returncode})"
        startup = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run([self.ferry, "--version"], capture_output=True)
            startup.append(time.perf_counter() - t0)
        ferry_py = ""
        if self.python:
            ferry_py = subprocess.run([self.python, "-c", "import sys; print(sys.version.split()[0])"],
                                      capture_output=True, text=True).stdout.strip()
        try:
            nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
        except OSError:
            nproc = str(len(os.sched_getaffinity(0)))
        try:
            with open("/proc/meminfo") as f:
                mem = next((ln.split(":")[1].strip() for ln in f if ln.startswith("MemTotal")), "?")
        except OSError:
            mem = "?"
        h = {
            "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "host": platform.node(),
            "nproc": nproc,
            "cpu_count": os.cpu_count(),
            "cpu_model": cpu_model(),
            "memory": mem,
            "kernel": platform.release(),
            "python": platform.python_version(),
            "python_executable": sys.executable,
            "ferry_python": ferry_py,
            "ferry_version": ferry_version,
            "ferry_command": self.ferry,
            "ferry_startup_s": median(startup),
            "runs": self.args.runs,
            "settle_s": self.args.settle,
            "disk_cleanup": self.args.disk_cleanup,
            "places": {p.name: {"path": str(p.work), "mount": p.mount, "fstype": p.fstype, "options": p.options}
                       for p in self.places},
            "page_cache": "warm: sources are read before timing and nothing is dropped from the page cache",
            "peers": {t: shutil.which(t) for t in ("cp", "sha256sum", "rsync", "sh")},
        }
        self.results["header"] = h
        log("=" * 78)
        log("Ferry local benchmarks")
        log("=" * 78)
        log(f"date          {h['date']}")
        log(f"host          {h['host']}   kernel {h['kernel']}")
        log(f"CPU           {h['cpu_model']}   nproc {h['nproc']}   memory {h['memory']}")
        log(f"Python        {h['python']} ({sys.executable}); Ferry's Python {ferry_py or 'NOT FOUND'}")
        log(f"Ferry         {ferry_version} ({self.ferry}); startup (ferry --version) "
            f"median {fmt_s(h['ferry_startup_s'])} s")
        for p in self.places:
            log(f"place {p.name:<6}  {p.describe()}")
        for m in self.skipped_places:
            log(m)
        log(f"runs          {self.args.runs} per tool (medians), tool order rotates each run; "
            f"after each run: delete output (small case on disk: at the end of the case, --disk-cleanup "
            f"{self.args.disk_cleanup}), sync, wait >= {self.args.settle:g} s for a quiet disk")
        log("page cache    sources are page-cache WARM (read once before timing; nothing is dropped)")
        log("ferry state   each Ferry run gets a fresh FERRY_DATA_DIR / FERRY_CONFIG_DIR (queue DB) in the place")
        for t, where in h["peers"].items():
            if not where:
                log(f"MISSING PEER  '{t}' is not on PATH: the rows that need it are skipped")
        for n in self.notes:
            log(n)
        log()
        return h

    # ---- running tools
    def env_for(self, place: Place, tool: Tool, tag: str) -> tuple[dict[str, str], Path | None]:
        env = dict(os.environ)
        state = None
        if tool.ferry:
            state = place.work / f"ferry-state-{tag}"
            (state / "data").mkdir(parents=True)
            (state / "config").mkdir(parents=True)
            env["FERRY_DATA_DIR"] = str(state / "data")
            env["FERRY_CONFIG_DIR"] = str(state / "config")
            env.pop("FERRY_QUEUE_DB", None)  # would override FERRY_DATA_DIR
        return env, state

    def run_matrix(self, place: Place, tools: list[Tool], src: Path, runs: int,
                   check: Callable[[Path], str | None], out_name: str, keep: list[Path] | None = None,
                   warmup: list[str] | None = None) -> dict[str, ToolResult]:
        """Time every tool ``runs`` times, rotating the order. ``keep``: instead of deleting each
        run's output at once, append it to this list for the caller to delete when the case ends
        (see README: ext4 without a journal slows inode creation for minutes after many deletes).
        ``warmup``: an untimed command run once first (SRC and OUT substituted)."""
        results: dict[str, ToolResult] = {}
        defer = keep is not None
        pending: list[Path] = keep if keep is not None else []
        assert self.watch is not None
        active: list[Tool] = []
        for t in tools:
            missing = [r for r in t.requires if not shutil.which(r)]
            results[t.key] = ToolResult(t.label)
            if missing:
                msg = f"'{' '.join(missing)}' not found on PATH"
                results[t.key].skipped = msg
                log(f"  SKIP {t.label}: {msg}")
            else:
                active.append(t)
        if not active:
            return results
        if warmup:
            out = place.work / "out-warmup" / out_name
            out.parent.mkdir(parents=True)
            argv = [str(out) if a == "OUT" else str(src) if a == "SRC" else a for a in warmup]
            t0 = time.perf_counter()
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            log(f"  warm-up (untimed): {' '.join(warmup)}  {time.perf_counter() - t0:.3f} s")
            if defer:
                pending.append(out.parent)
            else:
                rm(out.parent)
            self.watch.quiesce()
        for r in range(runs):
            k = r % len(active)
            order = active[k:] + active[:k]
            for t in order:
                tag = f"{t.key}-{r}"
                out = place.work / f"out-{tag}" / out_name
                out.parent.mkdir(parents=True)
                env, state = self.env_for(place, t, tag)
                argv = t.argv(src, out)
                with tempfile.TemporaryFile() as errf:
                    t0 = time.perf_counter()
                    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=errf)
                    _, status, usage = os.wait4(proc.pid, 0)
                    dt = time.perf_counter() - t0
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    cpu = usage.ru_utime + usage.ru_stime
                    errf.seek(0)
                    err = errf.read()[-1500:].decode(errors="replace").strip()
                problem = None
                if proc.returncode != 0:
                    problem = f"exit {proc.returncode}: {err.splitlines()[-1] if err else ''}"
                else:
                    problem = check(out)
                if problem:
                    results[t.key].failures.append(f"run {r + 1}: {problem}")
                    log(f"  run {r + 1}/{runs}  {t.label:<34} FAILED ({dt:.3f} s, not counted): {problem}")
                else:
                    results[t.key].times.append(dt)
                    results[t.key].cpu.append(cpu)
                    if not self.args.quiet:
                        log(f"  run {r + 1}/{runs}  {t.label:<34} {dt:8.3f} s  ok   (cpu {usage.ru_utime:.2f} user "
                            f"+ {usage.ru_stime:.2f} sys)")
                if defer:
                    pending.append(out.parent)
                    if state is not None:
                        pending.append(state)
                else:
                    rm(out.parent)
                    if state is not None:
                        rm(state)
                self.watch.quiesce()
        return results

    # ---- output
    def table(self, results: dict[str, ToolResult], rate: Callable[[float], str], rate_head: str) -> None:
        log(f"  {'tool':<36} {'runs':>5} {'median s':>9} {'min s':>8} {'max s':>8} {rate_head:>14} {'cpu s':>7}")
        for res in results.values():
            if res.skipped:
                log(f"  {res.label:<36} {'SKIPPED (' + res.skipped + ')'}")
                continue
            n_ok = len(res.times)
            n_all = n_ok + len(res.failures)
            med = res.median
            log(f"  {res.label:<36} {f'{n_ok}/{n_all}':>5} {fmt_s(med):>9} "
                f"{fmt_s(min(res.times) if res.times else None):>8} {fmt_s(max(res.times) if res.times else None):>8} "
                f"{rate(med) if med else '-':>14} {fmt_s(median(res.cpu)):>7}")
            for f in res.failures:
                log(f"      failure: {f}")

    def ratio(self, case: str, place: Place, name: str, value: float | None, op: str | None,
              target: float | None, meaning: str) -> dict[str, Any]:
        met = None
        if value is not None and op and target is not None:
            met = value >= target if op == ">=" else value <= target
        verdict = "" if met is None else ("  [target met]" if met else "  [TARGET MISSED]")
        tgt = f"target {op} {target:g}" if op and target is not None else "no target"
        val = "n/a" if value is None else f"{value:.3f}"
        log(f"    {name:<44} {val:>7}   {tgt:<14}{verdict}")
        log(f"      ({meaning})")
        self.summary_lines.append(f"{case:<8} {place.name:<6} {name:<44} {val:>7}   {tgt:<14}{verdict}")
        return {"name": name, "value": value, "op": op, "target": target, "met": met, "meaning": meaning}

    def save_json(self) -> None:
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(self.results, indent=2, sort_keys=False) + "\n")

    def runs_for(self, case: str) -> int:
        n = getattr(self.args, f"{case}_runs") or self.args.runs
        return max(1, int(n))

    # ------------------------------------------------------------------ case: big
    def case_big(self) -> None:
        size = self.args.big_size
        runs = self.runs_for("big")
        desc = f"one {fmt_size(size)} file, local -> local"
        log("-" * 78)
        log(f"CASE big: {desc}  (runs per tool: {runs})")
        log("-" * 78)
        case: dict[str, Any] = {"description": desc, "size_bytes": size, "runs": runs, "places": {}}
        self.results["cases"]["big"] = case
        f = self.ferry
        tools = [
            Tool("ferry_none", "ferry cp --verify none", lambda s, o: [f, "cp", "--verify", "none", str(s), str(o)],
                 ferry=True),
            Tool("cp", "cp", lambda s, o: ["cp", "--", str(s), str(o)], ("cp",)),
            Tool("ferry_sha256", "ferry cp (sha256, default)", lambda s, o: [f, "cp", str(s), str(o)], ferry=True),
            Tool("cp_sha256sum", "cp && sha256sum SRC", lambda s, o: [
                "sh", "-c", 'cp -- "$1" "$2" && sha256sum -- "$1" >/dev/null', "sh", str(s), str(o)],
                 ("sh", "cp", "sha256sum")),
        ]
        for place in self.places:
            log(f"[{place.name}] {place.describe()}")
            need = 2 * size + 256 * MiB
            if place.free() < need:
                msg = f"not enough free space ({fmt_size(place.free())} free, {fmt_size(need)} needed)"
                log(f"  SKIP big on {place.name}: {msg}")
                case["places"][place.name] = {"skipped": msg}
                continue
            src = place.work / "big-src.bin"
            t0 = time.perf_counter()
            make_big_file(src, size)
            log(f"  source written ({fmt_size(size)} random bytes, {time.perf_counter() - t0:.1f} s); "
                "warming page cache")
            warm_file(src)
            assert self.watch is not None
            self.watch.quiesce()
            samples = read_samples(src, size)

            def check(out: Path, size: int = size, samples: list[bytes] = samples) -> str | None:
                try:
                    got = out.stat().st_size
                except OSError as exc:
                    return f"output missing: {exc}"
                if got != size:
                    return f"output has {got} bytes, expected {size}"
                if read_samples(out, size) != samples:
                    return "output content differs from the source (sampled blocks)"
                return None

            res = self.run_matrix(place, tools, src, runs, check, "big-dst.bin",
                                  warmup=["cp", "SRC", "OUT"] if shutil.which("cp") else None)
            log(f"  results [{place.name}] (sources page-cache warm; no fsync by any tool):")
            self.table(res, lambda m: f"{size / MiB / m:.0f} MiB/s", "MiB/s")
            log("  ratios:")
            m = {k: v.median for k, v in res.items()}
            ratios = [
                self.ratio("big", place, "cp / ferry --verify none (time)",
                           m["cp"] / m["ferry_none"] if m["cp"] and m["ferry_none"] else None, ">=", 0.9,
                           "cp median time / ferry --verify none median time; 1.0 = as fast as cp"),
                self.ratio("big", place, "ferry sha256 / (cp + sha256sum) (time)",
                           m["ferry_sha256"] / m["cp_sha256sum"] if m["ferry_sha256"] and m["cp_sha256sum"] else None,
                           "<=", 1.15, "ferry cp (verified) time / time of cp then sha256sum of the source; "
                           "lower is better"),
            ]
            case["places"][place.name] = {"path": str(place.work), "fstype": place.fstype,
                                          "tools": {k: v.as_dict() for k, v in res.items()}, "ratios": ratios}
            rm(src)
            self.watch.quiesce()
            log()
            self.save_json()

    # ------------------------------------------------------------------ case: small
    def case_small(self) -> None:
        shape = self.args.tree
        fsize = self.args.file_size
        n_files = 1
        for x in shape:
            n_files *= x
        n_bytes = n_files * fsize
        runs = self.runs_for("small")
        desc = f"{n_files:,} x {fmt_size(fsize)} files in nested folders ({'x'.join(map(str, shape))})"
        log("-" * 78)
        log(f"CASE small: {desc}  (runs per tool: {runs})")
        log("-" * 78)
        case: dict[str, Any] = {"description": desc, "files": n_files, "bytes": n_bytes, "runs": runs, "places": {}}
        self.results["cases"]["small"] = case
        f = self.ferry
        par = ferry_default_parallel(f)
        tools = [
            Tool("ferry", f"ferry cp -r (default --parallel {par})", lambda s, o: [f, "cp", "-r", str(s), str(o)],
                 ferry=True),
            Tool("ferry_p1", "ferry cp -r --parallel 1",
                 lambda s, o: [f, "cp", "-r", "--parallel", "1", str(s), str(o)], ferry=True),
            Tool("cp", "cp -r", lambda s, o: ["cp", "-r", "--", str(s), str(o)], ("cp",)),
            Tool("rsync", "rsync -a", lambda s, o: ["rsync", "-a", "--", f"{s}/", f"{o}/"], ("rsync",)),
        ]
        if not self.args.no_extra:
            tools.append(Tool("ferry_none", "ferry cp -r --verify none (extra)",
                              lambda s, o: [f, "cp", "-r", "--verify", "none", str(s), str(o)], ferry=True))
        for place in self.places:
            log(f"[{place.name}] {place.describe()}")
            copies = 3 if place.fstype in ("tmpfs", "ramfs") or self.args.disk_cleanup == "each" \
                else 2 + runs * len(tools)
            need = copies * (n_bytes + n_files * 4 * KiB) + 64 * MiB
            if place.free() < need:
                msg = f"not enough free space ({fmt_size(place.free())} free, {fmt_size(need)} needed)"
                log(f"  SKIP small on {place.name}: {msg}")
                case["places"][place.name] = {"skipped": msg}
                continue
            src = place.work / "small-src"
            t0 = time.perf_counter()
            make_tree(src, shape, fsize)
            log(f"  source tree written ({n_files:,} files, {time.perf_counter() - t0:.1f} s); warming page cache")
            warm_tree(src)
            assert self.watch is not None
            self.watch.quiesce()

            def check(out: Path) -> str | None:
                files, size = count_tree(out)
                if files != n_files or size != n_bytes:
                    return f"output has {files:,} files / {size:,} bytes, expected {n_files:,} / {n_bytes:,}"
                return None

            defer = place.fstype not in ("tmpfs", "ramfs") and self.args.disk_cleanup == "defer"
            keep: list[Path] = []
            probe = self.wait_for_fast_inodes(place, keep)
            if defer:
                log("  outputs are kept until the end of this case (--disk-cleanup defer), then deleted")
            res = self.run_matrix(place, tools, src, runs, check, "small-dst", keep=keep if defer else None,
                                  warmup=["cp", "-r", "SRC", "OUT"] if shutil.which("cp") else None)
            probe_after = self.inode_probe(place, keep)
            t0 = time.perf_counter()
            for path in keep:
                rm(path)
            if defer:
                log(f"  deferred deletion of {len(keep)} kept folders: {time.perf_counter() - t0:.1f} s")
            self.watch.quiesce()
            log(f"  results [{place.name}] (sources page-cache warm):")
            self.table(res, lambda m: f"{n_files / m:,.0f} files/s", "files/s")
            log("  ratios (files/s of Ferry / files/s of the peer = peer time / Ferry time; higher is better):")
            m = {k: v.median for k, v in res.items()}

            def fr(a: str, b: str, m: dict[str, float | None] = m) -> float | None:
                ta, tb = m.get(a), m.get(b)
                return tb / ta if ta and tb else None

            ratios = [
                self.ratio("small", place, f"ferry (parallel {par}) vs cp -r", fr("ferry", "cp"), ">=", 0.5,
                           "ferry cp -r files/s / cp -r files/s"),
                self.ratio("small", place, "ferry --parallel 1 vs cp -r", fr("ferry_p1", "cp"), None, None,
                           "ferry cp -r --parallel 1 files/s / cp -r files/s"),
                self.ratio("small", place, f"ferry (parallel {par}) vs rsync -a", fr("ferry", "rsync"), None, None,
                           "ferry cp -r files/s / rsync -a files/s"),
                self.ratio("small", place, "ferry --parallel 1 vs rsync -a", fr("ferry_p1", "rsync"), None, None,
                           "ferry cp -r --parallel 1 files/s / rsync -a files/s"),
            ]
            if "ferry_none" in m:
                ratios.append(self.ratio("small", place, "ferry --verify none vs cp -r (extra)",
                                         fr("ferry_none", "cp"), None, None,
                                         "shows how much of Ferry's time is verification"))
            case["places"][place.name] = {"path": str(place.work), "fstype": place.fstype,
                                          "tools": {k: v.as_dict() for k, v in res.items()}, "ratios": ratios,
                                          "deferred_deletion": defer, "inode_probe_s": [probe, probe_after]}
            rm(src)
            self.watch.quiesce()
            log()
            self.save_json()

    def inode_probe(self, place: Place, keep: list[Path], n: int = 2000) -> float:
        """Seconds to create ``n`` empty files. Slow on journal-less ext4 in the minutes after many
        deletes (the kernel skips recently freed inodes one by one). The files are not deleted
        here (that would slow the next creations): the caller deletes ``keep`` after the case."""
        d = place.work / f"inode-probe-{len(keep)}"
        d.mkdir()
        keep.append(d)
        t0 = time.perf_counter()
        for i in range(n):
            os.close(os.open(d / f"p{i}", os.O_CREAT | os.O_WRONLY, 0o644))
        dt = time.perf_counter() - t0
        slow = dt > self.args.probe_limit
        log(f"  inode-creation probe: {n} empty files in {dt:.3f} s"
            + (f"  <-- SLOW (> {self.args.probe_limit:g} s): file creation here is degraded "
               "(mass deletes in the last minutes?)" if slow else ""))
        return dt

    def wait_for_fast_inodes(self, place: Place, keep: list[Path]) -> float:
        """Before a many-file case on a disk: probe file creation, and if it is slow wait (up to
        --recover-wait seconds) for the file system to recover, so the timings are not inflated."""
        if place.fstype in ("tmpfs", "ramfs"):
            return self.inode_probe(place, keep)
        start = time.monotonic()
        while True:
            dt = self.inode_probe(place, keep)
            if dt <= self.args.probe_limit:
                return dt
            waited = time.monotonic() - start
            if waited >= self.args.recover_wait:
                msg = (f"file creation on {place.name} was still slow ({dt:.2f} s per probe) after waiting "
                       f"{waited:.0f} s; its many-file timings are inflated")
                log(f"  WARNING: {msg}")
                self.notes_end.append(msg)
                return dt
            log(f"  waiting 30 s for the file system to recover (waited {waited:.0f} of "
                f"{self.args.recover_wait:g} s) ...")
            time.sleep(30)

    # ------------------------------------------------------------------ case: enqueue
    def case_enqueue(self) -> None:
        n, batch = self.args.tasks, self.args.batch
        runs = self.runs_for("enqueue")
        desc = f"enqueue {n:,} synthetic tasks (Store.add_tasks, batches of {batch:,}, lazy generator)"
        log("-" * 78)
        log(f"CASE enqueue: {desc}  (runs: {runs})")
        log("-" * 78)
        case: dict[str, Any] = {"description": desc, "tasks": n, "batch": batch, "runs": runs, "places": {}}
        self.results["cases"]["enqueue"] = case
        if not self.python:
            msg = "no Python that can 'import ferry' was found (use --python)"
            log(f"  SKIP enqueue: {msg}")
            case["skipped"] = msg
            return
        for place in self.places:
            log(f"[{place.name}] {place.describe()}")
            need = 1 * GiB
            if place.free() < need:
                msg = f"not enough free space ({fmt_size(place.free())} free, {fmt_size(need)} needed)"
                log(f"  SKIP enqueue on {place.name}: {msg}")
                case["places"][place.name] = {"skipped": msg}
                continue
            rows: list[dict[str, Any]] = []
            failures: list[str] = []
            for r in range(runs):
                d = place.work / f"enqueue-{r}"
                d.mkdir()
                db = d / "queue.db"
                env = dict(os.environ)
                env["FERRY_DATA_DIR"] = str(d)
                env["FERRY_CONFIG_DIR"] = str(d / "config")
                env.pop("FERRY_QUEUE_DB", None)
                argv = [self.python, str(Path(__file__).resolve()), "--enqueue-child", str(db), str(n), str(batch)]
                with tempfile.TemporaryFile() as outf, tempfile.TemporaryFile() as errf:
                    t0 = time.perf_counter()
                    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=outf, stderr=errf)
                    proc.wait()
                    wall = time.perf_counter() - t0
                    outf.seek(0)
                    errf.seek(0)
                    out, err = outf.read().decode(errors="replace"), errf.read().decode(errors="replace")
                try:
                    info = json.loads(out.strip().splitlines()[-1]) if proc.returncode == 0 else None
                except (ValueError, IndexError):
                    info = None
                if info is None:
                    tail = (err.strip().splitlines() or [""])[-1]
                    failures.append(f"run {r + 1}: exit {proc.returncode}: {tail}")
                    log(f"  run {r + 1}/{runs}  FAILED (exit {proc.returncode}): {tail}")
                elif info["rows"] != n:
                    failures.append(f"run {r + 1}: {info['rows']:,} rows in the table, expected {n:,}")
                    log(f"  run {r + 1}/{runs}  FAILED: {info['rows']:,} rows in the table, expected {n:,}")
                else:
                    info["wall_s"] = wall
                    rows.append(info)
                    if not self.args.quiet:
                        log(f"  run {r + 1}/{runs}  inserts {info['insert_s']:7.2f} s   process {wall:7.2f} s   "
                            f"peak RSS {info['ru_maxrss_mib']:6.1f} MiB (after import {info['rss_start_mib']:.1f})   "
                            f"db {fmt_size(info['db_bytes'])}")
                rm(d)
                assert self.watch is not None
                self.watch.quiesce()

            def med(key: str, rows: list[dict[str, Any]] = rows) -> float | None:
                return median([x[key] for x in rows])

            log(f"  results [{place.name}]:")
            log(f"  {'measure':<44} {'median':>10} {'min':>10} {'max':>10}")
            for key, label, unit in (("insert_s", "insert time (add_tasks loop)", "s"),
                                     ("wall_s", "child process wall time (incl. start-up)", "s"),
                                     ("ru_maxrss_mib", "peak RSS of the worker (ru_maxrss)", "MiB"),
                                     ("vmhwm_mib", "peak RSS seen by the worker (VmHWM)", "MiB"),
                                     ("rss_start_mib", "RSS after imports, before inserting", "MiB"),
                                     ("db_mib", "database size (db + wal)", "MiB")):
                vals = [x[key] for x in rows]
                if vals:
                    name = f"{label} [{unit}]"
                    log(f"  {name:<44} {median(vals):>10.2f} {min(vals):>10.2f} {max(vals):>10.2f}")
            if rows:
                log(f"  {'tasks/s (median of insert time)':<44} {n / med('insert_s'):>10,.0f}")
            for fl in failures:
                log(f"      failure: {fl}")
            log(f"  ok runs: {len(rows)}/{runs}")
            log("  targets:")
            ratios = [
                self.ratio("enqueue", place, "insert time, s", med("insert_s"), "<=", 60,
                           f"median seconds to insert {n:,} tasks in batches of {batch:,}"),
                self.ratio("enqueue", place, "process wall time, s", med("wall_s"), "<=", 60,
                           "median seconds for the whole child process: start-up, imports, job, inserts, row count"),
                self.ratio("enqueue", place, "peak RSS, MiB",
                           max((max(x["ru_maxrss_mib"], x["vmhwm_mib"]) for x in rows), default=None),
                           "<=", 300, "largest peak RSS of the worker process over all runs (ru_maxrss or VmHWM)"),
            ]
            case["places"][place.name] = {"path": str(place.work), "fstype": place.fstype, "runs": rows,
                                          "failures": failures, "ratios": ratios,
                                          "median": {k: med(k) for k in ("insert_s", "wall_s", "ru_maxrss_mib",
                                                                         "vmhwm_mib", "db_mib")} if rows else None}
            log()
            self.save_json()

    # ------------------------------------------------------------------ main
    def run(self, cases: list[str]) -> None:
        self.setup_places()
        if not self.places:
            sys.exit("ERROR: no place to run in")
        self.header()
        t0 = time.monotonic()
        try:
            for c in cases:
                getattr(self, f"case_{c}")()
        finally:
            self.results["header"]["total_s"] = time.monotonic() - t0
            self.results["header"]["quiet_wait_timeouts"] = self.watch.timeouts if self.watch else 0
            self.save_json()
            self.cleanup()
        log("=" * 78)
        log("SUMMARY (ratios and targets)")
        log("=" * 78)
        for line in self.summary_lines:
            log(line)
        for n in self.notes_end:
            log(f"note: {n}")
        if self.watch and self.watch.timeouts:
            log(f"note: the disk did not go quiet within {self.watch.max_wait:g} s after {self.watch.timeouts} "
                "run(s) (other activity on the machine?); those timings may be noisy")
        log(f"total time {time.monotonic() - t0:.0f} s")
        if self.args.json:
            log(f"JSON results written to {self.args.json}")


# --------------------------------------------------------------------------- data helpers


def make_big_file(path: Path, size: int) -> None:
    chunk = 64 * MiB
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(chunk, left)
            f.write(os.urandom(n))
            left -= n


def warm_file(path: Path) -> None:
    buf = bytearray(8 * MiB)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def read_samples(path: Path, size: int) -> list[bytes]:
    offs = sorted({0, max(0, size // 2 - SAMPLE // 2), max(0, size - SAMPLE)})
    with open(path, "rb") as f:
        out = []
        for o in offs:
            f.seek(o)
            out.append(f.read(SAMPLE))
        return out


def make_tree(root: Path, shape: list[int], fsize: int) -> None:
    *dirs, per_leaf = shape
    for idx in itertools.product(*(range(d) for d in dirs)):
        leaf = root.joinpath(*(f"d{i:03d}" for i in idx))
        leaf.mkdir(parents=True, exist_ok=True)
        for j in range(per_leaf):
            with open(leaf / f"f{j:04d}.bin", "wb") as f:
                f.write(os.urandom(fsize))


def walk_files(root: Path) -> Iterator[os.DirEntry[str]]:
    stack = [str(root)]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    yield e


def warm_tree(root: Path) -> None:
    for e in walk_files(root):
        with open(e.path, "rb") as f:
            f.read()


def count_tree(root: Path) -> tuple[int, int]:
    files = size = 0
    if not root.is_dir():
        return 0, 0
    for e in walk_files(root):
        files += 1
        size += e.stat(follow_symlinks=False).st_size
    return files, size


def ferry_default_parallel(ferry: str) -> str:
    try:
        text = subprocess.run([ferry, "cp", "--help"], capture_output=True, text=True).stdout
    except OSError:
        return "?"
    m = re.search(r"--parallel.*?\(default:\s*(\d+)\)", " ".join(text.split()))
    return m.group(1) if m else "?"


# --------------------------------------------------------------------------- enqueue child


def _vm_kib(field_name: str) -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def enqueue_child(db: str, n: int, batch: int) -> int:
    """Launcher, started by the benchmark: forks one worker and reports its peak RSS.

    The peak RSS is taken from the worker's rusage (wait4, i.e. RUSAGE_CHILDREN of this small
    launcher), not from the benchmark's own wait4 on the launcher: Linux carries the RSS of the
    pre-exec fork of the (large) benchmark process into the launcher's ru_maxrss, which would
    overstate the figure. The worker starts from this launcher's small footprint (~10 MiB).
    Prints one JSON line.
    """
    import resource
    import traceback

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        os.close(r)
        code = 1
        try:
            info = _enqueue_work(db, n, batch)
            data = json.dumps(info).encode()
            while data:
                data = data[os.write(w, data):]
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"enqueue worker failed (exit {code})", file=sys.stderr)
        return code or 1
    info = json.loads(b"".join(chunks))
    info["ru_maxrss_mib"] = usage.ru_maxrss / 1024  # KiB on Linux
    info["rusage_children_maxrss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(info))
    return 0


def _enqueue_work(db: str, n: int, batch: int) -> dict[str, Any]:
    import sqlite3

    from ferry.transfers.options import JobOptions
    from ferry.transfers.store import NewTask, Store

    rss_start = _vm_kib("VmRSS") / 1024
    store = Store(Path(db))
    src_root, dst_root = "/bench/src", "/bench/dst"
    job = store.create_job([src_root], dst_root, JobOptions(recursive=True, on_conflict="overwrite"),
                           [(src_root, dst_root, "src")])
    per_dir = 1000
    mtime0 = 1_700_000_000_000_000

    def tasks() -> Iterator[NewTask]:
        """n tasks, lazily: each folder is one 'dir' task then 999 'file' tasks, as the planner yields them."""
        i = 0
        for d in itertools.count():
            dname = f"d{d:05d}"
            sdir, ddir, rdir = f"{src_root}/{dname}", f"{dst_root}/{dname}", f"src/{dname}"
            for k in range(per_dir):
                if i >= n:
                    return
                if k == 0:
                    yield NewTask("dir", sdir, ddir, rdir, None, None)
                else:
                    name = f"f{i:08d}.dat"
                    yield NewTask("file", f"{sdir}/{name}", f"{ddir}/{name}", f"{rdir}/{name}", 4096, mtime0 + i)
                i += 1

    it = tasks()
    new = 0
    t0 = time.perf_counter()
    while True:
        chunk = list(itertools.islice(it, batch))
        if not chunk:
            break
        new += len(store.add_tasks(job, chunk))
    insert_s = time.perf_counter() - t0
    store.close()
    con = sqlite3.connect(db)
    rows = con.execute("SELECT COUNT(*) FROM tasks WHERE job_id = ?", (job,)).fetchone()[0]
    con.close()
    db_bytes = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))
    return {
        "insert_s": insert_s, "rows": rows, "new": new,
        "rss_start_mib": rss_start, "vmhwm_mib": _vm_kib("VmHWM") / 1024,
        "db_bytes": db_bytes, "db_mib": db_bytes / MiB,
    }


# --------------------------------------------------------------------------- CLI


def parse_tree(text: str) -> list[int]:
    try:
        parts = [int(x) for x in text.lower().split("x")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad tree shape {text!r} (e.g. 10x10x100)") from None
    if len(parts) < 1 or any(p < 1 for p in parts):
        raise argparse.ArgumentTypeError(f"bad tree shape {text!r}")
    return parts


def main(argv: list[str]) -> int:
    if argv[:1] == ["--enqueue-child"]:
        return enqueue_child(argv[1], int(argv[2]), int(argv[3]))
    p = argparse.ArgumentParser(
        description="Benchmark Ferry against cp, sha256sum and rsync on this machine (see benchmarks/README.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="cases: big (one large file), small (many small files), enqueue (1M queue inserts), all",
    )
    p.add_argument("cases", nargs="*", metavar="CASE", help="big, small, enqueue or all (default: all)")
    p.add_argument("--runs", type=int, default=3, help="timed runs per tool; medians are reported (default 3)")
    p.add_argument("--big-runs", type=int, help="override --runs for the big case")
    p.add_argument("--small-runs", type=int, help="override --runs for the small case")
    p.add_argument("--enqueue-runs", type=int, help="override --runs for the enqueue case")
    p.add_argument("--dir", default="/work/bench-tmp", help="folder on the disk to run in (default /work/bench-tmp)")
    p.add_argument("--shm-dir", default="/dev/shm/ferry-bench", help="folder on a tmpfs (default /dev/shm/ferry-bench)")
    p.add_argument("--places", default="disk,tmpfs", help="where to run: disk, tmpfs or both (default disk,tmpfs)")
    p.add_argument("--json", metavar="FILE", help="also write machine-readable results to FILE")
    p.add_argument("--settle", type=float, default=2.0,
                   help="seconds to wait after sync between runs, before checking the disk is quiet (default 2)")
    p.add_argument("--big-size", type=parse_size, default=2 * GiB, help="size of the big file (default 2G)")
    p.add_argument("--tree", type=parse_tree, default=[10, 10, 100],
                   help="small case shape: folder fan-outs then files per leaf folder (default 10x10x100)")
    p.add_argument("--file-size", type=parse_size, default=4 * KiB, help="small case file size (default 4K)")
    p.add_argument("--tasks", type=int, default=1_000_000, help="tasks to enqueue (default 1000000)")
    p.add_argument("--batch", type=int, default=1000, help="tasks per add_tasks call (default 1000, as the planner)")
    p.add_argument("--disk-cleanup", choices=("defer", "each"), default="defer",
                   help="small case on the disk: delete each run's output at the end of the case (defer, default) "
                        "or right after the run (each); tmpfs outputs and the big file are always deleted each run")
    p.add_argument("--probe-limit", type=float, default=0.25,
                   help="an inode-creation probe (2000 empty files) slower than this many seconds counts as "
                        "a degraded file system (default 0.25)")
    p.add_argument("--recover-wait", type=float, default=360,
                   help="before the small case on the disk, wait up to this many seconds for a degraded file "
                        "system to recover (default 360; 0 = do not wait, only warn)")
    p.add_argument("--no-extra", action="store_true", help="leave out the extra 'ferry cp -r --verify none' row")
    p.add_argument("--ferry", help="the ferry command (default: next to this Python, then PATH)")
    p.add_argument("--python", help="Python that can import ferry, for the enqueue child (default: this one)")
    p.add_argument("--keep", action="store_true", help="keep the work folders afterwards")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the tables, not each run")
    args = p.parse_args(argv)
    cases = args.cases or ["all"]
    bad = [c for c in cases if c not in (*CASES, "all")]
    if bad:
        p.error(f"unknown case(s) {', '.join(bad)} (choose from {', '.join(CASES)}, all)")
    selected = list(CASES) if "all" in cases else [c for c in CASES if c in cases]
    for name in ("runs", "big_runs", "small_runs", "enqueue_runs"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
        if v is not None and v < 3:
            print(f"note: --{name.replace('_', '-')} {v} < 3: medians of fewer than 3 runs are not robust",
                  file=sys.stderr)
    bench = Bench(args)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        bench.run(selected)
    except KeyboardInterrupt:
        log("interrupted; work folders removed" if not args.keep else "interrupted")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
