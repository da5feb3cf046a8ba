"""A stand-in for a simulation or an instrument: writes files over time, as the watch tests need.

Run as a separate process (``python writer.py MODE FOLDER ...``) so the watcher sees a real
writer: files growing slowly, renamed into place, deleted before they settle. Prints a JSON object
with the sha256 of every file that should arrive, then exits.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time


def _write_slowly(path: str, chunks: int, chunk: int, pause: float) -> str:
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(chunks):
            data = os.urandom(chunk)
            f.write(data)
            f.flush()
            h.update(data)
            time.sleep(pause)  # a code computing between writes: the file keeps growing
    return h.hexdigest()


def _write(path: str, size: int) -> str:
    data = os.urandom(size)
    with open(path, "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def mixed(folder: str) -> dict[str, str]:
    expect: dict[str, str] = {}
    # Renamed into place: written under a name the watch ignores, then moved.
    tmp = os.path.join(folder, "b.h5.part")
    expect["b.h5"] = _write(tmp, 300_000)
    os.rename(tmp, os.path.join(folder, "b.h5"))
    # Not matching the pattern: never shipped.
    _write(os.path.join(folder, "notes.txt"), 1000)
    # Deleted before it settles: still open and growing when it goes.
    with open(os.path.join(folder, "c.h5"), "wb") as f:
        f.write(os.urandom(50_000))
        f.flush()
        time.sleep(0.3)
        os.unlink(os.path.join(folder, "c.h5"))
        f.write(os.urandom(50_000))
    # A subfolder made after the watch started.
    os.mkdir(os.path.join(folder, "sub"))
    expect["sub/d.h5"] = _write(os.path.join(folder, "sub", "d.h5"), 200_000)
    # Appended by reopening it every so often (each append closes the file).
    h = hashlib.sha256()
    for _ in range(5):
        data = os.urandom(20_000)
        with open(os.path.join(folder, "e.h5"), "ab") as f:
            f.write(data)
        h.update(data)
        time.sleep(0.15)
    expect["e.h5"] = h.hexdigest()
    # Growing slowly, for longer than the settle time in total but never pausing that long.
    expect["a.h5"] = _write_slowly(os.path.join(folder, "a.h5"), chunks=25, chunk=64 * 1024, pause=0.1)
    return expect


def series(folder: str, count: int, size: int, pause: float) -> dict[str, str]:
    expect: dict[str, str] = {}
    for i in range(count):
        name = f"step_{i:04d}.dat"
        tmp = os.path.join(folder, f".{name}.tmp")
        expect[name] = _write(tmp, size)
        os.rename(tmp, os.path.join(folder, name))
        time.sleep(pause)
    return expect


def main(argv: list[str]) -> int:
    mode, folder = argv[0], argv[1]
    if mode == "mixed":
        expect = mixed(folder)
    elif mode == "series":
        expect = series(folder, int(argv[2]), int(argv[3]), float(argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    done = os.environ.get("WRITER_DONE")
    if done:
        with open(done, "w") as f:
            f.write("done\n")
    print(json.dumps(expect))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
