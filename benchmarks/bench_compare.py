"""``ferry compare`` against ``rclone check`` and ``rclone sync --dry-run`` on two local trees.

Builds two trees of N entries (files in folders of 1,000), B differing from A by a few missing,
extra and changed files, then runs each command once and reports wall time and the peak
resident memory of the process (``ru_maxrss`` of the child). Nothing fails: it prints figures.

    .venv/bin/python benchmarks/bench_compare.py                 # 100,000 entries
    .venv/bin/python benchmarks/bench_compare.py --entries 1000000 --keep /tmp/trees

Rows: ``ferry compare -r`` (size and time) beside ``rclone check --size-only`` (sizes only; rclone
check never compares times); ``ferry compare -r --by checksum`` beside ``rclone check`` (MD5 of
every file on both sides, as it does between local folders); ``rclone sync --dry-run`` (size and
time, the plan of a sync).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv" / "bin"
T = 1_700_000_000_000_000_000


def build(base: Path, entries: int) -> tuple[Path, Path]:
    a, b = base / "A", base / "B"
    per = 1000
    for root in (a, b):
        for d in range(max(1, entries // per)):
            folder = root / f"d{d:04}"
            folder.mkdir(parents=True, exist_ok=True)
            for f in range(per):
                p = folder / f"f{f:04}.dat"
                p.write_bytes(b"%d\n" % f)
                os.utime(p, ns=(T, T))
    # Differences: 10 missing from B, 10 extra in B, 10 changed in size, 10 in time.
    for i in range(10):
        (b / "d0000" / f"f{i:04}.dat").unlink()
        extra = b / "d0001" / f"extra{i}.dat"
        extra.write_bytes(b"x")
        (b / "d0002" / f"f{i:04}.dat").write_bytes(b"changed size\n")
        os.utime(b / "d0003" / f"f{i:04}.dat", ns=(T + 10**9, T + 10**9))
    return a, b


def run(label: str, argv: list[str], env: dict[str, str]) -> tuple[str, float, float, int]:
    """Wall time, peak RSS (MiB, this child alone: wait4's rusage) and exit code of one command."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return label, wall, usage.ru_maxrss / 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, help="build the trees here (reused if present) and keep them")
    ap.add_argument("--skip-checksum", action="store_true", help="leave out the rows that read every file")
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="ferry-bench-compare-"))
    t0 = time.perf_counter()
    if not (base / "B").exists():
        a, b = build(base, args.entries)
    else:
        a, b = base / "A", base / "B"
    print(f"trees of {args.entries:,} files each under {base} ({time.perf_counter() - t0:.1f} s to build)")
    env = dict(os.environ, FERRY_DATA_DIR=str(base / "ferry-data"), FERRY_CONFIG_DIR=str(base / "ferry-config"))
    ferry = [sys.executable, "-m", "ferry"]
    rclone = str(VENV / "rclone") if (VENV / "rclone").exists() else shutil.which("rclone") or "rclone"
    quiet = ["-q", "--config", "/dev/null"]
    rows = [
        ("rclone check --size-only", [rclone, "check", "--size-only", *quiet, str(a), str(b)]),
        ("ferry compare -r (size, time)", [*ferry, "compare", "-r", str(a), str(b)]),
        ("rclone sync --dry-run (size, time)", [rclone, "sync", "--dry-run", *quiet, str(a), str(b)]),
    ]
    if not args.skip_checksum:
        rows += [
            ("rclone check (md5 both sides)", [rclone, "check", *quiet, str(a), str(b)]),
            ("ferry compare -r --by checksum", [*ferry, "compare", "-r", "--by", "checksum", str(a), str(b)]),
        ]
    print(f"{'command':38} {'wall s':>8} {'peak RSS MiB':>13} {'exit':>5}")
    for label, argv in rows:
        name, wall, rss, code = run(label, argv, env)
        print(f"{name:38} {wall:8.2f} {rss:13.1f} {code:5}")
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
