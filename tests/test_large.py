"""Scale: ten thousand small files, and a sparse file of over a gibibyte (marked slow, run in CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import Ferry, describe, file_digests, file_events, partials, result_event, sha256_file

GiB = 1 << 30


@pytest.mark.slow
def test_ten_thousand_small_files(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "many"
    count = 0
    block = os.urandom(4096 + 10_000)
    for a in range(10):
        for b in range(20):
            folder = src / f"a{a:02}" / f"b{b:02}"
            folder.mkdir(parents=True)
            for c in range(50):
                (folder / f"f{c:02}.dat").write_bytes(block[count % 10_000 :][:4096])
                count += 1
    assert count == 10_000
    res = ferry("cp", "-r", "--json", src, f"{tmp_path / 'dst'}/", timeout=300)
    assert res.returncode == 0, describe(res)[-3000:]
    result = result_event(res.stdout)
    assert result["state"] == "done"
    assert result["files_done"] == result["files_total"] == count
    assert result["bytes_done"] == count * 4096
    fev = file_events(res.stdout)
    assert sum(1 for e in fev.values() if e["kind"] == "file" and e["verified"] == "sha256 match") == count
    assert file_digests(tmp_path / "dst" / "many") == file_digests(src)
    assert partials(tmp_path / "dst") == []
    (job,) = ferry.jobs()
    assert job["state"] == "done" and job["files_done"] == count


@pytest.mark.slow
def test_sparse_file_over_a_gibibyte(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "sparse.img"
    size = GiB + 12_345
    with open(src, "wb") as f:
        f.truncate(size)
        for offset in (0, 123_456_789, 512 << 20, size - 70_000):
            f.seek(offset)
            f.write(os.urandom(65_536))
    digest = sha256_file(src)
    dst = tmp_path / "copy.img"
    res = ferry("cp", "--json", src, dst, timeout=300)
    assert res.returncode == 0, describe(res)
    (e,) = file_events(res.stdout).values()
    assert e["verified"] == "sha256 match" and e["hash"] == digest
    assert dst.stat().st_size == size
    assert sha256_file(dst) == digest
    assert partials(tmp_path) == []
